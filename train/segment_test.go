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

// gradResult is one loss and its gradients, on the host.
type gradResult struct {
	loss  float32
	ntoks int
	grads [][]float64
}

// testBatch is two rows of 13 tokens below vocab, the second counting
// only positions 3..9 (a prompt offset and padding).
func testBatch(vocab int) Batch {
	r := rand.New(rand.NewPCG(7, 8))
	toks := make([]int32, 2*13)
	for i := range toks {
		toks[i] = int32(r.IntN(vocab))
	}
	return Batch{Tokens: toks, B: 2, L: 13, Lengths: [][2]int32{{1, 12}, {3, 9}}}
}

// withAdapters loads the tiny checkpoint name on b and puts rank-4
// adapters on its last numLayers layers, lora_b random (mlx_lm's zeros
// would leave lora_a without a gradient), and calls f.
func withAdapters(t *testing.T, b backend.Backend, name string, numLayers int, f func(m *minicpm5.Model, ads []lora.Adapter) error) {
	t.Helper()
	withAdaptersAt(t, b, filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "models", name), numLayers, f)
}

// withAdaptersAt is withAdapters on the checkpoint in dir.
func withAdaptersAt(t *testing.T, b backend.Backend, dir string, numLayers int, f func(m *minicpm5.Model, ads []lora.Adapter) error) {
	t.Helper()
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		m, err := minicpm5.Load(b, dir)
		if err != nil {
			return err
		}
		defer m.Close()
		ads, err := lora.Apply(b, m, numLayers, lora.Params{Rank: 4, Scale: 10}, generate.NewRNG(3))
		if err != nil {
			return err
		}
		r := rand.New(rand.NewPCG(1, 2))
		for _, a := range ads {
			p := a.Params()[1]
			s := (*p.Array).Shape()
			v := make([]float32, s.Size())
			for i := range v {
				v[i] = float32(r.NormFloat64() * 0.05)
			}
			*p.Array = b.FromHost(tensor.FromFloat32(s, v))
		}
		return f(m, ads)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// gradsOf runs the trainer's valueAndGrad on batch and copies the results
// to the host.
func gradsOf(tr *Trainer, batch Batch) (gradResult, error) {
	b := tr.B
	s := b.Scope()
	defer s.Close()
	outs, grads, err := tr.valueAndGrad(batch, tr.params())
	if err != nil {
		return gradResult{}, err
	}
	var res gradResult
	l, err := b.ToHost(outs[0])
	if err != nil {
		return res, err
	}
	n, err := b.ToHost(outs[1])
	if err != nil {
		return res, err
	}
	res.loss, res.ntoks = float32(l.ToFloat64()[0]), int(n.ToFloat64()[0])
	for _, g := range grads {
		h, err := b.ToHost(g)
		if err != nil {
			return res, err
		}
		res.grads = append(res.grads, h.ToFloat64())
	}
	return res, nil
}

// diff is the largest difference of the gradients relative to the
// largest magnitude of their tensor, and whether every one is equal.
func diff(got, want gradResult) (worst float64, same bool) {
	same = got.loss == want.loss && got.ntoks == want.ntoks && len(got.grads) == len(want.grads)
	for i := range want.grads {
		top := 0.0
		for _, v := range want.grads[i] {
			top = math.Max(top, math.Abs(v))
		}
		for j, v := range want.grads[i] {
			if got.grads[i][j] != v {
				same = false
				worst = math.Max(worst, math.Abs(got.grads[i][j]-v)/top)
			}
		}
	}
	return worst, same
}

// TestSegmentedBackward: on every backend and tiny checkpoint (quantized,
// mixed-precision, tied, float), the segmented backward's loss and
// gradients equal the plain backward's bit for bit, for every segment
// size, with adapters on every layer and on the last two only (the
// ranges then start at layer 1), with the plain and the chunked head
// (against the unsegmented backward with the same head); and its every
// gradient is not all zeros.
func TestSegmentedBackward(t *testing.T) {
	for _, bname := range backend.Names() {
		for _, model := range []string{"optiq-f32", "tied-f32", "q4g64-bf16", "fp-f32"} {
			for _, numLayers := range []int{-1, 2} {
				t.Run(fmt.Sprintf("%s/%s/layers%d", bname, model, numLayers), func(t *testing.T) {
					b, err := backend.Open(bname, backend.Options{Device: "cpu"})
					if err != nil {
						t.Fatal(err)
					}
					defer b.Close()
					withAdapters(t, b, model, numLayers, func(m *minicpm5.Model, ads []lora.Adapter) error {
						batch := testBatch(m.VocabSize())
						for _, chunk := range []int{0, 5} {
							tr := &Trainer{B: b, Model: m, Adapters: ads, LossChunk: chunk}
							want, err := gradsOf(tr, batch)
							if err != nil {
								return fmt.Errorf("chunk %d, unsegmented: %w", chunk, err)
							}
							for i, g := range want.grads {
								nonzero := false
								for _, v := range g {
									nonzero = nonzero || v != 0
								}
								if !nonzero {
									t.Errorf("chunk %d: gradient %d is all zeros", chunk, i)
								}
							}
							for seg := 1; seg <= len(m.Layers); seg++ {
								tr.SegmentLayers = seg
								got, err := gradsOf(tr, batch)
								tr.SegmentLayers = 0
								if err != nil {
									return fmt.Errorf("chunk %d, segments of %d: %w", chunk, seg, err)
								}
								if worst, same := diff(got, want); !same {
									t.Errorf("chunk %d, segments of %d: loss %v (%d tokens), plain %v (%d); gradients differ by up to %.3g of their largest", chunk, seg, got.loss, got.ntoks, want.loss, want.ntoks, worst)
								}
							}
						}
						return nil
					})
				})
			}
		}
	}
}

// TestHeadLoss: on every backend and tiny checkpoint, the loss through the
// chunked head equals the plain loss bit for bit for chunks of 1 row to
// more than the batch's, and its gradients (unsegmented: each chunk
// checkpointed; and segmented: one VJP a chunk) are within
// headGradBound of the plain loss's, relative to each tensor's largest
// magnitude.
func TestHeadLoss(t *testing.T) {
	for _, bname := range backend.Names() {
		for _, model := range []string{"optiq-f32", "tied-f32", "q4g64-bf16", "fp-f32"} {
			t.Run(bname+"/"+model, func(t *testing.T) {
				b, err := backend.Open(bname, backend.Options{Device: "cpu"})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				withAdapters(t, b, model, -1, func(m *minicpm5.Model, ads []lora.Adapter) error {
					batch := testBatch(m.VocabSize())
					tr := &Trainer{B: b, Model: m, Adapters: ads}
					want, err := gradsOf(tr, batch)
					if err != nil {
						return err
					}
					lv, n, err := tr.lossOnly(batch)
					if err != nil {
						return err
					}
					if lv != want.loss || n != want.ntoks {
						t.Fatalf("plain loss %v (%d tokens) evaluated, %v (%d) under the transform", lv, n, want.loss, want.ntoks)
					}
					worstAll := 0.0
					for _, chunk := range []int{1, 5, 7, 24, 100} {
						for _, seg := range []int{0, 1} {
							tr.LossChunk, tr.SegmentLayers = chunk, seg
							got, err := gradsOf(tr, batch)
							if err != nil {
								return err
							}
							ev, en, err := tr.lossOnly(batch)
							tr.LossChunk, tr.SegmentLayers = 0, 0
							if err != nil {
								return err
							}
							if got.loss != want.loss || got.ntoks != want.ntoks || ev != want.loss || en != want.ntoks {
								t.Errorf("chunk %d, segments %d: loss %v (%d tokens) under the transform, %v (%d) evaluated; plain %v (%d)", chunk, seg, got.loss, got.ntoks, ev, en, want.loss, want.ntoks)
							}
							worst, _ := diff(got, want)
							worstAll = math.Max(worstAll, worst)
							if worst > headGradBound {
								t.Errorf("chunk %d, segments %d: gradients differ from the plain loss's by %.3g of their largest, bound %.3g", chunk, seg, worst, headGradBound)
							}
						}
					}
					t.Logf("%s %s: worst gradient difference %.3g of the tensor's largest", bname, model, worstAll)
					return nil
				})
			})
		}
	}
}

// TestHeadLossSmolLM2: the same on the real SmolLM2-135M (its head the
// tied 8-bit embedding, vocabulary 49,152, float16), one row of 64
// tokens, the last layer adapted.
func TestHeadLossSmolLM2(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(t), ".venv", "smollm2", "SmolLM2-135M-Instruct-Q4_1-mlx")
	testenv.Need(t, filepath.Join(dir, "model.safetensors"), "make it with `make bench-matrix`'s rule: mlxgo convert of the Q4_1 GGUF of `make smollm2`")
	for _, bname := range backend.Names() {
		t.Run(bname, func(t *testing.T) {
			b, err := backend.Open(bname, backend.Options{Device: "cpu"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			withAdaptersAt(t, b, dir, 1, func(m *minicpm5.Model, ads []lora.Adapter) error {
				r := rand.New(rand.NewPCG(9, 9))
				toks := make([]int32, 65)
				for i := range toks {
					toks[i] = int32(r.IntN(m.VocabSize()))
				}
				batch := Batch{Tokens: toks, B: 1, L: 65, Lengths: [][2]int32{{1, 64}}}
				tr := &Trainer{B: b, Model: m, Adapters: ads}
				want, err := gradsOf(tr, batch)
				if err != nil {
					return err
				}
				for _, chunk := range []int{7, 64} {
					tr.LossChunk, tr.SegmentLayers = chunk, 1
					got, err := gradsOf(tr, batch)
					tr.LossChunk, tr.SegmentLayers = 0, 0
					if err != nil {
						return err
					}
					worst, _ := diff(got, want)
					if got.loss != want.loss || worst > headGradBound {
						t.Errorf("chunk %d: loss %v, plain %v; gradients differ by %.3g of their largest, bound %.3g", chunk, got.loss, want.loss, worst, headGradBound)
					}
					t.Logf("%s chunk %d: loss %v, gradients differ from the plain loss's by %.3g of their largest", bname, chunk, got.loss, worst)
				}
				return nil
			})
		})
	}
}

// headGradBound bounds the chunked head's gradients against the plain
// loss's, relative to each tensor's largest magnitude.
const headGradBound = 1e-5
