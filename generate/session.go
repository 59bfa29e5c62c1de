package generate

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// DefaultPrefillStep is mlx_lm's prefill_step_size: the prompt chunk length
// when Options.PrefillStepSize is 0.
const DefaultPrefillStep = 2048

// Unknown stands for a token a Session holds without knowing its id: the
// caches of a prompt cache file written by mlx_lm, which stores no tokens.
// It matches no token, so prefix reuse stops before it.
const Unknown int32 = -1

// Session is one sequence that lives across generations: the caches of
// every layer and the tokens they hold, owned by the caller. Generate
// continues it (only the new tokens go through the model), Append adds
// known tokens without sampling, Trim forgets the last tokens, Reuse trims
// it to the prefix a new prompt shares with it, Fork copies it (copy on
// write) and Release frees it.
//
// After a Generate the session holds its earlier tokens, the prompt and
// every generated token, a final EOS included, as mlx_lm's prompt_cache
// does after stream_generate: the last token is run through the model
// without logits (Model.Append) when the loop would not otherwise do it.
//
// A session is not safe for concurrent use. Its methods run on the
// backend's thread (Backend.Do) and may be called from any goroutine, but
// not from inside a Generate callback of the same session. Bad options or
// an empty prompt are reported before anything runs and leave the session
// as it was; a generation or Append that fails in the model leaves the
// caches invalid, so the session releases them and is then empty (Len 0),
// ready for a new sequence.
type Session[C Cache] struct {
	m      Model[C]
	b      backend.Backend
	cache  []C     // nil while empty
	tokens []int32 // the tokens the caches hold, Unknown where not known
}

// NewSession returns an empty session of m. Its caches are made
// (Model.NewCache) when the first tokens arrive.
func NewSession[C Cache](m Model[C]) (*Session[C], error) {
	b := m.Backend()
	if b == nil {
		return nil, errors.New("generate: the model has no backend")
	}
	return &Session[C]{m: m, b: b}, nil
}

// ResumeSession returns a session over caches that already hold tokens (a
// prompt cache file's, a batch row's), one per layer, all with the same
// Offset. tokens are the ids they hold, or nil when unknown (then every
// position is Unknown). The session takes the caches over.
func ResumeSession[C Cache](m Model[C], cache []C, tokens []int32) (*Session[C], error) {
	s, err := NewSession(m)
	if err != nil {
		return nil, err
	}
	if len(cache) == 0 {
		return nil, errors.New("generate: resuming a session: no caches")
	}
	n := cache[0].Offset()
	for i, c := range cache {
		if c.Offset() != n {
			return nil, fmt.Errorf("generate: resuming a session: cache %d holds %d tokens, cache 0 holds %d", i, c.Offset(), n)
		}
	}
	if tokens == nil {
		tokens = make([]int32, n) // n is the caches' own count, not input
		for i := range tokens {
			tokens[i] = Unknown
		}
	} else if len(tokens) != n {
		return nil, fmt.Errorf("generate: resuming a session: %d tokens for caches holding %d", len(tokens), n)
	}
	s.cache, s.tokens = cache, slices.Clone(tokens)
	return s, nil
}

// Len is the number of tokens the session holds.
func (s *Session[C]) Len() int { return len(s.tokens) }

// Tokens returns a copy of the tokens the session holds (Unknown where a
// loaded cache did not say).
func (s *Session[C]) Tokens() []int32 { return slices.Clone(s.tokens) }

// Caches returns the session's caches, one per layer (nil while empty). The
// session still owns them: a caller that appends to them or trims them
// directly (a batch or speculative loop) must keep them all at one Offset
// and tell the session with SetTokens.
func (s *Session[C]) Caches() []C { return s.cache }

// SetTokens records the tokens the caches hold after the caller changed
// them through Caches; len(tokens) must equal the caches' Offset.
func (s *Session[C]) SetTokens(tokens []int32) error {
	n := 0
	if len(s.cache) > 0 {
		n = s.cache[0].Offset()
	}
	if len(tokens) != n {
		return fmt.Errorf("generate: %d tokens for caches holding %d", len(tokens), n)
	}
	s.tokens = slices.Clone(tokens)
	return nil
}

// Model returns the session's model.
func (s *Session[C]) Model() Model[C] { return s.m }

