//go:build goexperiment.simd && amd64

package kernel

import (
	"math"
	"simd/archsimd"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
)

// Vector forms of ExpMLX and SwiGLU (AVX-512), bit-identical to the scalar
// ones: archsimd's MulAdd is a fused float32 multiply-add, which is what
// mlxmath.FMA32 computes, and floor(y + 0.5) is taken exactly in float32.

func init() {
	if archsimd.X86.AVX512() {
		simdSwiGLU = swigluAVX512
		simdExp = expSliceAVX512
		simdRoundBF16 = roundBF16SliceAVX512
	}
}

var expPoly = mlxmath.ExpPoly()

func bcast(f float32) archsimd.Float32x16 { return archsimd.BroadcastFloat32x16(f) }

func bcastBits(u uint32) archsimd.Float32x16 { return bcast(math.Float32frombits(u)) }

// expAVX512 is ExpMLX on 16 lanes. n = floor(y + 0.5) is floor(y), plus
// one when y ≥ floor(y) + 0.5 (exact: |y| < 2^22 here).
func expAVX512(x archsimd.Float32x16) archsimd.Float32x16 {
	one := bcast(1)
	y := x.Mul(bcast(1.442695))
	fl := y.FloorScaled(0)
	n := fl.Add(one).Merge(fl, y.GreaterEqual(fl.Add(bcast(0.5))))
	f := y.Sub(n)
	p := bcast(expPoly[0])
	for _, c := range expPoly[1:] {
		p = p.MulAdd(f, bcast(c))
	}
	e := n.ConvertToInt32().Add(archsimd.BroadcastInt32x16(127)).ShiftAllLeft(23).AsFloat32x16()
	r := e.Mul(p)
	r = bcast(float32(math.Inf(1))).Merge(r, x.Greater(bcast(88)))
	r = bcast(0).Merge(r, x.Less(bcast(-88)))
	return x.Merge(r, x.IsNaN())
}

// expSliceAVX512 writes ExpMLX(src[i]) to dst[i] for whole blocks of 16 and
// returns how many it wrote.
func expSliceAVX512(dst, src []float32) int {
	n := len(src) &^ 15
	dst = dst[:n]
	for i := 0; i < n; i += 16 {
		expAVX512(ld(src[i:])).Store((*[16]float32)(dst[i : i+16]))
	}
	return n
}

// roundBF16AVX512 is tensor.RoundBF16 on 16 lanes: round to nearest even
// on the upper 16 bits; NaN becomes bf16's quiet NaN 0x7FC0.
func roundBF16AVX512(v archsimd.Float32x16) archsimd.Float32x16 {
	u := v.AsUint32x16()
	one := archsimd.BroadcastUint32x16(1)
	r := u.Add(u.ShiftAllRight(16).And(one)).Add(archsimd.BroadcastUint32x16(0x7FFF)).And(archsimd.BroadcastUint32x16(0xFFFF0000))
	return bcastBits(0x7FC00000).Merge(r.AsFloat32x16(), v.IsNaN())
}

// roundBF16SliceAVX512 rounds whole blocks of 16 values to bf16 in place
// and returns how many it rounded.
func roundBF16SliceAVX512(v []float32) int {
	n := len(v) &^ 15
	for i := 0; i < n; i += 16 {
		roundBF16AVX512(ld(v[i:])).Store((*[16]float32)(v[i : i+16]))
	}
	return n
}

// swigluAVX512 computes SwiGLU for whole blocks of 16 (see swiglu), each
// stored value rounded to bf16 when bf16 is set (else float32), and returns
// how many it wrote.
func swigluAVX512(dst, gate, up []float32, bf16 bool) int {
	n := len(gate) &^ 15
	dst, up = dst[:n], up[:n]
	rnd := func(v archsimd.Float32x16) archsimd.Float32x16 { return v }
	if bf16 {
		rnd = roundBF16AVX512
	}
	one, zero := bcast(1), bcast(0)
	abs := archsimd.BroadcastUint32x16(0x7FFFFFFF)
	for i := 0; i < n; i += 16 {
		g, u := ld(gate[i:]), ld(up[i:])
		e := rnd(expAVX512(g.AsUint32x16().And(abs).AsFloat32x16()))
		y := one.Div(one.Add(e))
		sig := rnd(y.Merge(one.Sub(y), g.Less(zero)))
		silu := rnd(g.Mul(sig))
		rnd(silu.Mul(u)).Store((*[16]float32)(dst[i : i+16]))
	}
	return n
}
