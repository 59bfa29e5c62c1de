package generate

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/internal/procmem"
	"github.com/mlxgo/mlxgo/tensor"
)

// Cache is what generation needs from a layer's KV cache (nn.KVCache has
// it): the arrays it holds (State), to evaluate after each prefill chunk and
// to keep out of each step's scope; the number of tokens it holds (Offset);
// Trim, to forget the last tokens (a Session's Trim and prefix reuse); and
// Release.
type Cache interface {
	State() []backend.Array
	Offset() int
	Trim(n int) int
	Release()
}

// Model is what Generate needs from a language model. C is the model's cache
// type (nn.KVCache); Go infers it from the model's methods, so callers write
// Generate(m, ...).
type Model[C Cache] interface {
	// Backend is the backend the model's arrays live on.
	Backend() backend.Backend
	// NewCache returns an empty cache for one sequence, one entry per layer.
	NewCache() []C
	// Append runs ids (int32, shape [1, L]) through the model, appending
	// them to cache, without computing logits: a prefill chunk
	// (ForwardOptions{NoLogits: true} in models/minicpm5).
	Append(ids backend.Array, cache []C) error
	// LastLogits runs ids (int32 or uint32, shape [1, L]) through the model,
	// appending them to cache, and returns the logits of the last position,
	// [1, V] or [1, 1, V], in the model's dtype (BF16, F16 or F32).
	LastLogits(ids backend.Array, cache []C) (backend.Array, error)
	// Both must leave ids alone and may open scopes of their own; arrays
	// they return, and the caches' new arrays, belong to the scope
	// Generate has open (Generate keeps the caches' State out of it).
}

// PromptContext selects which prompt tokens the logits processors see.
type PromptContext int

const (
	// FullPrompt: the processors' context starts with the whole prompt,
	// as in the pinned mlx_lm 0.32.2 generate_step (its prefill loop adds
	// each chunk to the context) and in BatchGenerator.
	FullPrompt PromptContext = iota
	// LastPromptToken: the context starts with the last prompt token only,
	// the generate_step of mlx_lm 0.32.0 and earlier (mlx_lm/generate.py), whose
	// prefill chunks never reached the context, so the repetition penalty
	// saw nothing of the prompt but its last token.
	LastPromptToken
)

// Finish reasons.
const (
	FinishStop     = "stop"     // an EOS token was generated
	FinishLength   = "length"   // MaxTokens tokens were generated
	FinishCallback = "callback" // the token callback returned false
)

// Options configure Generate. The zero value is greedy decoding of up to 256
// tokens with no stop tokens, mlx_lm generate_step's defaults.
type Options struct {
	// MaxTokens is the most tokens to generate: 0 means 256, a negative
	// value means no limit (mlx_lm's -1).
	MaxTokens int
	// PrefillStepSize is the prompt chunk length; 0 means 2048.
	PrefillStepSize int
	// EOS lists the stop tokens (the tokenizer's eos_token_ids).
	EOS []int32
	// Sampler selects greedy or sampled decoding.
	Sampler SamplerOptions
	// Processors are the logits processors (none by default).
	Processors ProcessorOptions
	// PromptContext selects the processors' view of the prompt.
	PromptContext PromptContext
}

// Token is one generated token as the callback sees it.
type Token struct {
	ID    int32 // the token id
	Index int   // 0 for the first generated token
	// FromDraft: a draft token the target accepted (speculative decoding,
	// mlx_lm's from_draft); always false for Generate.
	FromDraft bool
}

// Stats are mlx_lm stream_generate's measurements plus process memory.
type Stats struct {
	PromptTokens int // len(prompt)
	// PromptTPS is PromptTokens over TimeToFirstToken.
	PromptTPS float64
	// GenerationTokens counts generated tokens, a final EOS included (as
	// mlx_lm's generation_tokens).
	GenerationTokens int
	// GenerationTPS is GenerationTokens over the time from the first token
	// to the last (mlx_lm's generation_tps; 0 when that time is 0).
	GenerationTPS float64
	// TimeToFirstToken runs from the call to the first sampled token: cache
	// creation, prefill and the first decode step.
	TimeToFirstToken time.Duration
	// PeakBytes is the backend's peak live bytes (Stats().PeakBytes).
	PeakBytes int64
	// PeakRSSBytes is the process's peak resident set (VmHWM in
	// /proc/self/status); 0 where that is unavailable.
	PeakRSSBytes int64
}

