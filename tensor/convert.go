package tensor

import (
	"math"

	"github.com/x448/float16"
)

// bf16NaN is the bit pattern MLX's CPU bfloat16 type gives every NaN
// (__MLX_BFLOAT_NAN__ in mlx/types/bf16.h): positive, quiet, no payload.
const bf16NaN = 0x7FC0

// Float32ToBF16 rounds f to bfloat16 exactly as MLX's CPU type does
// (mlx/types/bf16.h, _MLX_BFloat16(float)): every NaN becomes 0x7FC0 (sign and
// payload dropped); otherwise round to nearest, ties to even, on the raw bits,
// which also rounds subnormals correctly and overflows to ±Inf.
func Float32ToBF16(f float32) uint16 {
	if f != f {
		return bf16NaN
	}
	u := math.Float32bits(f)
	u += (u>>16)&1 + 0x7FFF
	return uint16(u >> 16)
}

// BF16ToFloat32 widens a bfloat16 bit pattern to float32 exactly (the bits
// become the upper half of the float32).
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToF16 rounds f to IEEE binary16, round to nearest, ties to even, with
// overflow to ±Inf and correctly rounded subnormals (github.com/x448/float16).
// A NaN stays a NaN with its sign, the quiet bit set and the top payload bits
// kept (0x7E00 for the canonical NaN), as numpy and ARM hardware do. MLX's
// portable CPU type (mlx/types/fp16.h, used on x86) writes sign|0x7D00
// instead; both are NaN and no other input differs.
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	if e := b >> 23 & 0xff; e-113 < 30 { // 2^-14 <= |f| < 2^16: RoundF16's common case
		// Sign, exponent and 10 mantissa bits, rounded to nearest even; a
		// carry out of the largest binade gives exponent 31 and mantissa 0,
		// infinity, as it should.
		r := (b + 0xfff + b>>13&1) >> 13
		return uint16(r>>18<<15 | (r>>10&0xff-112)<<10 | r&0x3ff)
	}
	return float32ToF16Slow(f)
}

// float32ToF16Slow is Float32ToF16 through the library's conversion (every
// case: zeros, subnormals, overflow, infinities, NaN).
func float32ToF16Slow(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// F16ToFloat32 widens an IEEE binary16 bit pattern to float32 exactly.
func F16ToFloat32(h uint16) float32 { return float16.Frombits(h).Float32() }

// RoundBF16 returns f rounded to the nearest bfloat16, as a float32.
func RoundBF16(f float32) float32 { return BF16ToFloat32(Float32ToBF16(f)) }

// RoundF16 returns f rounded to the nearest float16 (ties to even), as a
// float32. Where the result is a normal float16 it rounds the bits in place
// (drop 13 mantissa bits, to nearest even; a carry moves to the next
// binade), a few integer operations against the conversion's branches;
// everything else (zeros, subnormals, overflow to infinity, infinities,
// NaN) takes the conversion, roundF16Slow, which TestRoundF16 holds it to.
func RoundF16(f float32) float32 {
	b := math.Float32bits(f)
	if e := b >> 23 & 0xff; e-113 < 30 { // 2^-14 <= |f| < 2^16
		r := (b + 0xfff + b>>13&1) &^ 0x1fff
		if r>>23&0xff <= 142 { // still below 2^16: a normal float16
			return math.Float32frombits(r)
		}
	}
	return roundF16Slow(f)
}

// roundF16Slow is RoundF16 through the float16 conversion and back.
func roundF16Slow(f float32) float32 { return F16ToFloat32(float32ToF16Slow(f)) }

// float64ToFloat32Odd rounds x to float32 with round-to-odd: truncate toward
// zero, and if anything was discarded set the lowest mantissa bit. Rounding
// that result again to a format with at least two fewer mantissa bits (f16,
// bf16) gives the correctly rounded (RNE) result of x, with no double rounding.
func float64ToFloat32Odd(x float64) float32 {
	f := float32(x) // RNE
	if x != x || float64(f) == x {
		return f
	}
	if math.IsInf(x, 0) {
		return f
	}
	bits := math.Float32bits(f)
	if math.Abs(float64(f)) > math.Abs(x) {
		bits-- // step the magnitude toward zero (also turns Inf into MaxFloat32)
	}
	return math.Float32frombits(bits | 1)
}
