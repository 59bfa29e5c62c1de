//go:build linux || darwin

package mmap

import (
	"os"
	"syscall"
)

// Map maps the first size bytes of f read-only and shared (size > 0). The
// returned function unmaps them; the bytes must not be used after it.
func Map(f *os.File, size int) ([]byte, func([]byte) error, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, syscall.Munmap, nil
}
