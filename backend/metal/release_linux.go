//go:build mlx && linux

package metal

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// fileRange is a read-only shared mapping of a file in this process.
type fileRange struct{ start, end uintptr }

var (
	mapsMu     sync.Mutex
	fileRanges []fileRange // from /proc/self/maps, refreshed on a miss
)

// dropCopiedPages is called by Borrow after MLX copied data instead of
// aliasing it (its allocator cannot wrap foreign memory: the CPU and CUDA
// allocators on Linux). When data lies in a read-only shared mapping of a
// file (a memory-mapped checkpoint), it tells the kernel that this process no longer
// needs those pages (madvise MADV_DONTNEED): they leave the resident set but
// stay in the page cache, and the file's bytes are read back from there if
// the memory is touched again, so nothing changes for readers. Without it,
// every weight would be resident twice, once in the mapping and once in
// MLX's copy. Memory that is not such a mapping (the Go heap, anonymous,
// writable or private mappings) is left alone.
func dropCopiedPages(data []byte) {
	if len(data) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(&data[0]))
	end := start + uintptr(len(data))
	if !inReadOnlyFileMapping(start, end) {
		return
	}
	// Mappings start and end on page boundaries, so widening the range to
	// whole pages stays inside the mapping.
	page := uintptr(os.Getpagesize())
	lo, hi := start&^(page-1), (end+page-1)&^(page-1)
	p := unsafe.Add(unsafe.Pointer(&data[0]), -int(start-lo))
	_ = syscall.Madvise(unsafe.Slice((*byte)(p), hi-lo), syscall.MADV_DONTNEED)
}

// inReadOnlyFileMapping reports whether [start, end) lies inside one
// read-only shared file mapping, reading /proc/self/maps again when the cached list
// has none that holds it.
func inReadOnlyFileMapping(start, end uintptr) bool {
	mapsMu.Lock()
	defer mapsMu.Unlock()
	for pass := 0; pass < 2; pass++ {
		for _, r := range fileRanges {
			if r.start <= start && end <= r.end {
				return true
			}
		}
		if pass == 0 {
			fileRanges = readFileRanges()
		}
	}
	return false
}

// readFileRanges lists the read-only shared file mappings of this process.
// Lines of /proc/self/maps read "start-end perms offset dev inode path"; a
// mapping is kept when its perms are exactly "r--s" and it has an inode. A
// shared mapping holds no private copy-on-write pages, whose contents
// MADV_DONTNEED would discard (a private one that was written before being
// made read-only, a library's relocated data, could); the checkpoint readers
// map files read-only and shared.
func readFileRanges() []fileRange {
	data, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	var out []fileRange
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "r--s" || f[4] == "0" {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil {
			out = append(out, fileRange{uintptr(s), uintptr(e)})
		}
	}
	return out
}
