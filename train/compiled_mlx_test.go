//go:build mlx

package train

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

// compiledCases are training runs that take every path of a compiled
// step: each optimizer (AdamW with bias correction and a warmed-up
// cosine schedule, SGD with momentum, Nesterov and weight decay),
// gradient accumulation (a step that only accumulates, one that adds and
// updates), checkpointed blocks, DoRA, and LoRA dropout (whose masks a
// compiled step takes as inputs; the first step of each batch shape runs
// op by op), with checkpointed blocks too (whose recomputation replays
// the forward's masks).
var compiledCases = []struct {
	name string
	edit func(c *Config)
}{
	{"adam", func(c *Config) {}},
	{"adamw_bias_cosine_accum", func(c *Config) {
		c.Optimizer = "adamw"
		c.OptimizerConfig = map[string]map[string]any{"adamw": {"bias_correction": true}}
		c.LRSchedule = &Schedule{Name: "cosine_decay", Arguments: []float64{0.02, 4}, Warmup: 1}
		c.GradAccumulationSteps = 2
	}},
	{"sgd_nesterov_decay", func(c *Config) {
		c.Optimizer = "sgd"
		c.OptimizerConfig = map[string]map[string]any{"sgd": {"momentum": 0.9, "nesterov": true, "weight_decay": 0.01}}
	}},
	{"grad_checkpoint", func(c *Config) { c.GradCheckpoint = true }},
	{"dora", func(c *Config) { c.FineTuneType = "dora"; c.LearningRate = 1e-3 }},
	{"dropout", func(c *Config) { c.LoRAParameters.Dropout = 0.2 }},
	{"dropout_checkpoint", func(c *Config) { c.LoRAParameters.Dropout = 0.2; c.GradCheckpoint = true }},
}

// TestCompiledStep: on MLX's CPU device the compiled training step gives
// the op-by-op step's losses and adapters bit for bit, over 6 steps of
// each of compiledCases.
func TestCompiledStep(t *testing.T) {
	model := trainModelDir(t, "bytelevel-llama3")
	data := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "train", "data", "text")
	for _, tc := range compiledCases {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.Data, c.BatchSize, c.Iters, c.NumLayers, c.LearningRate = data, 2, 6, 2, 1e-2
			c.LoRAParameters = lora.Params{Rank: 4, Scale: 10}
			tc.edit(&c)
			plain := compiledRun(t, model, c, true)
			comp := compiledRun(t, model, c, false)
			if len(plain.losses) != c.Iters || len(comp.losses) != c.Iters {
				t.Fatalf("%d and %d steps, want %d", len(plain.losses), len(comp.losses), c.Iters)
			}
			for i := range plain.losses {
				if comp.losses[i] != plain.losses[i] {
					t.Errorf("step %d: loss %v compiled, %v op by op", i+1, comp.losses[i], plain.losses[i])
				}
			}
			for name, w := range plain.adapters {
				if d := maxDiff(comp.adapters[name], w); d != 0 {
					t.Errorf("%s: adapters differ by up to %g compiled", name, d)
				}
			}
			t.Logf("%d steps, %d adapter tensors compared", len(plain.losses), len(plain.adapters))
		})
	}
}

type compiledResult struct {
	losses   []float32
	adapters map[string][]float64
}

func maxDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		if a[i] != b[i] {
			d = math.Max(d, math.Abs(a[i]-b[i]))
			if math.IsNaN(a[i]) != math.IsNaN(b[i]) || d == 0 {
				d = math.Inf(1)
			}
		}
	}
	return d
}

