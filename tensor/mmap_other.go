//go:build !linux && !darwin

package tensor

import (
	"io"
	"os"
)

// mapFile reads the first size bytes of f into an 8-byte-aligned buffer; this
// platform gets no memory mapping, so views alias the buffer instead.
func mapFile(f *os.File, size int) ([]byte, func([]byte) error, error) {
	b := alignedBytes(size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, err
	}
	return b, func([]byte) error { return nil }, nil
}
