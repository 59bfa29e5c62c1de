package tensor

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
)

// Float32 bit patterns used below. A float32 is sign(1) exponent(8)
// mantissa(23); bfloat16 keeps the top 16 bits (sign, exponent, 7 mantissa
// bits), so rounding to bf16 looks at the low 16 bits: below 0x8000 round
// down, above round up, exactly 0x8000 is a tie that goes to the even
// (low bit 0) bf16 pattern.
func TestFloat32ToBF16(t *testing.T) {
	cases := []struct {
		name string
		in   uint32 // float32 bits
		want uint16
	}{
		{"+0", 0x00000000, 0x0000},
		{"-0", 0x80000000, 0x8000}, // sign kept
		{"+1", 0x3F800000, 0x3F80}, // exact
		{"+Inf", 0x7F800000, 0x7F80},
		{"-Inf", 0xFF800000, 0xFF80},
		// MLX maps every NaN to 0x7FC0 (__MLX_BFLOAT_NAN__), dropping sign and payload.
		{"qNaN", 0x7FC00000, 0x7FC0},
		{"-qNaN", 0xFFC00000, 0x7FC0},
		// Without the NaN check the rounding add would give 0x7F80 (+Inf) for this one.
		{"sNaN-payload1", 0x7F800001, 0x7FC0},
		// 1+2^-8: low half 0x8000, tie between 0x3F80 (even) and 0x3F81 -> 0x3F80.
		{"tie-to-even-down", 0x3F808000, 0x3F80},
		// 1+3*2^-8: tie between 0x3F81 (odd) and 0x3F82 (even) -> 0x3F82.
		{"tie-to-even-up", 0x3F818000, 0x3F82},
		{"tie-to-even-up-negative", 0xBF818000, 0xBF82},
		{"just-above-tie", 0x3F808001, 0x3F81}, // low half 0x8001 > 0x8000
		{"just-below-tie", 0x3F807FFF, 0x3F80}, // low half 0x7FFF < 0x8000
		// Smallest float32 subnormal 2^-149: low half 0x0001 < 0x8000 -> +0.
		{"f32-min-subnormal", 0x00000001, 0x0000},
		// Largest float32 subnormal 0x007FFFFF: low half 0xFFFF rounds up,
		// carrying into the exponent: 0x0080 = 2^-126, bf16's smallest normal.
		{"f32-max-subnormal", 0x007FFFFF, 0x0080},
		// bf16's smallest subnormal 2^-133 is float32 0x00010000: exact.
		{"bf16-min-subnormal", 0x00010000, 0x0001},
		// Half of it (0x00008000) ties between 0x0000 (even) and 0x0001 -> 0.
		{"subnormal-tie-down", 0x00008000, 0x0000},
		// 0x00018000 ties between 0x0001 (odd) and 0x0002 -> 0x0002.
		{"subnormal-tie-up", 0x00018000, 0x0002},
		// bf16's largest subnormal 0x007F and largest finite 0x7F7F are exact.
		{"bf16-max-subnormal", 0x007F0000, 0x007F},
		{"bf16-max-finite", 0x7F7F0000, 0x7F7F},
		// Halfway between 0x7F7F (odd) and 0x7F80 (Inf, even) -> +Inf (overflow).
		{"overflow-tie", 0x7F7F8000, 0x7F80},
		{"below-overflow-tie", 0x7F7F7FFF, 0x7F7F},
		// float32's max finite 0x7F7FFFFF is above that tie -> +Inf; negative -> -Inf.
		{"f32-max-finite", 0x7F7FFFFF, 0x7F80},
		{"f32-min-finite", 0xFF7FFFFF, 0xFF80},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Float32ToBF16(math.Float32frombits(c.in)); got != c.want {
				t.Errorf("got %#04x, want %#04x (input %#08x)", got, c.want, c.in)
			}
		})
	}
}

