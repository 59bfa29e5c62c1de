package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

const generateUsage = `usage: mlxgo generate --model DIR --prompt-ids IDS [flags]

Generates tokens from an MLX model directory (config.json and
model*.safetensors, as mlx_lm writes them) after a prompt given as token
ids (mlxgo has no tokenizer yet), as mlx_lm's generate_step does. Prints the
load time, each generated id as soon as it is known, and a statistics line.
Generation stops after --max-tokens tokens or at an eos_token_id of the
model's config.

Examples:
  mlxgo generate --model conformance/testdata/models/optiq-f32 --prompt-ids 1,2,3
  mlxgo generate --model DIR --prompt-ids 1,2,3 --max-tokens 64 --temp 0.7 --top-p 0.9 --seed 42
  mlxgo generate --model DIR --prompt-ids 5,6,7 --repetition-penalty 1.3 --backend cpu --precision high

Flags:
`

// generateFlags are the parsed flags of mlxgo generate.
type generateFlags struct {
	model, promptIDs, backend, precision string
	maxTokens, topK, minTokensToKeep     int
	temp, topP, minP, repPenalty         float64
	repContext, prefillStep              int
	seed                                 uint64
	ids                                  []int32
}

// usageError is a bad flag or argument: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// defaultBackend is "mlx" when compiled in, else "cpu".
func defaultBackend() string {
	if slices.Contains(backend.Names(), "mlx") {
		return "mlx"
	}
	return "cpu"
}

// parseGenerateFlags parses and checks the flags; --help prints the usage
// to stdout and returns flag.ErrHelp.
func parseGenerateFlags(args []string, stdout io.Writer) (*generateFlags, error) {
	f := &generateFlags{}
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by cmdGenerate, once
	fs.Usage = func() {}
	fs.StringVar(&f.model, "model", "", "model directory (config.json, model*.safetensors); required")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "prompt token ids, comma-separated (e.g. 1,2,3); required")
	fs.IntVar(&f.maxTokens, "max-tokens", 256, "most tokens to generate (>= 1)")
	fs.Float64Var(&f.temp, "temp", 0, "sampling temperature; 0 is greedy (argmax)")
	fs.Float64Var(&f.topP, "top-p", 0, "nucleus sampling: keep the most likely tokens up to this probability mass (0 or 1: off)")
	fs.IntVar(&f.topK, "top-k", 0, "keep only the K most likely tokens (0: off)")
	fs.Float64Var(&f.minP, "min-p", 0, "drop tokens less likely than min-p times the most likely one (0: off)")
	fs.IntVar(&f.minTokensToKeep, "min-tokens-to-keep", 1, "tokens min-p never drops (>= 1)")
	fs.Float64Var(&f.repPenalty, "repetition-penalty", 0, "penalise tokens of the recent context (> 0; 0: off; 1: no effect)")
	fs.IntVar(&f.repContext, "repetition-context-size", 20, "tokens of context the repetition penalty looks at (>= 1)")
	fs.Uint64Var(&f.seed, "seed", 0, "random seed (mx.random.seed) for sampling")
	fs.IntVar(&f.prefillStep, "prefill-step", 2048, "prompt tokens per prefill chunk (>= 1)")
	fs.StringVar(&f.backend, "backend", defaultBackend(), "backend: "+strings.Join(backend.Names(), " or "))
	fs.StringVar(&f.precision, "precision", "reference", "arithmetic: reference (MLX's) or high (float64 accumulation; cpu only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, generateUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	var err error
	switch {
	case f.model == "":
		err = usagef("--model is required (a model directory)")
	case f.promptIDs == "":
		err = usagef("--prompt-ids is required (comma-separated token ids, e.g. 1,2,3)")
	case f.maxTokens < 1:
		err = usagef("--max-tokens %d: want >= 1", f.maxTokens)
	case f.temp < 0:
		err = usagef("--temp %v: want >= 0", f.temp)
	case f.topP < 0 || f.topP > 1:
		err = usagef("--top-p %v: want 0 <= p <= 1", f.topP)
	case f.topK < 0:
		err = usagef("--top-k %d: want >= 0", f.topK)
	case f.minP < 0 || f.minP > 1:
		err = usagef("--min-p %v: want 0 <= p <= 1", f.minP)
	case f.minTokensToKeep < 1:
		err = usagef("--min-tokens-to-keep %d: want >= 1", f.minTokensToKeep)
	case f.repPenalty < 0:
		err = usagef("--repetition-penalty %v: want >= 0 (0: off)", f.repPenalty)
	case f.repContext < 1:
		err = usagef("--repetition-context-size %d: want >= 1", f.repContext)
	case f.prefillStep < 1:
		err = usagef("--prefill-step %d: want >= 1", f.prefillStep)
	case f.precision != "reference" && f.precision != "high":
		err = usagef("--precision %q: want reference or high", f.precision)
	case !slices.Contains(backend.Names(), f.backend):
		err = usagef("--backend %q is not compiled in (available: %s; the mlx backend needs `-tags mlx`)", f.backend, strings.Join(backend.Names(), ", "))
	}
	if err != nil {
		return nil, err
	}
	if f.ids, err = parseIDs(f.promptIDs); err != nil {
		return nil, err
	}
	if st, err := os.Stat(f.model); err != nil || !st.IsDir() {
		return nil, usagef("--model %q: not a directory", f.model)
	}
	return f, nil
}

