package mmap

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// HugePage is the size of an x86-64 or arm64 transparent huge page, the
// alignment AllocHuge gives its buffers.
const HugePage = 2 << 20

// AllocHuge returns n zeroed bytes for a large buffer that kernels stream
// from start to end (packed weights), and the function that frees them. On
// Linux, from HugePage bytes up, they are an anonymous private mapping
// starting on a HugePage boundary and advised MADV_HUGEPAGE, so that
// transparent huge pages back them where the system allows it
// (/sys/kernel/mm/transparent_hugepage/enabled "always" or "madvise"): a
// streaming read then crosses a 4 KiB page boundary, where the hardware
// prefetchers stop, once per 2 MiB instead of once per 4 KiB. Smaller
// buffers, and any that mmap refuses, are Go heap memory with a free that
// does nothing. The bytes must not be used after free.
func AllocHuge(n int) (b []byte, free func()) {
	if n < HugePage {
		return make([]byte, n), func() {}
	}
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	base, err := unix.MmapPtr(-1, 0, nil, uintptr(size+HugePage), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, n), func() {}
	}
	// Keep the HugePage-aligned size bytes; unmap the slack on either side.
	lead := (HugePage - uintptr(base)%HugePage) % HugePage
	start := unsafe.Add(base, lead)
	if lead > 0 {
		unix.MunmapPtr(base, lead)
	}
	if trail := uintptr(HugePage) - lead; trail > 0 {
		unix.MunmapPtr(unsafe.Add(start, size), trail)
	}
	b = unsafe.Slice((*byte)(start), size)
	unix.Madvise(b, unix.MADV_HUGEPAGE) // advice only: without it the pages are 4 KiB ones
	return b[:n:n], func() { unix.MunmapPtr(start, uintptr(size)) }
}

// HugeAdvised reports whether the mapping holding addr is advised for
// transparent huge pages (MADV_HUGEPAGE: "hg" among its VmFlags in
// /proc/self/smaps); false where that cannot be read.
func HugeAdvised(addr uintptr) bool {
	flags, ok, err := smapsValue(addr, "VmFlags")
	return err == nil && ok && slices.Contains(strings.Fields(flags), "hg")
}

// smapsValue returns the field name of the mapping holding addr in
// /proc/self/smaps, and whether such a mapping and field were found.
func smapsValue(addr uintptr, name string) (string, bool, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := strings.Cut(strings.Fields(line + " x")[0], "-"); ok && !strings.HasSuffix(line, ":") {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(addr) >= l && uint64(addr) < h
				continue
			}
		}
		if v, ok := strings.CutPrefix(line, name+":"); in && ok {
			return strings.TrimSpace(v), true, nil
		}
	}
	return "", false, sc.Err()
}
