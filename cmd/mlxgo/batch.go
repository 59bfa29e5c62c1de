package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/tokenizer"
)

const batchUsage = `usage: mlxgo batch --model DIR|ORG/NAME --prompts FILE.jsonl [flags]

Generates answers for many prompts at once: continuous batching with the
semantics of mlx_lm's BatchGenerator (mlx_lm itself has no batch command).
Up to --max-batch sequences decode together, one token each per step; the
other prompts wait in a queue and join as sequences finish, so any number
of prompts can be given (up to --max-prompts). Prompts of different lengths
are prefilled together, --prefill-batch at a time.

KV caches: with --batch-cache shared the rows share one left-padded full
cache (mlx_lm's BatchKVCache, copied whole as rows finish and join); with
--batch-cache per-row each row keeps a full cache of its own, moved instead
of copied; auto (the default) is per-row on the cpu backend and shared on
mlx. With --max-kv-size N the rows share one rotating window of N slots
(mlx_lm's BatchRotatingKVCache, which keeps no first tokens). With
--kv-bits or --kv-cache quantized|turbo[:k<K>v<V>] each row has a cache of
that kind of its own and computes what it computes alone (mlx_lm has no
batch form of its quantized cache).

Each non-blank line of FILE.jsonl (--prompts - reads stdin) is a JSON object
with exactly one of
  "prompt": "text"            a user message in the chat template (after
                              --system, unless --raw), as mlxgo generate
  "messages": [{"role": "system"|"user"|"assistant", "content": "..."}, ...]
                              a conversation in the chat template
  "prompt_ids": [1, 2, 3]     token ids, no template
and optionally "id" (any JSON value, echoed back) and per-line settings
that override the flags: "max_tokens", "temperature" (or "temp"), "top_p",
"top_k", "min_p", "repetition_penalty", "seed". A line with a "seed" samples
from a random state of its own, so its answer does not depend on the other
lines (it equals mlxgo generate's with that seed); lines without one share
the --seed state, drawing in batch order, as mlx_lm does. Unknown fields are
errors, so a typo cannot pass silently.

Stdout gets one JSON object per input line, in input order (each as soon as
it and every line before it are done):
  {"index": 0, "id": ..., "text": "...", "token_ids": [...],
   "finish_reason": "stop"|"length", "prompt_tokens": 12, "generation_tokens": 9}
"text" (absent without a tokenizer) and "token_ids" exclude the stop token;
"generation_tokens" counts it, as mlx_lm does. Stderr gets the load line,
a progress line per finished sequence and a closing statistics line with
the aggregate generation rate (tokens of all sequences per second).

Examples:
  mlxgo batch --model smollm2-mlx --prompts questions.jsonl > answers.jsonl
  (echo '{"prompt": "Name a colour."}'; echo '{"prompt": "Name a fruit.", "temperature": 0.7, "seed": 1}') | mlxgo batch --model DIR --prompts -
  mlxgo batch --model DIR --prompts in.jsonl --max-batch 16 --max-tokens 64 --backend cpu
  mlxgo batch --model conformance/testdata/models/optiq-f32 --prompts ids.jsonl   # lines {"prompt_ids": [1, 2, 3]}
  mlxgo batch --model smollm2-mlx --prompts in.jsonl --kv-cache turbo
  mlxgo batch --model smollm2-mlx --prompts in.jsonl --batch-cache shared   # mlx_lm's layout on the cpu backend too

Flags:
`

// maxBatchLine bounds one line of the prompts file.
const maxBatchLine = 16 << 20

// batchFlags are the parsed flags of mlxgo batch.
type batchFlags struct {
	sampleFlags
	prompts, system        string
	raw, think, noThink    bool
	maxBatch, prefillBatch int
	maxPrompts             int
	kvCacheFlags
}

