//go:build !(linux || darwin)

package gguf

import (
	"io"
	"os"
)

// mapFile reads the file into memory where mmap is not wired up.
func mapFile(f *os.File, size int) ([]byte, func([]byte) error, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, nil, nil
}
