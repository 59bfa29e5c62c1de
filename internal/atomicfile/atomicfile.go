// Package atomicfile writes a file through a temporary file in the same
// directory, renamed into place only once everything is written: a reader
// never sees a half-written file, and a failed write leaves nothing behind.
package atomicfile

import (
	"bufio"
	"os"
	"path/filepath"
)

// Write creates a temporary file next to path, calls fill with a 1 MiB
// buffered writer on it, flushes, sets mode 0644, closes it and renames it
// to path. On any error the temporary file is removed and the error (fill's
// as it is, or the os error, which names the file) is returned; callers add
// their own context.
func Write(path string, fill func(w *bufio.Writer) error) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	if err = fill(w); err != nil {
		return err
	}
	if err = w.Flush(); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