func parseBatchFlags(args []string, stdout io.Writer) (*batchFlags, error) {
	f := &batchFlags{}
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f.register(fs, 256)
	f.registerKV(fs)
	f.registerKVDType(fs)
	f.registerBatchCache(fs)
	fs.StringVar(&f.prompts, "prompts", "", "JSON Lines file of prompts, one object per line (- reads stdin); required")
	fs.IntVar(&f.maxBatch, "max-batch", 8, "most sequences decoding at once (>= 1); more prompts wait in a queue")
	fs.IntVar(&f.prefillBatch, "prefill-batch", 8, "most prompts prefilled at once (>= 1; at most --max-batch)")
	fs.IntVar(&f.maxPrompts, "max-prompts", 100000, "most prompts the file may hold (>= 1); more is an error")
	fs.StringVar(&f.system, "system", "", "system message before each \"prompt\" line's text (chat template only)")
	fs.BoolVar(&f.raw, "raw", false, "encode \"prompt\" lines as they are, without the chat template")
	fs.BoolVar(&f.think, "think", false, "set enable_thinking=true in the chat template")
	fs.BoolVar(&f.noThink, "no-think", false, "set enable_thinking=false in the chat template")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, batchUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected argument %q (flags start with --)", fs.Arg(0))
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	f.setBackend(f.backend, f.precision)
	var err error
	switch {
	case f.prompts == "":
		err = usagef("--prompts FILE.jsonl is required (one JSON object per line; - reads stdin)")
	case f.maxBatch < 1:
		err = usagef("--max-batch %d: want >= 1", f.maxBatch)
	case f.prefillBatch < 1:
		err = usagef("--prefill-batch %d: want >= 1", f.prefillBatch)
	case f.maxPrompts < 1:
		err = usagef("--max-prompts %d: want >= 1", f.maxPrompts)
	case f.think && f.noThink:
		err = usagef("--think and --no-think are mutually exclusive")
	case f.raw && (f.think || f.noThink || f.system != ""):
		err = usagef("--raw skips the chat template, so --system, --think and --no-think cannot apply")
	case kvErr(&f.kvCacheFlags) != nil:
		err = kvErr(&f.kvCacheFlags)
	}
	if err == nil {
		_, err = f.batchOptions(f.backend)
	}
	if err != nil {
		return nil, err
	}
	if f.model, err = resolveModel(f.model, f.offline); err != nil {
		return nil, err
	}
	return f, nil
}

func cmdBatch(args []string, stdout, stderr io.Writer) int {
	return runCommand("batch", args, stdout, stderr, parseBatchFlags, runBatch)
}

// batchLine is one line of the prompts file.
type batchLine struct {
	ID       json.RawMessage `json:"id"`
	Prompt   *string         `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	PromptIDs         []int32  `json:"prompt_ids"`
	MaxTokens         *int     `json:"max_tokens"`
	Temperature       *float64 `json:"temperature"`
	Temp              *float64 `json:"temp"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	Seed              *uint64  `json:"seed"`

	line int // 1-based line number in the file
}

// readBatchLines parses the prompts file: one object per non-blank line.
func readBatchLines(name string, r io.Reader, limit int) ([]*batchLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxBatchLine)
	var out []*batchLine
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		if len(out) == limit {
			return nil, usagef("%s: more than %d prompts (line %d), over the configured limit --max-prompts %d", name, limit, n, limit)
		}
		l := &batchLine{line: n}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(l); err != nil {
			return nil, usagef("%s line %d: %v (want one JSON object per line, see --help)", name, n, err)
		}
		if dec.More() {
			return nil, usagef("%s line %d: more than one JSON value on the line", name, n)
		}
		if err := l.check(); err != nil {
			return nil, usagef("%s line %d: %v", name, n, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, usagef("%s line %d: longer than %d bytes", name, n+1, maxBatchLine)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, usagef("%s: no prompts (want one JSON object per line, see --help)", name)
	}
	return out, nil
}

func (l *batchLine) check() error {
	kinds := 0
	if l.Prompt != nil {
		kinds++
	}
	if l.Messages != nil {
		kinds++
	}
	if l.PromptIDs != nil {
		kinds++
	}
	switch {
	case kinds != 1:
		return errors.New(`want exactly one of "prompt", "messages" and "prompt_ids"`)
	case l.Prompt != nil && *l.Prompt == "":
		return errors.New(`"prompt" is empty`)
	case l.Messages != nil && len(l.Messages) == 0:
		return errors.New(`"messages" is empty`)
	case l.PromptIDs != nil && len(l.PromptIDs) == 0:
		return errors.New(`"prompt_ids" is empty`)
	case l.Temperature != nil && l.Temp != nil:
		return errors.New(`"temperature" and "temp" are the same setting: give one`)
	case l.MaxTokens != nil && *l.MaxTokens < 1:
		return fmt.Errorf(`"max_tokens" is %d, want >= 1`, *l.MaxTokens)
	case l.Temperature != nil && *l.Temperature < 0:
		return fmt.Errorf(`"temperature" is %v, want >= 0 (0: greedy)`, *l.Temperature)
	case l.Temp != nil && *l.Temp < 0:
		return fmt.Errorf(`"temp" is %v, want >= 0 (0: greedy)`, *l.Temp)
	case l.TopP != nil && !(*l.TopP >= 0 && *l.TopP <= 1):
		return fmt.Errorf(`"top_p" is %v, want 0 <= p <= 1`, *l.TopP)
	case l.TopK != nil && *l.TopK < 0:
		return fmt.Errorf(`"top_k" is %d, want >= 0`, *l.TopK)
	case l.MinP != nil && !(*l.MinP >= 0 && *l.MinP <= 1):
		return fmt.Errorf(`"min_p" is %v, want 0 <= p <= 1`, *l.MinP)
	case l.RepetitionPenalty != nil && *l.RepetitionPenalty < 0:
		return fmt.Errorf(`"repetition_penalty" is %v, want >= 0 (0: off)`, *l.RepetitionPenalty)
	}
	for i, m := range l.Messages {
		if m.Role == "" {
			return fmt.Errorf(`messages[%d] has no "role"`, i)
		}
	}
	for i, id := range l.PromptIDs {
		if id < 0 {
			return fmt.Errorf(`prompt_ids[%d] is %d, want a token id >= 0`, i, id)
		}
	}
	return nil
}

