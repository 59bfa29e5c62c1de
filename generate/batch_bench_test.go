package generate_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/synth"
)

// BenchmarkBatchDecode measures the aggregate decode rate (generated tokens
// of all rows per second of decode steps, metric "tok/s") of the batch
// generator on the CPU backend at batch 1, 2, 4 and 8: B prompts of 16
// tokens prefilled together, then 32 greedy tokens each. The checkpoint is
// the synth preset MLXGO_BENCH_PRESET (default smollm2-135m: SmolLM2-135M's
// shapes, 4-bit), written once to a temporary directory, or the model
// directory MLXGO_BENCH_MODEL; MLXGO_BENCH_PRECISION picks the CPU
// backend's precision (reference by default, or fast). Metric
// "cpu-ms/step" is the process's CPU time per decode step after the first
// (which prefills), all threads (the machine may be shared).
// MLXGO_BENCH_BATCH_CACHE=per-row gives each row a cache of its own (the
// server's default on the CPU backend, --batch-cache per-row).
// MLXGO_BENCH_PACK=1 sets backend.Options.PackWeights.
// MLXGO_BENCH_PROMPT and MLXGO_BENCH_STEPS change the prompt length and
// the tokens generated per row (a server's rows run at longer contexts).
// MLXGO_BENCH_TEMP_ROWS=n samples the first n rows of each batch at
// temperature 0.8, each with a seed of its own (the rest stay greedy), so
// that the steps take the host sampling path, as a server's steps do when
// one of its requests asks for a temperature. MLXGO_BENCH_NO_LOGPROBS=1
// sets BatchOptions.NoLogprobs, as the server does.
//
//	go test ./generate/ -run '^$' -bench BatchDecode -benchtime 3x
func BenchmarkBatchDecode(b *testing.B) {
	m, bm := benchBatchModel(b)
	promptLen, steps := envInt(b, "MLXGO_BENCH_PROMPT", 16), envInt(b, "MLXGO_BENCH_STEPS", 32)
	noLP := os.Getenv("MLXGO_BENCH_NO_LOGPROBS") == "1"
	tempRows := 0
	if os.Getenv("MLXGO_BENCH_TEMP_ROWS") != "" {
		tempRows = envInt(b, "MLXGO_BENCH_TEMP_ROWS", 0)
	}
	// "alone": Generate on one prompt, the rate the batch path is measured
	// against (its GenerationTPS counts from the first token).
	b.Run("alone", func(b *testing.B) {
		p := batchPrompts(m.VocabSize(), promptLen)[0]
		var rate float64
		n := 0
		for b.Loop() {
			res, err := generate.Generate(m, p, generate.Options{MaxTokens: steps}, nil)
			if err != nil {
				b.Fatal(err)
			}
			rate += res.Stats.GenerationTPS
			n++
		}
		b.ReportMetric(rate/float64(n), "tok/s")
	})
	for _, B := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("b%d", B), func(b *testing.B) {
			prompts := batchPrompts(m.VocabSize(), repeat(promptLen, B)...)
			seqs := make([]generate.SequenceOptions, B)
			for r := range min(tempRows, B) {
				seed := uint64(r + 1)
				seqs[r] = generate.SequenceOptions{Sampler: &generate.SamplerOptions{Temp: 0.8}, Seed: &seed}
			}
			var tokens, nstep int
			var secs float64
			var cpu time.Duration
			for b.Loop() {
				g, err := generate.NewBatchGenerator(bm, generate.BatchOptions{MaxTokens: steps, CompletionBatchSize: B, PrefillBatchSize: B, NoLogprobs: noLP})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := g.Insert(prompts, seqs); err != nil {
					b.Fatal(err)
				}
				for first := true; !g.Done(); first = false {
					c0 := processCPU()
					if _, err := g.Next(); err != nil {
						b.Fatal(err)
					}
					if !first { // the first step prefills
						cpu += processCPU() - c0
						nstep++
					}
				}
				s := g.Stats()
				tokens += s.GenerationTokens
				secs += s.GenerationTime.Seconds()
				g.Close()
			}
			b.ReportMetric(float64(tokens)/secs, "tok/s")
			if nstep > 0 {
				b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(nstep), "cpu-ms/step")
			}
		})
	}
}

