package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/tokenizer"
)

const cachePromptUsage = `usage: mlxgo cache-prompt --model DIR|ORG/NAME (--prompt TEXT | --prompt-ids IDS) --prompt-cache-file FILE [flags]

Runs a prompt through a model and saves the KV cache to FILE, as
mlx_lm.cache_prompt does, in mlx_lm's prompt cache format (a safetensors file;
mlx_lm.generate --prompt-cache-file reads it, and mlxgo reads mlx_lm's).
'mlxgo generate --prompt-cache-file FILE --prompt TEXT' then continues the
cached prompt without running it again.

With a chat template, --prompt becomes a user message left open (the template
rendered with continue_final_message, no generation prompt), so that the
prompt given to generate continues that message; without one it is encoded as
it is. --prompt - reads stdin (one trailing newline dropped). The file's
metadata records --model as given and the tokenizer options, as mlx_lm's.

--kv-cache, --max-kv-size, --kv-bits, --kv-group-size and
--quantized-kv-start choose the cache saved, as for generate: mlx_lm's kinds
in its format, and --kv-cache turbo[:k<K>v<V>] as mlxgo's TurboQuantKVCache
(documented in package promptcache; mlx_lm cannot read it). mlx_lm's
--eos-token, --adapter-path and --trust-remote-code have no counterpart.

Examples:
  mlxgo cache-prompt --model smollm2-mlx --prompt "$(cat manual.txt)" --prompt-cache-file manual.safetensors
  mlxgo generate --prompt-cache-file manual.safetensors --prompt "How do I reset it?"
  mlxgo cache-prompt --model conformance/testdata/models/optiq-f32 --prompt-ids 1,2,3 --prompt-cache-file c.safetensors --backend cpu

Flags:
`

type cachePromptFlags struct {
	model, prompt, promptIDs, file string
	backend, precision             string
	prefillStep                    int
	ids                            []int32
	modelArg                       string // --model as given, for the metadata
	offline                        bool   // --offline: never download --model
	kvCacheFlags
}

