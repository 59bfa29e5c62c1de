// Package mlxmath holds the scalar float32 math that must match MLX's CPU
// kernels bit for bit and that several packages share (the CPU backend's
// kernels and the sampler).
package mlxmath

import "math"

// FMA32 returns a·b + c rounded once to float32 (C's fmaf). The hardware
// float64 FMA (math.FMA) rounds a·b + c once to float64; converting that
// to float32 rounds a second time, which gives the correctly rounded
// result unless the float64 value lies exactly halfway between two
// float32 values or outside float32's normal range. Those cases (rare: the
// 29 bits the conversion drops must be 1 followed by 28 zeros) take
// fma32Exact.
func FMA32(a, b, c float32) float32 {
	if r, ok := fma32Fast(a, b, c); ok {
		return r
	}
	return fma32Exact(a, b, c)
}

// fma32Fast is FMA32's hardware path (small enough to inline), reporting
// false where fma32Exact must decide.
func fma32Fast(a, b, c float32) (float32, bool) {
	r := math.FMA(float64(a), float64(b), float64(c))
	bits := math.Float64bits(r)
	// float32's normal exponents are 2^-126 to 2^127 (biased 897 to 1150
	// in float64).
	e := bits >> 52 & 0x7ff
	return float32(r), bits&(1<<29-1) != 1<<28 && e-(1023-126) <= 253
}

// fma32Exact is FMA32 without the hardware FMA: the product is exact in
// float64; the sum's rounding error is recovered (TwoSum) and folded in as
// a sticky bit (round to odd), so the final conversion to float32 rounds
// correctly.
func fma32Exact(a, b, c float32) float32 {
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

// ExpSlice writes Exp(src[i]) to dst[i] (len(dst) >= len(src); dst may be
// src), the same bits: through the vector exp registered with
// SetExpSlice when there is one (the CPU backend's kernels register their
// AVX-512/AVX2 exp, held to Exp bit for bit by their tests), else one
// value at a time.
func ExpSlice(dst, src []float32) {
	dst = dst[:len(src)]
	if expSlice != nil {
		expSlice(dst, src)
		return
	}
	for i, v := range src {
		dst[i] = Exp(v)
	}
}

var expSlice func(dst, src []float32)

// SetExpSlice makes ExpSlice call f, which must write Exp's bits for every
// value (the CPU backend's kernel package calls it in its init).
func SetExpSlice(f func(dst, src []float32)) { expSlice = f }

// ExpPoly returns the coefficients of Exp's polynomial in f, highest degree
// first (for vector forms of Exp).
func ExpPoly() [7]float32 { return expPoly }
