package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/kvquality"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tokenizer"
)

const kvqualityUsage = `usage: mlxgo kvquality --model DIR (--prompt TEXT | --prompt-ids IDS) [--steps 512] [--kinds LIST] [--free-run]

Measures KV cache kinds against the full cache (package kvquality): the
model decodes --steps greedy tokens with the full cache while every kind is
teacher-forced through the same tokens; per kind it prints the mean and
worst KL(full ‖ kind) of the next-token distributions (nats), the fraction
of steps whose argmax is the full cache's token, with --free-run the tokens
the kind decodes on its own that equal the full cache's (the prefix before
the first difference, and the fraction of positions), and the bytes a
cached token costs against the bfloat16 full cache. Slow: one forward per
kind per step.

--kinds is a comma-separated list of turbo, turbo:k<K>v<V> (deferred read),
turbo:k<K>v<V>/eager, and kv4, kv8 (mlx_lm's quantized cache, group 64,
quantized from the first forward on, as turbo is).

Example:
  mlxgo kvquality --model smollm2-mlx --prompt "Write a poem about the sea." --steps 128 --kinds kv8,turbo,turbo:k4v3/eager

Flags:
`

type kvqualityFlags struct {
	model, backend, precision string
	prompt, promptIDs         string
	steps                     int
	kinds                     string
	freeRun                   bool
	ids                       []int32
	parsed                    []kvquality.Kind
}

func parseKVQualityFlags(args []string, stdout io.Writer) (*kvqualityFlags, error) {
	f := &kvqualityFlags{}
	fs := flag.NewFlagSet("kvquality", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&f.model, "model", "", "model directory (required)")
	fs.StringVar(&f.backend, "backend", defaultBackend(), "backend: cpu or mlx")
	fs.StringVar(&f.precision, "precision", "", "backend precision (see mlxgo generate)")
	fs.StringVar(&f.prompt, "prompt", "", "prompt text, in the chat template when the model has one")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "prompt token ids, comma-separated, instead of --prompt")
	fs.IntVar(&f.steps, "steps", 512, "tokens decoded (>= 1)")
	fs.StringVar(&f.kinds, "kinds", "kv8,kv4,turbo:k8v8,turbo:k8v4,turbo:k8v3/eager,turbo:k8v3,turbo:k8v2,turbo:k4v3,turbo:k4v2", "the cache kinds measured")
	fs.BoolVar(&f.freeRun, "free-run", false, "also let each kind decode on its own and compare its tokens")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, kvqualityUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	switch {
	case fs.NArg() > 0:
		return nil, usagef("unexpected argument %q (flags start with --)", fs.Arg(0))
	case f.model == "":
		return nil, usagef("--model DIR is required")
	case (f.prompt == "") == (f.promptIDs == ""):
		return nil, usagef("give exactly one of --prompt TEXT and --prompt-ids IDS")
	case f.steps < 1:
		return nil, usagef("--steps %d: want >= 1", f.steps)
	}
	for _, k := range strings.Split(f.kinds, ",") {
		kind, err := parseKind(strings.TrimSpace(k))
		if err != nil {
			return nil, err
		}
		f.parsed = append(f.parsed, kind)
	}
	var err error
	if f.promptIDs != "" {
		if f.ids, err = parseIDs(f.promptIDs); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// parseKind reads one --kinds item.
func parseKind(s string) (kvquality.Kind, error) {
	switch s {
	case "kv4", "kv8":
		bits := 4
		if s == "kv8" {
			bits = 8
		}
		return kvquality.Kind{Name: fmt.Sprintf("affine kv%d (g64)", bits), Options: nn.CacheOptions{KVBits: bits, KVGroupSize: 64}}, nil
	}
	name, eager := strings.CutSuffix(s, "/eager")
	sc, err := turboquant.ParseScheme(name)
	if err != nil {
		return kvquality.Kind{}, usagef("--kinds item %q: want kv4, kv8, turbo, turbo:k<K>v<V> or turbo:k<K>v<V>/eager (%v)", s, err)
	}
	read := "deferred"
	if eager {
		read = "eager"
	}
	return kvquality.Kind{Name: fmt.Sprintf("%s (%s)", sc, read), Options: nn.CacheOptions{Turbo: sc, TurboEager: eager}}, nil
}

func cmdKVQuality(args []string, stdout, stderr io.Writer) int {
	return runCommand("kvquality", args, stdout, stderr, parseKVQualityFlags, runKVQuality)
}

func runKVQuality(f *kvqualityFlags, stdout, stderr io.Writer) error {
	if f.ids == nil {
		ck, err := checkpoint.LoadConfig(f.model)
		if err != nil {
			return fmt.Errorf("--model %s: %w", f.model, err)
		}
		tm, err := openText(f.model, ck, false, false, false, "", stderr)
		if err != nil {
			return err
		}
		if f.ids, err = renderPrompt(tm, []tokenizer.Message{{Role: "user", Content: f.prompt}}, false); err != nil {
			return err
		}
	}
	b, m, err := openModel(&sampleFlags{model: f.model, backend: f.backend, precision: f.precision}, stdout, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	defer b.Do(func() error { return m.Close() })
	res, err := kvquality.Measure(m, f.ids, f.steps, f.parsed, f.freeRun, stderr)
	if err != nil {
		return err
	}
	cfg := m.Config()
	fmt.Fprintf(stdout, "%s: %d-token prompt, %d greedy steps; full cache (bf16): %d bytes per token (%d layers, %d KV heads, head_dim %d)\n\n",
		f.model, len(f.ids), res.Steps, res.FullBF16Bytes, cfg.NumHiddenLayers, cfg.NumKeyValueHeads, cfg.HeadDim)
	fmt.Fprintln(stdout, "| cache | mean KL | max KL | top-1 agreement | free-run prefix | free-run match | bytes/token | vs bf16 |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|")
	for _, r := range res.Rows {
		prefix, match := "-", "-"
		if r.FreePrefix >= 0 {
			prefix, match = fmt.Sprintf("%d/%d", r.FreePrefix, res.Steps), fmt.Sprintf("%.1f%%", 100*r.FreeMatch)
		}
		fmt.Fprintf(stdout, "| %s | %.4g | %.4g | %.1f%% | %s | %s | %d | %.3f× |\n", r.Name, r.MeanKL, r.MaxKL, 100*r.Top1, prefix, match,
			r.BytesPerToken, float64(r.BytesPerToken)/float64(res.FullBF16Bytes))
	}
	return nil
}
