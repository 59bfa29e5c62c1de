package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/mlxgo/mlxgo/internal/atomicfile"
)

// Version is the format version the writer writes.
const Version = 3

// WriteTensor is a tensor to write: Dims in GGUF order (ne, innermost
// first) and Data its raw bytes in the type's block layout, or nil when
// Write's fill function supplies them.
type WriteTensor struct {
	Name string
	Dims []uint64
	Type Type
	Data []byte
}

// Write writes a version-3 GGUF file holding kvs and tensors to path,
// streaming: the header first, then each tensor's bytes as fill writes
// them, so a file larger than memory can be written. The file goes through
// a temporary file in the same directory, renamed into place on success; a
// failed write leaves nothing at path. The data section and every tensor
// start at a multiple of general.alignment when kvs sets it (a uint32 power
// of two), else DefaultAlignment, and the last tensor is padded to it too,
// as ggml's writer does. fill is called once per tensor, in order, and must
// write exactly the tensor's byte count (Type.Bytes of its dims) to w; a
// nil fill writes each tensor's Data.
func Write(path string, kvs []KV, tensors []WriteTensor, fill func(i int, w io.Writer) error) error {
	err := atomicfile.Write(path, func(w *bufio.Writer) error { return encode(w, kvs, tensors, fill) })
	if err != nil {
		return fmt.Errorf("gguf %s: %w", path, err)
	}
	return nil
}

// WriteFile writes kvs and tensors, each with its Data, to path (Write
// with a nil fill).
func WriteFile(path string, kvs []KV, tensors []WriteTensor) error {
	return Write(path, kvs, tensors, nil)
}

// Encode returns, in memory, the file WriteFile would write; for tests and
// small files.
func Encode(kvs []KV, tensors []WriteTensor) ([]byte, error) {
	var b bytes.Buffer
	if err := encode(&b, kvs, tensors, nil); err != nil {
		return nil, fmt.Errorf("gguf encode: %w", err)
	}
	return b.Bytes(), nil
}

// encode writes the whole file to out; see Write.
func encode(out io.Writer, kvs []KV, tensors []WriteTensor, fill func(int, io.Writer) error) error {
	align := uint64(DefaultAlignment)
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.V.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("metadata general.alignment = %v (%s), want a uint32 power of two", kv.Value.V, kv.Value.Type)
			}
			align = uint64(a)
		}
	}
	sizes := make([]uint64, len(tensors))
	offsets := make([]uint64, len(tensors))
	var off uint64
	for i, t := range tensors {
		n, err := t.Type.Bytes(t.Dims)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if fill == nil && uint64(len(t.Data)) != n {
			return fmt.Errorf("tensor %s: %d bytes of data, want %d for dims %v of %s", t.Name, len(t.Data), n, t.Dims, t.Type)
		}
		sizes[i], offsets[i] = n, off
		off = pad(off+n, align)
	}
	w := &countWriter{w: out}
	w.Write([]byte(Magic))
	w.put(uint32(Version))
	w.put(uint64(len(tensors)))
	w.put(uint64(len(kvs)))
	for _, kv := range kvs {
		w.str(kv.Key)
		w.put(uint32(kv.Value.Type))
		if err := w.value(kv.Value); err != nil {
			return fmt.Errorf("metadata %s: %w", kv.Key, err)
		}
	}
	for i, t := range tensors {
		w.str(t.Name)
		w.put(uint32(len(t.Dims)))
		w.put(t.Dims)
		w.put(uint32(t.Type))
		w.put(offsets[i])
	}
	w.zeros(pad(w.n, align) - w.n)
	for i, t := range tensors {
		start := w.n
		if fill == nil {
			w.Write(t.Data)
		} else if err := fill(i, w); err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if w.err == nil && w.n-start != sizes[i] {
			return fmt.Errorf("tensor %s: wrote %d bytes, want %d", t.Name, w.n-start, sizes[i])
		}
		w.zeros(pad(w.n, align) - w.n)
	}
	if w.err != nil {
		return fmt.Errorf("writing: %w", w.err)
	}
	return nil
}

func pad(n, align uint64) uint64 { return (n + align - 1) / align * align }

// countWriter counts the bytes written and keeps the first error, after
// which it writes nothing.
type countWriter struct {
	w   io.Writer
	n   uint64
	err error
}