// Result is what Generate returns.
type Result struct {
	// Tokens are the generated tokens, a final EOS excluded (as the text of
	// mlx_lm's responses excludes it).
	Tokens []int32
	// FinishReason is FinishStop, FinishLength or FinishCallback.
	FinishReason string
	Stats        Stats
}

// Generate runs prompt through m and generates tokens as mlx_lm's
// generate_step and stream_generate do, calling onToken (when not nil) with
// each token as soon as it is known; onToken returning false stops
// generation. See the package doc for the loop, its numerics and its memory.
//
// Generate is a fresh [Session] released on return, except that it never
// runs the last token it returns through the model (nothing would use it);
// a Session's Generate does, so that the session holds every token.
//
// The whole loop runs on the backend's thread, in one Backend.Do, as
// generate_step runs on Python's one thread: a backend that does its work on
// a thread of its own (mlx) then pays no hand-over between threads per
// token. onToken runs there too: it may use the backend, but it must not
// wait for another goroutine that does (that goroutine's Do would wait for
// Generate), nor call runtime.Goexit (t.Fatal), which would end the
// backend's thread. A panic in onToken stops generation, releases the
// caches and reaches the caller as Backend.Do reports it.
func Generate[C Cache](m Model[C], prompt []int32, opts Options, onToken func(Token) bool) (Result, error) {
	s, err := NewSession(m)
	if err != nil {
		return Result{}, err
	}
	defer s.Release()
	return s.generate(prompt, opts, onToken, false)
}

type generator[C Cache] struct {
	m       Model[C]
	b       backend.Backend
	prompt  []int32
	opts    Options
	sampler *Sampler
	cache   []C
	context []int32      // the processors' token history
	device  bool         // greedy without processors: argmax on the backend
	dt      tensor.DType // the logits' dtype (the host rows are float32 widenings of it)
	row     []float32    // the host row a backend.HostReader fills, reused every step
	// complete: run the last token returned (or the final EOS) through the
	// model too, so that the caches hold every token (a Session).
	complete bool
	// fed counts the generated tokens run through the model: always the
	// first fed of the tokens resolved, in order.
	fed int
	// held are the last two scheduled outputs, the only ones that can be
	// unresolved (current and next step); close releases them again, which
	// the Backend contract allows for arrays already released.
	held [2]backend.Array
}

func newGenerator[C Cache](m Model[C], prompt []int32, opts Options) (*generator[C], error) {
	if len(prompt) == 0 {
		return nil, errors.New("generate: empty prompt, want at least one token")
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = 256
	}
	if opts.PrefillStepSize == 0 {
		opts.PrefillStepSize = DefaultPrefillStep
	}
	if opts.PrefillStepSize < 0 {
		return nil, fmt.Errorf("generate: prefill step size is %d, want a positive number (0 = 2048)", opts.PrefillStepSize)
	}
	if opts.PromptContext != FullPrompt && opts.PromptContext != LastPromptToken {
		return nil, fmt.Errorf("generate: unknown prompt context %d", opts.PromptContext)
	}
	if err := opts.Processors.validate(); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	s, err := NewSampler(opts.Sampler)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	g := &generator[C]{m: m, b: m.Backend(), prompt: prompt, opts: opts, sampler: s}
	g.device = s.Greedy() && !opts.Processors.Enabled()
	return g, nil
}

// close releases the outstanding step outputs, on the backend's thread.
func (g *generator[C]) close() {
	_ = g.b.Do(func() (err error) {
		defer backend.Recover(&err)
		g.b.Release(g.held[:]...)
		return nil
	})
	g.held = [2]backend.Array{}
}

func (g *generator[C]) states() []backend.Array { return states(g.cache) }

// do runs fn on the backend's thread inside a scope, turning an op's
// *backend.OpError panic into an error. fn keeps what must outlive the scope.
func (g *generator[C]) do(fn func(sc backend.Scope) error) error { return do(g.b, fn) }