// parseIDs parses comma-separated non-negative int32 token ids.
func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for i, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		v, err := strconv.ParseInt(field, 10, 32)
		if err != nil || v < 0 {
			return nil, usagef("--prompt-ids %q: item %d is %q, want a non-negative integer token id", s, i, field)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

func cmdGenerate(args []string, stdout, stderr io.Writer) int {
	f, err := parseGenerateFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo generate: %v\nRun 'mlxgo generate --help' for the flags.\n", err)
		return 2
	}
	if err := runGenerate(f, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "mlxgo generate:", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

func runGenerate(f *generateFlags, stdout, stderr io.Writer) error {
	b, err := backend.Open(f.backend, backend.Options{Precision: f.precision})
	if err != nil {
		return usagef("--backend %s --precision %s: %v", f.backend, f.precision, err)
	}
	defer b.Close()
	start := time.Now()
	m, err := loadModel(b, f.model)
	if err != nil {
		return fmt.Errorf("--model %s: %w", f.model, err)
	}
	defer b.Do(func() error { return m.Close() })
	cfg := m.Config()
	fmt.Fprintf(stdout, "loaded %s on %s in %s (%s, %d layers, vocab %d)\n", f.model, b.Name(), ms(time.Since(start)), m.DType().MLXName(), cfg.NumHiddenLayers, cfg.VocabSize)
	for i, id := range f.ids {
		if int(id) >= cfg.VocabSize {
			return usagef("--prompt-ids: item %d is %d, out of the vocabulary (vocab_size %d in %s/config.json)", i, id, cfg.VocabSize, f.model)
		}
	}
	opts := generate.Options{
		MaxTokens:       f.maxTokens,
		PrefillStepSize: f.prefillStep,
		Sampler: generate.SamplerOptions{
			Temp: f.temp, TopP: f.topP, TopK: f.topK, MinP: f.minP,
			MinTokensToKeep: f.minTokensToKeep, Seed: f.seed,
		},
		Processors: generate.ProcessorOptions{RepetitionPenalty: f.repPenalty, RepetitionContextSize: f.repContext},
	}
	for _, e := range cfg.EOSTokenIDs {
		opts.EOS = append(opts.EOS, int32(e))
	}
	res, err := streamTokens(m, f.ids, opts, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, statsLine(res))
	return nil
}

// loadModel loads a model directory on b's thread.
func loadModel(b backend.Backend, dir string) (m *minicpm5.Model, err error) {
	err = b.Do(func() (err error) {
		defer backend.Recover(&err)
		m, err = minicpm5.Load(b, dir)
		return err
	})
	return m, err
}

// streamTokens generates, printing each id as it comes ("generated: 1 2 3").
func streamTokens(m *minicpm5.Model, ids []int32, opts generate.Options, w io.Writer) (generate.Result, error) {
	fmt.Fprint(w, "generated:")
	res, err := generate.Generate(m, ids, opts, func(t generate.Token) bool {
		fmt.Fprintf(w, " %d", t.ID)
		return true
	})
	fmt.Fprintln(w)
	return res, err
}

// statsLine is mlx_lm's closing statistics, on one line.
func statsLine(r generate.Result) string {
	s := r.Stats
	mem := fmt.Sprintf("peak memory %s (backend)", mb(s.PeakBytes))
	if s.PeakRSSBytes > 0 {
		mem += fmt.Sprintf(", %s (process RSS)", mb(s.PeakRSSBytes))
	}
	return fmt.Sprintf("prompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s | time to first token %s | %s | finish: %s",
		s.PromptTokens, s.PromptTPS, s.GenerationTokens, s.GenerationTPS, ms(s.TimeToFirstToken), mem, r.FinishReason)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