// Generate runs prompt (the tokens after the ones the session holds)
// through the model and generates as the package-level Generate does, then
// leaves the session holding the prompt and every generated token (a final
// EOS included). The processors' context is this prompt and the generated
// tokens, as in mlx_lm's generate_step given a prompt_cache.
func (s *Session[C]) Generate(prompt []int32, opts Options, onToken func(Token) bool) (Result, error) {
	return s.generate(prompt, opts, onToken, true)
}

func (s *Session[C]) generate(prompt []int32, opts Options, onToken func(Token) bool, complete bool) (Result, error) {
	g, err := newGenerator(s.m, prompt, opts)
	if err != nil {
		return Result{}, err
	}
	g.complete = complete
	var res Result
	var all []int32
	start := time.Now()
	err = s.b.Do(func() (err error) {
		defer g.close()
		if err := s.ensureCache(); err != nil {
			return err
		}
		g.cache = s.cache
		res, err = g.run(start, onToken, &all)
		return err
	})
	if err != nil {
		s.Release()
		return res, err
	}
	return res, s.advance(prompt, all[:g.fed])
}

// advance records the tokens appended and checks the caches agree.
func (s *Session[C]) advance(tokens ...[]int32) error {
	for _, t := range tokens {
		s.tokens = append(s.tokens, t...)
	}
	for i, c := range s.cache {
		if c.Offset() != len(s.tokens) {
			n := len(s.tokens)
			s.Release()
			return fmt.Errorf("generate: internal: cache %d holds %d tokens, the session %d; the session was released", i, c.Offset(), n)
		}
	}
	return nil
}

func (s *Session[C]) ensureCache() error {
	if s.cache == nil {
		s.cache = s.m.NewCache()
		if len(s.cache) == 0 {
			return errors.New("generate: the model made no caches")
		}
	}
	return nil
}

// Append runs tokens through the model into the caches without sampling,
// chunked as generate_step chunks a prompt (every token but the last in
// chunks of at most step tokens, 0 meaning 2048, then the last alone), so
// the caches hold what mlx_lm's cache_prompt computes for the same tokens.
func (s *Session[C]) Append(tokens []int32, step int) error {
	if len(tokens) == 0 {
		return nil
	}
	if step == 0 {
		step = DefaultPrefillStep
	}
	if step < 0 {
		return fmt.Errorf("generate: prefill step size is %d, want a positive number (0 = 2048)", step)
	}
	err := s.b.Do(func() error {
		if err := s.ensureCache(); err != nil {
			return err
		}
		n := len(tokens) - 1
		if err := Prefill(s.m, s.cache, tokens[:n], step); err != nil {
			return err
		}
		return Prefill(s.m, s.cache, tokens[n:], step)
	})
	if err != nil {
		s.Release()
		return err
	}
	return s.advance(tokens)
}

// Trim keeps the first n tokens and forgets the rest (the caches' offsets
// move back; nothing is copied). n must be between 0 and Len. A cache that
// cannot be trimmed (a rotating cache past its window) is an error, and the
// session is released.
func (s *Session[C]) Trim(n int) error {
	if n < 0 || n > len(s.tokens) {
		return fmt.Errorf("generate: trim to %d tokens, want 0 <= n <= %d (the tokens held)", n, len(s.tokens))
	}
	if n == len(s.tokens) {
		return nil
	}
	drop := len(s.tokens) - n
	if i := untrimmable(s.cache); i >= 0 {
		s.Release()
		return fmt.Errorf("generate: cache %d is %s; the session was released", i, pastWindow)
	}
	for i, c := range s.cache {
		if got := c.Trim(drop); got != drop {
			s.Release()
			return fmt.Errorf("generate: cache %d trimmed %d tokens of %d; the session was released", i, got, drop)
		}
	}
	s.tokens = s.tokens[:n]
	return nil
}

// Reuse prepares the session for a generation from prompt, the whole
// sequence: it keeps the longest common prefix of the held tokens and
// prompt, but at most len(prompt)-1 tokens, so that at least one token runs
// through the model to give the next logits, trims the rest, and returns
// how many tokens it kept. The caller then generates from prompt[kept:].
// With nothing in common, or tokens to drop from a cache that cannot be
// trimmed (a rotating cache past its window), the session is released (its
// caches reused nothing); Unknown tokens match nothing.
func (s *Session[C]) Reuse(prompt []int32) (kept int, err error) {
	kept = min(CommonPrefix(s.tokens, prompt), max(len(prompt)-1, 0))
	if kept == 0 || kept < len(s.tokens) && untrimmable(s.cache) >= 0 {
		s.Release()
		return 0, nil
	}
	return kept, s.Trim(kept)
}

