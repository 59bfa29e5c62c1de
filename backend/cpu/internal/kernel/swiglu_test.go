package kernel

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// TestExpMLX: MLX's polynomial exp is close to the true exp, and its special
// cases follow the code: NaN passes, > 88 is +Inf, < −88 is 0. Bound: the
// polynomial and the final product cost a few ulps (4 allowed); rounding
// y = x·log2(e) to float32 moves y by up to |y|·2^-24, i.e. the result by a
// relative ln2·|y|·2^-24 = |x|·2^-24, which is |x|/2 ulps (2^-23), and the
// float32 constant 1.442695 is 1.3e-8 relative off log2(e), another
// 1.3e-8·|x| relative (0.11·|x| ulps): 4 + 0.75·|x| ulps in all (~70 at
// |x| = 88; about 32 measured there).
func TestExpMLX(t *testing.T) {
	for x := float32(-87.5); x < 87.5; x += 0.0137 {
		got, want := float64(ExpMLX(x)), math.Exp(float64(x))
		// Below 2^-126 (x < −87.3) results are subnormal: absolute ulp 2^-149.
		ulps := 4 + 0.75*math.Abs(float64(x))
		if math.Abs(got-want) > ulps*max(math.Ldexp(want, -23), math.Ldexp(1, -149)) {
			t.Fatalf("ExpMLX(%v): got %v, want %v within %.1f ulp", x, got, want, ulps)
		}
	}
	specials := []struct{ x, want float32 }{
		{88.5, float32(math.Inf(1))}, {-88.5, 0}, {float32(math.Inf(1)), float32(math.Inf(1))}, {float32(math.Inf(-1)), 0}, {0, 1},
	}
	for _, c := range specials {
		if got := ExpMLX(c.x); got != c.want {
			t.Errorf("ExpMLX(%v): got %v, want %v", c.x, got, c.want)
		}
	}
	if got := ExpMLX(float32(math.NaN())); got == got {
		t.Errorf("ExpMLX(NaN): got %v, want NaN", got)
	}
}

func TestSwiGLU(t *testing.T) {
	for _, dt := range testDTypes {
		for _, n := range []int{1, 7, 33, 40001} {
			t.Run(fmt.Sprintf("swiglu/%s/%d", dt.name, n), func(t *testing.T) {
				r := newRand(uint64(n))
				g, u := randVec(r, n, 4, dt.round), randVec(r, n, 1, dt.round)
				g0, u0 := slices.Clone(g), slices.Clone(u)
				want := make([]float32, n)
				SwiGLURef(want, g, u, dt.round)
				got, whole := guarded(n)
				withThreads(4, func() { SwiGLU(got, g, u, dt.round) })
				expectSame(t, got, want, "fast vs ref")
				checkGuards(t, whole, "dst")
				unchanged(t, g, g0, "gate")
				unchanged(t, u, u0, "up")
				// Against float64 g·u/(1+e^−g): four roundings to the dtype
				// (exp, sigmoid, silu, product) and the polynomial exp's
				// relative error (TestExpMLX), which passes at most 1:1 into
				// the sigmoid.
				ur := ulpOf(1, dt.round) / 2
				for i := range n {
					gf, uf := float64(g[i]), float64(u[i])
					w := gf * uf / (1 + math.Exp(-gf))
					bound := (6*ur+(4+0.75*math.Abs(gf))*math.Ldexp(1, -23))*math.Abs(gf*uf) + 1e-30
					if e := math.Abs(float64(got[i]) - w); e > bound {
						t.Fatalf("got %v, want %v ± %g (gate %v up %v, index %d)", got[i], w, bound, g[i], u[i], i)
					}
				}
			})
		}
	}
}

// TestSwiGLUSpecials: NaN propagates; gate +Inf gives silu +Inf (sigmoid 1);
// gate −Inf gives −Inf·0 = NaN, as MLX (the oracle test covers every bf16).
func TestSwiGLUSpecials(t *testing.T) {
	inf := float32(math.Inf(1))
	gate := []float32{float32(math.NaN()), inf, -inf, 0}
	up := []float32{1, 2, 2, float32(math.NaN())}
	got := make([]float32, 4)
	SwiGLU(got, gate, up, Identity)
	if got[0] == got[0] || got[1] != inf || got[2] == got[2] || got[3] == got[3] {
		t.Errorf("got %v, want [NaN +Inf NaN NaN]", got)
	}
}