func (g *generator[C]) ids(tokens []int32) backend.Array { return idsArray(g.b, tokens) }

// schedule builds one decode step on ids (the processors having seen the
// context) and starts its evaluation. It returns the argmax token (device
// greedy) or the logprobs row [1, V], kept out of the step's scope.
func (g *generator[C]) schedule(ids func() backend.Array) (out backend.Array, err error) {
	err = g.do(func(sc backend.Scope) error {
		logits, err := g.m.LastLogits(ids(), g.cache)
		if err != nil {
			return err
		}
		sc.Keep(g.states()...)
		s := logits.Shape()
		if len(s) == 3 && s[0] == 1 && s[1] == 1 {
			logits = g.b.Reshape(logits, 1, s[2])
		} else if len(s) != 2 || s[0] != 1 {
			return fmt.Errorf("model logits are %v %v, want [1, V] or [1, 1, V]", logits.DType(), s)
		}
		if rounder(logits.DType()) == nil {
			return fmt.Errorf("model logits are %v %v, want BF16, F16 or F32", logits.DType(), s)
		}
		if g.opts.Processors.Enabled() {
			if logits, err = g.process(logits); err != nil {
				return err
			}
		}
		lse := g.b.LogSumExp(logits, -1, true)
		out = g.b.Binary(backend.Subtract, logits, lse)
		g.dt = out.DType()
		if g.device {
			out = g.b.Argmax(out, -1, false)
		} else if _, read := g.b.(backend.HostReader); !read {
			// The row goes to the host as float32 (exact), converted by
			// the backend's vector code, not an element at a time there.
			// (A HostReader converts it as it reads it, into g.row.)
			out = g.b.AsType(out, tensor.F32)
		}
		sc.Keep(out)
		if a, ok := g.b.(backend.AsyncEvaler); ok {
			return a.AsyncEval(out)
		}
		return g.b.Eval(out)
	})
	if err != nil {
		return nil, fmt.Errorf("generate: decode step: %w", err)
	}
	g.held = [2]backend.Array{g.held[1], out}
	g.fed++
	return out, nil
}

// feed runs the last token through the model without logits (complete
// mode), starting the caches' evaluation.
func (g *generator[C]) feed(ids func() backend.Array) error {
	err := g.do(func(sc backend.Scope) error {
		if err := g.m.Append(ids(), g.cache); err != nil {
			return err
		}
		st := g.states()
		sc.Keep(st...)
		if a, ok := g.b.(backend.AsyncEvaler); ok {
			return a.AsyncEval(st...)
		}
		return g.b.Eval(st...)
	})
	if err != nil {
		return fmt.Errorf("generate: appending the last token: %w", err)
	}
	g.fed++
	return nil
}

// process applies the logits processors on the host and returns the new
// logits on the backend, in the same dtype.
func (g *generator[C]) process(logits backend.Array) (backend.Array, error) {
	h, dt, err := toHostF32(g.b, logits)
	if err != nil {
		return nil, err
	}
	row := h.ToFloat32()
	if err := g.opts.Processors.Process(g.context, row, dt); err != nil {
		return nil, err
	}
	return g.b.FromHost(tensor.FromFloat32(h.Shape, row).Convert(dt)), nil
}

// readInto reads a's values as float32 through r into *buf (grown when
// too small, kept for the next step) and returns them.
func readInto(r backend.HostReader, buf *[]float32, a backend.Array) ([]float32, error) {
	n := a.Shape().Size()
	if cap(*buf) < n {
		*buf = make([]float32, n)
	}
	*buf = (*buf)[:n]
	return *buf, r.ReadFloat32(*buf, a)
}

// toHostF32 evaluates a (inside a scope, which frees the conversion) and
// returns its values on the host as float32 with a's own dtype: the
// backend widens them (exactly) with its vector code, where the host
// would convert a float16 or bfloat16 value at a time.
func toHostF32(b backend.Backend, a backend.Array) (*tensor.Dense, tensor.DType, error) {
	h, err := b.ToHost(b.AsType(a, tensor.F32))
	return h, a.DType(), err
}