// Binary16 is sign(1) exponent(5, bias 15) mantissa(10): max finite 65504 =
// (2-2^-10)*2^15 = 0x7BFF, smallest normal 2^-14 = 0x0400, subnormals
// k*2^-24 = k for k in 1..1023.
func TestFloat32ToF16(t *testing.T) {
	cases := []struct {
		name string
		in   float32
		want uint16
	}{
		{"+0", 0, 0x0000},
		{"-0", float32(math.Copysign(0, -1)), 0x8000},
		{"+1", 1, 0x3C00},
		{"+Inf", float32(math.Inf(1)), 0x7C00},
		{"-Inf", float32(math.Inf(-1)), 0xFC00},
		// Canonical NaN 0x7FC00000: exponent all ones, quiet bit 0x200, payload
		// top bits (0x400000>>13 = 0x200) -> 0x7E00; negative keeps its sign.
		{"qNaN", math.Float32frombits(0x7FC00000), 0x7E00},
		{"-qNaN", math.Float32frombits(0xFFC00000), 0xFE00},
		// Payload 1 is lost in the 13 dropped bits, the quiet bit keeps it a NaN.
		{"sNaN-payload1", math.Float32frombits(0x7F800001), 0x7E00},
		{"max-finite", 65504, 0x7BFF},
		// 65519 is below the midpoint 65520 between 65504 and 65536.
		{"below-overflow-tie", 65519, 0x7BFF},
		// 65520 ties between 0x7BFF (odd) and 0x7C00 (even, Inf) -> +Inf.
		{"overflow-tie", 65520, 0x7C00},
		{"f32-max-finite", math.MaxFloat32, 0x7C00},
		{"f32-min-finite", -math.MaxFloat32, 0xFC00},
		{"min-subnormal", float32(math.Ldexp(1, -24)), 0x0001},
		// 2^-25 ties between 0 (even) and 2^-24 -> 0.
		{"subnormal-tie-down", float32(math.Ldexp(1, -25)), 0x0000},
		// 3*2^-25 = 1.5*2^-24 ties between 0x0001 (odd) and 0x0002 -> 0x0002.
		{"subnormal-tie-up", float32(math.Ldexp(3, -25)), 0x0002},
		// Just above 2^-25 rounds up to the smallest subnormal.
		{"above-subnormal-tie", float32(math.Ldexp(1+math.Ldexp(1, -23), -25)), 0x0001},
		{"max-subnormal", float32(math.Ldexp(1023, -24)), 0x03FF},
		{"min-normal", float32(math.Ldexp(1, -14)), 0x0400},
		// 1+2^-11 ties between 0x3C00 (even) and 0x3C01 -> 0x3C00.
		{"tie-to-even-down", float32(1 + math.Ldexp(1, -11)), 0x3C00},
		// 1+3*2^-11 ties between 0x3C01 (odd) and 0x3C02 -> 0x3C02.
		{"tie-to-even-up", float32(1 + math.Ldexp(3, -11)), 0x3C02},
		{"tie-to-even-up-negative", float32(-1 - math.Ldexp(3, -11)), 0xBC02},
		{"f32-min-subnormal", math.Float32frombits(1), 0x0000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Float32ToF16(c.in); got != c.want {
				t.Errorf("got %#04x, want %#04x (input %g, bits %#08x)", got, c.want, c.in, math.Float32bits(c.in))
			}
		})
	}
}

func TestWidening(t *testing.T) {
	cases := []struct {
		name string
		fn   func(uint16) float32
		in   uint16
		want uint32 // float32 bits
	}{
		{"bf16/+1", BF16ToFloat32, 0x3F80, 0x3F800000},
		{"bf16/-0", BF16ToFloat32, 0x8000, 0x80000000},
		{"bf16/min-subnormal", BF16ToFloat32, 0x0001, 0x00010000}, // 2^-133
		{"bf16/-Inf", BF16ToFloat32, 0xFF80, 0xFF800000},
		{"bf16/NaN", BF16ToFloat32, 0x7FC0, 0x7FC00000},
		{"f16/+1", F16ToFloat32, 0x3C00, 0x3F800000},
		{"f16/-0", F16ToFloat32, 0x8000, 0x80000000},
		// 2^-24: float32 exponent 127-24 = 103 = 0x67 -> 0x33800000.
		{"f16/min-subnormal", F16ToFloat32, 0x0001, 0x33800000},
		// 65504 = 1.1111111111b * 2^15: exponent 142 = 0x8E, mantissa 0x7FE000 -> 0x477FE000.
		{"f16/max-finite", F16ToFloat32, 0x7BFF, 0x477FE000},
		{"f16/-Inf", F16ToFloat32, 0xFC00, 0xFF800000},
		{"f16/qNaN", F16ToFloat32, 0x7E00, 0x7FC00000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := math.Float32bits(c.fn(c.in)); got != c.want {
				t.Errorf("got %#08x, want %#08x (input %#04x)", got, c.want, c.in)
			}
		})
	}
}

