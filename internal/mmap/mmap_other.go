//go:build !linux && !darwin

package mmap

import (
	"io"
	"os"
	"unsafe"
)

// Map reads the first size bytes of f (size > 0) into an 8-byte-aligned
// buffer, so typed views of it are aligned; this platform gets no memory
// mapping. The returned function does nothing.
func Map(f *os.File, size int) ([]byte, func([]byte) error, error) {
	w := make([]uint64, (size+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, func([]byte) error { return nil }, nil
}

// Release does nothing on this platform (Map reads the file into memory
// that must keep its bytes) and returns 0.
func Release(b []byte) int64 { return 0 }
