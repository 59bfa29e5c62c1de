package gguf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenNonRegular: a directory or a device where a GGUF file is expected gets an error
// naming it ("mapping: no such device" before, or a read without end).
func TestOpenNonRegular(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "model.gguf")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.gguf")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{{sub, "it is a directory"}, {zero, "it is a device"}} {
		f, err := Open(c.path)
		if err == nil {
			f.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%s): got %v, want an error naming it, containing %q", c.path, err, c.want)
		}
	}
}
