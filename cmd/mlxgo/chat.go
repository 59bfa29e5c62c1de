package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tokenizer"
)

const chatUsage = `usage: mlxgo chat --model DIR|ORG/NAME [--system TEXT] [--think|--no-think] [flags]

An interactive multi-turn chat with a model, as mlx_lm.chat: each line you
type is a user message, and the answer is printed as it is generated. The
KV cache is kept between turns: each turn the whole conversation is rendered
with the chat template and only the tokens after the cached ones are run
through the model. When the rendering does not extend the cached tokens (a
template that rewrites earlier turns, or an answer that re-encodes
differently) the cache is cut back to the common prefix, or reset, and a
line says so.

Commands: /reset forgets the conversation (the --system message stays),
/exit quits, and so does end of input (Ctrl-D). After each answer a line
says what the cache reused, then the statistics line. Each answer stops at
an end-of-sequence token or after --max-tokens tokens.

Examples:
  mlxgo chat --model smollm2-mlx
  mlxgo chat --model HuggingFaceTB/SmolLM2-135M-Instruct --system "You are a pirate." --temp 0.7 --seed 3
  mlxgo chat --model minicpm5-dir --no-think --backend cpu
  printf 'Hi!\nWhat did I just say?\n' | mlxgo chat --model DIR --max-tokens 64

Flags:
`

// chatFlags are the parsed flags of mlxgo chat.
type chatFlags struct {
	sampleFlags
	system         string
	think, noThink bool
}

func parseChatFlags(args []string, stdout io.Writer) (*chatFlags, error) {
	f := &chatFlags{}
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f.register(fs, 256)
	fs.StringVar(&f.system, "system", "", "system message at the start of the conversation")
	fs.BoolVar(&f.think, "think", false, "set enable_thinking=true in the chat template (templates with that switch only)")
	fs.BoolVar(&f.noThink, "no-think", false, "set enable_thinking=false in the chat template (templates with that switch only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, chatUsage)
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
	if f.think && f.noThink {
		return nil, usagef("--think and --no-think are mutually exclusive")
	}
	var err error
	if f.model, err = resolveModel(f.model); err != nil {
		return nil, err
	}
	return f, nil
}

func cmdChat(args []string, stdout, stderr io.Writer) int {
	f, err := parseChatFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo chat: %v\nRun 'mlxgo chat --help' for the flags.\n", err)
		return 2
	}
	if err := runChat(f, stdin, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "mlxgo chat:", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

func runChat(f *chatFlags, in io.Reader, stdout, stderr io.Writer) error {
	cfg, err := checkpoint.LoadConfig(f.model)
	if err != nil {
		return fmt.Errorf("--model %s: %w", f.model, err)
	}
	tm, err := openText(f.model, cfg, false, f.think, f.noThink, f.system, stderr)
	if err != nil {
		return err
	}
	if !tm.template {
		return usagef("%s has no chat template, which mlxgo chat needs (use mlxgo generate --raw for plain text)", f.model)
	}
	stop, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		return err
	}
	defer stop()
	b, m, err := openModel(&f.sampleFlags, stdout)
	if err != nil {
		return err
	}
	defer b.Close()
	defer b.Do(func() error { return m.Close() })
	s := &session{m: m, tm: tm, opts: f.options(), system: f.system, slow: slowNotes{}, stderr: stderr}
	defer s.reset()
	fmt.Fprintln(stdout, "Type a message and press Enter; /reset starts a new conversation, /exit (or end of input) quits.")
	r := bufio.NewReader(in)
	for {
		fmt.Fprint(stdout, ">>> ")
		line, err := r.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading input: %w", err)
		}
		eof := err != nil
		text := strings.TrimRight(line, "\r\n")
		switch strings.TrimSpace(text) {
		case "":
			if eof {
				fmt.Fprintln(stdout)
				return nil
			}
			continue
		case "/exit", "/quit":
			return nil
		case "/reset":
			s.reset()
			fmt.Fprintln(stdout, "(conversation reset)")
			continue
		}
		if err := s.turn(text, stdout); err != nil {
			fmt.Fprintf(stderr, "mlxgo chat: %v (the conversation is kept without this message; the cache was reset)\n", err)
		}
		if eof {
			return nil
		}
	}
}

// session is one conversation, whose KV cache lives across turns.
type session struct {
	m      *minicpm5.Model
	tm     *textModel
	opts   generate.Options // sampling; MaxTokens is the per-answer limit
	system string
	msgs   []tokenizer.Message // the turns so far, without the system message
	cache  []*heldCache        // nil when empty
	cached []int32             // the tokens the cache holds
	slow   slowNotes           // slow paths already reported
	stderr io.Writer
}

// reset releases the cache and forgets the conversation.
func (s *session) reset() {
	s.dropCache()
	s.msgs = nil
}

func (s *session) dropCache() {
	if s.cache != nil {
		b := s.m.Backend()
		_ = b.Do(func() (err error) {
			defer backend.Recover(&err)
			for _, c := range s.cache {
				c.kv.Release()
			}
			return nil
		})
	}
	s.cache, s.cached = nil, nil
}

