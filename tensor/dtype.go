package tensor

import "fmt"

// DType is the element type of a tensor.
type DType uint8

// The element types, named as in safetensors.
const (
	Invalid DType = iota
	Bool
	U8
	I8
	U16
	I16
	U32
	I32
	U64
	I64
	F16
	BF16
	F32
	F64
)

var dtypeInfo = [...]struct {
	name  string // safetensors name
	mlx   string // MLX / numpy name
	size  int
	float bool
}{
	Invalid: {"INVALID", "", 0, false},
	Bool:    {"BOOL", "bool", 1, false},
	U8:      {"U8", "uint8", 1, false},
	I8:      {"I8", "int8", 1, false},
	U16:     {"U16", "uint16", 2, false},
	I16:     {"I16", "int16", 2, false},
	U32:     {"U32", "uint32", 4, false},
	I32:     {"I32", "int32", 4, false},
	U64:     {"U64", "uint64", 8, false},
	I64:     {"I64", "int64", 8, false},
	F16:     {"F16", "float16", 2, true},
	BF16:    {"BF16", "bfloat16", 2, true},
	F32:     {"F32", "float32", 4, true},
	F64:     {"F64", "float64", 8, true},
}

func (d DType) valid() bool { return d > Invalid && int(d) < len(dtypeInfo) }

// Size returns the number of bytes per element (0 for Invalid or unknown values).
func (d DType) Size() int {
	if !d.valid() {
		return 0
	}
	return dtypeInfo[d].size
}

// String returns the safetensors name ("F32", "BF16", ...), "INVALID" for
// Invalid and "DType(n)" for values outside the enumeration.
func (d DType) String() string {
	if d == Invalid {
		return "INVALID"
	}
	if !d.valid() {
		return fmt.Sprintf("DType(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// IsFloat reports whether d is a floating-point type (F16, BF16, F32, F64).
func (d DType) IsFloat() bool { return d.valid() && dtypeInfo[d].float }

// MLXName returns MLX's spelling of d ("float32", "bfloat16", ...), or "" for Invalid.
func (d DType) MLXName() string {
	if !d.valid() {
		return ""
	}
	return dtypeInfo[d].mlx
}

// ParseDType parses a safetensors dtype name ("F32", "BF16", ...) or an MLX /
// numpy spelling ("float32", "bfloat16", "int32", "bool", ...). Matching is
// exact (case-sensitive). The error names the string. The safetensors 8-bit
// float names are not accepted here; the safetensors reader maps them itself.
func ParseDType(s string) (DType, error) {
	for d := Bool; int(d) < len(dtypeInfo); d++ {
		if s == dtypeInfo[d].name || s == dtypeInfo[d].mlx {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want one of BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64 or an MLX name such as float32, bfloat16)", s)
}
