package generate_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// BenchmarkSpeculative measures greedy decoding of a real model plain, with
// a draft model (k = 2, 3, 4) on a prose prompt, and plain and with prompt
// lookup on a prompt that invites repeating it. Each op generates 64
// tokens from a fresh session; tok/s is generated tokens over the whole
// call (prefill included), accepted/drafted the drafts' acceptance.
//
//	MLXGO_SPEC_TARGET=/tmp/smollm2-bf16 MLXGO_SPEC_DRAFT=/tmp/smollm2-mlx \
//	  go test ./generate/ -run '^$' -bench Speculative -benchtime 3x
//
// MLXGO_SPEC_BACKEND picks the backend (cpu by default). The target and the
// draft need tokenizer.json (the target's encodes the prompts) and the same
// vocabulary.
func BenchmarkSpeculative(b *testing.B) {
	target, draft := os.Getenv("MLXGO_SPEC_TARGET"), os.Getenv("MLXGO_SPEC_DRAFT")
	if target == "" || draft == "" {
		b.Skip("BenchmarkSpeculative NOT RUN: set MLXGO_SPEC_TARGET and MLXGO_SPEC_DRAFT to model directories (e.g. a bf16 SmolLM2 and its 4-bit twin)")
	}
	be := os.Getenv("MLXGO_SPEC_BACKEND")
	if be == "" {
		be = "cpu"
	}
	bk, err := backend.Open(be, backend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	load := func(dir string) *minicpm5.Model {
		var m *minicpm5.Model
		if err := bk.Do(func() (err error) { m, err = minicpm5.Load(bk, dir); return err }); err != nil {
			b.Fatal(err)
		}
		return m
	}
	m, dm := load(target), load(draft)
	defer bk.Do(func() error { m.Close(); return dm.Close() })
	tok, err := tokenizer.Load(target)
	if err != nil {
		b.Fatal(err)
	}
	prose := tok.Encode("The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is Rome. Write a short story about a journey through these three cities.")
	code := tok.Encode(strings.Repeat("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n", 2) + "def add(a, b):\n")
	const n = 64
	drafter, err := generate.NewDraftModel[nn.KVCache](dm)
	if err != nil {
		b.Fatal(err)
	}
	defer drafter.Release()
	lookup, _ := generate.NewPromptLookup(3)
	for _, tc := range []struct {
		name   string
		prompt []int32
		d      generate.Drafter
		k      int
	}{
		{"prose/plain", prose, nil, 0},
		{"prose/draft-k2", prose, drafter, 2},
		{"prose/draft-k3", prose, drafter, 3},
		{"prose/draft-k4", prose, drafter, 4},
		{"code/plain", code, nil, 0},
		{"code/lookup3-k4", code, lookup, 4},
		{"code/lookup3-k8", code, lookup, 8},
	} {
		b.Run(tc.name, func(b *testing.B) {
			opts := generate.Options{MaxTokens: n}
			var toks, drafted, accepted int
			var elapsed time.Duration
			for b.Loop() {
				drafter.Release() // no reuse across ops
				s, _ := generate.NewSession[nn.KVCache](m)
				start := time.Now()
				if tc.d == nil {
					res, err := s.Generate(tc.prompt, opts, nil)
					if err != nil {
						b.Fatal(err)
					}
					toks += res.Stats.GenerationTokens
				} else {
					res, err := s.GenerateSpeculative(tc.prompt, tc.d, generate.SpeculativeOptions{Options: opts, NumDraftTokens: tc.k}, nil)
					if err != nil {
						b.Fatal(err)
					}
					toks += res.Stats.GenerationTokens
					drafted += res.Drafted
					accepted += res.Accepted
				}
				elapsed += time.Since(start)
				s.Release()
			}
			b.ReportMetric(float64(toks)/elapsed.Seconds(), "tok/s")
			if drafted > 0 {
				b.ReportMetric(float64(accepted)/float64(drafted), "accepted/drafted")
			}
		})
	}
}
