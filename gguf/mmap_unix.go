//go:build linux || darwin

package gguf

import (
	"os"
	"syscall"
)

// mapFile maps the first size bytes of f read-only. size > 0.
func mapFile(f *os.File, size int) ([]byte, func([]byte) error, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, syscall.Munmap, nil
}
