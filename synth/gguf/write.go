package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// Write writes a GGUF v3 file to path (through a temporary file in the same
// directory, renamed into place on success). The tensors' Offset and Size
// are computed here (alignment: the general.alignment value of kvs when
// present, else DefaultAlignment). fill is called once per tensor, in
// order, and must write exactly that tensor's Size bytes to w.
func Write(path string, kvs []KV, tensors []TensorInfo, fill func(i int, w io.Writer) error) (err error) {
	align := uint64(DefaultAlignment)
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			if kv.Value.Type != Uint32 || kv.Value.Uint == 0 || kv.Value.Uint%8 != 0 {
				return fmt.Errorf("gguf %s: general.alignment must be a uint32 multiple of 8, got %v %d", path, kv.Value.Type, kv.Value.Uint)
			}
			align = kv.Value.Uint
		}
	}
	var off uint64
	for i := range tensors {
		t := &tensors[i]
		n, err := t.Type.Bytes(t.Dims)
		if err != nil {
			return fmt.Errorf("gguf %s: tensor %s: %w", path, t.Name, err)
		}
		t.Offset, t.Size = off, n
		off = pad(off+n, align)
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("gguf %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w := &writer{w: bufio.NewWriterSize(tmp, 1<<20)}
	w.bytes([]byte(Magic))
	w.u32(Version)
	w.u64(uint64(len(tensors)))
	w.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		if err := w.kv(kv); err != nil {
			return fmt.Errorf("gguf %s: metadata %s: %w", path, kv.Key, err)
		}
	}
	for _, t := range tensors {
		w.str(t.Name)
		w.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			w.u64(d)
		}
		w.u32(uint32(t.Type))
		w.u64(t.Offset)
	}
	w.zeros(pad(w.n, align) - w.n)
	for i, t := range tensors {
		start := w.n
		if err := fill(i, w); err != nil {
			return fmt.Errorf("gguf %s: tensor %s: %w", path, t.Name, err)
		}
		if got := w.n - start; got != t.Size {
			return fmt.Errorf("gguf %s: tensor %s: wrote %d bytes, want %d", path, t.Name, got, t.Size)
		}
		w.zeros(pad(w.n, align) - w.n) // the data section ends aligned too, as ggml sizes it
	}
	if w.err != nil {
		return fmt.Errorf("gguf %s: writing: %w", path, w.err)
	}
	if err = w.w.Flush(); err != nil {
		return fmt.Errorf("gguf %s: writing: %w", path, err)
	}
	if err = tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("gguf %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("gguf %s: writing: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf %s: %w", path, err)
	}
	return nil
}

func pad(n, align uint64) uint64 { return (n + align - 1) / align * align }

// writer counts bytes and keeps the first error.
type writer struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (w *writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.w.Write(p)
	w.n += uint64(n)
	w.err = err
	return n, err
}

func (w *writer) bytes(p []byte) { w.Write(p) }

func (w *writer) zeros(n uint64) {
	var z [64]byte
	for n > 0 {
		k := min(n, uint64(len(z)))
		w.Write(z[:k])
		n -= k
	}
}

func (w *writer) u8(v uint8) { w.Write([]byte{v}) }
func (w *writer) u16(v uint16) {
	binary.LittleEndian.PutUint16(w.buf[:], v)
	w.Write(w.buf[:2])
}
func (w *writer) u32(v uint32) {
	binary.LittleEndian.PutUint32(w.buf[:], v)
	w.Write(w.buf[:4])
}
func (w *writer) u64(v uint64) {
	binary.LittleEndian.PutUint64(w.buf[:], v)
	w.Write(w.buf[:8])
}
func (w *writer) str(s string) {
	w.u64(uint64(len(s)))
	w.Write([]byte(s))
}

func (w *writer) kv(kv KV) error {
	w.str(kv.Key)
	w.u32(uint32(kv.Value.Type))
	v := kv.Value
	if v.Type != Array {
		return w.scalar(v.Type, v.Str, v.Int, v.Uint, v.F, v.B)
	}
	w.u32(uint32(v.Elem))
	switch {
	case v.Elem == String:
		w.u64(uint64(len(v.Strings)))
		for _, s := range v.Strings {
			w.str(s)
		}
	case v.Elem == Float32 || v.Elem == Float64:
		w.u64(uint64(len(v.Floats)))
		for _, f := range v.Floats {
			if err := w.scalar(v.Elem, "", 0, 0, f, false); err != nil {
				return err
			}
		}
	case v.Elem.size() > 0:
		w.u64(uint64(len(v.Ints)))
		for _, x := range v.Ints {
			if err := w.scalar(v.Elem, "", x, uint64(x), 0, x != 0); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("array of %v is not supported", v.Elem)
	}
	return nil
}

// scalar writes one value of type t; integers come from i (signed) or u
// (unsigned).
func (w *writer) scalar(t ValueType, s string, i int64, u uint64, f float64, b bool) error {
	switch t {
	case String:
		w.str(s)
	case Bool:
		if b {
			w.u8(1)
		} else {
			w.u8(0)
		}
	case Uint8:
		w.u8(uint8(u))
	case Int8:
		w.u8(uint8(i))
	case Uint16:
		w.u16(uint16(u))
	case Int16:
		w.u16(uint16(i))
	case Uint32:
		w.u32(uint32(u))
	case Int32:
		w.u32(uint32(i))
	case Uint64:
		w.u64(u)
	case Int64:
		w.u64(uint64(i))
	case Float32:
		w.u32(math.Float32bits(float32(f)))
	case Float64:
		w.u64(math.Float64bits(f))
	default:
		return fmt.Errorf("value type %v is not supported", t)
	}
	return nil
}
