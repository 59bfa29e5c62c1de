package generate_test

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/nn"
)

// specCase is one case of conformance/testdata/speculative/cases.json
// (conformance/oracle/speculative.py).
type specCase struct {
	Name           string  `json:"name"`
	Target         string  `json:"target"`
	Draft          string  `json:"draft"`
	DType          string  `json:"dtype"`
	NumDraftTokens int     `json:"num_draft_tokens"`
	MaxTokens      int     `json:"max_tokens"`
	PrefillStep    int     `json:"prefill_step_size"`
	Sampler        string  `json:"sampler"`
	Prompt         []int32 `json:"prompt"`
	Tokens         []int32 `json:"tokens"`
	FromDraft      []bool  `json:"from_draft"`
	// KVBits, KVGroupSize and QuantizedKVStart: speculative decoding on
	// quantized caches (the target's and the draft's) when KVBits > 0.
	KVBits           int `json:"kv_bits"`
	KVGroupSize      int `json:"kv_group_size"`
	QuantizedKVStart int `json:"quantized_kv_start"`
}

// TestSpeculativeOracle replays mlx_lm's speculative_generate_step cases:
// the mlx backend must give its tokens and from_draft flags exactly on
// every checkpoint (the same MLX CPU kernels), the cpu backend its tokens
// and from_draft flags on the float32 checkpoints (where the oracle's
// greedy margins exceed summation-order noise). Cases with kv_bits run on
// quantized caches (nn.CacheOptions, the draft's too, as mlx_lm's).
func TestSpeculativeOracle(t *testing.T) {
	path := fixtureDir() + "/speculative/cases.json"
	testenv.Need(t, path, "the oracle's speculative fixtures; run `make oracle`")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []specCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(fx.Cases) == 0 {
		t.Fatalf("%s has no cases", path)
	}
	for _, be := range backend.Names() {
		for _, c := range fx.Cases {
			if be == "cpu" && c.DType != "float32" {
				continue // bf16: only MLX's own kernels reproduce MLX's bits
			}
			if c.Sampler != "argmax" {
				t.Fatalf("%s: sampler %q, want argmax", c.Name, c.Sampler)
			}
			t.Run(be+"/"+strings.ReplaceAll(c.Name, "/", "_"), func(t *testing.T) {
				m, b := loadTinyOn(t, be, c.Target)
				d := loadTinyWith(t, b, c.Draft)
				o := nn.CacheOptions{KVBits: c.KVBits, KVGroupSize: c.KVGroupSize, QuantizedKVStart: c.QuantizedKVStart}
				view, err := m.WithCache(o)
				if err != nil {
					t.Fatal(err)
				}
				dview, err := d.WithCache(o)
				if err != nil {
					t.Fatal(err)
				}
				dm, err := generate.NewDraftModel[nn.KVCache](dview)
				if err != nil {
					t.Fatal(err)
				}
				defer dm.Release()
				s, _ := generate.NewSession[nn.KVCache](view)
				defer s.Release()
				opts := generate.SpeculativeOptions{
					Options:        generate.Options{MaxTokens: c.MaxTokens, PrefillStepSize: c.PrefillStep},
					NumDraftTokens: c.NumDraftTokens,
				}
				res, err := s.GenerateSpeculative(c.Prompt, dm, opts, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.Tokens, c.Tokens) {
					t.Fatalf("got tokens %v\nwant (mlx_lm) %v", res.Tokens, c.Tokens)
				}
				if !slices.Equal(res.FromDraft, c.FromDraft) {
					t.Errorf("got from_draft %v\nwant (mlx_lm) %v", res.FromDraft, c.FromDraft)
				}
			})
		}
	}
}
