package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
)

// File is a parsed GGUF file: its metadata in file order, its tensor
// descriptors, and where the data section starts.
type File struct {
	Version    uint32
	KVs        []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // absolute file offset of the data section
	FileSize   uint64
}

// Get returns the metadata value of key.
func (f *File) Get(key string) (Value, bool) {
	for _, kv := range f.KVs {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return Value{}, false
}

// Tensor returns the descriptor of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// Limits on what Read accepts, so a corrupt count cannot exhaust memory.
const (
	maxCount  = 1 << 24 // tensors, metadata entries, array elements
	maxString = 1 << 20 // bytes of one string
	maxDims   = 4       // GGML_MAX_DIMS
)

// Read parses the GGUF file at path and checks it: magic, version 3, known
// value and tensor types, tensor offsets aligned, in the data section, not
// overlapping, and every tensor's data inside the file. Errors name the
// file and the entry.
func Read(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	r := &reader{r: bufio.NewReaderSize(fh, 1<<20)}
	f := &File{FileSize: uint64(st.Size()), Alignment: DefaultAlignment}
	fail := func(format string, a ...any) (*File, error) {
		if r.err != nil {
			if errors.Is(r.err, io.EOF) || errors.Is(r.err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("gguf %s: "+format+": file truncated at byte %d", append([]any{path}, append(a, r.n)...)...)
			}
			return nil, fmt.Errorf("gguf %s: "+format+": %v", append([]any{path}, append(a, r.err)...)...)
		}
		return nil, fmt.Errorf("gguf %s: "+format, append([]any{path}, a...)...)
	}
	magic := r.bytes(4)
	if r.err != nil {
		return fail("header")
	}
	if string(magic) != Magic {
		return fail("magic %q, want %q", magic, Magic)
	}
	if f.Version = r.u32(); f.Version != Version {
		return fail("version %d, want %d", f.Version, Version)
	}
	nTensors, nKV := r.u64(), r.u64()
	if r.err != nil {
		return fail("header")
	}
	if nTensors > maxCount || nKV > maxCount {
		return fail("header counts %d tensors and %d metadata entries, more than %d", nTensors, nKV, maxCount)
	}
	for i := range nKV {
		key := r.str()
		t := ValueType(r.u32())
		if r.err != nil {
			return fail("metadata entry %d", i)
		}
		v, err := r.value(t)
		if err != nil || r.err != nil {
			return fail("metadata %s: %v", key, err)
		}
		if key == "general.alignment" {
			if t != Uint32 || v.Uint == 0 || v.Uint&(v.Uint-1) != 0 {
				return fail("general.alignment is %v %d, want a uint32 power of two", t, v.Uint)
			}
			f.Alignment = v.Uint
		}
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	for i := range nTensors {
		var t TensorInfo
		t.Name = r.str()
		nd := r.u32()
		if r.err != nil {
			return fail("tensor descriptor %d", i)
		}
		if nd == 0 || nd > maxDims {
			return fail("tensor %s: %d dimensions, want 1 to %d", t.Name, nd, maxDims)
		}
		for range nd {
			t.Dims = append(t.Dims, r.u64())
		}
		t.Type = TensorType(r.u32())
		t.Offset = r.u64()
		if r.err != nil {
			return fail("tensor descriptor %s", t.Name)
		}
		if t.Size, err = t.Type.Bytes(t.Dims); err != nil {
			return fail("tensor %s: %v", t.Name, err)
		}
		if t.Offset%f.Alignment != 0 {
			return fail("tensor %s: offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		f.Tensors = append(f.Tensors, t)
	}
	f.DataOffset = pad(r.n, f.Alignment)
	seen := map[string]bool{}
	var end uint64
	for _, t := range f.Tensors {
		if seen[t.Name] {
			return fail("tensor %s: name given twice", t.Name)
		}
		seen[t.Name] = true
		if t.Offset < end {
			return fail("tensor %s: offset %d overlaps the previous tensor, which ends at %d", t.Name, t.Offset, end)
		}
		end = t.Offset + t.Size
		if f.DataOffset+end > f.FileSize {
			return fail("tensor %s: data [%d, %d) of the data section runs past the end of the file (%d bytes, data section at %d)", t.Name, t.Offset, end, f.FileSize, f.DataOffset)
		}
	}
	return f, nil
}

// reader counts bytes and keeps the first error.
type reader struct {
	r   *bufio.Reader
	n   uint64
	err error
	buf [8]byte
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	b := make([]byte, n)
	k, err := io.ReadFull(r.r, b)
	r.n += uint64(k)
	r.err = err
	return b
}

func (r *reader) fixed(n int) []byte {
	if r.err != nil {
		return r.buf[:n]
	}
	k, err := io.ReadFull(r.r, r.buf[:n])
	r.n += uint64(k)
	r.err = err
	return r.buf[:n]
}

func (r *reader) u8() uint8   { return r.fixed(1)[0] }
func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16(r.fixed(2)) }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.fixed(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.fixed(8)) }

func (r *reader) str() string {
	n := r.u64()
	if r.err != nil {
		return ""
	}
	if n > maxString {
		r.err = fmt.Errorf("string of %d bytes, more than %d", n, maxString)
		return ""
	}
	return string(r.bytes(int(n)))
}

func (r *reader) value(t ValueType) (Value, error) {
	if t != Array {
		return r.scalar(t)
	}
	v := Value{Type: Array, Elem: ValueType(r.u32())}
	n := r.u64()
	if r.err != nil {
		return v, nil
	}
	if n > maxCount {
		return v, fmt.Errorf("array of %d elements, more than %d", n, maxCount)
	}
	if v.Elem == Array {
		return v, fmt.Errorf("nested arrays are not supported")
	}
	for range n {
		e, err := r.scalar(v.Elem)
		if err != nil || r.err != nil {
			return v, err
		}
		switch {
		case v.Elem == String:
			v.Strings = append(v.Strings, e.Str)
		case v.Elem == Float32 || v.Elem == Float64:
			v.Floats = append(v.Floats, e.F)
		case v.Elem == Bool:
			v.Ints = append(v.Ints, boolInt(e.B))
		default:
			v.Ints = append(v.Ints, e.Int)
		}
	}
	return v, nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (r *reader) scalar(t ValueType) (Value, error) {
	v := Value{Type: t}
	unsigned := func(u uint64) { v.Uint, v.Int = u, int64(u) }
	switch t {
	case String:
		v.Str = r.str()
	case Bool:
		b := r.u8()
		if r.err == nil && b > 1 {
			return v, fmt.Errorf("bool byte %d, want 0 or 1", b)
		}
		v.B = b == 1
	case Uint8:
		unsigned(uint64(r.u8()))
	case Int8:
		v.Int = int64(int8(r.u8()))
	case Uint16:
		unsigned(uint64(r.u16()))
	case Int16:
		v.Int = int64(int16(r.u16()))
	case Uint32:
		unsigned(uint64(r.u32()))
	case Int32:
		v.Int = int64(int32(r.u32()))
	case Uint64:
		unsigned(r.u64())
	case Int64:
		v.Int = int64(r.u64())
	case Float32:
		v.F = float64(math.Float32frombits(r.u32()))
	case Float64:
		v.F = math.Float64frombits(r.u64())
	default:
		return v, fmt.Errorf("unknown value type %d", uint32(t))
	}
	return v, nil
}