// turn answers one user message, printing the answer as it is generated,
// then the cache line and the statistics line.
func (s *session) turn(user string, w io.Writer) error {
	turns := append(slices.Clone(s.msgs), tokenizer.Message{Role: "user", Content: user})
	msgs := turns
	if s.system != "" {
		msgs = append([]tokenizer.Message{{Role: "system", Content: s.system}}, turns...)
	}
	ids, err := s.tm.render(msgs)
	if err != nil {
		s.dropCache()
		return err
	}
	if len(ids) == 0 {
		s.dropCache()
		return errors.New("the conversation renders to no tokens")
	}
	vocab := s.m.Config().VocabSize
	for i, id := range ids {
		if int(id) >= vocab {
			s.dropCache()
			return fmt.Errorf("the tokenizer gave token %d (at %d), out of the model's vocabulary (vocab_size %d)", id, i, vocab)
		}
	}
	// Keep the cached tokens the new rendering starts with; at least one
	// token must run through the model to give the next logits.
	keep := commonPrefix(s.cached, ids)
	keep = min(keep, len(ids)-1)
	note := ""
	switch {
	case len(s.cached) == 0:
		note = fmt.Sprintf("cache: new conversation, prefilled %d tokens", len(ids))
	case keep == len(s.cached):
		note = fmt.Sprintf("cache: reused %d tokens, prefilled %d new", keep, len(ids)-keep)
	case keep == 0:
		note = fmt.Sprintf("cache: reset (the conversation's tokens do not extend the %d cached ones), prefilled all %d tokens", len(s.cached), len(ids))
		s.dropCache()
	default:
		note = fmt.Sprintf("cache: the conversation's tokens leave the %d cached ones at token %d; cut the cache back to %d tokens, prefilled %d", len(s.cached), keep, keep, len(ids)-keep)
		for _, c := range s.cache {
			c.kv.Trim(c.kv.Offset() - keep)
		}
		s.cached = s.cached[:keep]
	}
	if s.cache == nil {
		for _, kv := range s.m.NewCache() {
			s.cache = append(s.cache, &heldCache{kv: kv})
		}
	}

	gen, res, err := s.generate(ids[keep:], w)
	if err != nil {
		s.dropCache()
		return err
	}
	seq := append(slices.Clone(ids), gen...)
	off := s.cache[0].kv.Offset()
	if off > len(seq) || off < len(ids) {
		s.dropCache()
		return fmt.Errorf("internal: the cache holds %d tokens after a turn of %d prompt and %d generated tokens", off, len(ids), len(gen))
	}
	s.cached = seq[:off]
	s.msgs = append(turns, tokenizer.Message{Role: "assistant", Content: s.tm.tok.Decode(res.Tokens)})
	fmt.Fprintf(w, "(%s)\n%s\n", note, statsLine(res))
	s.slow.print(s.m.Backend(), s.stderr)
	return nil
}

// generate runs suffix through the model after the cached tokens and
// streams the answer. It returns every generated token, a final
// end-of-sequence token included, and the result with Tokens without it.
//
// generate.Generate releases the caches it used when it returns, so the
// stop tokens and the length limit are handled here: the callback that
// stops generation first detaches the caches (see heldCache), and
// Generate's unlimited MaxTokens lets it see every token. Generate then
// has already appended the last token to the cache (it starts the next
// step before the callback runs), so the cache holds the prompt and every
// generated token.
func (s *session) generate(suffix []int32, w io.Writer) ([]int32, generate.Result, error) {
	opts := s.opts
	opts.MaxTokens, opts.EOS = -1, nil
	limit := s.opts.MaxTokens
	var gen []int32
	finish := ""
	st := s.tm.tok.NewStream(false)
	sm := &sessionModel{m: s.m, cache: s.cache}
	res, err := generate.Generate(sm, suffix, opts, func(t generate.Token) bool {
		gen = append(gen, t.ID)
		switch {
		case slices.Contains(s.tm.eos, t.ID):
			finish = generate.FinishStop
		default:
			io.WriteString(w, st.Push(t.ID))
			if len(gen) == limit {
				finish = generate.FinishLength
			}
		}
		if finish == "" {
			return true
		}
		for _, c := range s.cache {
			c.detached = true
		}
		return false
	})
	io.WriteString(w, st.Flush())
	fmt.Fprintln(w)
	if err != nil {
		return nil, res, err
	}
	if finish == "" {
		return nil, res, fmt.Errorf("internal: generation ended (%s) before a stop token or the length limit", res.FinishReason)
	}
	res.FinishReason = finish
	res.Tokens = gen
	if finish == generate.FinishStop {
		res.Tokens = gen[:len(gen)-1]
	}
	return gen, res, nil
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// heldCache is a layer's KV cache that outlives one generate.Generate call.
// Generate releases its caches' State (and calls Release where a cache has
// it) when it returns; heldCache has no Release method, and once detached its
// State is empty, so the arrays survive. It is attached while Generate runs,
// when State must return the arrays for Generate to keep them out of its
// scopes and to evaluate them.
type heldCache struct {
	kv       nn.KVCache
	detached bool
}

// State is the cache's arrays while attached, nil once detached.
func (c *heldCache) State() []backend.Array {
	if c.detached {
		return nil
	}
	return c.kv.State()
}

// sessionModel is the model with the session's caches: NewCache hands out
// the caches of the conversation so far (attached) instead of empty ones.
type sessionModel struct {
	m     *minicpm5.Model
	cache []*heldCache
}

func (s *sessionModel) Backend() backend.Backend { return s.m.Backend() }

func (s *sessionModel) NewCache() []*heldCache {
	for _, c := range s.cache {
		c.detached = false
	}
	return s.cache
}

func (s *sessionModel) Append(ids backend.Array, cache []*heldCache) error {
	return s.m.Append(ids, kvs(cache))
}

func (s *sessionModel) LastLogits(ids backend.Array, cache []*heldCache) (backend.Array, error) {
	return s.m.LastLogits(ids, kvs(cache))
}

func kvs(cache []*heldCache) []nn.KVCache {
	out := make([]nn.KVCache, len(cache))
	for i, c := range cache {
		out[i] = c.kv
	}
	return out
}