func (w *countWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.w.Write(p)
	w.n += uint64(n)
	w.err = err
	return n, err
}

// put writes a fixed-size value or slice of them, little-endian.
func (w *countWriter) put(v any) { binary.Write(w, binary.LittleEndian, v) }

func (w *countWriter) str(s string) {
	w.put(uint64(len(s)))
	io.WriteString(w, s)
}

func (w *countWriter) zeros(n uint64) {
	var z [64]byte
	for n > 0 {
		k := min(n, uint64(len(z)))
		w.Write(z[:k])
		n -= k
	}
}

// value writes v's payload, after checking that the Go type of v.V is the
// one v.Type (and v.Elem, for an array) calls for.
func (w *countWriter) value(v Value) error {
	if v.Type != TypeArray {
		if t, ok := valueTypeOf(v.V); !ok || t != v.Type {
			return fmt.Errorf("value %v (%T) does not fit type %s", v.V, v.V, v.Type)
		}
		if s, ok := v.V.(string); ok {
			w.str(s)
		} else {
			w.put(v.V)
		}
		return nil
	}
	if t, ok := elemTypeOf(v.V); !ok || t != v.Elem {
		return fmt.Errorf("array %T does not fit element type %s", v.V, v.Elem)
	}
	w.put(uint32(v.Elem))
	switch x := v.V.(type) {
	case []string:
		w.put(uint64(len(x)))
		for _, s := range x {
			w.str(s)
		}
	case []Value:
		w.put(uint64(len(x)))
		for i, e := range x {
			if e.Type != TypeArray {
				return fmt.Errorf("element %d: %s in an array of arrays", i, e.Type)
			}
			if err := w.value(e); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	default:
		w.put(uint64(lenOf(x)))
		w.put(x)
	}
	return nil
}

// valueTypeOf is the metadata type of a scalar Go value.
func valueTypeOf(x any) (ValueType, bool) {
	switch x.(type) {
	case uint8:
		return TypeUint8, true
	case int8:
		return TypeInt8, true
	case uint16:
		return TypeUint16, true
	case int16:
		return TypeInt16, true
	case uint32:
		return TypeUint32, true
	case int32:
		return TypeInt32, true
	case float32:
		return TypeFloat32, true
	case bool:
		return TypeBool, true
	case string:
		return TypeString, true
	case uint64:
		return TypeUint64, true
	case int64:
		return TypeInt64, true
	case float64:
		return TypeFloat64, true
	}
	return 0, false
}

// elemTypeOf is the element type of an array value's Go slice.
func elemTypeOf(x any) (ValueType, bool) {
	switch x.(type) {
	case []uint8:
		return TypeUint8, true
	case []int8:
		return TypeInt8, true
	case []uint16:
		return TypeUint16, true
	case []int16:
		return TypeInt16, true
	case []uint32:
		return TypeUint32, true
	case []int32:
		return TypeInt32, true
	case []float32:
		return TypeFloat32, true
	case []bool:
		return TypeBool, true
	case []string:
		return TypeString, true
	case []Value:
		return TypeArray, true
	case []uint64:
		return TypeUint64, true
	case []int64:
		return TypeInt64, true
	case []float64:
		return TypeFloat64, true
	}
	return 0, false
}

// Metadata values for the writer.

// U32 is a uint32 metadata value.
func U32(v uint32) Value { return Value{Type: TypeUint32, V: v} }

// F32Value is a float32 metadata value.
func F32Value(v float32) Value { return Value{Type: TypeFloat32, V: v} }

// Str is a string metadata value.
func Str(s string) Value { return Value{Type: TypeString, V: s} }

// BoolValue is a bool metadata value.
func BoolValue(v bool) Value { return Value{Type: TypeBool, V: v} }

// Strs is an array-of-strings metadata value.
func Strs(s []string) Value { return Value{Type: TypeArray, Elem: TypeString, V: s} }

// I32s is an array-of-int32 metadata value.
func I32s(v []int32) Value { return Value{Type: TypeArray, Elem: TypeInt32, V: v} }

// F32s is an array-of-float32 metadata value.
func F32s(v []float32) Value { return Value{Type: TypeArray, Elem: TypeFloat32, V: v} }
