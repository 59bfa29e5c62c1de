//go:build linux || darwin

package mmap

import (
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Map maps the first size bytes of f read-only and shared (size > 0). The
// returned function unmaps them; the bytes must not be used after it.
func Map(f *os.File, size int) ([]byte, func([]byte) error, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	live.add(b)
	return b, func(b []byte) error {
		live.remove(b)
		return syscall.Munmap(b)
	}, nil
}

// Release gives back to the operating system the pages that lie wholly
// inside b, when b is part of a mapping made by Map and not yet unmapped,
// and returns their bytes (0 for any other memory, which it leaves alone).
// The bytes stay valid: a read of a released page maps it again from the
// file. The process's resident memory drops by the pages it held.
func Release(b []byte) int64 {
	if len(b) == 0 {
		return 0
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(&b[0]))
	lo, hi := (start+page-1)&^(page-1), (start+uintptr(len(b)))&^(page-1)
	if lo >= hi {
		return 0
	}
	live.mu.Lock()
	defer live.mu.Unlock()
	if !live.holds(start, start+uintptr(len(b))) {
		return 0
	}
	if err := unix.Madvise(b[lo-start:hi-start], unix.MADV_DONTNEED); err != nil {
		return 0
	}
	return int64(hi - lo)
}

// live is the set of mappings Map made that are not yet unmapped, so that
// Release never touches other memory (MADV_DONTNEED on the Go heap would
// zero it).
var live mappings

type mappings struct {
	mu     sync.Mutex
	ranges [][2]uintptr // [start, end) of each mapping
}

func (m *mappings) add(b []byte) {
	start := uintptr(unsafe.Pointer(&b[0]))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ranges = append(m.ranges, [2]uintptr{start, start + uintptr(len(b))})
}

func (m *mappings) remove(b []byte) {
	if len(b) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(&b[0]))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range m.ranges {
		if r[0] == start {
			m.ranges = append(m.ranges[:i], m.ranges[i+1:]...)
			return
		}
	}
}

// holds reports whether [lo, hi) lies inside one mapping (m.mu held).
func (m *mappings) holds(lo, hi uintptr) bool {
	for _, r := range m.ranges {
		if lo >= r[0] && hi <= r[1] {
			return true
		}
	}
	return false
}
