package train

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

type orpoFixture struct {
	Model  string  `json:"model"`
	Lambda float64 `json:"lambda"`
	Rank   int     `json:"rank"`
	Scale  float64 `json:"scale"`
	Pairs  []struct {
		Prompt, Chosen, Rejected []int32
	} `json:"pairs"`
	Loss         float64   `json:"loss"`
	LogOdds      float64   `json:"log_odds"`
	ChosenLogP   []float64 `json:"chosen_logp"`
	RejectedLogP []float64 `json:"rejected_logp"`
	// Ref is the same run with the bf16 weights in float32 (bf16 only).
	Ref *struct {
		Loss         float64   `json:"loss"`
		LogOdds      float64   `json:"log_odds"`
		ChosenLogP   []float64 `json:"chosen_logp"`
		RejectedLogP []float64 `json:"rejected_logp"`
	} `json:"ref"`
}

// TestORPOOracle compares the ORPO loss, its parts and its gradients
// w.r.t. every adapter, both prefix-shared and with two forwards, on
// both backends, with conformance/testdata/orpo: an independent
// implementation (conformance/oracle/orpo.py: mlx_lm's model and LoRA
// layers, two forwards per pair, cross_entropy, log1p/expm1, logaddexp,
// MLX's autodiff) on the tiny checkpoints, with ℓ near 0 in the greedy
// case.
//
// On MLX (the oracle's own ops on its CPU device) each pair's ℓ_w and ℓ_l
// must be the oracle's bits, both ways, and so must the λ = 0 loss
// (−mean ℓ_w) and, with two forwards, its gradients (measured: also
// bit-exact prefix-shared). logOR, the λ > 0 loss and the other
// gradients are held to a bound, since log(1 − eˣ) is computed with other
// ops than the oracle's log1p and expm1 (ORPOTerms) and prefix sharing's
// gradients reduce over other rows (TestPrefixSharedEqualsTwoForwards):
// measured ≤ 3e-8 on logOR, ≤ 3e-6 of a gradient tensor's largest
// element in float32 and 3.1e-2 in bfloat16 (prefix-shared).
//
// The CPU backend in float32 (its own summation order): ℓ, the loss and
// logOR within 1e-5 relative or 2e-5 absolute (1e-4 for logOR; ℓ near 0
// is a mean of logits less a logsumexp of scale ~30: measured 6e-6
// absolute), gradients within 1e-4 of each tensor's largest element and
// in relative Frobenius norm (measured ≤ 7.2e-5).
//
// The CPU backend in bfloat16 is held to the oracle's float32 run of the
// same weights (ref), as the model fixtures are (model_logits): no
// further from it than twice MLX's own bf16 run plus two bf16 ulps of the
// value, and gradients within twice MLX's bf16 run's relative Frobenius
// error plus 0.01. On these random checkpoints bf16 gradients are noise:
// MLX's own are 0.86-1.03 of their size from the float32 run's (ours
// 0.41-0.85), so only the values say much there.
func TestORPOOracle(t *testing.T) {
	root := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata")
	files, _ := filepath.Glob(filepath.Join(root, "orpo", "*.json"))
	if len(files) == 0 {
		t.Fatalf("no fixtures in %s/orpo (conformance/oracle/generate.py --only orpo writes them)", root)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		var fx orpoFixture
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, &fx); err != nil {
			t.Fatal(err)
		}
		pairs := make([]Pair, len(fx.Pairs))
		for i, p := range fx.Pairs {
			pairs[i] = Pair{Prompt: p.Prompt, Chosen: p.Chosen, Rejected: p.Rejected, Source: name}
		}
		bf16 := strings.Contains(fx.Model, "bf16")
		for _, bname := range backend.Names() {
			for _, shared := range []bool{false, true} {
				mode := map[bool]string{false: "two", true: "shared"}[shared]
				t.Run(name+"/"+bname+"/"+mode, func(t *testing.T) {
					b, err := backend.Open(bname, backend.Options{Device: "cpu"})
					if err != nil {
						t.Fatal(err)
					}
					defer b.Close()
					exact := b.OracleExact()
					err = b.Do(func() (err error) {
						defer backend.Recover(&err)
						m, err := minicpm5.Load(b, filepath.Join(root, "models", fx.Model))
						if err != nil {
							return err
						}
						defer m.Close()
						ads, err := lora.Apply(b, m, -1, lora.Params{Rank: fx.Rank, Scale: fx.Scale}, generate.NewRNG(0))
						if err != nil {
							return err
						}
						if n, err := lora.LoadWeights(b, filepath.Join(root, "orpo", name+".adapters.safetensors"), ads); err != nil || n != 2*len(ads) {
							t.Fatalf("adapters: %d set, %v", n, err)
						}
						// byRef: the CPU backend in bf16 is held to the float32
						// run: no further from it than twice the oracle's own
						// bf16 run, plus two bf16 ulps (2^-7) of its scale.
						byRef := bf16 && !exact
						near := func(what string, got, want, ref, rel, abs float64, mustBeExact bool) {
							t.Helper()
							switch {
							case byRef:
								if math.IsNaN(got) || math.Abs(got-ref) > 2*math.Abs(want-ref)+0x1p-7*math.Max(1, math.Abs(ref)) {
									t.Errorf("%s: %v, float32 run %v, oracle's bf16 run %v", what, got, ref, want)
								}
							case mustBeExact && got != want || math.IsNaN(got) || math.Abs(got-want) > math.Max(rel*math.Abs(want), abs):
								t.Errorf("%s: %v, oracle %v (exact %v)", what, got, want, mustBeExact)
							}
						}
						ref := func(f func() float64) float64 {
							if fx.Ref == nil {
								return math.NaN()
							}
							return f()
						}
						for i, p := range pairs {
							s := b.Scope()
							v, err := ORPOLoss(b, m, []Pair{p}, fx.Lambda, pairForward(shared), minicpm5.ForwardOptions{})
							if err != nil {
								t.Fatal(err)
							}
							near(fmt.Sprintf("ℓ_w of pair %d", i), host(t, b, v.ChosenLogP)[0], fx.ChosenLogP[i], ref(func() float64 { return fx.Ref.ChosenLogP[i] }), 1e-5, 2e-5, exact)
							near(fmt.Sprintf("ℓ_l of pair %d", i), host(t, b, v.RejectedLogP)[0], fx.RejectedLogP[i], ref(func() float64 { return fx.Ref.RejectedLogP[i] }), 1e-5, 2e-5, exact)
							s.Close()
						}
						vals, grads := orpoGrads(t, b, m, ads, pairs, fx.Lambda, pairForward(shared))
						near("loss", vals[0], fx.Loss, ref(func() float64 { return fx.Ref.Loss }), 1e-5, 2e-5, exact && fx.Lambda == 0)
						near("logOR", vals[1], fx.LogOdds, ref(func() float64 { return fx.Ref.LogOdds }), 1e-5, 1e-4, false)
						want, err := tensor.OpenSafetensors(filepath.Join(root, "orpo", name+".grads.safetensors"))
						if err != nil {
							t.Fatal(err)
						}
						defer want.Close()
						var refGrads *tensor.SafetensorsFile
						if byRef {
							if refGrads, err = tensor.OpenSafetensors(filepath.Join(root, "orpo", name+".refgrads.safetensors")); err != nil {
								t.Fatal(err)
							}
							defer refGrads.Close()
						}
						k := 0
						worst, worstFro := 0.0, 0.0
						gradExact := exact && fx.Lambda == 0 && !shared
						for _, a := range ads {
							for _, p := range a.Params() {
								wt, err := want.TensorCopy(a.Path + "." + p.Leaf)
								if err != nil {
									t.Fatal(err)
								}
								w, g := wt.ToFloat64(), grads[k]
								k++
								if byRef {
									rt, err := refGrads.TensorCopy(a.Path + "." + p.Leaf)
									if err != nil {
										t.Fatal(err)
									}
									r := rt.ToFloat64()
									ours, theirs := frobenius(g, r), frobenius(w, r)
									worst, worstFro = math.Max(worst, ours), math.Max(worstFro, theirs)
									if ours > 2*theirs+0.01 {
										t.Errorf("d %s.%s: %.3g from the float32 run in relative Frobenius norm, the oracle's bf16 run %.3g", a.Path, p.Leaf, ours, theirs)
									}
									continue
								}
								d := relDiff(g, w)
								fro := frobenius(g, w)
								worst, worstFro = math.Max(worst, d), math.Max(worstFro, fro)
								bound, fbound := 1e-4, 1e-4
								if bf16 {
									bound, fbound = 0.1, 0.05 // MLX prefix-shared
								}
								if gradExact && d != 0 || d > bound || fro > fbound {
									t.Errorf("d %s.%s: %.3g of the largest element, %.3g relative Frobenius (exact %v)", a.Path, p.Leaf, d, fro, gradExact)
								}
							}
						}
						if byRef {
							t.Logf("loss %v (oracle %v, float32 run %v); gradients %.3g from the float32 run in relative Frobenius norm (the oracle's bf16 run: %.3g)",
								vals[0], fx.Loss, fx.Ref.Loss, worst, worstFro)
						} else {
							t.Logf("loss %v (oracle %v), logOR %v (oracle %v); gradients within %.3g of the largest element, %.3g relative Frobenius",
								vals[0], fx.Loss, vals[1], fx.LogOdds, worst, worstFro)
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
}

// frobenius is ‖got − want‖ / ‖want‖.
func frobenius(got, want []float64) float64 {
	var dd, ww float64
	for j := range want {
		dd += (got[j] - want[j]) * (got[j] - want[j])
		ww += want[j] * want[j]
	}
	return math.Sqrt(dd / math.Max(ww, 1e-300))
}
