package generate_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// batchFixture is one case of conformance/oracle/batch.py (see its doc).
type batchFixture struct {
	Checkpoint          string    `json:"checkpoint"`
	Prompts             [][]int32 `json:"prompts"`
	MaxTokens           []int     `json:"max_tokens"`
	StopTokens          []int32   `json:"stop_tokens"`
	PrefillStepSize     int       `json:"prefill_step_size"`
	PrefillBatchSize    int       `json:"prefill_batch_size"`
	CompletionBatchSize int       `json:"completion_batch_size"`
	Seed                uint64    `json:"seed"`
	Samplers            []*struct {
		Temp float64 `json:"temp"`
		TopP float64 `json:"top_p"`
	} `json:"samplers"`
	Processors []*struct {
		RepetitionPenalty float64 `json:"repetition_penalty"`
	} `json:"processors"`
	Tokens        [][]int32 `json:"tokens"`
	FinishReasons []string  `json:"finish_reasons"`
	Steps         [][]int   `json:"steps"`
	Alone         [][]int32 `json:"alone"`
	AloneEqual    []bool    `json:"alone_equal"`
	// MaxKVSize > 0: the rows on rotating caches of that window (mlx_lm's
	// BatchRotatingKVCache).
	MaxKVSize int `json:"max_kv_size"`
}

// batchRun is what the generator handed out, in the fixture's terms.
type batchRun struct {
	tokens   [][]int32
	logprobs [][][]float32
	finish   []string
	steps    [][]int
}

func runBatchFixture(t *testing.T, m generate.BatchModel, f *batchFixture, noLogprobs bool) batchRun {
	t.Helper()
	opts := generate.BatchOptions{StopTokens: f.StopTokens, PrefillStepSize: f.PrefillStepSize,
		PrefillBatchSize: f.PrefillBatchSize, CompletionBatchSize: f.CompletionBatchSize, Seed: f.Seed,
		NoLogprobs: noLogprobs}
	seqs := make([]generate.SequenceOptions, len(f.Prompts))
	for i := range seqs {
		seqs[i].MaxTokens = f.MaxTokens[i]
		if i < len(f.Samplers) && f.Samplers[i] != nil {
			seqs[i].Sampler = &generate.SamplerOptions{Temp: f.Samplers[i].Temp, TopP: f.Samplers[i].TopP}
		}
		if i < len(f.Processors) && f.Processors[i] != nil {
			seqs[i].Processors = &generate.ProcessorOptions{RepetitionPenalty: f.Processors[i].RepetitionPenalty}
		}
	}
	g, err := generate.NewBatchGenerator(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	uids, err := g.Insert(f.Prompts, seqs)
	if err != nil {
		t.Fatal(err)
	}
	index := map[int]int{}
	for i, u := range uids {
		index[u] = i
	}
	n := len(f.Prompts)
	r := batchRun{tokens: make([][]int32, n), logprobs: make([][][]float32, n), finish: make([]string, n)}
	for {
		toks, err := g.NextGenerated()
		if err != nil {
			t.Fatal(err)
		}
		if len(toks) == 0 {
			break
		}
		var step []int
		for _, tk := range toks {
			i := index[tk.UID]
			step = append(step, i)
			r.tokens[i] = append(r.tokens[i], tk.Token)
			r.logprobs[i] = append(r.logprobs[i], tk.Logprobs)
			if tk.FinishReason != "" {
				r.finish[i] = tk.FinishReason
			}
		}
		r.steps = append(r.steps, step)
	}
	if !g.Done() {
		t.Errorf("generator not done after NextGenerated returned nothing (%d held)", g.Len())
	}
	return r
}

// TestBatchOracle runs the oracle's batch fixtures (mlx_lm's BatchGenerator
// on the tiny checkpoints; conformance/oracle/batch.py) on every backend.
// The MLX backend must hand out the same tokens, in the same steps, with
// bit-identical logprob rows, on every checkpoint. The CPU backend must give
// the same tokens, finish reasons and step order on the float32 checkpoints
// (its logprobs differ from MLX's in the last bits: the largest difference
// is logged); its bfloat16 runs are logged, not checked. Each greedy row is
// also compared with Generate on that prompt alone (the fixture records that
// mlx_lm's own rows equal generate_step's alone: alone_equal). The rotating
// case runs on rotating batch caches (max_kv_size).
func TestBatchOracle(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtureDir(), "batch", "*", "*.json"))
	if len(files) == 0 {
		testenv.Missing(t, "no batch fixtures under "+filepath.Join(fixtureDir(), "batch")+" (run `make oracle`)")
	}
	for _, name := range backend.Names() {
		t.Run(name, func(t *testing.T) {
			b, err := backend.Open(name, backend.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, file := range files {
				var f batchFixture
				raw, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(raw, &f); err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				ckpt := filepath.Base(filepath.Dir(file))
				cas := strings.TrimSuffix(filepath.Base(file), ".json")
				t.Run(ckpt+"/"+cas, func(t *testing.T) {
					m := batchCheckpoint(t, b, ckpt)
					view, err := m.WithCache(nn.CacheOptions{MaxKVSize: f.MaxKVSize})
					if err != nil {
						t.Fatal(err)
					}
					got := runBatchFixture(t, view, &f, false)
					exact := name != "cpu"
					f32 := strings.HasSuffix(ckpt, "-f32")
					report := t.Errorf
					if !exact && !f32 {
						report = t.Logf
					}
					checkTokens := func(got batchRun, how string) {
						for i := range f.Prompts {
							if !slices.Equal(got.tokens[i], f.Tokens[i]) || got.finish[i] != f.FinishReasons[i] {
								report("%sprompt %d: got %v (%s), want %v (%s)", how, i, got.tokens[i], got.finish[i], f.Tokens[i], f.FinishReasons[i])
							}
						}
						if fmt.Sprint(got.steps) != fmt.Sprint(f.Steps) {
							report("%ssteps: got %v, want %v", how, got.steps, f.Steps)
						}
					}
					checkTokens(got, "")
					if cas == "greedy" {
						// Without logprobs every row is picked on the backend and
						// the next step starts before the tokens are read back
						// (the pipelined path): the same tokens and steps.
						checkTokens(runBatchFixture(t, view, &f, true), "NoLogprobs: ")
					}
					worst := checkLogprobs(t, file, &f, got, exact)
					t.Logf("%s: logprob rows, largest |Δ| against mlx_lm %.3g", name, worst)
					if cas == "greedy" && (exact || f32) {
						checkAlone(t, m, &f, got)
					}
				})
			}
		})
	}
}

