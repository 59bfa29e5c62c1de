package tensor

import (
	"fmt"
	"math"
	"testing"
)

var (
	nan  = math.NaN()
	inf  = math.Inf(1)
	ninf = math.Inf(-1)
)

func near(got, want, tol float64) bool {
	if math.IsInf(want, 0) || math.IsNaN(want) {
		return got == want || math.IsNaN(got) && math.IsNaN(want)
	}
	return math.Abs(got-want) <= tol
}

func TestMaxAbs(t *testing.T) {
	cases := []struct {
		name string
		a, b []float64
		max  float64
		idx  int
	}{
		// |diffs| = 0.5, 0.5, 2, 0 -> 2 at index 2.
		{"basic", []float64{1, 2.5, -3, 4}, []float64{1.5, 2, -1, 4}, 2, 2},
		// 0.5, 0.5: the first index wins a tie.
		{"tie", []float64{1, 2}, []float64{1.5, 2.5}, 0.5, 0},
		{"nan-vs-number", []float64{1, nan, 5}, []float64{1, 2, 5}, inf, 1},
		{"nan-vs-nan-and-equal-infs", []float64{nan, inf, ninf}, []float64{nan, inf, ninf}, 0, 0},
		{"opposite-infs", []float64{inf}, []float64{ninf}, inf, 0},
		{"empty", nil, nil, 0, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, i := MaxAbs(c.a, c.b)
			if m != c.max || i != c.idx {
				t.Errorf("got %v at %d, want %v at %d", m, i, c.max, c.idx)
			}
		})
	}
}

func TestMaxRel(t *testing.T) {
	cases := []struct {
		name  string
		a, b  []float64
		floor float64
		max   float64
		idx   int
	}{
		// 0.1/1 = 0.1; 0.001/max(0, 1e-3) = 1; 1/9 = 0.111... -> 1 at index 1.
		{"floor", []float64{1.1, 0.001, 10}, []float64{1, 0, 9}, 1e-3, 1, 1},
		// 1/9 = 0.111... beats 0.1/1.
		{"no-floor-hit", []float64{1.1, 10}, []float64{1, 9}, 1e-3, 1.0 / 9, 1},
		{"zero-over-zero", []float64{0}, []float64{0}, 0, 0, 0},
		{"nonzero-over-zero", []float64{0, 1}, []float64{0, 0}, 0, inf, 1},
		{"inf-want", []float64{1}, []float64{inf}, 1, inf, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, i := MaxRel(c.a, c.b, c.floor)
			if !near(m, c.max, 1e-12) || i != c.idx {
				t.Errorf("got %v at %d, want %v at %d", m, i, c.max, c.idx)
			}
		})
	}
}

func TestULPDistance(t *testing.T) {
	cases := []struct {
		a, b float64
		dt   DType
		want uint64
	}{
		{1, float64(math.Nextafter32(1, 2)), F32, 1},
		{1, 1 + 3*math.Ldexp(1, -23), F32, 3},
		{1, 1 + math.Ldexp(1, -30), F32, 0}, // both round to 1.0f
		{0, math.Copysign(0, -1), F32, 0},
		{0, math.Copysign(0, -1), BF16, 0},
		{0, math.Copysign(0, -1), F16, 0},
		// Smallest float32 subnormals of opposite sign: -1 -> -0 = +0 -> +1: 2 steps.
		{math.Ldexp(1, -149), -math.Ldexp(1, -149), F32, 2},
		{math.MaxFloat32, inf, F32, 1},
		{1, 1 + math.Ldexp(1, -7), BF16, 1},
		// bf16 1.0 = 0x3F80, 2.0 = 0x4000: 0x80 = 128 patterns apart.
		{1, 2, BF16, 128},
		// 1+2^-8+2^-40 rounds once (RNE) to 1+2^-7 = 0x3F81, one from 1.0;
		// rounding through float32 first would tie down to 1.0 and give 0.
		{1 + math.Ldexp(1, -8) + math.Ldexp(1, -40), 1, BF16, 1},
		// f16 1.0 = 0x3C00, 2.0 = 0x4000: 0x400 = 1024 apart.
		{1, 2, F16, 1024},
		// -1 and 1: 0x3C00 on each side of zero: 2*0x3C00 = 30720.
		{-1, 1, F16, 30720},
		{65504, 1e6, F16, 1}, // 0x7BFF and Inf 0x7C00
		// f16 analogue of the double-rounding case: 1+2^-11+2^-40 -> 0x3C01.
		{1 + math.Ldexp(1, -11) + math.Ldexp(1, -40), 1, F16, 1},
		{1, math.Nextafter(1, 2), F64, 1},
		{-math.MaxFloat64, math.MaxFloat64, F64, 2 * 0x7FEFFFFFFFFFFFFF},
		{nan, nan, BF16, 0},
		{nan, 1, F32, math.MaxUint64},
		{1, nan, F16, math.MaxUint64},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%g/%g", c.dt, c.a, c.b), func(t *testing.T) {
			if got := ULPDistance(c.a, c.b, c.dt); got != c.want {
				t.Errorf("got %d, want %d", got, c.want)
			}
			if got := ULPDistance(c.b, c.a, c.dt); got != c.want {
				t.Errorf("swapped: got %d, want %d", got, c.want)
			}
		})
	}
	got := ULPs([]float64{1, 1}, []float64{1, 2}, BF16)
	if len(got) != 2 || got[0] != 0 || got[1] != 128 {
		t.Errorf("ULPs: got %v, want [0 128]", got)
	}
	mustPanic(t, "bad-dtype", "not F64, F32, F16 or BF16", func() { ULPDistance(1, 1, I32) })
}

