package kernel

import (
	"reflect"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/tensor"
)

// ExpMLX is exp(x) exactly as MLX's CPU computes it in float32
// (mlx/backend/cpu/simd/math.h, simd::exp; see mlxmath.Exp): a Cephes
// polynomial, not correctly rounded; NaN passes through, x > 88 gives +Inf
// and x < -88 gives 0. It is what MLX's CPU exp, sigmoid and silu use.
func ExpMLX(x float32) float32 { return mlxmath.Exp(x) }

// ExpSlice writes ExpMLX(src[i]) to dst[i] for every i (dst and src may be
// the same slice); 16 lanes at a time with AVX-512, 8 with AVX2 and FMA,
// bit-identical.
func ExpSlice(dst, src []float32) {
	need("ExpSlice", "dst", len(dst), len(src))
	i := 0
	if simdExp != nil {
		i = simdExp(dst, src)
	}
	for ; i < len(src); i++ {
		dst[i] = ExpMLX(src[i])
	}
}

// The sampler's exp (mlxmath.ExpSlice) runs on ExpSlice's vector kernels.
func init() { mlxmath.SetExpSlice(ExpSlice) }

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

// Vector hooks (vec_amd64.go, assembly of sdpa_amd64.s, with AVX-512;
// vec_avx2_amd64.go, assembly of vec_avx2_amd64.s, with AVX2): each handles
// a prefix of whole vectors and returns its length; nil when the CPU has
// neither.
var (
	// simdSwiGLU is SwiGLU with every stored value rounded as roundKind
	// kind says ('i', 'b' or 'h'; it returns 0 for a kind it lacks).
	simdSwiGLU func(dst, gate, up []float32, kind byte) int
	// simdExp writes ExpMLX of each value.
	simdExp func(dst, src []float32) int
)

// roundSlice applies round to every value of v in place; tensor.RoundBF16
// and tensor.RoundF16 go through RoundBF16s and RoundF16s (vector code with
// AVX2, F16C).
func roundSlice(v []float32, round Rounder, kind byte) {
	switch kind {
	case 'i':
	case 'b':
		RoundBF16s(v)
	case 'h':
		RoundF16s(v)
	default:
		for i := range v {
			v[i] = round(v[i])
		}
	}
}

// roundKind classifies a Rounder for the vector kernels: 'i' Identity, 'b'
// tensor.RoundBF16, 'h' tensor.RoundF16, 0 anything else (left to the
// scalar loops).
func roundKind(r Rounder) byte {
	switch reflect.ValueOf(r).Pointer() {
	case reflect.ValueOf(Identity).Pointer():
		return 'i'
	case reflect.ValueOf(tensor.RoundBF16).Pointer():
		return 'b'
	case reflect.ValueOf(tensor.RoundF16).Pointer():
		return 'h'
	}
	return 0
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

// swigluChunk is the fewest values SwiGLU hands a worker: about a
// nanosecond each (an exp and a division), so a decode step's few thousand
// are worth splitting. Eight SmolLM2 rows (12288 values, bf16, Zen 4, two
// threads, a throwaway benchmark): 12.6 us whole, 8.6 us in chunks of at
// least 4096, 6.8 us of at least 2048.
const swigluChunk = 2048

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
// (mlx/backend/cpu/unary_ops.h):
//
//	sig  = SigmoidMLX(g)            (rounds the exp and the result)
//	silu = round(g·sig)
//	dst  = round(silu·up)
//
// for len(gate) elements; up has the same length. Checked bit for bit against
// MLX in bf16, f16 and f32 in the tests. Chunks are split across workers; no
// scratch. With AVX-512 the bf16 and float32 forms run 16 lanes at a time,
// with AVX2 (FMA, F16C) the float32, bf16 and f16 forms 8 at a time, all
// bit-identical to SwiGLURef.
func SwiGLU(dst, gate, up []float32, round Rounder) {
	checkSwiGLU(dst, gate, up)
	round = roundOr(round)
	kind := roundKind(round)
	parallelFor(len(gate), swigluChunk, func(lo, hi int) {
		if simdSwiGLU != nil && kind != 0 {
			lo += simdSwiGLU(dst[lo:hi], gate[lo:hi], up[lo:hi], kind)
		}
		for i := lo; i < hi; i++ {
			dst[i] = swiglu(gate[i], up[i], round)
		}
	})
}