func parseCachePromptFlags(args []string, stdout io.Writer) (*cachePromptFlags, error) {
	f := &cachePromptFlags{}
	fs := flag.NewFlagSet("cache-prompt", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&f.model, "model", "", "model directory or Hugging Face repo id org/name (downloaded into the Hugging Face cache when not there); required")
	registerOffline(fs, &f.offline)
	fs.StringVar(&f.prompt, "prompt", "", "prompt text (- reads stdin); a user message left open when the model has a chat template")
	fs.StringVar(&f.promptIDs, "prompt-ids", "", "prompt token ids, comma-separated (e.g. 1,2,3), instead of --prompt")
	fs.StringVar(&f.file, "prompt-cache-file", "", "the file to save the prompt cache in (safetensors); required")
	fs.IntVar(&f.prefillStep, "prefill-step", 2048, "prompt tokens per prefill chunk (>= 1)")
	fs.StringVar(&f.backend, "backend", defaultBackend(), "backend: "+strings.Join(backend.Names(), " or "))
	fs.StringVar(&f.precision, "precision", "reference", "arithmetic: reference, high or fast (cpu only), as for generate")
	f.registerKV(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, cachePromptUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var err error
	switch {
	case fs.NArg() > 0:
		err = usagef("unexpected argument %q (flags start with --; quote a prompt: --prompt \"...\")", fs.Arg(0))
	case f.model == "":
		err = usagef("--model is required (a model directory or a Hugging Face repo id, org/name)")
	case f.file == "":
		err = usagef("--prompt-cache-file is required: the file to save the cache in")
	case set["prompt"] == set["prompt-ids"]:
		err = usagef("give exactly one of --prompt TEXT and --prompt-ids IDS")
	case set["prompt-ids"] && f.promptIDs == "":
		err = usagef("--prompt-ids is empty: want comma-separated token ids, e.g. 1,2,3")
	case f.prefillStep < 1:
		err = usagef("--prefill-step %d: want >= 1", f.prefillStep)
	case kvErr(&f.kvCacheFlags) != nil:
		err = kvErr(&f.kvCacheFlags)
	}
	if err != nil {
		return nil, err
	}
	sf := sampleFlags{model: f.model, backend: f.backend, precision: f.precision, maxTokens: 1, minTokensToKeep: 1, repContext: 1, prefillStep: f.prefillStep}
	if err := sf.check(); err != nil {
		return nil, err
	}
	if set["prompt-ids"] {
		if f.ids, err = parseIDs(f.promptIDs); err != nil {
			return nil, err
		}
	}
	f.modelArg = f.model
	if f.model, err = resolveModel(f.model, f.offline); err != nil {
		return nil, err
	}
	return f, nil
}

func cmdCachePrompt(args []string, stdout, stderr io.Writer) int {
	return runCommand("cache-prompt", args, stdout, stderr, parseCachePromptFlags, runCachePrompt)
}

// tokenizerConfigMeta is the metadata "tokenizer_config" mlx_lm.cache_prompt
// writes without --eos-token: json.dumps({"trust_remote_code": False}).
const tokenizerConfigMeta = `{"trust_remote_code": false}`

func runCachePrompt(f *cachePromptFlags, stdout, stderr io.Writer) error {
	if f.ids == nil {
		cfg, err := checkpoint.LoadConfig(f.model)
		if err != nil {
			return fmt.Errorf("--model %s: %w", f.model, err)
		}
		tm, err := openText(f.model, cfg, false, false, false, "", io.Discard)
		if err != nil {
			return err
		}
		prompt, err := readPrompt(f.prompt)
		if err != nil {
			return err
		}
		msgs := []tokenizer.Message{{Role: "user", Content: prompt}}
		if tm.Template {
			text, err := tm.RenderContinue(msgs)
			if err != nil {
				return err
			}
			f.ids = tm.Tok.EncodeSpecial(text, false)
		} else {
			f.ids = tm.Tok.Encode(prompt)
		}
		if len(f.ids) == 0 {
			return usagef("--prompt encodes to no tokens: give some text")
		}
	}
	sf := sampleFlags{model: f.model, backend: f.backend, precision: f.precision}
	b, m, err := openModel(&sf, stdout, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	defer b.Do(func() error { return m.Close() })
	if err := checkVocab(f.ids, m, f.model); err != nil {
		return err
	}
	view, err := m.WithCache(f.cacheOptions())
	if err != nil {
		return usagef("%s: %v", kvDescription(f.cacheOptions()), err)
	}
	s, err := generate.NewSession[nn.KVCache](view)
	if err != nil {
		return err
	}
	defer s.Release()
	start := time.Now()
	if err := s.Append(f.ids, f.prefillStep); err != nil {
		return err
	}
	var pc *promptcache.File
	err = b.Do(func() (err error) {
		pc, err = promptcache.FromCaches(b, s.Caches(), map[string]string{"model": f.modelArg, "tokenizer_config": tokenizerConfigMeta})
		return err
	})
	if err != nil {
		return err
	}
	d := time.Since(start)
	fmt.Fprintf(stdout, "processed %d tokens in %s (%.1f tok/s) | peak memory %s (backend)\n", len(f.ids), ms(d), float64(len(f.ids))/max(d.Seconds(), 1e-9), mb(b.Stats().PeakBytes))
	if err := pc.Write(f.file); err != nil {
		return fmt.Errorf("--prompt-cache-file: %w", err)
	}
	fmt.Fprintf(stdout, "saved the prompt cache (%d tokens) to %s\n", len(f.ids), f.file)
	slowNotes{}.print(b, stderr)
	return nil
}

// checkVocab fails when an id is outside the model's vocabulary.
func checkVocab(ids []int32, m *minicpm5.Model, dir string) error {
	v := m.Config().VocabSize
	for i, id := range ids {
		if int(id) >= v {
			return usagef("prompt token %d (at %d) is out of the vocabulary (vocab_size %d in %s/config.json)", id, i, v, dir)
		}
	}
	return nil
}

// readCache reads --prompt-cache-file; without --model, the model is the
// one its metadata names.
func (f *generateFlags) readCache() error {
	pc, err := promptcache.Read(f.cacheFile)
	if err != nil {
		return usagef("--prompt-cache-file: %v", err)
	}
	f.cache = pc
	if f.model == "" {
		if f.model = pc.Metadata["model"]; f.model == "" {
			return usagef("--model is required: %s's metadata names no model", f.cacheFile)
		}
	}
	return nil
}

// sameModel fails, as mlx_lm.generate does, when --model is not the model
// the prompt cache was made with (its metadata "model"); a path naming the
// same directory another way is the same model.
func sameModel(given, dir string, pc *promptcache.File, file string) error {
	made := pc.Metadata["model"]
	if made == "" || made == given {
		return nil
	}
	if other, err := cachedModel(made); err == nil {
		a, errA := os.Stat(dir)
		b, errB := os.Stat(other)
		if errA == nil && errB == nil && os.SameFile(a, b) {
			return nil
		}
	}
	return usagef("--model %s is not the model the prompt cache %s was made with (%s)", given, file, made)
}

// resumeCache uploads a prompt cache after checking it fits m, and returns
// the session holding it.
func resumeCache(m *minicpm5.Model, pc *promptcache.File, file string, stdout io.Writer) (*generate.Session[nn.KVCache], error) {
	dts, err := m.CacheDTypes()
	if err != nil {
		return nil, err
	}
	if err := pc.Check(promptcache.ModelShape(m.Config(), dts)); err != nil {
		return nil, fmt.Errorf("--prompt-cache-file %s does not fit the model: %w", file, err)
	}
	b := m.Backend()
	var caches []nn.KVCache
	err = b.Do(func() (err error) {
		defer backend.Recover(&err)
		caches, err = pc.Caches(b)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("--prompt-cache-file %s: %w", file, err)
	}
	s, err := generate.ResumeSession(m, caches, nil)
	if err != nil {
		b.Do(func() error {
			for _, c := range caches {
				c.Release()
			}
			return nil
		})
		return nil, err
	}
	fmt.Fprintf(stdout, "prompt cache %s: %d tokens\n", file, s.Len())
	return s, nil
}

// renderPrompt encodes a --prompt conversation: the whole rendering, or,
// after a prompt cache, the rendering from the start of the user message's
// content on (mlx_lm.generate's suffix after a cached prefix).
func renderPrompt(tm *chat.Text, msgs []tokenizer.Message, cached bool) ([]int32, error) {
	if !cached || !tm.Template {
		return tm.Render(msgs)
	}
	text, err := tm.RenderAfter(msgs)
	if err != nil {
		return nil, err
	}
	return tm.Tok.EncodeSpecial(text, false), nil
}