func TestCosineNMSE(t *testing.T) {
	cases := []struct {
		name         string
		a, b         []float64
		cosine, nmse float64
	}{
		// a·b = 2+0+2 = 4, |a| = 3, |b| = √5: cos = 4/(3√5).
		// Σ(a-b)² = 1+4+1 = 6, Σb² = 5: NMSE = 6/5.
		{"basic", []float64{1, 2, 2}, []float64{2, 0, 1}, 4 / (3 * math.Sqrt(5)), 6.0 / 5},
		// Orthogonal: cos 0; Σ(a-b)² = 2, Σb² = 1 -> 2.
		{"orthogonal", []float64{1, 0}, []float64{0, 1}, 0, 2},
		// Opposite: cos -1; Σ(a-b)² = 9+9 = 18, Σb² = 8 -> 2.25.
		{"opposite", []float64{1, 1}, []float64{-2, -2}, -1, 2.25},
		{"both-zero", []float64{0, 0}, []float64{0, 0}, 1, 0},
		{"want-zero", []float64{1, 0}, []float64{0, 0}, 0, inf},
		{"got-zero", []float64{0, 0}, []float64{1, 0}, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Cosine(c.a, c.b); !near(got, c.cosine, 1e-15) {
				t.Errorf("Cosine: got %v, want %v", got, c.cosine)
			}
			if got := NMSE(c.a, c.b); !near(got, c.nmse, 1e-15) {
				t.Errorf("NMSE: got %v, want %v", got, c.nmse)
			}
		})
	}
}

func TestArgmaxAgree(t *testing.T) {
	// Rows of a: [0 5 5] -> 1 (tie, smallest index), [1 0 0] -> 0, [2 3 1] -> 1, [1 NaN 3] -> 1 (NaN largest).
	// Rows of b: [0 5 4] -> 1, [0 1 0] -> 1, [2 1 3] -> 2, [0 NaN NaN] -> 1.
	// Agreement: rows 0 and 3 -> 2.
	a := []float64{0, 5, 5, 1, 0, 0, 2, 3, 1, 1, nan, 3}
	b := []float64{0, 5, 4, 0, 1, 0, 2, 1, 3, 0, nan, nan}
	if got := ArgmaxAgree(a, b, 4, 3); got != 2 {
		t.Errorf("got %d, want 2", got)
	}
	if got := ArgmaxAgree(a, a, 4, 3); got != 4 {
		t.Errorf("self: got %d, want 4", got)
	}
	mustPanic(t, "shape", "does not match length", func() { ArgmaxAgree(a, b, 5, 3) })
}

func TestTopKOverlap(t *testing.T) {
	cases := []struct {
		name string
		a, b []float64
		k    int
		want float64
	}{
		// top2(a) = {0,1}, top2(b) = {2,1}: {1} -> 1/2.
		{"k2", []float64{5, 4, 3, 2, 1}, []float64{1, 4, 5, 3, 2}, 2, 0.5},
		// top3(a) = {0,1,2}, top3(b) = {2,1,3}: {1,2} -> 2/3.
		{"k3", []float64{5, 4, 3, 2, 1}, []float64{1, 4, 5, 3, 2}, 3, 2.0 / 3},
		// Ties to the smaller index: top2(a) = {0,1}, top2(b) = {1,2}: {1} -> 1/2.
		{"ties", []float64{1, 1, 1, 0}, []float64{0, 1, 1, 1}, 2, 0.5},
		{"all", []float64{1, 2}, []float64{2, 1}, 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := TopKOverlap(c.a, c.b, c.k); !near(got, c.want, 1e-15) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
	mustPanic(t, "k0", "k=0", func() { TopKOverlap([]float64{1}, []float64{1}, 0) })
}

func TestKLDivergence(t *testing.T) {
	ln3 := math.Log(3)
	large := 1000 + ln3
	cases := []struct {
		name string
		p, q []float64
		want float64
	}{
		// P = [1/2, 1/2], Q = softmax([0, ln3]) = [1/4, 3/4]:
		// KL = ½ln(½/¼) + ½ln(½/¾) = ½ln2 + ½ln(2/3) = ½ln(4/3).
		{"basic", []float64{0, 0}, []float64{0, ln3}, 0.5 * math.Log(4.0/3)},
		// Shifting logits by 1000 changes nothing (exp(1000) overflows, so this
		// checks the max is subtracted), except that 1000+ln3 rounds: with
		// d = fl(1000+ln3)-1000 (exact), Q = [1, e^d]/(1+e^d) and
		// KL = ½ln(½(1+e^d)) + ½ln(½(1+e^d)/e^d) = ln((1+e^d)/2) - d/2.
		{"large-logits", []float64{1000, 1000}, []float64{1000, 1000 + ln3}, math.Log((1+math.Exp(large-1000))/2) - (large-1000)/2},
		{"identical", []float64{1, 2, 3}, []float64{1, 2, 3}, 0},
		// P = [1, 0], Q = [½, ½]: KL = 1·ln(1/½) = ln2; the P=0 term contributes 0.
		{"p-zero-term", []float64{0, ninf}, []float64{0, 0}, math.Ln2},
		{"q-zero-where-p-positive", []float64{0, 0}, []float64{0, ninf}, inf},
		{"nan", []float64{nan, 0}, []float64{0, 0}, nan},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := KLDivergence(c.p, c.q); !near(got, c.want, 1e-15) {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}