// Every one of the 65536 patterns widens and narrows back to itself, except
// NaNs: bf16 NaNs all become 0x7FC0 (MLX), f16 NaNs stay NaN.
func TestHalfRoundTripExhaustive(t *testing.T) {
	for b := 0; b < 1<<16; b++ {
		h := uint16(b)
		isNaN := h&0x7F80 == 0x7F80 && h&0x7F != 0
		got := Float32ToBF16(BF16ToFloat32(h))
		if want := h; isNaN && got != 0x7FC0 || !isNaN && got != want {
			t.Fatalf("bf16: got %#04x from %#04x", got, h)
		}
		isNaN = h&0x7C00 == 0x7C00 && h&0x3FF != 0
		got = Float32ToF16(F16ToFloat32(h))
		if isNaN && got&0x7C00 != 0x7C00 || isNaN && got&0x3FF == 0 || !isNaN && got != h {
			t.Fatalf("f16: got %#04x from %#04x", got, h)
		}
	}
}

// refRound is an independent round-to-nearest-even of a finite float32 into a
// 16-bit format given by its widening function: binary search the
// non-negative finite patterns (monotone in value), then compare the exact
// float64 distances to the two neighbours. maxFinite is the largest finite
// pattern, inf the infinity pattern.
func refRound(x float32, widen func(uint16) float32, maxFinite, inf uint16) uint16 {
	sign := uint16(0)
	v := float64(x)
	if math.Signbit(v) {
		sign, v = 0x8000, -v
	}
	lo, hi := uint16(0), maxFinite
	if v >= float64(widen(maxFinite)) {
		top := float64(widen(maxFinite))
		half := (top - float64(widen(maxFinite-1))) / 2
		if v >= top+half { // the tie goes to inf, whose pattern is even
			return sign | inf
		}
		return sign | maxFinite
	}
	for hi-lo > 1 { // invariant: widen(lo) <= v < widen(hi)
		mid := lo + (hi-lo)/2
		if float64(widen(mid)) <= v {
			lo = mid
		} else {
			hi = mid
		}
	}
	dl, dh := v-float64(widen(lo)), float64(widen(hi))-v
	switch {
	case dl < dh:
		return sign | lo
	case dh < dl:
		return sign | hi
	case lo&1 == 0:
		return sign | lo
	}
	return sign | hi
}

func TestRoundingAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, f := range []struct {
		name      string
		conv      func(float32) uint16
		widen     func(uint16) float32
		maxFinite uint16
		inf       uint16
	}{
		{"bf16", Float32ToBF16, BF16ToFloat32, 0x7F7F, 0x7F80},
		{"f16", Float32ToF16, F16ToFloat32, 0x7BFF, 0x7C00},
	} {
		t.Run(f.name, func(t *testing.T) {
			for i := 0; i < 200000; i++ {
				bits := rng.Uint32()
				if i%4 == 1 { // force ties and near-ties
					bits = bits&^0x1FFF | 0x1000 // f16 tie pattern in the low 13 bits
				} else if i%4 == 2 {
					bits = bits&^0xFFFF | 0x8000 // bf16 tie pattern
				} else if i%4 == 3 { // values near the f16 range
					bits = bits&0x807FFFFF | uint32(100+rng.Intn(60))<<23
				}
				x := math.Float32frombits(bits)
				if x != x {
					continue
				}
				got, want := f.conv(x), refRound(x, f.widen, f.maxFinite, f.inf)
				if got != want {
					t.Fatalf("got %#04x, want %#04x (input %#08x = %g)", got, want, bits, x)
				}
			}
		})
	}
}

