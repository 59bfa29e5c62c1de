package kernel

import "math"

// fma32 returns a·b + c rounded once to float32 (C's fmaf). The product is
// exact in float64; the sum's rounding error is recovered (TwoSum) and folded
// in as a sticky bit (round to odd), so the final conversion to float32
// rounds correctly.
func fma32(a, b, c float32) float32 {
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

// ExpMLX is exp(x) exactly as MLX's CPU computes it in float32
// (mlx/backend/cpu/simd/math.h, simd::exp): x·log2(e) split into the integer
// n = floor(x·1.442695 + 0.5) (the +0.5 taken in double) and the fraction f,
// 2^f from a degree-6 Cephes polynomial evaluated with fmaf, 2^n built from
// the exponent bits; NaN passes through, x > 88 gives +Inf and x < -88 gives 0.
// It is not correctly rounded; it is what MLX's CPU exp, sigmoid and silu use.
func ExpMLX(x float32) float32 {
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
	p := float32(1.535336188319500e-4)
	p = fma32(p, f, 1.339887440266574e-3)
	p = fma32(p, f, 9.618437357674640e-3)
	p = fma32(p, f, 5.550332471162809e-2)
	p = fma32(p, f, 2.402264791363012e-1)
	p = fma32(p, f, 6.931472028550421e-1)
	p = fma32(p, f, 1.000000000000000)
	e := math.Float32frombits(uint32((int32(ipart) + 127) << 23))
	return e * p
}

// SigmoidMLX is mx.sigmoid of a value stored in a dtype with rounding round,
// as MLX's CPU computes it (mlx/backend/cpu/unary_ops.h Sigmoid): the exp is
// stored in the dtype, the rest is float32 (float op bf16 gives float in
// mlx/types/bf16.h), and the result is rounded once:
//
//	e = round(ExpMLX(|x|)); y = 1/(1+e); result = round(x < 0 ? y : 1−y)
func SigmoidMLX(x float32, round Rounder) float32 {
	e := round(ExpMLX(abs32(x)))
	y := 1 / (1 + e)
	if x < 0 {
		return round(y)
	}
	return round(1 - y)
}

// swiglu computes one element of mlx_lm's swiglu (see SwiGLU).
func swiglu(g, u float32, round Rounder) float32 {
	silu := round(float32(g * SigmoidMLX(g, round)))
	return round(float32(silu * u))
}

func checkSwiGLU(dst, gate, up []float32) {
	check(len(gate) == len(up), "SwiGLU", "gate has %d elements and up %d", len(gate), len(up))
	need("SwiGLU", "dst", len(dst), len(gate))
}

// SwiGLURef is the reference of [SwiGLU]: one goroutine.
func SwiGLURef(dst, gate, up []float32, round Rounder) {
	checkSwiGLU(dst, gate, up)
	round = roundOr(round)
	for i, g := range gate {
		dst[i] = swiglu(g, up[i], round)
	}
}

// SwiGLU is mlx_lm's swiglu (mlx_lm/models/activations.py: silu(gate)·up,
// compiled) as MLX's CPU computes it, every graph node stored in the dtype
// (mlx_lm_spec.md §3.8, refined from mlx/backend/cpu/unary_ops.h):
//
//	sig  = SigmoidMLX(g)            (rounds the exp and the result)
//	silu = round(g·sig)
//	dst  = round(silu·up)
//
// for len(gate) elements; up has the same length. Checked bit for bit against
// MLX in bf16, f16 and f32 in the tests. Chunks are split across workers; no
// scratch.
func SwiGLU(dst, gate, up []float32, round Rounder) {
	checkSwiGLU(dst, gate, up)
	round = roundOr(round)
	parallelFor(len(gate), 16384, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = swiglu(gate[i], up[i], round)
		}
	})
}