// resolve waits for a scheduled step and returns its token.
func (g *generator[C]) resolve(out backend.Array) (int32, error) {
	var tok int32
	err := g.b.Do(func() (err error) {
		defer backend.Recover(&err)
		defer g.b.Release(out)
		if r, ok := g.b.(backend.HostReader); ok && !g.device {
			// The row converted straight into the generator's own
			// buffer: no float32 array and no host tensor per step (a
			// 128256-token vocabulary is half a megabyte of each).
			row, err := readInto(r, &g.row, out)
			if err != nil {
				return err
			}
			tok, err = g.sampler.Sample(row, g.dt)
			return err
		}
		h, err := g.b.ToHost(out)
		if err != nil {
			return err
		}
		if g.device {
			tok = int32(h.ToFloat64()[0])
			return nil
		}
		tok, err = g.sampler.Sample(h.ToFloat32(), g.dt)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("generate: sampling: %w", err)
	}
	return tok, nil
}

// run generates after the caches' tokens, timing from start; all receives
// every resolved token, a final EOS included.
func (g *generator[C]) run(start time.Time, onToken func(Token) bool, all *[]int32) (res Result, err error) {
	res.Stats.PromptTokens = len(g.prompt)
	defer func() {
		res.Stats.PeakBytes = g.b.Stats().PeakBytes
		res.Stats.PeakRSSBytes = procmem.PeakRSS()
	}()

	if err := Prefill(g.m, g.cache, g.prompt[:len(g.prompt)-1], g.opts.PrefillStepSize); err != nil {
		return res, err
	}
	last := g.prompt[len(g.prompt)-1:]
	if g.opts.Processors.Enabled() {
		if g.opts.PromptContext == FullPrompt {
			g.context = append(g.context, g.prompt...)
		} else {
			g.context = append(g.context, last...)
		}
	}
	cur, err := g.schedule(func() backend.Array { return g.ids(last) })
	if err != nil {
		return res, err
	}
	g.fed = 0 // the prompt's last token is not a generated one
	var firstAt time.Time
	for n := 0; ; n++ {
		more := g.opts.MaxTokens < 0 || n+1 < g.opts.MaxTokens
		var next backend.Array
		var tok int32
		if g.device {
			// Pipelined as generate_step: step n+1 is built on the lazy
			// token n and started before token n is read back.
			y := cur
			lazy := func() backend.Array { return g.b.Reshape(y, 1, 1) }
			if more {
				if next, err = g.schedule(lazy); err != nil {
					return res, err
				}
			} else if g.complete {
				if err = g.feed(lazy); err != nil {
					return res, err
				}
			}
			if tok, err = g.resolve(cur); err != nil {
				return res, err
			}
		} else {
			// Sampling on the host needs token n before step n+1 can be
			// built; step n+1 then runs while the callback handles token n.
			if tok, err = g.resolve(cur); err != nil {
				return res, err
			}
			t := tok
			if more && !slices.Contains(g.opts.EOS, tok) {
				if g.opts.Processors.Enabled() {
					g.context = append(g.context, tok)
				}
				if next, err = g.schedule(func() backend.Array { return g.ids([]int32{t}) }); err != nil {
					return res, err
				}
			} else if g.complete {
				if err = g.feed(func() backend.Array { return g.ids([]int32{t}) }); err != nil {
					return res, err
				}
			}
		}
		*all = append(*all, tok)
		now := time.Now()
		if n == 0 {
			firstAt = now
			res.Stats.TimeToFirstToken = now.Sub(start)
			if s := res.Stats.TimeToFirstToken.Seconds(); s > 0 {
				res.Stats.PromptTPS = float64(len(g.prompt)) / s
			}
		}
		res.Stats.GenerationTokens = n + 1
		if s := now.Sub(firstAt).Seconds(); s > 0 {
			res.Stats.GenerationTPS = float64(n+1) / s
		}
		if slices.Contains(g.opts.EOS, tok) {
			res.FinishReason = FinishStop
			return res, nil
		}
		res.Tokens = append(res.Tokens, tok)
		if onToken != nil && !onToken(Token{ID: tok, Index: n}) {
			res.FinishReason = FinishCallback
			return res, nil
		}
		if n%256 == 0 {
			clearCache(g.b)
		}
		if !more {
			res.FinishReason = FinishLength
			return res, nil
		}
		cur = next
	}
}