func TestRoundHelpers(t *testing.T) {
	// 1+2^-8+2^-9 is above the bf16 tie at 1+2^-8, so it rounds up to 1+2^-7;
	// in f16 (10 mantissa bits) it is exact.
	x := float32(1 + math.Ldexp(1, -8) + math.Ldexp(1, -9))
	if got, want := RoundBF16(x), float32(1+math.Ldexp(1, -7)); got != want {
		t.Errorf("RoundBF16: got %g, want %g", got, want)
	}
	if got := RoundF16(x); got != x {
		t.Errorf("RoundF16: got %g, want %g", got, x)
	}
}

func TestFloat64ToFloat32Odd(t *testing.T) {
	cases := []struct {
		in   float64
		want uint32
	}{
		{1, 0x3F800000},                                           // exact
		{1 + math.Ldexp(1, -40), 0x3F800001},                      // truncates to 1.0, sticky sets bit 0
		{1 + math.Ldexp(1, -23) - math.Ldexp(1, -40), 0x3F800001}, // RNE would give 1+2^-23 = 0x3F800001 too; truncation 1.0 | 1
		{-(1 + math.Ldexp(1, -40)), 0xBF800001},
		{math.Ldexp(1, -160), 0x00000001}, // below every float32: truncates to 0, sticky 1
		{math.MaxFloat64, 0x7F7FFFFF},     // RNE gives Inf; truncation gives max finite, already odd
		{math.Inf(1), 0x7F800000},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.in), func(t *testing.T) {
			if got := math.Float32bits(float64ToFloat32Odd(c.in)); got != c.want {
				t.Errorf("got %#08x, want %#08x", got, c.want)
			}
		})
	}
}

// TestRoundF16: RoundF16's in-place rounding of normal results gives the
// bits of the conversion through float16 (roundF16Slow) on every 4099th
// float32 bit pattern, every pattern within 2^14 of each exponent boundary
// of the fast path (around 2^-14 and 2^16, where it hands over to the
// conversion), and ties around 65504 and 65520. (Checked on all 2^32 bit
// patterns once, 2026-12-04: no difference.)
// f16Sweep calls check on a sweep of all float32 patterns (every 4099th)
// and on every pattern within 2^14 of the edges of float16's normal range
// (exponents 112, 113, 142 and 143), both signs.
func f16Sweep(check func(b uint32)) {
	for b := uint64(0); b < 1<<32; b += 4099 {
		check(uint32(b))
	}
	for _, sign := range []uint32{0, 1 << 31} {
		for _, e := range []uint32{112, 113, 142, 143} {
			for d := int64(-1 << 14); d < 1<<14; d++ {
				check(sign | uint32(int64(e<<23)+d))
			}
		}
	}
}

// TestFloat32ToF16Fast holds Float32ToF16's in-place rounding of normal
// float16 values to the library conversion, on f16Sweep's inputs.
func TestFloat32ToF16Fast(t *testing.T) {
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if got, want := Float32ToF16(f), float32ToF16Slow(f); got != want {
			t.Fatalf("Float32ToF16(%#08x = %g) = %#04x, want %#04x", b, f, got, want)
		}
	}
	f16Sweep(check)
}

func TestRoundF16(t *testing.T) {
	check := func(b uint32) {
		f := math.Float32frombits(b)
		if got, want := math.Float32bits(RoundF16(f)), math.Float32bits(roundF16Slow(f)); got != want {
			t.Fatalf("RoundF16(%#08x = %g) = %#08x, want %#08x", b, f, got, want)
		}
	}
	f16Sweep(check)
	for _, sign := range []uint32{0, 1 << 31} {
		for _, f := range []float32{65504, 65519.99, 65520, 65536, 6.1035156e-05, 5.9604645e-08} {
			check(sign | math.Float32bits(f))
		}
	}
}
