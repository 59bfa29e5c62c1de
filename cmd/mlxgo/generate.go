package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/tokenizer"
)

const generateUsage = `usage: mlxgo generate --model DIR|ORG/NAME (--prompt TEXT | --prompt-ids IDS) [flags]

Generates text from an MLX model directory (config.json, model*.safetensors,
tokenizer.json and tokenizer_config.json, as mlx_lm writes them), as
mlx_lm.generate does. --model is a directory or a Hugging Face repo id
(org/name) already in the local Hugging Face cache.

With --prompt, the text is wrapped in the model's chat template as a user
message (after a --system message, if given) unless --raw is given, encoded
with the model's tokenizer, and the answer is printed as it is generated.
--prompt - reads the prompt from stdin (one trailing newline dropped).
--think / --no-think set the template's enable_thinking variable, for
templates that have one (MiniCPM5, Qwen3). With --prompt-ids the prompt is
token ids and the generated ids are printed ("generated: 1 2 3").

Generation stops after --max-tokens tokens or at an end-of-sequence token:
tokenizer_config.json's eos_token, config.json's and generation_config.json's
eos_token_id. A load-time line comes first and a statistics line (prompt and
generation tokens per second, peak memory) last.

--prompt-cache-file FILE (made by mlxgo cache-prompt or mlx_lm.cache_prompt)
starts from the cached tokens, as mlx_lm.generate does: with a chat template,
only the text from the start of the user message's content on is encoded (the
cache holds the template's part before it, and the cached prompt's text), so
the prompt continues the cached one; --model defaults to the model the file
was made with and must be that model. A cache of another model (layers, kv
heads, head_dim or dtype) is an error naming what differs.

Speculative decoding, as mlx_lm.generate's: --draft-model DIR (a smaller
model with the same vocabulary, on the same backend) proposes
--num-draft-tokens tokens (default 3) one at a time, the model checks them in
one forward and keeps those that equal its own picks, so the output is what
the model alone gives (greedy: the same tokens). --prompt-lookup N drafts
without a second model (prompt lookup decoding, llama.cpp's ngram-simple
speculative type, --spec-type ngram-simple there): it finds the last N tokens
earlier in the prompt and the text so far and proposes the tokens that
followed; it pays off when the answer repeats the prompt (editing,
extraction, code). The statistics line then says how many drafted tokens
were accepted. As in mlx_lm, --repetition-penalty then looks at the
prompt's last token and the generated ones only, and sampling (--temp > 0)
draws its random numbers in another order, so those runs can differ from
runs without drafting. A draft model with another vocabulary (config.json's
vocab_size or the tokenizer's tokens) is an error naming what differs.

KV caches: --kv-cache full (the default), quantized (mlx_lm's QuantizedKVCache,
--kv-bits 4|8, --kv-group-size, --quantized-kv-start), rotating (mlx_lm's
RotatingKVCache, --max-kv-size N) or turbo[:k<K>v<V>] (TurboQuant: keys
affine per 32-group in K bits, values rotated and Lloyd-Max quantized in V
bits; turbo is k8v3; head_dim 64, 128, 256 or 512; --turbo-read deferred or
eager). --kv-bits or --max-kv-size alone choose their kind, as in mlx_lm.
Speculative decoding runs on every kind (the draft model's caches of the
same kind, as mlx_lm quantizes both); with --max-kv-size the prompt and
--max-tokens must fit in the window (a rotating cache cannot be trimmed
once it has evicted tokens). With --prompt-cache-file the file's caches are
used as stored: KV cache flags must name the kind it holds.

--adapter-path DIR puts LoRA or DoRA adapters on the model after loading, as
mlx_lm.generate --adapter-path does: a directory mlx_lm.lora (or mlxgo)
wrote, adapters.safetensors and adapter_config.json. Adapters of another
model, rank or set of layers are an error naming the tensor and the file.

Examples:
  mlxgo generate --model smollm2-mlx --prompt "What is the capital of France?"
  mlxgo generate --prompt-cache-file manual.safetensors --prompt "How do I reset it?"
  mlxgo generate --model HuggingFaceTB/SmolLM2-135M-Instruct --prompt "Write a haiku." --temp 0.7 --seed 1
  echo "Summarise: ..." | mlxgo generate --model DIR --prompt - --system "You are terse." --max-tokens 100
  mlxgo generate --model DIR --prompt "2+2=" --raw --max-tokens 8
  mlxgo generate --model minicpm5-dir --prompt "Is 97 prime?" --no-think
  mlxgo generate --model conformance/testdata/models/optiq-f32 --prompt-ids 1,2,3
  mlxgo generate --model DIR --prompt-ids 5,6,7 --repetition-penalty 1.3 --backend cpu --precision high
  mlxgo generate --model smollm2-mlx --prompt "Hi" --backend cpu --precision fast --no-pack-weights
  mlxgo generate --model smollm2-mlx --prompt "Hi" --backend cpu --precision fast --kv-dtype float32   # mlx_lm's float32 cache for a float32 model
  mlxgo generate --model smollm2-bf16 --draft-model smollm2-mlx --num-draft-tokens 4 --prompt "Explain DNS."
  mlxgo generate --model DIR --prompt-lookup 3 --num-draft-tokens 8 --prompt "Fix the typos: ..."
  mlxgo generate --model smollm2-mlx --kv-cache turbo:k4v3 --prompt "Summarise: ..."

Flags:
`

