// Package mlxmath holds the scalar float32 math that must match MLX's CPU
// kernels bit for bit and that several packages share (the CPU backend's
// kernels and the sampler).
package mlxmath

import "math"

// FMA32 returns a·b + c rounded once to float32 (C's fmaf). The product is
// exact in float64; the sum's rounding error is recovered (TwoSum) and folded
// in as a sticky bit (round to odd), so the final conversion to float32
// rounds correctly.
func FMA32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	if math.IsInf(s, 0) || s != s {
		return float32(s)
	}
	bb := s - p
	err := (p - (s - bb)) + (float64(c) - bb)
	if err == 0 {
		return float32(s)
	}
	bits := math.Float64bits(s)
	if bits&1 == 0 {
		if (err > 0) == (s > 0) {
			bits++
		} else {
			bits--
		}
	}
	return float32(math.Float64frombits(bits))
}

// expPoly is the degree-6 Cephes polynomial for 2^f on [-0.5, 0.5] of
// MLX's CPU exp, highest degree first.
var expPoly = [7]float32{
	1.535336188319500e-4,
	1.339887440266574e-3,
	9.618437357674640e-3,
	5.550332471162809e-2,
	2.402264791363012e-1,
	6.931472028550421e-1,
	1.000000000000000,
}

// Exp is exp(x) exactly as MLX's CPU computes it in float32
// (mlx/backend/cpu/simd/math.h, simd::exp): x·log2(e) split into the integer
// n = floor(x·1.442695 + 0.5) (the +0.5 taken in double) and the fraction f,
// 2^f from the degree-6 polynomial ExpPoly() evaluated with fmaf, 2^n built
// from the exponent bits; NaN passes through, x > 88 gives +Inf and x < -88
// gives 0. It is not correctly rounded; it is what MLX's CPU exp, sigmoid,
// silu, softmax and categorical sampling use.
func Exp(x float32) float32 {
	if x != x {
		return x
	}
	if x > 88 {
		return float32(math.Inf(1))
	}
	if x < -88 {
		return 0
	}
	y := x * 1.442695
	ipart := float32(math.Floor(float64(y) + 0.5))
	f := y - ipart
	p := expPoly[0]
	for _, c := range expPoly[1:] {
		p = FMA32(p, f, c)
	}
	e := math.Float32frombits(uint32((int32(ipart) + 127) << 23))
	return e * p
}

// ExpPoly returns the coefficients of Exp's polynomial in f, highest degree
// first (for vector forms of Exp).
func ExpPoly() [7]float32 { return expPoly }
