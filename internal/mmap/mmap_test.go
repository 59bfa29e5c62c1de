package mmap

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// Map returns the file's bytes, 8-byte aligned, and unmaps without error.
func TestMap(t *testing.T) {
	want := []byte("0123456789abcdefXYZ")
	f := tempFile(t, want)
	for _, size := range []int{len(want), 5} {
		b, unmap, err := Map(f, size)
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(b, want[:size]) || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
			t.Errorf("got %q at %p, want %q 8-byte aligned (size %d)", b, &b[0], want[:size], size)
		}
		if err := unmap(b); err != nil {
			t.Errorf("unmap: %v (size %d)", err, size)
		}
	}
}

// tempFile writes data to a file in a test directory and opens it (closed
// when the test ends).
func tempFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