// pastWindow says why untrimmable's cache cannot be trimmed.
const pastWindow = "a rotating cache past its window: it evicted tokens that trimming would need back (mlx_lm's RotatingKVCache is not trimmable then)"

// untrimmable returns the index of the first cache that cannot be trimmed
// (a rotating cache that has evicted tokens, whose Trimmable is false), or
// -1.
func untrimmable[C Cache](cache []C) int {
	for i, c := range cache {
		if t, ok := any(c).(interface{ Trimmable() bool }); ok && !t.Trimmable() {
			return i
		}
	}
	return -1
}

// CommonPrefix is the length of the longest common prefix of a and b.
func CommonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Fork returns a new session holding the same tokens. A cache type with a
// method Fork() C forks without copying (nn.FullKVCache: the new caches view
// the same buffers and the first write to either copies it, copy on write);
// any other cache type is an error. The two sessions are then independent:
// release each.
func (s *Session[C]) Fork() (*Session[C], error) {
	f := &Session[C]{m: s.m, b: s.b, tokens: slices.Clone(s.tokens)}
	if s.cache == nil {
		return f, nil
	}
	err := s.b.Do(func() (err error) {
		defer backend.Recover(&err)
		for i, c := range s.cache {
			fc, ok := any(c).(interface{ Fork() C })
			if !ok {
				return fmt.Errorf("generate: cache %d is a %T, which has no Fork method", i, c)
			}
			f.cache = append(f.cache, fc.Fork())
		}
		return nil
	})
	if err != nil {
		f.Release()
		return nil, err
	}
	return f, nil
}

// Release frees the caches; the session is then empty and may be used
// again. Releasing twice is allowed.
func (s *Session[C]) Release() {
	if s.cache != nil {
		_ = s.b.Do(func() (err error) {
			defer backend.Recover(&err)
			for _, c := range s.cache {
				s.b.Release(c.State()...)
				c.Release()
			}
			return nil
		})
	}
	s.cache, s.tokens = nil, nil
}

// Prefill appends tokens to cache through m.Append in chunks of at most
// step tokens (0 means 2048), evaluating the caches' State after each chunk
// and clearing a caching backend's freed buffers (backend.CacheClearer), as
// generate_step's prefill loop does. It runs on the backend's thread, each
// chunk in a scope of its own. generate_step leaves the prompt's last token
// out of this loop; Generate, Session and models/minicpm5's PrefillLast do
// the same by passing all but that token.
func Prefill[C Cache](m Model[C], cache []C, tokens []int32, step int) error {
	if step == 0 {
		step = DefaultPrefillStep
	}
	if step < 0 {
		return fmt.Errorf("generate: prefill step size is %d, want a positive number (0 = 2048)", step)
	}
	b := m.Backend()
	for done := 0; done < len(tokens); {
		n := min(step, len(tokens)-done)
		chunk := tokens[done : done+n]
		err := do(b, func(sc backend.Scope) error {
			if err := m.Append(idsArray(b, chunk), cache); err != nil {
				return err
			}
			st := states(cache)
			sc.Keep(st...)
			return b.Eval(st...)
		})
		if err != nil {
			return fmt.Errorf("generate: prefill at prompt token %d: %w", done, err)
		}
		done += n
		clearCache(b)
	}
	return nil
}

func states[C Cache](cache []C) []backend.Array {
	var out []backend.Array
	for _, c := range cache {
		out = append(out, c.State()...)
	}
	return out
}

// do runs fn on b's thread inside a scope, turning an op's
// *backend.OpError panic into an error. fn keeps what must outlive the scope.
func do(b backend.Backend, fn func(sc backend.Scope) error) error {
	return b.Do(func() (err error) {
		defer backend.Recover(&err)
		sc := b.Scope()
		defer sc.Close()
		return fn(sc)
	})
}

func idsArray(b backend.Backend, tokens []int32) backend.Array {
	return b.FromHost(tensor.FromInt32(tensor.Shape{1, len(tokens)}, tokens))
}

// clearCache returns a caching backend's freed buffers to the system, as
// generate_step calls mx.clear_cache: after each prefill chunk, and after
// the generated tokens 0, 256, 512, ... are handed out.
func clearCache(b backend.Backend) {
	if c, ok := b.(backend.CacheClearer); ok {
		_ = b.Do(func() (err error) {
			defer backend.Recover(&err)
			c.ClearCache()
			return nil
		})
	}
}
