package kernel

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// Vec is a read-only vector of float values kept in their storage dtype:
// float32, or bfloat16/float16 bits. The quantized matmuls read their scales
// and biases through a Vec, so a bf16 checkpoint's scales are converted a
// row at a time in the kernel instead of into a full float32 copy per call.
type Vec struct {
	F32 []float32 // float32 storage; when nil the values are in U16
	U16 []uint16  // bfloat16 bits, or float16 bits when F16 is set
	F16 bool
}

// F32Vec wraps float32 values.
func F32Vec(v []float32) Vec { return Vec{F32: v} }

// BF16Vec wraps bfloat16 bits.
func BF16Vec(v []uint16) Vec { return Vec{U16: v} }

// F16Vec wraps float16 bits.
func F16Vec(v []uint16) Vec { return Vec{U16: v, F16: true} }

// Len returns the number of values.
func (v Vec) Len() int {
	if v.F32 != nil {
		return len(v.F32)
	}
	return len(v.U16)
}

// At returns value i as float32 (exact for every storage dtype).
func (v Vec) At(i int) float32 {
	switch {
	case v.F32 != nil:
		return v.F32[i]
	case v.F16:
		return tensor.F16ToFloat32(v.U16[i])
	}
	return math.Float32frombits(uint32(v.U16[i]) << 16)
}

// load writes values off..off+len(dst)-1 to dst as float32.
func (v Vec) load(dst []float32, off int) {
	switch {
	case v.F32 != nil:
		copy(dst, v.F32[off:off+len(dst)])
	case v.F16:
		F16ToFloat32s(dst, v.U16[off:off+len(dst)])
	default:
		BF16ToFloat32s(dst, v.U16[off:off+len(dst)])
	}
}