// sequence returns the line's generation settings over the flags'.
func (l *batchLine) sequence(f *batchFlags) generate.SequenceOptions {
	so := f.options().Sampler
	po := f.options().Processors
	o := generate.SequenceOptions{Sampler: &so, Processors: &po, Seed: l.Seed}
	if l.MaxTokens != nil {
		o.MaxTokens = *l.MaxTokens
	}
	if l.Temperature != nil {
		so.Temp = *l.Temperature
	}
	if l.Temp != nil {
		so.Temp = *l.Temp
	}
	if l.TopP != nil {
		so.TopP = *l.TopP
	}
	if l.TopK != nil {
		so.TopK = *l.TopK
	}
	if l.MinP != nil {
		so.MinP = *l.MinP
	}
	if l.RepetitionPenalty != nil {
		po.RepetitionPenalty = *l.RepetitionPenalty
	}
	return o
}

// batchResult is one line of the output.
type batchResult struct {
	Index            int             `json:"index"`
	ID               json.RawMessage `json:"id,omitempty"`
	Text             *string         `json:"text,omitempty"`
	TokenIDs         []int32         `json:"token_ids"`
	FinishReason     string          `json:"finish_reason"`
	PromptTokens     int             `json:"prompt_tokens"`
	GenerationTokens int             `json:"generation_tokens"`
}

