package gguf

import (
	"fmt"
	"math"
)

// Type is a ggml tensor type (enum ggml_type).
type Type uint32

// The ggml types. Numbers missing here (4, 5, 31-33) were removed from ggml.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

// typeInfo is a type's name, elements per block and bytes per block
// (ggml's type_traits blck_size and type_size).
var typeInfo = map[Type]struct {
	name        string
	block, size int
}{
	F32: {"F32", 1, 4}, F16: {"F16", 1, 2}, BF16: {"BF16", 1, 2}, F64: {"F64", 1, 8},
	I8: {"I8", 1, 1}, I16: {"I16", 1, 2}, I32: {"I32", 1, 4}, I64: {"I64", 1, 8},
	Q4_0: {"Q4_0", 32, 18}, Q4_1: {"Q4_1", 32, 20}, Q5_0: {"Q5_0", 32, 22}, Q5_1: {"Q5_1", 32, 24},
	Q8_0: {"Q8_0", 32, 34}, Q8_1: {"Q8_1", 32, 36},
	Q2_K: {"Q2_K", 256, 84}, Q3_K: {"Q3_K", 256, 110}, Q4_K: {"Q4_K", 256, 144},
	Q5_K: {"Q5_K", 256, 176}, Q6_K: {"Q6_K", 256, 210}, Q8_K: {"Q8_K", 256, 292},
	IQ2_XXS: {"IQ2_XXS", 256, 66}, IQ2_XS: {"IQ2_XS", 256, 74}, IQ3_XXS: {"IQ3_XXS", 256, 98},
	IQ1_S: {"IQ1_S", 256, 50}, IQ4_NL: {"IQ4_NL", 32, 18}, IQ3_S: {"IQ3_S", 256, 110},
	IQ2_S: {"IQ2_S", 256, 82}, IQ4_XS: {"IQ4_XS", 256, 136}, IQ1_M: {"IQ1_M", 256, 56},
	TQ1_0: {"TQ1_0", 256, 54}, TQ2_0: {"TQ2_0", 256, 66}, MXFP4: {"MXFP4", 32, 17},
}

// String returns ggml's name of the type, or "type(N)" for an unknown one.
func (t Type) String() string {
	if ti, ok := typeInfo[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// Known reports whether the type's block layout is known.
func (t Type) Known() bool { _, ok := typeInfo[t]; return ok }

// BlockSize returns the elements per block (0 for an unknown type).
func (t Type) BlockSize() int { return typeInfo[t].block }

// BlockBytes returns the bytes per block (0 for an unknown type).
func (t Type) BlockBytes() int { return typeInfo[t].size }

// Bytes returns the data size of a tensor of type t with dims (GGUF order,
// innermost first): ne[0] must be a multiple of the block size and the
// product must not overflow.
func (t Type) Bytes(dims []uint64) (uint64, error) {
	if !t.Known() {
		return 0, fmt.Errorf("unknown ggml type %d", uint32(t))
	}
	if len(dims) == 0 {
		return 0, fmt.Errorf("%s tensor with no dimensions", t)
	}
	if bs := uint64(t.BlockSize()); dims[0]%bs != 0 {
		return 0, fmt.Errorf("row length ne[0] = %d is not a multiple of %s's block size %d", dims[0], t, bs)
	}
	n := dims[0] / uint64(t.BlockSize()) * uint64(t.BlockBytes())
	for _, d := range dims[1:] {
		if d != 0 && n > math.MaxUint64/d {
			return 0, fmt.Errorf("%s dimensions %v overflow", t, dims)
		}
		n *= d
	}
	return n, nil
}

// ValueType is the type tag of a metadata value (enum gguf_type).
type ValueType uint32

// The metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

// String returns the type's name, as gguf-py spells it in lower case.
func (v ValueType) String() string {
	if int(v) < len(valueTypeNames) {
		return valueTypeNames[v]
	}
	return fmt.Sprintf("value_type(%d)", uint32(v))
}

// scalarSize is the payload size of a fixed-size value type (0 otherwise).
func (v ValueType) scalarSize() int {
	switch v {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}
