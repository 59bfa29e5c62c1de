package kernel

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// Bulk conversions between float32 and bfloat16, bit-identical to the scalar
// tensor.BF16ToFloat32, tensor.Float32ToBF16 and tensor.RoundBF16 (round to
// nearest even on the raw bits, every NaN to the canonical 0x7FC0). On
// amd64 CPUs with AVX2 they run in assembly (conv_amd64.s), in every build;
// elsewhere they are the scalar loops.

// convAVX2 is set at start-up when the CPU (and OS) support AVX2.
var convAVX2 bool

// convParallel is the length from which the bulk conversions below split
// across the worker pool (a prefill's activations: 512 tokens x 4608 is
// 2.4 million values); below it they run on the caller, allocating nothing.
const convParallel = 1 << 17

// BF16ToFloat32s widens bfloat16 bits to float32 (exact): dst[i] = src[i]
// as float32, for i < len(dst). src needs at least len(dst) elements.
func BF16ToFloat32s(dst []float32, src []uint16) {
	src = src[:len(dst)]
	if len(dst) < convParallel {
		bf16ToFloat32s(dst, src)
		return
	}
	parallelFor(len(dst), 1<<15, func(lo, hi int) { bf16ToFloat32s(dst[lo:hi], src[lo:hi]) })
}

func bf16ToFloat32s(dst []float32, src []uint16) {
	i := 0
	if convAVX2 && len(dst) >= 16 {
		i = len(dst) &^ 15
		convBF16ToF32(&dst[0], &src[0], i)
	}
	for ; i < len(dst); i++ {
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
	}
}

// Float32sToBF16 rounds float32 values to bfloat16 bits as
// tensor.Float32ToBF16 does, for i < len(dst). src needs at least len(dst)
// elements.
func Float32sToBF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	if len(dst) < convParallel {
		float32sToBF16(dst, src)
		return
	}
	parallelFor(len(dst), 1<<15, func(lo, hi int) { float32sToBF16(dst[lo:hi], src[lo:hi]) })
}

func float32sToBF16(dst []uint16, src []float32) {
	i := 0
	if convAVX2 && len(dst) >= 16 {
		i = len(dst) &^ 15
		convF32ToBF16(&dst[0], &src[0], i)
	}
	for ; i < len(dst); i++ {
		dst[i] = tensor.Float32ToBF16(src[i])
	}
}

// AddRound sets dst[i] = a[i] + b[i], one float32 addition rounded to
// the nearest bfloat16 as tensor.RoundBF16 when bf16 is set (a sum of two
// bfloat16 arrays, as MLX adds them), for i < len(dst); a and b need
// len(dst) elements each and may be dst itself. It runs 16 values at a
// time in assembly where the CPU has AVX2, the same bits as the scalar
// loop.
func AddRound(dst, a, b []float32, bf16 bool) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	if convAVX2 && n >= 16 {
		i = n &^ 15
		flag := 0
		if bf16 {
			flag = 1
		}
		convAdd(&dst[0], &a[0], &b[0], i, flag)
	}
	for ; i < n; i++ {
		dst[i] = a[i] + b[i]
		if bf16 {
			dst[i] = tensor.RoundBF16(dst[i])
		}
	}
}

// RoundBF16s rounds every value of v to the nearest bfloat16 in place, as
// tensor.RoundBF16 does (a NaN becomes the canonical bf16 NaN).
func RoundBF16s(v []float32) {
	if len(v) < convParallel {
		roundBF16s(v)
		return
	}
	parallelFor(len(v), 1<<15, func(lo, hi int) { roundBF16s(v[lo:hi]) })
}

func roundBF16s(v []float32) {
	i := 0
	if convAVX2 && len(v) >= 16 {
		i = len(v) &^ 15
		convRoundBF16(&v[0], i)
	}
	for ; i < len(v); i++ {
		v[i] = tensor.RoundBF16(v[i])
	}
}

// simdF16 is set at start-up when the CPU has F16C (with AVX2 and FMA,
// vec_avx2_amd64.go): the float16 conversions below then run 8 values at a
// time with VCVTPH2PS/VCVTPS2PH, bit-identical to tensor.F16ToFloat32,
// tensor.Float32ToF16 and tensor.RoundF16 (round to nearest even; NaNs keep
// their sign and top payload bits and get the quiet bit, as x448/float16
// does).
var simdF16 bool

// F16ToFloat32s widens float16 bits to float32 (exact), for i < len(dst).
// src needs at least len(dst) elements.
func F16ToFloat32s(dst []float32, src []uint16) {
	src = src[:len(dst)]
	if len(dst) < convParallel {
		f16ToFloat32s(dst, src)
		return
	}
	parallelFor(len(dst), 1<<15, func(lo, hi int) { f16ToFloat32s(dst[lo:hi], src[lo:hi]) })
}

func f16ToFloat32s(dst []float32, src []uint16) {
	i := 0
	if simdF16 {
		i = f16ToFloat32sAsm(dst, src)
	}
	for ; i < len(dst); i++ {
		dst[i] = tensor.F16ToFloat32(src[i])
	}
}

// Float32sToF16 rounds float32 values to float16 bits as
// tensor.Float32ToF16 does, for i < len(dst). src needs at least len(dst)
// elements.
func Float32sToF16(dst []uint16, src []float32) {
	src = src[:len(dst)]
	if len(dst) < convParallel {
		float32sToF16(dst, src)
		return
	}
	parallelFor(len(dst), 1<<15, func(lo, hi int) { float32sToF16(dst[lo:hi], src[lo:hi]) })
}

func float32sToF16(dst []uint16, src []float32) {
	i := 0
	if simdF16 {
		i = float32sToF16Asm(dst, src)
	}
	for ; i < len(dst); i++ {
		dst[i] = tensor.Float32ToF16(src[i])
	}
}

// RoundF16s rounds every value of v to the nearest float16 in place
// (tensor.RoundF16).
func RoundF16s(v []float32) {
	if len(v) < convParallel {
		roundF16s(v)
		return
	}
	parallelFor(len(v), 1<<15, func(lo, hi int) { roundF16s(v[lo:hi]) })
}

func roundF16s(v []float32) {
	i := 0
	if simdF16 {
		i = roundF16sAsm(v)
	}
	for ; i < len(v); i++ {
		v[i] = tensor.RoundF16(v[i])
	}
}

// VecRow returns len(buf) values of v from index off as float32: a view of
// float32 storage, or bf16/f16 bits converted into buf.
func VecRow(v Vec, off int, buf []float32) []float32 {
	switch {
	case v.F32 != nil:
		return v.F32[off : off+len(buf)]
	case v.F16:
		F16ToFloat32s(buf, v.U16[off:])
	default:
		BF16ToFloat32s(buf, v.U16[off:])
	}
	return buf
}