// benchBatchModel loads the model of BenchmarkBatchDecode and the batch
// view MLXGO_BENCH_BATCH_CACHE asks for, closed when b ends.
func benchBatchModel(b *testing.B) (*minicpm5.Model, generate.BatchModel) {
	dir := os.Getenv("MLXGO_BENCH_MODEL")
	if dir == "" {
		preset := os.Getenv("MLXGO_BENCH_PRESET")
		if preset == "" {
			preset = "smollm2-135m"
		}
		spec, ok := synth.Presets[preset]
		if !ok {
			b.Fatalf("MLXGO_BENCH_PRESET %q: want one of %v", preset, synth.PresetNames())
		}
		dir = filepath.Join(b.TempDir(), preset)
		if err := synth.WriteMLX(dir, spec, nil); err != nil {
			b.Fatal(err)
		}
	}
	be, err := cpu.New(backend.Options{Precision: os.Getenv("MLXGO_BENCH_PRECISION"), PackWeights: os.Getenv("MLXGO_BENCH_PACK") == "1"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	m, err := minicpm5.Load(be, dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	switch c := os.Getenv("MLXGO_BENCH_BATCH_CACHE"); c {
	case "", "shared":
		return m, m
	case "per-row":
		view, err := m.WithCache(nn.CacheOptions{PerRow: true})
		if err != nil {
			b.Fatal(err)
		}
		return m, view
	default:
		b.Fatalf("MLXGO_BENCH_BATCH_CACHE %q: want shared (the default) or per-row", c)
	}
	return nil, nil
}

// BenchmarkBatchJoin measures a server's pattern on the model of
// BenchmarkBatchDecode (and its environment variables): 8 sequences
// decoding greedily and, as each one finishes, another joining, 32 in all,
// prompts of MLXGO_BENCH_PROMPT tokens asking for a quarter to all of
// MLXGO_BENCH_STEPS tokens, in mlx_lm's order ("mlx_lm": the joining rows'
// last prompt tokens in a forward of their own) and with
// BatchOptions.JoinPrefilled ("join-prefilled"). Metric tok/s is the
// generated tokens per second of the whole run, prefill included.
func BenchmarkBatchJoin(b *testing.B) {
	m, bm := benchBatchModel(b)
	promptLen, steps := envInt(b, "MLXGO_BENCH_PROMPT", 16), envInt(b, "MLXGO_BENCH_STEPS", 32)
	const rows, total = 8, 32
	prompts := batchPrompts(m.VocabSize(), repeat(promptLen, total)...)
	seqs := make([]generate.SequenceOptions, total)
	for i := range seqs {
		seqs[i].MaxTokens = steps/4 + (i*7919)%(steps-steps/4+1)
	}
	for _, join := range []bool{false, true} {
		b.Run(map[bool]string{false: "mlx_lm", true: "join-prefilled"}[join], func(b *testing.B) {
			var tokens int
			var secs float64
			for b.Loop() {
				g, err := generate.NewBatchGenerator(bm, generate.BatchOptions{CompletionBatchSize: rows, PrefillBatchSize: rows, NoLogprobs: true, JoinPrefilled: join})
				if err != nil {
					b.Fatal(err)
				}
				next := 0
				insert := func(n int) {
					if _, err := g.Insert(prompts[next:next+n], seqs[next:next+n]); err != nil {
						b.Fatal(err)
					}
					next += n
				}
				t0 := time.Now()
				insert(rows)
				for !g.Done() {
					toks, err := g.Next()
					if err != nil {
						b.Fatal(err)
					}
					for _, t := range toks {
						tokens++
						if t.FinishReason != "" && next < total {
							insert(1)
						}
					}
				}
				secs += time.Since(t0).Seconds()
				g.Close()
			}
			b.ReportMetric(float64(tokens)/secs, "tok/s")
		})
	}
}

// BenchmarkBatchPrefillMixed times the prefill of a burst of four prompts
// of two lengths (20 and 50 tokens, as the load test's short and long
// prompts; one step of JoinPrefilled work, no decoding) in one padded
// forward (mlx_lm's) against forwards per group of similar lengths
// (BatchOptions.PrefillPadLimit 8, the server's), on the model of
// BenchmarkBatchDecode; with per-row caches (MLXGO_BENCH_BATCH_CACHE=per-row)
// for the groups to apply.
func BenchmarkBatchPrefillMixed(b *testing.B) {
	m, bm := benchBatchModel(b)
	prompts := batchPrompts(m.VocabSize(), 20, 50, 21, 51)
	for _, lim := range []int{0, 8} {
		b.Run(map[int]string{0: "padded", 8: "groups"}[lim], func(b *testing.B) {
			for b.Loop() {
				g, err := generate.NewBatchGenerator(bm, generate.BatchOptions{MaxTokens: 1, CompletionBatchSize: 4, PrefillBatchSize: 4, NoLogprobs: true, JoinPrefilled: true, PrefillPadLimit: lim})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := g.Insert(prompts, nil); err != nil {
					b.Fatal(err)
				}
				if _, err := g.Next(); err != nil { // admits, prefills, joins, then one decode step
					b.Fatal(err)
				}
				g.Close()
			}
		})
	}
}

// envInt is the positive integer in the environment variable name, or def
// when it is unset.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// processCPU is the CPU time (user and system) of the process so far, all
// threads.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}
