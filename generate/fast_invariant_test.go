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
	"github.com/mlxgo/mlxgo/tensor"
)

// TestFastSmallBatchesDecodeAsAlone: in the CPU backend's fast precision, a
// decode step of up to four rows takes the batched one-row int8 kernels
// (backend/cpu/internal/kernel/qmvb_amd64.s on AVX-512 VNNI machines, the
// per-row loops elsewhere), and the attention of a left-padded batch starts
// each row's key blocks at its first key (kernel keyStarts), so on a small
// synthetic OptiQ model (4- and 8-bit layers the vector kernels take) in
// bfloat16 and in float32 (which shows one-ulp differences that bfloat16
// activations round away) each row of a greedy batch of three decodes to
// the tokens and log-probabilities it gives alone, and the model drafting
// for itself with three drafts (a verify window of four) accepts every
// draft and gives Generate's tokens.
func TestFastSmallBatchesDecodeAsAlone(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
		t.Run(dt.String(), func(t *testing.T) {
			spec := synth.Spec{Hidden: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, Intermediate: 512, Vocab: 1024,
				MaxPositions: 4096, RopeTheta: 10000, RMSNormEps: 1e-5, Quant: "optiq", GroupSize: 64, Seed: 7, DType: dt}
			fastDecodesAsAlone(t, spec, [][]int32{ids(9, 1), ids(12, 2), ids(7, 3)}, 3)
		})
	}
}

// TestFastQ4G32BatchesDecodeAsAlone: 4-bit weights in groups of 32 (the
// layout of the SmolLM2 checkpoints) take, in fast, the same float32 steps
// at any number of rows (the int8 GEMM in the one-row order, q8gemmDot, on
// AVX-512 VNNI machines; the one-row AVX2 kernels' m-blocked forms and the
// portable loops elsewhere), so on a small synthetic q4g32 model with a
// tied 4-bit head each row of a greedy batch of eight decodes to the tokens
// and log-probabilities it gives alone, and the model drafting for itself
// with seven drafts (a verify window of eight) accepts every draft. The
// checkpoint is float32: bfloat16 activations round most one-ulp
// differences away, and this test must see them (with the GEMM's own order
// at two or more rows, a row's log-probabilities differ).
func TestFastQ4G32BatchesDecodeAsAlone(t *testing.T) {
	spec := synth.Spec{Hidden: 256, Layers: 2, Heads: 4, KVHeads: 1, HeadDim: 64, Intermediate: 512, Vocab: 1024,
		MaxPositions: 4096, RopeTheta: 10000, RMSNormEps: 1e-5, Tied: true, Quant: "q4g32", DType: tensor.F32, Seed: 5}
	var prompts [][]int32
	for i := range 8 {
		prompts = append(prompts, ids(5+3*i, i+1))
	}
	fastDecodesAsAlone(t, spec, prompts, 7)
}

// fastDecodesAsAlone writes spec's checkpoint, loads it on the CPU backend
// in fast, and checks that each prompt gives in one greedy batch the tokens
// Generate gives it alone, and that the model drafting for itself with
// drafts tokens per step accepts every draft and gives those tokens too.
func fastDecodesAsAlone(t *testing.T, spec synth.Spec, prompts [][]int32, drafts int) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fast-"+spec.Quant)
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
	// The log-probabilities show any difference in the bits, near-tie or
	// not: each row's in the batch equal those of a batch of one.
	withLP, _, err := generate.BatchGenerate(m, prompts, generate.BatchOptions{MaxTokens: n}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		one, _, err := generate.BatchGenerate(m, [][]int32{p}, generate.BatchOptions{MaxTokens: n}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(withLP[i].Tokens, one[0].Tokens) || !slices.Equal(withLP[i].Logprobs, one[0].Logprobs) {
			t.Errorf("batch row %d: tokens %v, log-probabilities %v; in a batch of one %v, %v", i, withLP[i].Tokens, withLP[i].Logprobs, one[0].Tokens, one[0].Logprobs)
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
			got, err := s.GenerateSpeculative(p, self, generate.SpeculativeOptions{Options: generate.Options{MaxTokens: n}, NumDraftTokens: drafts}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Tokens, alone[i]) || got.Accepted != got.Drafted {
				t.Errorf("got %v with %d of %d drafts accepted, want %v with all", got.Tokens, got.Accepted, got.Drafted, alone[i])
			}
		})
	}
}
