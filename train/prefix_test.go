package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

func TestPrefixLayout(t *testing.T) {
	l := PrefixLayout{P: 3, Rc: 2, Rr: 2}
	// Rows: p0 p1 p2 c0 c1 r0 r1.
	want := []string{
		"1000000",
		"1100000",
		"1110000",
		"1111000",
		"1111100",
		"1110010",
		"1110011",
	}
	m := l.MaskData()
	for i, row := range want {
		got := ""
		for j := range l.T() {
			got += fmt.Sprint(m[i*l.T()+j])
		}
		if got != row {
			t.Errorf("mask row %d: %s, want %s", i, got, row)
		}
	}
	pos := []int{0, 1, 2, 3, 4, 3, 4}
	for i, p := range pos {
		if got := l.Position(i); got != p {
			t.Errorf("position %d: %d, want %d", i, got, p)
		}
	}
	c, r := l.PredictingRows()
	if fmt.Sprint(c, r) != "[2 3] [2 5]" {
		t.Errorf("predicting rows %v %v, want [2 3] [2 5]", c, r)
	}
	for _, bad := range []PrefixLayout{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}} {
		if bad.check() == nil {
			t.Errorf("layout %+v accepted", bad)
		}
	}
}

// prefixModel loads a tiny checkpoint of conformance/testdata/models on b
// with LoRA adapters on every layer whose lora_b are random too (so every
// adapter has a gradient).
func prefixModel(t *testing.T, b backend.Backend, name string) (*minicpm5.Model, []lora.Adapter) {
	dir := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "models", name)
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	ads, err := lora.Apply(b, m, -1, lora.Params{Rank: 4, Scale: 10}, generate.NewRNG(3))
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, a := range ads {
		p := a.Params()[1].Array
		s := (*p).Shape()
		v := make([]float32, s.Size())
		for i := range v {
			v[i] = float32(r.NormFloat64() * 0.02)
		}
		b.Release(*p)
		*p = b.FromHost(tensor.FromFloat32(s, v))
	}
	return m, ads
}

func randomPair(r *rand.Rand, vocab, P, Rc, Rr int) Pair {
	tok := func(n int) []int32 {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(r.IntN(vocab))
		}
		return v
	}
	return Pair{Prompt: tok(P), Chosen: tok(Rc), Rejected: tok(Rr), Source: fmt.Sprintf("random P=%d Rc=%d Rr=%d", P, Rc, Rr)}
}

func host(t *testing.T, b backend.Backend, a backend.Array) []float64 {
	t.Helper()
	d, err := b.ToHost(a)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToFloat64()
}

// pairForward is Shared or TwoForwards.
func pairForward(shared bool) PairForward {
	if shared {
		return Shared
	}
	return TwoForwards
}

