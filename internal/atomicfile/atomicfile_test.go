package atomicfile

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A successful Write leaves exactly path, with fill's bytes and mode 0644,
// replacing what was there.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	if err := os.WriteFile(path, []byte("old contents"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, func(w *bufio.Writer) error { _, err := w.WriteString("new"); return err }); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "new" {
		t.Fatalf("contents %q, %v; want \"new\"", b, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
		t.Errorf("files %v, want only %s", left, path)
	}
}

// A failing fill returns its error, leaves what was at path untouched and
// no temporary file; a missing directory is an error too.
func TestWriteFails(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bin")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w *bufio.Writer) error { w.WriteString("partial"); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want fill's error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("contents %q after a failed write, want \"old\"", b)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
		t.Errorf("files %v after a failed write, want only %s", left, path)
	}
	if err := Write(filepath.Join(dir, "no", "such", "dir"), func(*bufio.Writer) error { return nil }); err == nil {
		t.Error("Write into a missing directory: got no error")
	}
}