// sampleFlags are the model, backend and sampling flags that generate and
// chat share.
type sampleFlags struct {
	model, backend, precision        string
	offline                          bool // --offline: never download --model
	packWeights                      bool // --pack-weights: backend.Options.PackWeights
	noPackWeights                    bool // --no-pack-weights: backend.Options.NoPackWeights
	cpuProfile                       string
	maxTokens, topK, minTokensToKeep int
	temp, topP, minP, repPenalty     float64
	repContext, prefillStep          int
	seed                             uint64
	adapterPath                      string // --adapter-path
}

// generateFlags are the parsed flags of mlxgo generate.
type generateFlags struct {
	sampleFlags
	promptIDs, prompt, system string
	raw, think, noThink       bool
	ids                       []int32
	cacheFile                 string            // --prompt-cache-file
	cache                     *promptcache.File // its contents
	draftModel                string            // --draft-model, resolved to a directory
	numDraft                  int               // --num-draft-tokens
	promptLookup              int               // --prompt-lookup n-gram size; 0: off
	kvCacheFlags
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

// register adds the shared flags to fs.
func (f *sampleFlags) register(fs *flag.FlagSet, maxTokens int) {
	fs.StringVar(&f.model, "model", "", "model directory (config.json, model*.safetensors, tokenizer.json) or Hugging Face repo id org/name (downloaded into the Hugging Face cache when not there); required")
	registerOffline(fs, &f.offline)
	fs.IntVar(&f.maxTokens, "max-tokens", maxTokens, "most tokens to generate (>= 1)")
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
	fs.StringVar(&f.precision, "precision", "reference", "arithmetic: reference (MLX's), high (float64 accumulation; cpu only) or fast (int8 activations in quantized matmuls, FMA in dense ones; approximate; cpu only)")
	fs.BoolVar(&f.packWeights, "pack-weights", false, "cpu --precision fast: pack the quantized weights for the int8 matmul, which the fast backend does by default on AVX-512 VNNI (kept so that scripts that give it keep working; see --no-pack-weights)")
	fs.BoolVar(&f.noPackWeights, "no-pack-weights", false, "cpu: read every weight in the file's layout, no packed copies. By default --precision fast on AVX-512 VNNI rearranges each 4- or 8-bit weight for the int8 kernels in its first matmul (without packing, rows of 8-bit and group-64+ layers take the one-row kernels' order up to four rows; packed, the int8 GEMM's order at every batch size), and --precision reference each float16 or bfloat16 dense weight (AVX-512) and each 4- or 8-bit weight (AVX-512 VNNI) for its one-row kernels (the same bits either way); the file's pages they replace go back to the operating system")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run to this file (go tool pprof)")
	fs.StringVar(&f.adapterPath, "adapter-path", "", "directory of LoRA or DoRA adapters as mlx_lm.lora writes them (adapters.safetensors, adapter_config.json), put on the model after loading")
}

// check validates the shared flags and resolves --model to a directory.
func (f *sampleFlags) check() error {
	var err error
	switch {
	case f.model == "":
		err = usagef("--model is required (a model directory or a Hugging Face repo id, org/name)")
	case f.maxTokens < 1:
		err = usagef("--max-tokens %d: want >= 1", f.maxTokens)
	case !(f.temp >= 0): // NaN too
		err = usagef("--temp %v: want >= 0", f.temp)
	case !(f.topP >= 0 && f.topP <= 1): // NaN too
		err = usagef("--top-p %v: want 0 <= p <= 1", f.topP)
	case f.topK < 0:
		err = usagef("--top-k %d: want >= 0", f.topK)
	case !(f.minP >= 0 && f.minP <= 1): // NaN too
		err = usagef("--min-p %v: want 0 <= p <= 1", f.minP)
	case f.minTokensToKeep < 1:
		err = usagef("--min-tokens-to-keep %d: want >= 1", f.minTokensToKeep)
	case !(f.repPenalty >= 0): // NaN too
		err = usagef("--repetition-penalty %v: want >= 0 (0: off)", f.repPenalty)
	case f.repContext < 1:
		err = usagef("--repetition-context-size %d: want >= 1", f.repContext)
	case f.prefillStep < 1:
		err = usagef("--prefill-step %d: want >= 1", f.prefillStep)
	case f.precision != "reference" && f.precision != "high" && f.precision != "fast":
		err = usagef("--precision %q: want reference, high or fast", f.precision)
	case f.packWeights && f.noPackWeights:
		err = usagef("--pack-weights and --no-pack-weights contradict each other (give at most one)")
	case f.packWeights && (f.backend != "cpu" || f.precision != "fast"):
		err = usagef("--pack-weights is for --backend cpu --precision fast (got --backend %s --precision %s)", f.backend, f.precision)
	case f.noPackWeights && (f.backend != "cpu" || f.precision == "high"):
		err = usagef("--no-pack-weights is for --backend cpu --precision fast or reference (got --backend %s --precision %s)", f.backend, f.precision)
	case !slices.Contains(backend.Names(), f.backend):
		err = usagef("--backend %q is not compiled in (available: %s; the mlx backend needs `-tags mlx`)", f.backend, strings.Join(backend.Names(), ", "))
	}
	return err
}

// options are the generate.Options of the flags (EOS left empty).
func (f *sampleFlags) options() generate.Options {
	return generate.Options{
		MaxTokens:       f.maxTokens,
		PrefillStepSize: f.prefillStep,
		Sampler: generate.SamplerOptions{
			Temp: f.temp, TopP: f.topP, TopK: f.topK, MinP: f.minP,
			MinTokensToKeep: f.minTokensToKeep, Seed: f.seed,
		},
		Processors: generate.ProcessorOptions{RepetitionPenalty: f.repPenalty, RepetitionContextSize: f.repContext},
	}
}

// parseGenerateFlags parses and checks the flags; --help prints the usage
// to stdout and returns flag.ErrHelp.
func parseGenerateFlags(args []string, stdout io.Writer) (*generateFlags, error) {
	f := &generateFlags{}
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported by cmdGenerate, once
	fs.Usage = func() {}
	f.register(fs, 256)
	fs.StringVar(&f.prompt, "prompt", "", "prompt text (- reads stdin); wrapped in the chat template unless --raw")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "prompt token ids, comma-separated (e.g. 1,2,3), instead of --prompt")
	fs.StringVar(&f.system, "system", "", "system message before the prompt (chat template only)")
	fs.BoolVar(&f.raw, "raw", false, "encode --prompt as it is, without the chat template")
	fs.BoolVar(&f.think, "think", false, "set enable_thinking=true in the chat template (templates with that switch only)")
	fs.BoolVar(&f.noThink, "no-think", false, "set enable_thinking=false in the chat template (templates with that switch only)")
	fs.StringVar(&f.cacheFile, "prompt-cache-file", "", "a prompt cache (mlxgo cache-prompt, mlx_lm.cache_prompt) whose tokens the prompt continues; --model defaults to the one it was made with")
	fs.StringVar(&f.draftModel, "draft-model", "", "a smaller model with the same vocabulary (directory or org/name) drafting tokens for speculative decoding")
	fs.IntVar(&f.numDraft, "num-draft-tokens", 3, "tokens drafted per step with --draft-model or --prompt-lookup (>= 1)")
	fs.IntVar(&f.promptLookup, "prompt-lookup", 0, "speculative decoding by prompt lookup: draft the tokens that followed the last N tokens earlier in the sequence (N >= 1; 0: off)")
	f.registerKV(fs)
	f.registerKVDType(fs)
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
		return nil, usagef("unexpected argument %q (flags start with --; quote a prompt: --prompt \"...\")", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.cacheFile != "" {
		if err := f.readCache(); err != nil {
			return nil, err
		}
		if err := f.checkFileKind(f.cache, f.cacheFile, set); err != nil {
			return nil, err
		}
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	f.setBackend(f.backend, f.precision)
	var err error
	switch {
	case set["prompt"] && set["prompt-ids"]:
		err = usagef("--prompt and --prompt-ids are mutually exclusive: give the prompt as text or as token ids, not both")
	case !set["prompt"] && !set["prompt-ids"]:
		err = usagef("--prompt TEXT or --prompt-ids is required (the prompt as text, or as token ids)")
	case set["prompt-ids"] && f.promptIDs == "":
		err = usagef("--prompt-ids is empty: want comma-separated token ids, e.g. 1,2,3")
	case set["prompt-ids"] && (f.raw || f.think || f.noThink || f.system != ""):
		err = usagef("--raw, --system, --think and --no-think apply to --prompt text, not to --prompt-ids")
	case f.think && f.noThink:
		err = usagef("--think and --no-think are mutually exclusive")
	case kvErr(&f.kvCacheFlags) != nil:
		err = kvErr(&f.kvCacheFlags)
	case f.raw && (f.think || f.noThink || f.system != ""):
		err = usagef("--raw skips the chat template, so --system, --think and --no-think cannot apply")
	case f.draftModel != "" && set["prompt-lookup"]:
		err = usagef("--draft-model and --prompt-lookup are mutually exclusive: draft with a model or by prompt lookup, not both")
	case f.promptLookup < 0:
		err = usagef("--prompt-lookup %d: want an n-gram size >= 1 (0: off)", f.promptLookup)
	case f.numDraft < 1:
		err = usagef("--num-draft-tokens %d: want >= 1", f.numDraft)
	case set["num-draft-tokens"] && f.draftModel == "" && f.promptLookup == 0:
		err = usagef("--num-draft-tokens applies to speculative decoding: give --draft-model DIR or --prompt-lookup N too")
	}
	if err != nil {
		return nil, err
	}
	if set["prompt-ids"] {
		if f.ids, err = parseIDs(f.promptIDs); err != nil {
			return nil, err
		}
	}
	given := f.model
	if f.model, err = resolveModel(f.model, f.offline); err != nil {
		return nil, err
	}
	if f.cache != nil {
		if err := sameModel(given, f.model, f.cache, f.cacheFile); err != nil {
			return nil, err
		}
	}
	if f.draftModel != "" {
		if f.draftModel, err = resolveModel(f.draftModel, f.offline); err != nil {
			return nil, fmt.Errorf("--draft-model: %w", err)
		}
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

// runCommand is a command's main: it parses args with parse and runs run,
// printing an error as "mlxgo NAME: ..." (and, for a flag error, where to find
// the flags), and returns the exit status: 0, 2 for a usage error, 1 for
// any other failure.
func runCommand[F any](name string, args []string, stdout, stderr io.Writer,
	parse func([]string, io.Writer) (F, error), run func(F, io.Writer, io.Writer) error) int {
	f, err := parse(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo %s: %v\nRun 'mlxgo %s --help' for the flags.\n", name, err, name)
		return 2
	}
	if err := run(f, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "mlxgo %s: %v\n", name, err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

// stdin is the standard input of --prompt - and of mlxgo chat (tests replace it).
var stdin io.Reader = os.Stdin

func cmdGenerate(args []string, stdout, stderr io.Writer) int {
	return runCommand("generate", args, stdout, stderr, parseGenerateFlags, runGenerate)
}

// openText loads dir's tokenizer and stop tokens (chat.Load) and checks the
// template switches; raw skips the template, think/noThink set
// enable_thinking.
func openText(dir string, cfg *checkpoint.Config, raw, think, noThink bool, system string, stderr io.Writer) (*chat.Text, error) {
	tm, err := chat.Load(dir, cfg)
	if errors.Is(err, chat.ErrNoTokenizer) {
		return nil, usagef("%s has no tokenizer.json, which text prompts need: copy tokenizer.json and tokenizer_config.json from the model's Hugging Face repo into it (mlxgo convert writes them for GGUF files), or give the prompt as --prompt-ids", dir)
	}
	if err != nil {
		return nil, err
	}
	if !raw && !tm.Template {
		if think || noThink || system != "" {
			return nil, usagef("%s/tokenizer_config.json has no chat_template, so --system, --think and --no-think cannot apply", dir)
		}
		fmt.Fprintf(stderr, "note: %s/tokenizer_config.json has no chat_template; the prompt is encoded as it is (as with --raw)\n", dir)
	}
	if raw {
		tm.Template = false
	}
	if think || noThink {
		if !tm.HasThinkingSwitch() {
			flagName := map[bool]string{true: "--think", false: "--no-think"}[think]
			return nil, usagef("%s: the chat template of %s has no enable_thinking switch (only templates that mention enable_thinking, e.g. MiniCPM5's or Qwen3's, have one)", flagName, dir)
		}
		tm.Extra = map[string]any{"enable_thinking": think}
	}
	return tm, nil
}

// readPrompt returns --prompt, or stdin without one trailing newline for "-".
func readPrompt(p string) (string, error) {
	if p != "-" {
		return p, nil
	}
	b, err := io.ReadAll(stdin)
	if err != nil {
		return "", fmt.Errorf("--prompt -: reading stdin: %w", err)
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.TrimSuffix(s, "\r"), nil
}

// startCPUProfile starts a Go CPU profile into path ("" does nothing) and
// returns the function that ends it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, usagef("--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, usagef("--cpuprofile %s: %v", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// openModel opens the backend and loads the model, printing the load line.
func openModel(f *sampleFlags, stdout, stderr io.Writer) (backend.Backend, *minicpm5.Model, error) {
	b, err := backend.Open(f.backend, backend.Options{Precision: f.precision, PackWeights: f.packWeights, NoPackWeights: f.noPackWeights})
	if err != nil {
		return nil, nil, usagef("--backend %s --precision %s: %v", f.backend, f.precision, err)
	}
	if f.packWeights && !cpu.PackWeightsSupported() {
		fmt.Fprintln(stderr, "note: --pack-weights does nothing on this CPU (it needs AVX-512 with VNNI); the weights are read as they are")
	}
	start := time.Now()
	m, err := loadModel(b, f.model)
	if err != nil {
		b.Close()
		return nil, nil, fmt.Errorf("--model %s: %w", f.model, err)
	}
	cfg := m.Config()
	fmt.Fprintf(stdout, "loaded %s on %s in %s (%s, %d layers, vocab %d)\n", f.model, b.Name(), ms(time.Since(start)), m.DType().MLXName(), cfg.NumHiddenLayers, cfg.VocabSize)
	PrintWarnings(stderr, m.Warnings())
	if f.adapterPath != "" {
		var ads []lora.Adapter
		var ac lora.Config
		err := b.Do(func() (err error) {
			defer backend.Recover(&err)
			ads, ac, err = lora.Load(b, m, f.adapterPath)
			return err
		})
		if err != nil {
			m.Close()
			b.Close()
			return nil, nil, fmt.Errorf("--adapter-path %s: %w", f.adapterPath, err)
		}
		fmt.Fprintf(stdout, "adapters: %d %s layers (rank %d, scale %g) from %s\n", len(ads), ac.FineTuneType, ac.LoRA.Rank, ac.LoRA.Scale, f.adapterPath)
	}
	return b, m, nil
}

func runGenerate(f *generateFlags, stdout, stderr io.Writer) error {
	var tm *chat.Text
	var prompt string
	if f.ids == nil {
		// The tokenizer and the prompt come before the weights, so that a
		// missing tokenizer.json fails fast.
		ck, err := checkpoint.LoadConfig(f.model)
		if err != nil {
			return fmt.Errorf("--model %s: %w", f.model, err)
		}
		if tm, err = openText(f.model, ck, f.raw, f.think, f.noThink, f.system, stderr); err != nil {
			return err
		}
		if prompt, err = readPrompt(f.prompt); err != nil {
			return err
		}
		var msgs []tokenizer.Message
		if f.system != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: f.system})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: prompt})
		if f.ids, err = renderPrompt(tm, msgs, f.cache != nil); err != nil {
			return err
		}
		if len(f.ids) == 0 {
			return usagef("--prompt is empty and encodes to no tokens: give some text")
		}
	}
	stop, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	b, m, err := openModel(&f.sampleFlags, stdout, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	defer b.Do(func() error { return m.Close() })
	cfg := m.Config()
	for i, id := range f.ids {
		if int(id) >= cfg.VocabSize {
			if tm != nil {
				return fmt.Errorf("the tokenizer of %s gave token %d (at %d), out of the model's vocabulary (vocab_size %d in config.json)", f.model, id, i, cfg.VocabSize)
			}
			return usagef("--prompt-ids: item %d is %d, out of the vocabulary (vocab_size %d in %s/config.json)", i, id, cfg.VocabSize, f.model)
		}
	}
	co := f.cacheOptions()
	if f.cache != nil {
		co = nn.CacheOptions{} // the file's caches are used as stored (checkFileKind)
	}
	view, err := m.WithCache(co)
	if err != nil {
		return usagef("%s: %v", kvDescription(co), err)
	}
	if w := f.cacheOptions().MaxKVSize; w > 0 && (f.draftModel != "" || f.promptLookup > 0) && len(f.ids)+f.maxTokens >= w {
		return usagef("--max-kv-size %d with speculative decoding: the prompt's %d tokens and --max-tokens %d must fit in the window (fewer than %d): a verify step past it evicts tokens that a rejected draft needs back", w, len(f.ids), f.maxTokens, w)
	}
	gen := func(ids []int32, opts generate.Options, onToken func(generate.Token) bool) (generate.Result, error) {
		return generate.Generate(view, ids, opts, onToken)
	}
	var sess *generate.Session[nn.KVCache]
	if f.cache != nil {
		s, err := resumeCache(m, f.cache, f.cacheFile, stdout)
		if err != nil {
			return err
		}
		defer s.Release()
		gen, sess = s.Generate, s
	}
	opts := f.options()
	var spec *generate.SpeculativeResult
	if f.draftModel != "" || f.promptLookup > 0 {
		d, release, err := f.drafter(b, m, tm, stdout, stderr)
		if err != nil {
			return err
		}
		defer release()
		if sess == nil {
			if sess, err = generate.NewSession[nn.KVCache](view); err != nil {
				return err
			}
			defer sess.Release()
		}
		// speculative_generate_step's processors see the last prompt token
		// and the generated ones.
		opts.PromptContext = generate.LastPromptToken
		spec = &generate.SpeculativeResult{}
		gen = func(ids []int32, opts generate.Options, onToken func(generate.Token) bool) (generate.Result, error) {
			var err error
			*spec, err = sess.GenerateSpeculative(ids, d, generate.SpeculativeOptions{Options: opts, NumDraftTokens: f.numDraft}, onToken)
			return spec.Result, err
		}
	}
	var res generate.Result
	if tm == nil {
		for _, e := range cfg.EOSTokenIDs {
			opts.EOS = append(opts.EOS, int32(e))
		}
		res, err = streamTokens(gen, f.ids, opts, stdout)
	} else {
		opts.EOS = tm.EOS
		res, err = streamText(gen, tm.Tok, f.ids, opts, stdout)
	}
	if err != nil {
		return err
	}
	line := statsLine(res)
	if spec != nil {
		line += " | " + draftLine(*spec)
	}
	if st := b.Stats(); st.PackedBytes > 0 {
		line += fmt.Sprintf(" | packed weights %s, the file's pages they replaced given back %s", mb(st.PackedBytes), mb(st.ReleasedBytes))
	}
	fmt.Fprintln(stdout, line)
	slowNotes{}.print(b, stderr)
	return nil
}

// draftLine reports how the drafts fared.
func draftLine(r generate.SpeculativeResult) string {
	pct := 0.0
	if r.Drafted > 0 {
		pct = 100 * float64(r.Accepted) / float64(r.Drafted)
	}
	return fmt.Sprintf("draft: %d of %d drafted tokens accepted (%.0f%%), %d verify steps", r.Accepted, r.Drafted, pct, r.Steps)
}

// drafter returns the drafter of --draft-model or --prompt-lookup and the
// function that frees it. The draft model loads on b, the model's backend,
// after its vocabulary was checked against m's (tm: the model's tokenizer,
// nil with --prompt-ids).
func (f *generateFlags) drafter(b backend.Backend, m *minicpm5.Model, tm *chat.Text, stdout, stderr io.Writer) (generate.Drafter, func(), error) {
	if f.promptLookup > 0 {
		d, err := generate.NewPromptLookup(f.promptLookup)
		return d, func() {}, err
	}
	dcfg, err := checkpoint.LoadConfig(f.draftModel)
	if err != nil {
		return nil, nil, fmt.Errorf("--draft-model %s: %w", f.draftModel, err)
	}
	if err := sameVocab(f.model, f.draftModel, m.Config(), dcfg, tm); err != nil {
		return nil, nil, err
	}
	start := time.Now()
	dm, err := loadModel(b, f.draftModel)
	if err != nil {
		return nil, nil, fmt.Errorf("--draft-model %s: %w", f.draftModel, err)
	}
	fmt.Fprintf(stdout, "loaded draft model %s in %s (%s, %d layers)\n", f.draftModel, ms(time.Since(start)), dm.DType().MLXName(), dcfg.NumHiddenLayers)
	var warnings []string
	for _, w := range dm.Warnings() {
		warnings = append(warnings, "--draft-model: "+w)
	}
	PrintWarnings(stderr, warnings)
	// The draft model's caches are of the model's kind, as mlx_lm's
	// speculative_generate_step quantizes both (kv_bits).
	dv, err := dm.WithCache(f.cacheOptions())
	if err != nil {
		b.Do(func() error { return dm.Close() })
		return nil, nil, usagef("--draft-model %s with %s: %v", f.draftModel, kvDescription(f.cacheOptions()), err)
	}
	d, err := generate.NewDraftModel[nn.KVCache](dv)
	if err != nil {
		b.Do(func() error { return dm.Close() })
		return nil, nil, err
	}
	return d, func() { d.Release(); b.Do(func() error { return dm.Close() }) }, nil
}

// sameVocab checks that the draft model shares the model's vocabulary:
// config.json's vocab_size (the width of the logits) and, where both
// directories have a tokenizer.json, the tokenizer (mlx_lm compares the
// tokenizers' vocab_size; mlxgo compares every token too). tm is the
// model's tokenizer when already loaded.
func sameVocab(dir, draftDir string, cfg, dcfg *checkpoint.Config, tm *chat.Text) error {
	if cfg.VocabSize != dcfg.VocabSize {
		return usagef("--draft-model %s has another vocabulary: vocab_size %d in its config.json, %d in %s/config.json; the draft model must use the model's tokenizer", draftDir, dcfg.VocabSize, cfg.VocabSize, dir)
	}
	_, errA := os.Stat(filepath.Join(dir, "tokenizer.json"))
	_, errB := os.Stat(filepath.Join(draftDir, "tokenizer.json"))
	if errA != nil || errB != nil {
		return nil // nothing more to compare (--prompt-ids with a bare checkpoint)
	}
	var tok *tokenizer.Tokenizer
	if tm != nil {
		tok = tm.Tok
	} else {
		var err error
		if tok, err = tokenizer.Load(dir); err != nil {
			return fmt.Errorf("--model %s: %w", dir, err)
		}
	}
	dtok, err := tokenizer.Load(draftDir)
	if err != nil {
		return fmt.Errorf("--draft-model %s: %w", draftDir, err)
	}
	if tok.VocabSize() != dtok.VocabSize() {
		return usagef("--draft-model %s has another tokenizer: %d tokens in its tokenizer.json, %d in %s/tokenizer.json", draftDir, dtok.VocabSize(), tok.VocabSize(), dir)
	}
	for id := range int32(tok.VocabSize()) {
		a, okA := tok.IDToToken(id)
		d, okD := dtok.IDToToken(id)
		if a != d || okA != okD {
			return usagef("--draft-model %s has another tokenizer: token %d is %q in its tokenizer.json, %q in %s/tokenizer.json", draftDir, id, d, a, dir)
		}
	}
	return nil
}

// slowNotes prints the slow paths a backend reports (backend.SlowPathReporter),
// each once: the keys are the ones already printed.
type slowNotes map[string]bool

func (n slowNotes) print(b backend.Backend, w io.Writer) {
	r, ok := b.(backend.SlowPathReporter)
	if !ok {
		return
	}
	for _, s := range r.SlowPaths() {
		if !n[s] {
			n[s] = true
			fmt.Fprintf(w, "note: %s ran on the %s backend's portable loops (slow): no vector kernel for this CPU covers it yet\n", s, b.Name())
		}
	}
}

// genFunc is a generation: generate.Generate on a model, or a session's
// Generate.
type genFunc func(ids []int32, opts generate.Options, onToken func(generate.Token) bool) (generate.Result, error)

// streamText generates, printing the text as it becomes final (mlx_lm's
// streaming detokenizer), then a newline.
func streamText(gen genFunc, tok *tokenizer.Tokenizer, ids []int32, opts generate.Options, w io.Writer) (generate.Result, error) {
	st := tok.NewStream(false)
	res, err := gen(ids, opts, func(t generate.Token) bool {
		io.WriteString(w, st.Push(t.ID))
		return true
	})
	io.WriteString(w, st.Flush())
	fmt.Fprintln(w)
	return res, err
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
func streamTokens(gen genFunc, ids []int32, opts generate.Options, w io.Writer) (generate.Result, error) {
	fmt.Fprint(w, "generated:")
	res, err := gen(ids, opts, func(t generate.Token) bool {
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
