//go:build mlx && !mlxc_system

package train

import (
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/metal"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

// fusingBackend is MLX's CPU device taking the fused cross-entropy
// (mx.fast.cross_entropy, which MLX's CPU computes op by op) as the
// trainer takes it on a GPU, so that the GPU's loss path runs here.
type fusingBackend struct{ *metal.Backend }

func (fusingBackend) FusesCrossEntropy() bool { return true }

// TestFusedCrossEntropyLoss: with the fused cross-entropy (the path a GPU
// takes, as mlx.nn.losses.cross_entropy does there) the training steps,
// compiled, op by op, checkpointed and with the chunked loss, give the
// losses and adapters of the op-by-op cross-entropy, within float32
// rounding (MLX's CPU computes mx.fast.cross_entropy op by op, and on this
// float32 model gives the same bits; a GPU's fused kernel rounds
// differently).
func TestFusedCrossEntropyLoss(t *testing.T) {
	model := trainModelDir(t, "bytelevel-llama3")
	data := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "train", "data", "text")
	for _, tc := range []struct {
		name string
		edit func(tn *Trainer)
	}{
		{"compiled", func(tn *Trainer) {}},
		{"op_by_op", func(tn *Trainer) { tn.NoCompile = true }},
		{"grad_checkpoint", func(tn *Trainer) { tn.GradCheckpoint = true }},
		{"loss_chunk", func(tn *Trainer) { tn.LossChunk = 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(fused bool) compiledResult {
				mb, err := backend.Open("mlx", backend.Options{Device: "cpu"})
				if err != nil {
					t.Fatal(err)
				}
				defer mb.Close()
				var b backend.Backend = mb
				if fused {
					b = fusingBackend{mb.(*metal.Backend)}
				}
				c := Defaults()
				c.Data, c.BatchSize, c.Iters, c.NumLayers, c.LearningRate = data, 2, 4, 2, 1e-2
				c.LoRAParameters = lora.Params{Rank: 4, Scale: 10}
				var r compiledResult
				dir := t.TempDir()
				err = onTrainModel(b, model, c.Data, DataOptions{}, func(m *minicpm5.Model, tr, _ []Example) error {
					tn := &Trainer{B: b, Model: m, RNG: NewNumpyRNG(uint32(c.Seed))}
					tc.edit(tn)
					tn.OnStep = func(it int, l float32, n int) { r.losses = append(r.losses, l) }
					if err := setup(tn, c, io.Discard); err != nil {
						return err
					}
					if got := fusedCE(b) != nil; got != fused {
						t.Fatalf("fusedCE: %v, want %v", got, fused)
					}
					return tn.Run(Args{BatchSize: c.BatchSize, Iters: c.Iters, StepsPerReport: 100, StepsPerEval: 100, StepsPerSave: 100,
						MaxSeqLength: c.MaxSeqLength, AdapterFile: filepath.Join(dir, lora.WeightsFile), GradAccumulationSteps: 1}, tr, nil)
				})
				if err != nil {
					t.Fatal(err)
				}
				r.adapters = readAdapters(t, filepath.Join(dir, lora.WeightsFile))
				return r
			}
			plain, fused := run(false), run(true)
			if len(plain.losses) != 4 || len(fused.losses) != 4 {
				t.Fatalf("%d and %d steps, want 4", len(plain.losses), len(fused.losses))
			}
			for i := range plain.losses {
				if d := math.Abs(float64(fused.losses[i]-plain.losses[i])) / math.Abs(float64(plain.losses[i])); d > 1e-5 {
					t.Errorf("step %d: loss %v fused, %v op by op (relative difference %.2g)", i+1, fused.losses[i], plain.losses[i], d)
				}
			}
			worst := 0.0
			for name, w := range plain.adapters {
				d := maxDiff(fused.adapters[name], w)
				if d > 1e-4 {
					t.Errorf("%s: adapters differ by up to %g fused", name, d)
				}
				worst = math.Max(worst, d)
			}
			t.Logf("losses %v fused, %v op by op; adapters within %.2g", fused.losses, plain.losses, worst)
		})
	}
}