func runBatch(f *batchFlags, stdout, stderr io.Writer) error {
	var in io.Reader = stdin
	if f.prompts != "-" {
		file, _, err := safefile.Open(f.prompts) // a device or directory is refused (stdin is --prompts -)
		if err != nil {
			return usagef("--prompts: %v", err)
		}
		defer file.Close()
		in = file
	}
	lines, err := readBatchLines(f.prompts, in, f.maxPrompts)
	if err != nil {
		return err
	}
	cfg, err := checkpoint.LoadConfig(f.model)
	if err != nil {
		return fmt.Errorf("--model %s: %w", f.model, err)
	}
	text := false
	for _, l := range lines {
		text = text || l.PromptIDs == nil
	}
	var tm *batchText
	if text || hasTokenizer(f.model) {
		if tm, err = openBatchText(f, cfg, stderr); err != nil {
			return err
		}
	}
	prompts := make([][]int32, len(lines))
	for i, l := range lines {
		if prompts[i], err = l.ids(tm, f.system); err != nil {
			return fmt.Errorf("%s line %d: %w", f.prompts, l.line, err)
		}
		for j, id := range prompts[i] {
			if int(id) >= cfg.VocabSize {
				return usagef("%s line %d: token %d is %d, out of the vocabulary (vocab_size %d in %s/config.json)", f.prompts, l.line, j, id, cfg.VocabSize, f.model)
			}
		}
	}
	seqs := make([]generate.SequenceOptions, len(lines))
	for i, l := range lines {
		seqs[i] = l.sequence(f)
		if _, err := generate.NewSampler(*seqs[i].Sampler); err != nil {
			return usagef("%s line %d: %v", f.prompts, l.line, err)
		}
		if so := seqs[i].Sampler; so.Temp > 0 && so.TopK >= cfg.VocabSize {
			return usagef("%s line %d: top_k %d, want fewer than the vocabulary's %d tokens (vocab_size in %s/config.json)", f.prompts, l.line, so.TopK, cfg.VocabSize, f.model)
		}
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	b, m, err := openModel(&f.sampleFlags, stderr, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	defer b.Do(func() error { return m.Close() })

	opts := generate.BatchOptions{
		MaxTokens:           f.maxTokens,
		Sampler:             f.options().Sampler,
		Processors:          f.options().Processors,
		Seed:                f.seed,
		CompletionBatchSize: f.maxBatch,
		PrefillBatchSize:    min(f.prefillBatch, f.maxBatch),
		PrefillStepSize:     f.prefillStep,
		// The output has no log-probabilities: the rows are read into the
		// generator's own buffer, not copied out every step.
		NoLogprobs: true,
	}
	if tm != nil {
		opts.StopTokens = tm.eos
	} else {
		for _, e := range cfg.EOSTokenIDs {
			opts.StopTokens = append(opts.StopTokens, int32(e))
		}
	}
	co, err := f.batchOptions(f.backend)
	if err != nil {
		return err
	}
	view, err := m.WithCache(co)
	if err == nil {
		err = view.CheckBatch()
	}
	if err != nil {
		return usagef("%s: %v", kvDescription(co), err)
	}
	g, err := generate.NewBatchGenerator(view, opts)
	if err != nil {
		return err
	}
	defer g.Close()
	index := map[int]int{}
	for i, l := range lines {
		uids, err := g.Insert(prompts[i:i+1], seqs[i:i+1])
		if err != nil {
			return usagef("%s line %d: %v", f.prompts, l.line, err)
		}
		index[uids[0]] = i
	}

	results := make([]*batchResult, len(lines))
	tokens := make([][]int32, len(lines))
	next, done := 0, 0
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	start := time.Now()
	for {
		toks, err := g.NextGenerated()
		if err != nil {
			return err
		}
		if len(toks) == 0 {
			break
		}
		for _, t := range toks {
			i := index[t.UID]
			tokens[i] = append(tokens[i], t.Token)
			if t.FinishReason == "" {
				continue
			}
			r := &batchResult{Index: i, ID: lines[i].ID, FinishReason: t.FinishReason,
				PromptTokens: len(prompts[i]), GenerationTokens: len(tokens[i]), TokenIDs: tokens[i]}
			if t.FinishReason == generate.FinishStop {
				r.TokenIDs = tokens[i][:len(tokens[i])-1]
			}
			if tm != nil {
				s := tm.tok.Decode(r.TokenIDs)
				r.Text = &s
			}
			results[i] = r
			done++
			fmt.Fprintf(stderr, "[%d/%d] line %d: %d tokens, %s (%.1f s)\n", done, len(lines), lines[i].line, r.GenerationTokens, r.FinishReason, time.Since(start).Seconds())
		}
		for next < len(results) && results[next] != nil {
			if err := enc.Encode(results[next]); err != nil {
				return err
			}
			results[next] = nil // printed; let it go
			next++
		}
	}
	if next != len(lines) {
		return fmt.Errorf("the generator finished with %d of %d prompts answered", next, len(lines))
	}
	s := g.Stats()
	fmt.Fprintf(stderr, "batch: %d prompts | prompt: %d tokens, %.1f tok/s | generation: %d tokens, %.1f tok/s aggregate | peak memory %s (backend)\n",
		len(lines), s.PromptTokens, s.PromptTPS(), s.GenerationTokens, s.GenerationTPS(), mb(s.PeakBytes))
	slowNotes{}.print(b, stderr)
	return nil
}

// batchText is what batch needs of the model's text side (openText's).
type batchText struct {
	tok      *tokenizer.Tokenizer
	eos      []int32
	template bool
	render   func([]tokenizer.Message) ([]int32, error)
}

// openBatchText opens the text side with generate's rules (openText).
func openBatchText(f *batchFlags, cfg *checkpoint.Config, stderr io.Writer) (*batchText, error) {
	tm, err := openText(f.model, cfg, f.raw, f.think, f.noThink, f.system, stderr)
	if err != nil {
		return nil, err
	}
	return &batchText{tok: tm.Tok, eos: tm.EOS, template: tm.Template, render: tm.Render}, nil
}

// hasTokenizer reports whether dir has a tokenizer.json.
func hasTokenizer(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	return err == nil
}

// ids returns the line's prompt tokens.
func (l *batchLine) ids(tm *batchText, system string) ([]int32, error) {
	if l.PromptIDs != nil {
		return l.PromptIDs, nil
	}
	var msgs []tokenizer.Message
	if l.Prompt != nil {
		if system != "" {
			msgs = append(msgs, tokenizer.Message{Role: "system", Content: system})
		}
		msgs = append(msgs, tokenizer.Message{Role: "user", Content: *l.Prompt})
	} else {
		if !tm.template {
			return nil, errors.New(`"messages" need the chat template (not with --raw, nor without a chat_template)`)
		}
		for _, m := range l.Messages {
			msgs = append(msgs, tokenizer.Message{Role: m.Role, Content: m.Content})
		}
	}
	ids, err := tm.render(msgs)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("the prompt encodes to no tokens")
	}
	return ids, nil
}
