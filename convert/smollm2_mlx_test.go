//go:build mlx

package convert

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	_ "github.com/mlxgo/mlxgo/backend/metal"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestSmolLM2GreedyMLX: the MLX backend on our conversion generates exactly
// mlx_lm's greedy tokens for every recorded chat prompt (only the first with
// -short), and for the first prompt its log-probabilities at the first steps
// agree with generate_step's, as TestSmolLM2Greedy checks for the CPU
// backend.
func TestSmolLM2GreedyMLX(t *testing.T) {
	dir := smolDir(t)
	var fx smolCases
	readJSON(t, filepath.Join(smolFixtures(t), "cases.json"), &fx)
	if len(fx.Cases) == 0 {
		t.Fatal("cases.json has no cases")
	}
	lp, err := tensor.OpenSafetensors(filepath.Join(smolFixtures(t), "logprobs.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	b, err := backend.Open("mlx", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var m *minicpm5.Model
	if err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		m, err = minicpm5.Load(b, dir)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer b.Do(func() error { return m.Close() })
	for i, c := range fx.Cases {
		if testing.Short() && i > 0 {
			break
		}
		t.Run(c.Name, func(t *testing.T) {
			res, err := generate.Generate(m, c.PromptIDs, generate.Options{MaxTokens: fx.MaxTokens, EOS: []int32{int32(fx.EOS)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Tokens
			if res.FinishReason == generate.FinishStop {
				got = append(got, int32(fx.EOS))
			}
			if !slices.Equal(got, c.Tokens) {
				t.Fatalf("tokens: got %v, want %v (mlx_lm's greedy tokens, %q)", got, c.Tokens, c.Text)
			}
			t.Logf("all %d greedy tokens equal mlx_lm's (%q)", len(c.Tokens), c.Text)
			if i == 0 { // each op runs on the MLX thread by itself; t.Fatal must stay on this goroutine
				checkLogprobs(t, m, lp, c.Name, c.PromptIDs, c.Tokens, fx.Steps)
			}
		})
	}
}
