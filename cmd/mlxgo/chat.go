package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/chat"
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
	kvCacheFlags
}

func parseChatFlags(args []string, stdout io.Writer) (*chatFlags, error) {
	f := &chatFlags{}
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f.register(fs, 256)
	f.registerKV(fs)
	f.registerKVDType(fs)
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
	f.setBackend(f.backend, f.precision)
	if f.think && f.noThink {
		return nil, usagef("--think and --no-think are mutually exclusive")
	}
	if err := kvErr(&f.kvCacheFlags); err != nil {
		return nil, err
	}
	var err error
	if f.model, err = resolveModel(f.model, f.offline); err != nil {
		return nil, err
	}
	return f, nil
}

func cmdChat(args []string, stdout, stderr io.Writer) int {
	return runCommand("chat", args, stdout, stderr, parseChatFlags, func(f *chatFlags, stdout, stderr io.Writer) error { return runChat(f, stdin, stdout, stderr) })
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
	if !tm.Template {
		return usagef("%s has no chat template, which mlxgo chat needs (use mlxgo generate --raw for plain text)", f.model)
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
	opts := f.options()
	opts.EOS = tm.EOS
	view, err := m.WithCache(f.cacheOptions())
	if err != nil {
		return usagef("%s: %v", kvDescription(f.cacheOptions()), err)
	}
	seq, err := generate.NewSession[nn.KVCache](view)
	if err != nil {
		return err
	}
	s := &session{m: m, tm: tm, opts: opts, system: f.system, seq: seq, slow: slowNotes{}, stderr: stderr}
	defer s.reset()
	fmt.Fprintln(stdout, "Type a message and press Enter; /reset starts a new conversation, /exit (or end of input) quits.")
	r := bufio.NewReader(in)
	tried, failed := 0, 0
	// done ends the conversation: an error when every message failed.
	done := func() error {
		if tried > 0 && failed == tried {
			return fmt.Errorf("every message of the conversation failed (%d)", tried)
		}
		return nil
	}
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
				return done()
			}
			continue
		case "/exit", "/quit":
			return done()
		case "/reset":
			s.reset()
			fmt.Fprintln(stdout, "(conversation reset)")
			continue
		}
		if cmd := strings.TrimSpace(text); strings.HasPrefix(cmd, "/") && !strings.ContainsAny(cmd, " \t") {
			// One word starting with "/" is a command, as in ollama.
			fmt.Fprintf(stderr, "mlxgo chat: unknown command %s (the commands are /reset, /exit and /quit)\n", cmd)
			if eof {
				return done()
			}
			continue
		}
		tried++
		if err := s.turn(text, stdout); err != nil {
			failed++
			fmt.Fprintf(stderr, "mlxgo chat: %v (the conversation is kept without this message; the cache was reset)\n", err)
		}
		if eof {
			return done()
		}
	}
}

// session is one conversation, whose KV cache lives across turns.
type session struct {
	m      *minicpm5.Model
	tm     *chat.Text
	opts   generate.Options // sampling; MaxTokens is the per-answer limit
	system string
	msgs   []tokenizer.Message // the turns so far, without the system message
	seq    *generate.Session[nn.KVCache]
	slow   slowNotes // slow paths already reported
	stderr io.Writer
}

// reset releases the cache and forgets the conversation.
func (s *session) reset() {
	s.seq.Release()
	s.msgs = nil
}

// turn answers one user message, printing the answer as it is generated,
// then the cache line and the statistics line.
func (s *session) turn(user string, w io.Writer) error {
	turns := append(slices.Clone(s.msgs), tokenizer.Message{Role: "user", Content: user})
	msgs := turns
	if s.system != "" {
		msgs = append([]tokenizer.Message{{Role: "system", Content: s.system}}, turns...)
	}
	ids, err := s.tm.Render(msgs)
	if err != nil {
		s.seq.Release()
		return err
	}
	if len(ids) == 0 {
		s.seq.Release()
		return errors.New("the conversation renders to no tokens")
	}
	vocab := s.m.Config().VocabSize
	for i, id := range ids {
		if int(id) >= vocab {
			s.seq.Release()
			return fmt.Errorf("the tokenizer gave token %d (at %d), out of the model's vocabulary (vocab_size %d)", id, i, vocab)
		}
	}
	// Keep the cached tokens the new rendering starts with; at least one
	// token must run through the model to give the next logits.
	cached := s.seq.Len()
	common := min(generate.CommonPrefix(s.seq.Tokens(), ids), max(len(ids)-1, 0))
	keep, err := s.seq.Reuse(ids)
	if err != nil {
		return err
	}
	var note string
	switch {
	case cached == 0:
		note = fmt.Sprintf("cache: new conversation, prefilled %d tokens", len(ids))
	case keep == cached:
		note = fmt.Sprintf("cache: reused %d tokens, prefilled %d new", keep, len(ids)-keep)
	case keep == 0 && common > 0:
		note = fmt.Sprintf("cache: reset (a rotating cache past its window cannot be cut back to the %d tokens the conversation shares with it), prefilled all %d tokens", common, len(ids))
	case keep == 0:
		note = fmt.Sprintf("cache: reset (the conversation's tokens do not extend the %d cached ones), prefilled all %d tokens", cached, len(ids))
	default:
		note = fmt.Sprintf("cache: the conversation's tokens leave the %d cached ones at token %d; cut the cache back to %d tokens, prefilled %d", cached, keep, keep, len(ids)-keep)
	}
	st := s.tm.Tok.NewStream(false)
	res, err := s.seq.Generate(ids[keep:], s.opts, func(t generate.Token) bool {
		io.WriteString(w, st.Push(t.ID))
		return true
	})
	io.WriteString(w, st.Flush())
	fmt.Fprintln(w)
	if err != nil {
		return err
	}
	s.msgs = append(turns, tokenizer.Message{Role: "assistant", Content: s.tm.Tok.Decode(res.Tokens)})
	fmt.Fprintf(w, "(%s)\n%s\n", note, statsLine(res))
	s.slow.print(s.m.Backend(), s.stderr)
	return nil
}
