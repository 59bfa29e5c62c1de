// Package gguf writes and reads GGUF version 3 files, the model format of
// ggml and llama.cpp, written from the format's specification (ggml's
// docs/gguf.md): a header (magic "GGUF", version, tensor count, key-value
// count), typed key-value metadata, tensor descriptors (name, dimensions
// with the contiguous one first, ggml type, offset), padding to the
// alignment, then the tensor data, each tensor starting at a multiple of the
// alignment. Everything is little-endian; strings are a uint64 byte length
// followed by the bytes, without a terminator.
//
// The writer streams: it takes each tensor's size up front and asks for its
// bytes one tensor at a time, so a file larger than memory can be written.
// The reader parses the header, metadata and descriptors and checks every
// tensor's extent against the file; it does not map the data.
package gguf

import (
	"fmt"
	"math"
)

// Magic is the first four bytes of a GGUF file ("GGUF").
const Magic = "GGUF"

// Version is the format version this package writes and reads.
const Version = 3

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// ValueType is the type tag of a metadata value (gguf_type).
type ValueType uint32

// The metadata value types.
const (
	Uint8 ValueType = iota
	Int8
	Uint16
	Int16
	Uint32
	Int32
	Float32
	Bool
	String
	Array
	Uint64
	Int64
	Float64
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("gguf_type(%d)", uint32(t))
}

// size is the encoded size of a fixed-size value type, 0 for string and array.
func (t ValueType) size() int {
	switch t {
	case Uint8, Int8, Bool:
		return 1
	case Uint16, Int16:
		return 2
	case Uint32, Int32, Float32:
		return 4
	case Uint64, Int64, Float64:
		return 8
	}
	return 0
}

// TensorType is a ggml tensor type (ggml_type). Only the types this package
// can size are listed.
type TensorType uint32

// The tensor types with their ggml numbers.
const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q4_0 TensorType = 2
	Q8_0 TensorType = 8
	BF16 TensorType = 30
)

// typeInfo gives, per type, the elements of one block and its bytes.
var typeInfo = map[TensorType]struct {
	name         string
	block, bytes int
}{
	F32:  {"F32", 1, 4},
	F16:  {"F16", 1, 2},
	Q4_0: {"Q4_0", 32, 2 + 16}, // f16 delta, 32 4-bit codes
	Q8_0: {"Q8_0", 32, 2 + 32}, // f16 delta, 32 int8 codes
	BF16: {"BF16", 1, 2},
}

func (t TensorType) String() string {
	if ti, ok := typeInfo[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(t))
}

// BlockSize returns the elements per block of t (1 for plain float types),
// and false when the package does not know t.
func (t TensorType) BlockSize() (int, bool) {
	ti, ok := typeInfo[t]
	return ti.block, ok
}

// Bytes returns the data size of a tensor of type t with dims (contiguous
// dimension first). The first dimension must be a multiple of the block size.
func (t TensorType) Bytes(dims []uint64) (uint64, error) {
	ti, ok := typeInfo[t]
	if !ok {
		return 0, fmt.Errorf("tensor type %v: unknown to this package", t)
	}
	if len(dims) == 0 {
		return 0, fmt.Errorf("tensor type %v: no dimensions", t)
	}
	if dims[0]%uint64(ti.block) != 0 {
		return 0, fmt.Errorf("tensor type %v: first dimension %d is not a multiple of the block size %d", t, dims[0], ti.block)
	}
	n := dims[0] / uint64(ti.block) * uint64(ti.bytes)
	for _, d := range dims[1:] {
		if d != 0 && n > math.MaxUint64/d {
			return 0, fmt.Errorf("tensor type %v: dimensions %v overflow", t, dims)
		}
		n *= d
	}
	return n, nil
}

// Value is a metadata value: Type says which field holds it. Arrays hold
// their element type in Elem and their elements in the slice of that type
// (Strings, Ints for every integer type and Bool, Floats for both float
// types).
type Value struct {
	Type ValueType
	Elem ValueType // array element type
	Str  string
	Int  int64  // signed integers; unsigned ones converted with int64()
	Uint uint64 // unsigned integers
	F    float64
	B    bool

	Strings []string
	Ints    []int64 // integer and bool arrays (bools as 0/1)
	Floats  []float64
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// Str, U32, I32, F32v, BoolV, U64, Strs, F32s and I32s build values.
func Str(s string) Value     { return Value{Type: String, Str: s} }
func U32(v uint32) Value     { return Value{Type: Uint32, Uint: uint64(v), Int: int64(v)} }
func I32(v int32) Value      { return Value{Type: Int32, Int: int64(v)} }
func F32v(v float32) Value   { return Value{Type: Float32, F: float64(v)} }
func BoolV(v bool) Value     { return Value{Type: Bool, B: v} }
func U64(v uint64) Value     { return Value{Type: Uint64, Uint: v, Int: int64(v)} }
func Strs(s []string) Value  { return Value{Type: Array, Elem: String, Strings: s} }
func F32s(v []float64) Value { return Value{Type: Array, Elem: Float32, Floats: v} }
func I32s(v []int64) Value   { return Value{Type: Array, Elem: Int32, Ints: v} }

// TensorInfo describes one tensor: Dims has the contiguous dimension first
// (ggml's ne), so a PyTorch weight [out, in] has Dims {in, out}. Offset is
// relative to the start of the data section and a multiple of the
// alignment; Size is its data bytes (both filled in by Write and Read).
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   TensorType
	Offset uint64
	Size   uint64
}