// compiledRun trains c on MLX's CPU device, compiled unless noCompile.
func compiledRun(t *testing.T, model string, c Config, noCompile bool) compiledResult {
	t.Helper()
	b, err := backend.Open("mlx", backend.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var r compiledResult
	dir := t.TempDir()
	err = onTrainModel(b, model, c.Data, DataOptions{}, func(m *minicpm5.Model, tr, _ []Example) error {
		tn := &Trainer{B: b, Model: m, RNG: NewNumpyRNG(uint32(c.Seed)), GradCheckpoint: c.GradCheckpoint, NoCompile: noCompile}
		tn.OnStep = func(it int, l float32, n int) {
			r.losses = append(r.losses, l)
			if !noCompile && it == c.Iters && len(tn.compiled) == 0 {
				panic(&backend.OpError{Op: "test", Err: fmt.Errorf("no step of %d was compiled", it)})
			}
		}
		if err := setup(tn, c, io.Discard); err != nil {
			return err
		}
		if !noCompile && tn.compiler() == nil {
			return fmt.Errorf("the run does not compile on %s", b.Name())
		}
		return tn.Run(Args{BatchSize: c.BatchSize, Iters: c.Iters, StepsPerReport: 100, StepsPerEval: 100, StepsPerSave: 100,
			MaxSeqLength: c.MaxSeqLength, AdapterFile: filepath.Join(dir, lora.WeightsFile), GradAccumulationSteps: c.GradAccumulationSteps}, tr, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	r.adapters = readAdapters(t, filepath.Join(dir, lora.WeightsFile))
	return r
}

// TestCompiledGradients: the compiled step's loss, token count and
// gradients (a step that only accumulates returns them) are the op-by-op
// step's bit for bit, on batches of two shapes in the order A, B, A: the
// first call traces, the second traces anew, the third replays the first
// trace.
func TestCompiledGradients(t *testing.T) {
	model := trainModelDir(t, "bytelevel-llama3")
	data := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "train", "data", "text")
	for _, ck := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", ck), func(t *testing.T) {
			b, err := backend.Open("mlx", backend.Options{Device: "cpu"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			err = onTrainModel(b, model, data, DataOptions{}, func(m *minicpm5.Model, set, _ []Example) (err error) {
				c := Defaults()
				c.NumLayers, c.LoRAParameters, c.GradCheckpoint = 2, lora.Params{Rank: 4, Scale: 10}, ck
				tn := &Trainer{B: b, Model: m, RNG: NewNumpyRNG(0), GradCheckpoint: ck}
				if err := setup(tn, c, io.Discard); err != nil {
					return err
				}
				defer tn.releaseCompiled()
				it, err := NewBatches(set, 2, 2048, false, tn.RNG, nil)
				if err != nil {
					return err
				}
				a, _ := it.Next()
				bb := cutBatch(a, 9)
				for k, batch := range []Batch{a, bb, a} {
					var got [2][][]float64
					var loss [2]float32
					var toks [2]int
					for i, noCompile := range []bool{false, true} {
						tn.NoCompile = noCompile
						var accum []backend.Array
						if loss[i], toks[i], err = tn.step(batch, &accum, false, 1); err != nil {
							return err
						}
						for _, g := range accum {
							h, err := b.ToHost(g)
							if err != nil {
								return err
							}
							got[i] = append(got[i], h.ToFloat64())
						}
						b.Release(accum...)
					}
					if len(tn.compiled) != 1 {
						return fmt.Errorf("batch %d: %d compiled steps, want 1", k, len(tn.compiled))
					}
					if loss[0] != loss[1] || toks[0] != toks[1] {
						t.Errorf("batch %d (%d×%d): loss %v over %d tokens compiled, %v over %d op by op", k, batch.B, batch.L, loss[0], toks[0], loss[1], toks[1])
					}
					if len(got[0]) != len(got[1]) || len(got[0]) == 0 {
						return fmt.Errorf("batch %d: %d and %d gradients", k, len(got[0]), len(got[1]))
					}
					for i := range got[1] {
						if d := maxDiff(got[0][i], got[1][i]); d != 0 {
							t.Errorf("batch %d: gradient %d differs by up to %g compiled", k, i, d)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// cpuSeconds is the process's user and system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// cutBatch is a batch's rows cut to their first L tokens.
func cutBatch(a Batch, L int) Batch {
	out := Batch{B: a.B, L: L, Lengths: make([][2]int32, a.B)}
	for r := 0; r < a.B; r++ {
		out.Tokens = append(out.Tokens, a.Tokens[r*a.L:r*a.L+L]...)
		out.Lengths[r] = [2]int32{a.Lengths[r][0], min(a.Lengths[r][1], int32(L-1))}
	}
	return out
}

// BenchmarkTrainStep times one training step (Adam, LoRA rank 4 on 2
// layers, a batch of two rows of the fixtures' text data) of the tiny
// test checkpoint on MLX's CPU device, compiled and op by op, with and
// without checkpointed blocks: the Go side's share of a step (recording
// the graph, its VJP and the update), which a compiled step replays
// instead. cpu-ms/op is the process's user+sys time per step (MLX's
// threads included), the figure to compare on a shared machine:
//
//	go test -tags mlx ./train -run '^$' -bench TrainStep -benchtime 50x -count 3
func BenchmarkTrainStep(bm *testing.B) {
	model := trainModelDir(bm, "bytelevel-llama3")
	data := filepath.Join(testenv.RepoRoot(bm), "conformance", "testdata", "train", "data", "text")
	for _, mode := range []string{"compiled", "op-by-op"} {
		for _, ck := range []bool{false, true} {
			bm.Run(fmt.Sprintf("%s/ck=%v", mode, ck), func(bm *testing.B) {
				b, err := backend.Open("mlx", backend.Options{Device: "cpu"})
				if err != nil {
					bm.Fatal(err)
				}
				defer b.Close()
				err = onTrainModel(b, model, data, DataOptions{}, func(m *minicpm5.Model, set, _ []Example) error {
					c := Defaults()
					c.NumLayers, c.LoRAParameters, c.GradCheckpoint, c.LearningRate = 2, lora.Params{Rank: 4, Scale: 10}, ck, 1e-3
					tn := &Trainer{B: b, Model: m, RNG: NewNumpyRNG(0), GradCheckpoint: ck, NoCompile: mode == "op-by-op"}
					if err := setup(tn, c, io.Discard); err != nil {
						return err
					}
					defer tn.releaseCompiled()
					it, err := NewBatches(set, 2, 2048, true, tn.RNG, nil)
					if err != nil {
						return err
					}
					batch, _ := it.Next()
					var accum []backend.Array
					if _, _, err := tn.step(batch, &accum, true, 1); err != nil { // the trace
						return err
					}
					toks := 0
					cpu0 := cpuSeconds()
					bm.ResetTimer()
					for range bm.N {
						_, n, err := tn.step(batch, &accum, true, 1)
						if err != nil {
							return err
						}
						toks += n
					}
					bm.ReportMetric(float64(toks)/bm.Elapsed().Seconds(), "tokens/s")
					bm.ReportMetric((cpuSeconds()-cpu0)*1e3/float64(bm.N), "cpu-ms/op")
					return nil
				})
				if err != nil {
					bm.Fatal(err)
				}
			})
		}
	}
}
