package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFile feeds ReadFile what a hostile model directory can hold where a file is
// expected: a symbolic link to /dev/zero (read without end before), a directory ("mapping:
// no such device" before), a FIFO (an open that blocks), a file over the cap.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok.json")
	if err := os.WriteFile(ok, []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(ok, 100); err != nil || string(data) != `{"a": 1}` {
		t.Fatalf("regular file: got (%q, %v)", data, err)
	}
	zero := filepath.Join(dir, "zero.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub.json")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.json")
	haveFIFO := mkfifo(fifo) == nil
	cases := []struct {
		name, path string
		max        int64
		want       string
	}{
		{"symlink to /dev/zero", zero, MaxJSONBytes, "it is a device"},
		{"directory", sub, MaxJSONBytes, "it is a directory"},
		{"too large", ok, 4, "more than the limit of 4"},
	}
	if haveFIFO {
		cases = append(cases, struct {
			name, path string
			max        int64
			want       string
		}{"fifo", fifo, MaxJSONBytes, "it is a named pipe"})
	} else {
		t.Log("mkfifo failed; the FIFO case is not run")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, err := ReadFile(c.path, c.max)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("got (%d bytes, %v), want an error naming %s and containing %q", len(data), err, c.path, c.want)
			}
		})
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.json"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
}
