package mmap

import (
	"os"
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
