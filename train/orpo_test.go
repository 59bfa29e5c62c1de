package train

import (
	"math"
	"testing"

	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// orpo64 is the ORPO loss, logOR and the loss's derivatives w.r.t. ℓ_w
// and ℓ_l in float64 with the standard library's Log1p and Expm1 (a
// plain reference): dL/dℓ_w = −1 − λ·σ(−logOR)/(1 − e^{ℓ_w}) and
// dL/dℓ_l = λ·σ(−logOR)/(1 − e^{ℓ_l}) (research notes §2.1).
func orpo64(lw, ll, lambda float64) (loss, lor, dw, dl float64) {
	l1m := func(x float64) float64 {
		if x < -math.Ln2 {
			return math.Log1p(-math.Exp(x))
		}
		return math.Log(-math.Expm1(x))
	}
	lor = (lw - ll) - (l1m(lw) - l1m(ll))
	sp := math.Max(-lor, 0) + math.Log1p(math.Exp(-math.Abs(lor)))
	loss = -lw + lambda*sp
	sig := 1 / (1 + math.Exp(lor)) // σ(−logOR)
	dw = -1 - lambda*sig/(-math.Expm1(lw))
	dl = lambda * sig / (-math.Expm1(ll))
	return
}

// TestORPOTerms compares ORPOTerms (loss, logOR, and the gradients
// through its stable log1mexp and softplus) with the float64 reference
// on both backends, across the branch point −ln 2, near 0 (where
// log(1 − eˣ) cancels without care), far out, and with λ from 0 to 1.
// Bound: 2e-6 relative (a few float32 roundings; each input is
// float32-exact and the reference uses the same inputs).
func TestORPOTerms(t *testing.T) {
	cases := []struct{ lw, ll, lambda float64 }{
		{-0.5, -2, 0.1},
		{-2, -0.5, 0.1},
		{-1e-4, -3e-3, 0.1},   // both near 0
		{-0.6931, -0.6932, 1}, // on either side of −ln 2
		{-30, -40, 0.1},       // e^ℓ negligible
		{-1.5, -1.5, 0.5},     // logOR = 0
		{-0.02, -25, 1},       // logOR large
		{-25, -0.02, 1},       // logOR very negative
		{-0.3, -0.7, 0},
	}
	for _, bname := range backend.Names() {
		t.Run(bname, func(t *testing.T) {
			b, err := backend.Open(bname, backend.Options{Device: "cpu"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			d := b.(backend.Differentiator)
			for _, c := range cases {
				lw, ll := float64(float32(c.lw)), float64(float32(c.ll))
				wl, wlor, wdw, wdl := orpo64(lw, ll, c.lambda)
				in := []backend.Array{
					b.FromHost(tensor.FromFloat32(tensor.Shape{}, []float32{float32(lw)})),
					b.FromHost(tensor.FromFloat32(tensor.Shape{}, []float32{float32(ll)})),
				}
				outs, grads, err := d.ValueAndGrad(func(x []backend.Array) ([]backend.Array, error) {
					l, lor := ORPOTerms(b, x[0], x[1], c.lambda)
					return []backend.Array{l, lor}, nil
				}, in, []int{0, 1})
				if err != nil {
					t.Fatal(err)
				}
				got := []float64{host(t, b, outs[0])[0], host(t, b, outs[1])[0], host(t, b, grads[0])[0], host(t, b, grads[1])[0]}
				want := []float64{wl, wlor, wdw, wdl}
				for i, name := range []string{"loss", "logOR", "dL/dℓ_w", "dL/dℓ_l"} {
					tol := 2e-6 * math.Max(math.Abs(want[i]), 1e-3)
					if math.IsNaN(got[i]) || math.Abs(got[i]-want[i]) > tol {
						t.Errorf("ℓ_w=%g ℓ_l=%g λ=%g: %s %v, want %v", lw, ll, c.lambda, name, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestORPOLossErrors: bad pairs and λ are errors naming what is wrong.
func TestORPOLossErrors(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, _ := prefixModel(t, b, "optiq-f32")
	defer m.Close()
	ok := Pair{Prompt: []int32{1, 2}, Chosen: []int32{3}, Rejected: []int32{4}, Source: "x:1"}
	cases := []struct {
		name   string
		pairs  []Pair
		lambda float64
		want   string
	}{
		{"no pairs", nil, 0.1, "no pairs"},
		{"negative λ", []Pair{ok}, -1, "λ"},
		{"NaN λ", []Pair{ok}, math.NaN(), "λ"},
		{"empty chosen", []Pair{{Prompt: []int32{1}, Rejected: []int32{2}, Source: "x:2"}}, 0.1, "x:2"},
		{"empty prompt", []Pair{{Chosen: []int32{1}, Rejected: []int32{2}, Source: "x:3"}}, 0.1, "x:3"},
		{"token outside vocabulary", []Pair{{Prompt: []int32{1}, Chosen: []int32{1000}, Rejected: []int32{2}, Source: "x:4"}}, 0.1, "vocabulary"},
	}
	for _, c := range cases {
		for _, shared := range []bool{false, true} {
			_, err := ORPOLoss(b, m, c.pairs, c.lambda, pairForward(shared), minicpmOpts())
			if err == nil || !contains(err.Error(), c.want) {
				t.Errorf("%s (shared %v): error %v, want one naming %q", c.name, shared, err, c.want)
			}
		}
	}
}

func minicpmOpts() minicpm5.ForwardOptions { return minicpm5.ForwardOptions{} }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
