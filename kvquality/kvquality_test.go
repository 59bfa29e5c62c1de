package kvquality

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/synth"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestMeasure runs a short measurement on a tiny synthetic float32 model
// with head_dim 64 and checks what holds for any model: the full cache
// measured against itself has KL 0 and agrees everywhere, free-running
// too; KL is never negative and the mean at most the worst step; the
// fractions lie in [0, 1]; bytes per token are the formats' sizes.
func TestMeasure(t *testing.T) {
	s := synth.Presets["tiny"]
	s.HeadDim, s.Heads, s.Quant, s.DType = 64, 4, "f32", tensor.F32
	dir := t.TempDir()
	if err := synth.WriteMLX(dir, s, nil); err != nil {
		t.Fatal(err)
	}
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	kinds := []Kind{
		{"full", nn.CacheOptions{}},
		{"k8v3", nn.CacheOptions{Turbo: turboquant.Default}},
		{"k2v2 eager", nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 2, VBits: 2}, TurboEager: true}},
		{"kv4", nn.CacheOptions{KVBits: 4, KVGroupSize: 64}},
	}
	const steps = 6
	res, err := Measure(m, []int32{5, 17, 250, 3, 999, 42, 7}, steps, kinds, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.FullBF16Bytes != 3*2*64*2*2 || len(res.Rows) != len(kinds) || len(res.ReferenceTokens) != steps {
		t.Fatalf("full bytes %d (want %d), %d rows, %d reference tokens", res.FullBF16Bytes, 3*2*64*2*2, len(res.Rows), len(res.ReferenceTokens))
	}
	wantBytes := []int{res.FullBF16Bytes, 3 * 2 * (64 + 4 + 4 + 24 + 4), 3 * 2 * (16 + 4 + 4 + 16 + 4), 3 * 2 * 2 * (32 + 4)}
	for i, r := range res.Rows {
		if r.BytesPerToken != wantBytes[i] {
			t.Errorf("%s: %d bytes per token, want %d", r.Name, r.BytesPerToken, wantBytes[i])
		}
		if r.MeanKL < 0 || r.MaxKL < r.MeanKL || r.Top1 < 0 || r.Top1 > 1+1e-9 || r.FreePrefix < 0 || r.FreePrefix > steps || r.FreeMatch > 1+1e-9 {
			t.Errorf("%s: mean KL %g, max KL %g, top-1 %g, free-run prefix %d", r.Name, r.MeanKL, r.MaxKL, r.Top1, r.FreePrefix)
		}
	}
	if f := res.Rows[0]; f.MaxKL != 0 || f.Top1 < 1-1e-9 || f.FreePrefix != steps {
		t.Errorf("full against itself: max KL %g, top-1 %g, free-run prefix %d", f.MaxKL, f.Top1, f.FreePrefix)
	}
}
