// Package safefile opens and reads the files a model directory names, refusing what is not a
// regular file (a directory, a device such as /dev/zero, a FIFO, a socket: reading those
// never ends, blocks, or fails with a message that names no file) and files larger than a
// cap the caller documents.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Caps on the files read whole into memory. Real ones are far smaller: config.json and
// generation_config.json are a few KB, tokenizer_config.json and a safetensors index at most a
// few MB, tokenizer.json at most about 40 MB.
const (
	// MaxJSONBytes bounds a JSON configuration file (config.json, generation_config.json,
	// tokenizer_config.json, a safetensors index, a conformance manifest).
	MaxJSONBytes = 64 << 20
	// MaxTokenizerBytes bounds tokenizer.json.
	MaxTokenizerBytes = 512 << 20
)

// ErrNotRegular is wrapped by the error for a path that is not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// kind names what a non-regular file is.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0 || m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

// Check returns an error unless path (after symbolic links) is a regular file. The error
// names the path; for a missing file it wraps fs.ErrNotExist.
func Check(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w: it is %s", path, ErrNotRegular, kind(st.Mode()))
	}
	return st, nil
}

// Open opens path for reading after checking that it is a regular file (checked again on the
// open file, as the path may change in between).
func Open(path string) (*os.File, fs.FileInfo, error) {
	if _, err := Check(path); err != nil {
		return nil, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w: it is %s", path, ErrNotRegular, kind(st.Mode()))
	}
	return f, st, nil
}

// ReadFile reads the regular file at path whole, refusing one larger than max bytes. Errors
// name the path; a missing file's wraps fs.ErrNotExist.
func ReadFile(path string, max int64) ([]byte, error) {
	f, st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st.Size() > max {
		return nil, fmt.Errorf("%s: %d bytes, more than the limit of %d for this file", path, st.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s: more than the limit of %d bytes for this file (it grew while read)", path, max)
	}
	return data, nil
}
