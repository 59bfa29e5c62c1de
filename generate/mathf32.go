package generate

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// expF32 is MLX's CPU exp for float32 (mlx/backend/cpu/simd/math.h, simd::exp,
// which mx.exp and the float32 parts of categorical use on the CPU device):
// y = x·1.442695, 2^y split as ipart = floor(y + 0.5) and fpart = y − ipart,
// a degree-6 Cephes polynomial in fpart evaluated with fused multiply-adds,
// times 2^ipart built from the exponent bits; NaN passes through, x > 88
// gives +Inf and x < −88 gives 0.
func expF32(in float32) float32 {
	if in != in {
		return in
	}
	if in > 88 {
		return float32(math.Inf(1))
	}
	if in < -88 {
		return 0
	}
	x := in * 1.442695
	ipart := float32(math.Floor(float64(x) + 0.5))
	fpart := x - ipart
	p := float32(1.535336188319500e-4)
	p = fma32(p, fpart, 1.339887440266574e-3)
	p = fma32(p, fpart, 9.618437357674640e-3)
	p = fma32(p, fpart, 5.550332471162809e-2)
	p = fma32(p, fpart, 2.402264791363012e-1)
	p = fma32(p, fpart, 6.931472028550421e-1)
	p = fma32(p, fpart, 1.0)
	e := math.Float32frombits(uint32(int32(ipart)+127) << 23)
	return e * p
}

// fma32 is a float32 fused multiply-add (C's fmaf): a·b + c rounded once.
// a·b is exact in float64; the float64 sum is rounded to odd (using its exact
// error term) so that the final rounding to float32 is the correct one.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bb := s - p
	e := (p - (s - bb)) + (float64(c) - bb)
	if e == 0 {
		return float32(s)
	}
	bits := math.Float64bits(s)
	if bits&1 == 0 {
		if (e > 0) == (s > 0) {
			bits++
		} else {
			bits--
		}
	}
	return float32(math.Float64frombits(bits))
}

// rounder returns the function that rounds a float32 to dt, the way MLX's CPU
// types store each op's result: RNE to bfloat16 or float16, identity for
// float32. Other dtypes are not logits dtypes and give nil.
func rounder(dt tensor.DType) func(float32) float32 {
	switch dt {
	case tensor.BF16:
		return tensor.RoundBF16
	case tensor.F16:
		return tensor.RoundF16
	case tensor.F32:
		return func(f float32) float32 { return f }
	}
	return nil
}
