package generate_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/synth"
)

// TestFastSmallBatchesDecodeAsAlone: in the CPU backend's fast precision, a
// decode step of up to four rows takes the batched one-row int8 kernels
// (backend/cpu/internal/kernel/qmvb_amd64.s on AVX-512 VNNI machines, the
// per-row loops elsewhere), so on a small synthetic OptiQ model (4- and
// 8-bit layers the vector kernels take) each row of a greedy batch of
// three decodes to the tokens it gives alone, and the model drafting for
// itself with three drafts (a verify window of four) accepts every draft
// and gives Generate's tokens.
func TestFastSmallBatchesDecodeAsAlone(t *testing.T) {
	spec := synth.Spec{Hidden: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512, Vocab: 1024,
		MaxPositions: 4096, RopeTheta: 10000, RMSNormEps: 1e-5, Quant: "optiq", GroupSize: 64, Seed: 7}
	dir := filepath.Join(t.TempDir(), "fast-optiq")
	if err := synth.WriteMLX(dir, spec, nil); err != nil {
		t.Fatal(err)
	}
	b, err := cpu.New(backend.Options{Precision: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	prompts := [][]int32{ids(9, 1), ids(12, 2), ids(7, 3)}
	const n = 24
	alone := make([][]int32, len(prompts))
	for i, p := range prompts {
		res, err := generate.Generate(m, p, generate.Options{MaxTokens: n}, nil)
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = res.Tokens
	}
	res, _, err := generate.BatchGenerate(m, prompts, generate.BatchOptions{MaxTokens: n, NoLogprobs: true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if !slices.Equal(res[i].Tokens, alone[i]) {
			t.Errorf("batch row %d: %v, alone %v", i, res[i].Tokens, alone[i])
		}
	}
	self, err := generate.NewDraftModel[nn.KVCache](m)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Release()
	for i, p := range prompts {
		t.Run(fmt.Sprint("speculative", i), func(t *testing.T) {
			s, _ := generate.NewSession[nn.KVCache](m)
			defer s.Release()
			got, err := s.GenerateSpeculative(p, self, generate.SpeculativeOptions{Options: generate.Options{MaxTokens: n}, NumDraftTokens: 3}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Tokens, alone[i]) || got.Accepted != got.Drafted {
				t.Errorf("got %v with %d of %d drafts accepted, want %v with all", got.Tokens, got.Accepted, got.Drafted, alone[i])
			}
		})
	}
}