// checkLogprobs compares the logprob rows of every token both runs handed
// out; with exact set, bit for bit. It returns the largest difference.
func checkLogprobs(t *testing.T, file string, f *batchFixture, got batchRun, exact bool) float64 {
	t.Helper()
	st, err := tensor.OpenSafetensors(strings.TrimSuffix(file, ".json") + ".safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	worst := 0.0
	for i := range f.Prompts {
		d, err := st.Tensor(fmt.Sprintf("%d.logprobs", i))
		if err != nil {
			t.Fatal(err)
		}
		want := d.ToFloat32()
		V := d.Shape[1]
		for k := 0; k < min(len(got.logprobs[i]), d.Shape[0]); k++ {
			row := got.logprobs[i][k]
			for j := range V {
				w, g := want[k*V+j], row[j]
				if exact && math.Float32bits(w) != math.Float32bits(g) {
					t.Errorf("prompt %d token %d: logprob %d is %v, want %v (bit-identical)", i, k, j, g, w)
					return math.Inf(1)
				}
				if !math.IsInf(float64(w), 0) {
					worst = math.Max(worst, math.Abs(float64(w-g)))
				}
			}
		}
	}
	return worst
}

// checkAlone compares each row with Generate on its prompt alone (same
// chunk size, max tokens and stop token). Where mlx_lm's own batch row
// differs from its generate_step alone (alone_equal false), a difference is
// logged, not failed: the fixture shows MLX itself differs there.
func checkAlone(t *testing.T, m *minicpm5.Model, f *batchFixture, got batchRun) {
	t.Helper()
	for i, p := range f.Prompts {
		res, err := generate.Generate(m, p, generate.Options{MaxTokens: f.MaxTokens[i], PrefillStepSize: f.PrefillStepSize, EOS: f.StopTokens}, nil)
		if err != nil {
			t.Fatal(err)
		}
		alone := res.Tokens
		if res.FinishReason == generate.FinishStop {
			// Generate drops the stop token; the batch hands it out.
			alone = append(alone, got.tokens[i][len(got.tokens[i])-1])
		}
		if !slices.Equal(alone, got.tokens[i]) {
			report := t.Errorf
			if i < len(f.AloneEqual) && !f.AloneEqual[i] {
				report = t.Logf
			}
			report("prompt %d: batch row %v, Generate alone %v (mlx_lm: batch row equals alone: %v)", i, got.tokens[i], alone, i < len(f.AloneEqual) && f.AloneEqual[i])
		}
	}
}
