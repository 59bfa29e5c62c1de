package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

// WriteTensor is a tensor to write: Dims in GGUF order (ne, innermost
// first) and its raw bytes in the type's block layout.
type WriteTensor struct {
	Name string
	Dims []uint64
	Type Type
	Data []byte
}

// Encode returns a version-3 GGUF file holding kvs and tensors, with the
// data section aligned to general.alignment when kvs sets it (a uint32),
// else 32. It is meant for tests and small synthetic files: it checks only
// that each tensor's byte count matches its dims and type.
func Encode(kvs []KV, tensors []WriteTensor) ([]byte, error) {
	align := uint64(DefaultAlignment)
	var b bytes.Buffer
	le := binary.LittleEndian
	w := func(v any) { binary.Write(&b, le, v) }
	str := func(s string) { w(uint64(len(s))); b.WriteString(s) }
	b.WriteString(Magic)
	w(uint32(3))
	w(uint64(len(tensors)))
	w(uint64(len(kvs)))
	for _, kv := range kvs {
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.V.(uint32)
			if !ok || a == 0 {
				return nil, fmt.Errorf("gguf encode: general.alignment must be a nonzero uint32")
			}
			align = uint64(a)
		}
		str(kv.Key)
		w(uint32(kv.Value.Type))
		if err := encodeValue(&b, kv.Value); err != nil {
			return nil, fmt.Errorf("gguf encode: metadata %s: %w", kv.Key, err)
		}
	}
	var off uint64
	offsets := make([]uint64, len(tensors))
	for i, t := range tensors {
		n := uint64(1)
		for _, d := range t.Dims {
			n *= d
		}
		if bs := uint64(t.Type.BlockSize()); bs == 0 || n%bs != 0 || uint64(len(t.Data)) != n/bs*uint64(t.Type.BlockBytes()) {
			return nil, fmt.Errorf("gguf encode: tensor %s: %d bytes do not fit dims %v of %s", t.Name, len(t.Data), t.Dims, t.Type)
		}
		offsets[i] = off
		off = (off + uint64(len(t.Data)) + align - 1) / align * align
		str(t.Name)
		w(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			w(d)
		}
		w(uint32(t.Type))
		w(offsets[i])
	}
	for uint64(b.Len())%align != 0 {
		b.WriteByte(0)
	}
	start := uint64(b.Len())
	for i, t := range tensors {
		for uint64(b.Len()) < start+offsets[i] {
			b.WriteByte(0)
		}
		b.Write(t.Data)
	}
	return b.Bytes(), nil
}

// WriteFile writes Encode's result to path.
func WriteFile(path string, kvs []KV, tensors []WriteTensor) error {
	data, err := Encode(kvs, tensors)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func encodeValue(b *bytes.Buffer, v Value) error {
	le := binary.LittleEndian
	w := func(x any) { binary.Write(b, le, x) }
	switch x := v.V.(type) {
	case string:
		w(uint64(len(x)))
		b.WriteString(x)
		return nil
	case bool:
		if x {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
		return nil
	case uint8, int8, uint16, int16, uint32, int32, float32, uint64, int64, float64:
		w(x)
		return nil
	}
	if v.Type != TypeArray {
		return fmt.Errorf("value %v (%T) does not fit type %s", v.V, v.V, v.Type)
	}
	w(uint32(v.Elem))
	switch x := v.V.(type) {
	case []string:
		w(uint64(len(x)))
		for _, s := range x {
			w(uint64(len(s)))
			b.WriteString(s)
		}
	case []Value:
		w(uint64(len(x)))
		for _, e := range x {
			if err := encodeValue(b, e); err != nil {
				return err
			}
		}
	case []bool:
		w(uint64(len(x)))
		for _, e := range x {
			encodeValue(b, Value{Type: TypeBool, V: e})
		}
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []uint64, []int64, []float64:
		w(uint64(lenOf(x)))
		w(x)
	default:
		return fmt.Errorf("unsupported array %T", v.V)
	}
	return nil
}

// Scalar values for Encode's metadata.

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
