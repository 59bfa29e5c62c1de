package minicpm5_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestDecodeEqualsRecompute: feeding a sequence token by token through the
// cache gives, at every position, the logits of one forward over the whole
// sequence, within the table's "model_decode_vs_recompute" row for the
// model's dtype.
func TestDecodeEqualsRecompute(t *testing.T) {
	for _, dir := range minicpm5.Checkpoints(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			b := minicpm5.NewCPU(t)
			m := minicpm5.LoadModel(t, b, dir)
			tol, err := conformance.BudgetFor("model_decode_vs_recompute", m.DType().MLXName())
			if err != nil || !(tol.NormErr > 0) {
				t.Fatalf("no NormErr row for model_decode_vs_recompute %s: %+v, %v", m.DType().MLXName(), tol, err)
			}
			ids := minicpm5.Prompt(24, m.Config().VocabSize)
			x := b.FromHost(tensor.FromInt32(tensor.Shape{1, len(ids)}, ids))
			full, err := m.Forward(x, nil, minicpm5.ForwardOptions{})
			b.Release(x)
			if err != nil {
				t.Fatal(err)
			}
			want := minicpm5.Host(t, b, full.Logits)
			b.Release(full.Logits)
			cache := m.NewCache()
			defer minicpm5.Release(cache)
			var got []float32
			for _, id := range ids {
				got = append(got, minicpm5.Step(t, m, cache, id)...)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d logits, want %d", len(got), len(want))
			}
			exact := 0
			var worst, scale float64
			at := -1
			for i := range want {
				if math.Float32bits(got[i]) == math.Float32bits(want[i]) {
					exact++
				}
				scale = math.Max(scale, math.Abs(float64(want[i])))
				if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst || math.IsNaN(d) {
					worst, at = d, i
					if math.IsNaN(d) {
						worst = math.Inf(1)
					}
				}
			}
			normErr := worst / scale
			if worst == 0 {
				normErr = 0
			}
			if !(normErr <= tol.NormErr) {
				t.Errorf("decode vs recompute: max |Δ| %.3g at %d (got %v, want %v) is %.3g of scale %.3g, bound %.3g (%s)", worst, at, got[at], want[at], normErr, scale, tol.NormErr, tol.Reason)
			}
			t.Logf("max |Δ| %.3g, %.3g of scale %.3g (bound %.3g); %d of %d logits bit-identical", worst, normErr, scale, tol.NormErr, exact, len(want))
		})
	}
}