// orpoGrads is the ORPO loss's values and gradients w.r.t. every adapter
// parameter.
func orpoGrads(t *testing.T, b backend.Backend, m *minicpm5.Model, ads []lora.Adapter, pairs []Pair, lambda float64, fw PairForward) (vals []float64, grads [][]float64) {
	t.Helper()
	var slots []*backend.Array
	for _, a := range ads {
		for _, p := range a.Params() {
			slots = append(slots, p.Array)
		}
	}
	params := make([]backend.Array, len(slots))
	all := make([]int, len(slots))
	for i, s := range slots {
		params[i], all[i] = *s, i
	}
	s := b.Scope()
	defer s.Close()
	outs, gs, err := b.(backend.Differentiator).ValueAndGrad(func(x []backend.Array) ([]backend.Array, error) {
		for i, s := range slots {
			*s = x[i]
		}
		v, err := ORPOLoss(b, m, pairs, lambda, fw, minicpm5.ForwardOptions{})
		return v.Arrays(), err
	}, params, all)
	for i, s := range slots {
		*s = params[i]
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range outs {
		vals = append(vals, host(t, b, o)[0])
	}
	for _, g := range gs {
		grads = append(grads, host(t, b, g))
	}
	return vals, grads
}

// hiddenRows runs the pair both ways and returns the final-norm hidden
// states of the prompt, chosen and rejected rows: [two-forward, shared];
// dense: the shared forward under the Bool mask array.
func hiddenRows(t *testing.T, b backend.Backend, m *minicpm5.Model, p Pair, dense bool) (two, shared [3][]float64) {
	t.Helper()
	l := p.Layout()
	D := m.Config().HiddenSize
	rows := func(h backend.Array, from, to int) []float64 {
		return host(t, b, b.Slice(h, []int{0, from, 0}, []int{1, to, D}))
	}
	s := b.Scope()
	defer s.Close()
	for i, resp := range [][]int32{p.Chosen, p.Rejected} {
		seq := append(append([]int32{}, p.Prompt...), resp...)
		o, err := m.Forward(b.FromHost(tensor.FromInt32(tensor.Shape{1, len(seq)}, seq)), nil, minicpm5.ForwardOptions{CaptureHidden: true, NoLogits: true})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			two[0] = rows(o.Norm, 0, l.P)
		}
		two[1+i] = rows(o.Norm, l.P, len(seq))
	}
	c, err := NewPrefixCache(b, l)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	c.Dense = dense
	seq := append(append(append([]int32{}, p.Prompt...), p.Chosen...), p.Rejected...)
	o, err := m.Forward(b.FromHost(tensor.FromInt32(tensor.Shape{1, len(seq)}, seq)), c.Caches(len(m.Layers)), minicpm5.ForwardOptions{CaptureHidden: true, NoLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	shared = [3][]float64{rows(o.Norm, 0, l.P), rows(o.Norm, l.P, l.P+l.Rc), rows(o.Norm, l.P+l.Rc, l.T())}
	return two, shared
}

// relDiff is the largest |got − want| over the largest |want|.
func relDiff(got, want []float64) float64 {
	top, worst := 0.0, 0.0
	for i := range want {
		top = math.Max(top, math.Abs(want[i]))
		worst = math.Max(worst, math.Abs(got[i]-want[i]))
	}
	if worst == 0 {
		return 0
	}
	return worst / top
}

// TestPrefixSharedEqualsTwoForwards runs preference pairs as one
// prefix-shared forward and as two separate forwards on the tiny
// checkpoints, on every backend, and compares the final hidden states of
// the prompt, chosen and rejected rows, the ORPO loss and its parts, and
// the gradients of every adapter (random lora_b, so all have one).
//
// Measured (both backends, every checkpoint below): the prompt and chosen
// rows, ℓ_w, and the λ = 0 loss (−ℓ_w: only the chosen branch has a
// cotangent) are bit for bit those of two forwards, and so are the λ = 0
// gradients on the CPU backend. On MLX, whose blocked attention runs the
// prompt's queries and each response's as separate causal attentions, the
// prompt's dK and dV are two sums added instead of one: the λ = 0
// gradients move by ≤ 4.8e-7 of a tensor's largest element in float32
// and ≤ 2.3e-2 in bfloat16 (MLX's CPU device), within the λ > 0 bounds
// below. On MLX, and on the CPU backend in bfloat16, the rejected rows,
// ℓ_l, logOR and the λ > 0 loss are those of two forwards bit for bit. On the CPU backend in float32 the rejected
// rows (whose attention reads T keys, the chosen ones masked, where their
// own forward reads P+Rr) differ by summation order: measured ≤ 1.3e-6
// of the largest hidden value (bound 1e-5) and 1.4e-6 of logOR (bound
// 1e-5 relative). With λ > 0 the gradients reduce over one sequence of
// P+Rc+Rr rows instead of two of P+Rc and P+Rr, so they differ by
// summation order too: measured ≤ 1.8e-6 of each tensor's largest
// element in float32 (bound 1e-5); in bfloat16, whose activations round
// to 8 bits, ≤ 4.4e-2 of the largest element (bound 0.1) and ≤ 2.8e-2 in
// relative Frobenius norm (bound 0.05; the seed measured ~1% on
// MiniCPM5).
func TestPrefixSharedEqualsTwoForwards(t *testing.T) {
	cases := []struct {
		model string
		bf16  bool
	}{
		{"optiq-f32", false},
		{"optiq-bf16", true},
		{"fp-f32", false},
		{"q4g64-bf16", true},
		{"tied-f32", false},
	}
	for _, bname := range backend.Names() {
		for _, c := range cases {
			t.Run(bname+"/"+c.model, func(t *testing.T) {
				b, err := backend.Open(bname, backend.Options{Device: "cpu"})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				rejectedExact := bname != "cpu" || c.bf16
				err = b.Do(func() (err error) {
					defer backend.Recover(&err)
					m, ads := prefixModel(t, b, c.model)
					defer m.Close()
					r := rand.New(rand.NewPCG(7, 8))
					pairs := []Pair{randomPair(r, m.VocabSize(), 9, 5, 7), randomPair(r, m.VocabSize(), 1, 1, 3), randomPair(r, m.VocabSize(), 4, 6, 1)}
					for _, p := range pairs {
						two, shared := hiddenRows(t, b, m, p, false)
						for k, part := range []string{"prompt", "chosen", "rejected"} {
							d := relDiff(shared[k], two[k])
							if (k < 2 || rejectedExact) && d != 0 || d > 1e-5 {
								t.Errorf("%s: %s rows differ by %.3g of the largest", p.Source, part, d)
							}
						}
					}
					for _, lam := range []float64{0, 0.1, 1} {
						v2, g2 := orpoGrads(t, b, m, ads, pairs, lam, TwoForwards)
						v1, g1 := orpoGrads(t, b, m, ads, pairs, lam, Shared)
						for k, name := range []string{"loss", "logOR", "ℓ_w", "ℓ_l"} {
							exact := rejectedExact || name == "ℓ_w" || (name == "loss" && lam == 0)
							if d := math.Abs(v1[k] - v2[k]); exact && d != 0 || d > 1e-5*math.Abs(v2[k]) {
								t.Errorf("λ=%g: %s %v shared, %v in two forwards", lam, name, v1[k], v2[k])
							}
						}
						worst, worstFro := 0.0, 0.0
						for i := range g2 {
							worst = math.Max(worst, relDiff(g1[i], g2[i]))
							var dd, ww float64
							for j := range g2[i] {
								dd += (g1[i][j] - g2[i][j]) * (g1[i][j] - g2[i][j])
								ww += g2[i][j] * g2[i][j]
							}
							if ww > 0 {
								worstFro = math.Max(worstFro, math.Sqrt(dd/ww))
							}
						}
						bound, fro := 1e-5, 1e-5
						if c.bf16 {
							bound, fro = 0.1, 0.05
						}
						if lam == 0 && bname == "cpu" && worst != 0 || worst > bound {
							t.Errorf("λ=%g: gradients differ by %.3g of a tensor's largest element (bound %g)", lam, worst, bound)
						}
						if worstFro > fro {
							t.Errorf("λ=%g: gradients differ by %.3g in relative Frobenius norm (bound %g)", lam, worstFro, fro)
						}
						t.Logf("λ=%g: loss %v; gradients differ by %.3g of the largest element, %.3g relative Frobenius", lam, v1[0], worst, worstFro)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestPrefixMaskEqualsArrayMask runs a pair long enough for the CPU
// backend's attention VJP to go in three tiles of 128 positions, the
// second wholly in the rejected block, which skips the chosen keys (P=100,
// Rc=28, Rr=150: 278 positions), prefix-shared under the PrefixMask (the
// blocked attention) and under the plain Bool ArrayMask of the same
// layout (--orpo-attention dense), on every backend: the hidden states and
// the loss's parts are the same bits. The gradients are held to 1e-5 of
// each tensor's largest element in float32 and 0.1 in bfloat16 (the
// bounds of TestPrefixSharedEqualsTwoForwards): the CPU backend's VJP sums
// dK and dV tile by tile under the PrefixMask (measured 5.4e-7 and
// 3.9e-3), MLX's blocked attention sums the prompt's dK and dV over its
// own queries and each response's separately. With λ = 0 the gradients
// stay those of two separate forwards bit for bit on the CPU backend (the
// tiles of the chosen sequence's own causal VJP are those of the shared
// one, whose rejected rows carry a zero cotangent) and within the same
// bounds on MLX.
func TestPrefixMaskEqualsArrayMask(t *testing.T) {
	for _, bname := range backend.Names() {
		for _, model := range []string{"optiq-f32", "q4g64-bf16"} {
			t.Run(bname+"/"+model, func(t *testing.T) {
				b, err := backend.Open(bname, backend.Options{Device: "cpu"})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				err = b.Do(func() (err error) {
					defer backend.Recover(&err)
					m, ads := prefixModel(t, b, model)
					defer m.Close()
					pair := randomPair(rand.New(rand.NewPCG(9, 10)), m.VocabSize(), 100, 28, 150)
					run := func(array bool, lam float64) (hid [3][]float64, vals []float64, grads [][]float64) {
						fw := Shared
						if array {
							fw = SharedDense
						}
						_, hid = hiddenRows(t, b, m, pair, array)
						vals, grads = orpoGrads(t, b, m, ads, []Pair{pair}, lam, fw)
						return hid, vals, grads
					}
					for _, lam := range []float64{0, 0.1} {
						h0, v0, g0 := run(true, lam)
						h1, v1, g1 := run(false, lam)
						for k := range h0 {
							if d := relDiff(h1[k], h0[k]); d != 0 {
								t.Errorf("λ=%g: hidden rows of part %d differ by %.3g", lam, k, d)
							}
						}
						for k := range v0 {
							if v1[k] != v0[k] {
								t.Errorf("λ=%g: loss part %d is %v under the prefix mask, %v under the array mask", lam, k, v1[k], v0[k])
							}
						}
						bound := 1e-5
						if model == "q4g64-bf16" {
							bound = 0.1
						}
						worst := 0.0
						for i := range g0 {
							worst = math.Max(worst, relDiff(g1[i], g0[i]))
						}
						if worst > bound {
							t.Errorf("λ=%g: gradients differ by %.3g of a tensor's largest element (bound %g)", lam, worst, bound)
						}
						t.Logf("λ=%g: gradients differ by %.3g", lam, worst)
						if lam == 0 {
							_, g2 := orpoGrads(t, b, m, ads, []Pair{pair}, lam, TwoForwards)
							for i := range g2 {
								if d := relDiff(g1[i], g2[i]); bname == "cpu" && d != 0 || d > bound {
									t.Errorf("λ=0: gradient %d differs from two forwards' by %.3g", i, d)
								}
							}
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
