package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/bench"
	"github.com/mlxgo/mlxgo/synth"
)

const benchUsage = `usage: mlxgo bench [flags]

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

Examples:
  mlxgo bench
  mlxgo bench --llama-bench /tmp/llama.cpp/build/bin/llama-bench
  mlxgo bench --reps 2 --prompt-lens 32 --decode-tokens 16 --configs cpu,mlx_lm
  mlxgo bench --report bench/results/2026-01-02T150405-host.json

Flags:
`

// cmdBench runs the harness, or with --child one Go configuration.
func cmdBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	home, _ := os.UserHomeDir()
	defModel := filepath.Join(home, ".cache", "mlxgo", "synth-minicpm5-1b-optiq")
	model := fs.String("model", "", "MLX checkpoint directory (default: "+defModel+", synthesized if absent)")
	ggufPath := fs.String("gguf", "", "its GGUF twin for llama.cpp (default: MODEL.gguf, synthesized if absent for the default model)")
	llama := fs.String("llama-bench", "", "path of llama.cpp's llama-bench; empty skips llama.cpp")
	python := fs.String("python", ".venv/bin/python", "python of the virtualenv with mlx_lm; mlx_lm is skipped when absent")
	driver := fs.String("driver", "bench/mlx_lm_driver.py", "the mlx_lm driver script")
	configs := fs.String("configs", "", "comma-separated configurations or prefixes (default: "+strings.Join(bench.DefaultConfigs(), ",")+"; also cpu-high, mlx-cpu, mlx-gpu)")
	lens := fs.String("prompt-lens", "128,512", "prompt lengths")
	decode := fs.Int("decode-tokens", 128, "tokens generated after the first prompt length (>= 2)")
	reps := fs.Int("reps", 5, "timed repetitions")
	warmup := fs.Int("warmup", 1, "untimed warm-up runs before them")
	slowLens := fs.String("slow-prompt-lens", "16", "prompt lengths for MLX on its CPU device (its x86 quantized matmul runs at well under 1 tok/s)")
	slowDecode := fs.Int("slow-decode-tokens", 8, "decode tokens for MLX on its CPU device")
	slowReps := fs.Int("slow-reps", 1, "repetitions for MLX on its CPU device")
	threads := fs.Int("threads", 0, "llama-bench threads (0: every core)")
	seed := fs.Uint64("seed", 1, "seed of the prompt ids")
	results := fs.String("results", "bench/results", "directory of the JSON and PNG results; empty writes none")
	report := fs.String("report", "", "re-render a saved result JSON as the markdown table (and its PNG next to it) instead of measuring")
	child := fs.Bool("child", false, "internal: run one Go configuration and print its JSON report")
	bandwidth := fs.Bool("bandwidth", false, "internal (--child): measure the memory read bandwidth and print it as JSON")
	config := fs.String("config", "", "internal (--child): the configuration")
	idsFile := fs.String("ids-file", "", "internal (--child): JSON list of prompt ids")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, benchUsage)
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
	promptLens, err := parseInts(*lens)
	if err != nil {
		return bad("--prompt-lens: %v", err)
	}
	slowPromptLens, err := parseInts(*slowLens)
	if err != nil {
		return bad("--slow-prompt-lens: %v", err)
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
		err = bench.RunChild(bench.ChildOptions{Model: *model, Backend: name, Options: opts, IDs: ids, PromptLens: promptLens,
			DecodeTokens: *decode, Reps: *reps, Warmup: *warmup}, stdout, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "mlxgo bench --child: %v\n", err)
			return 1
		}
		return 0
	}

	if *decode < 2 || *reps < 1 || *warmup < 0 || *slowDecode < 2 || *slowReps < 1 {
		return bad("--decode-tokens and --slow-decode-tokens must be >= 2, --reps and --slow-reps >= 1, --warmup >= 0")
	}
	if *model == "" {
		*model = defModel
		if *ggufPath == "" {
			*ggufPath = defModel + ".gguf"
		}
		if err := ensureSynth(*model, "mlx", stderr); err != nil {
			fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
			return 1
		}
		if *llama != "" {
			if err := ensureSynth(*ggufPath, "gguf", stderr); err != nil {
				fmt.Fprintf(stderr, "mlxgo bench: %v\n", err)
				return 1
			}
		}
	} else if *ggufPath == "" {
		*ggufPath = filepath.Clean(*model) + ".gguf"
	}
	if *llama != "" {
		if _, err := os.Stat(*ggufPath); err != nil {
			return bad("--llama-bench needs the GGUF twin %s (write it with mlxgo synth --format gguf, with the flags that made --model): %v", *ggufPath, err)
		}
	}
	py := *python
	if _, err := os.Stat(py); err != nil {
		fmt.Fprintf(stderr, "mlxgo bench: WARNING: %s not found, mlx_lm is not measured (run make venv)\n", py)
		py = ""
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
	res, err := bench.Run(bench.Options{
		Model: *model, GGUF: *ggufPath, Self: []string{exe, "bench", "--child"}, Python: py, Driver: *driver,
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
	for _, c := range res.Configs {
		if c.Err != "" {
			return 1
		}
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
