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

// DefaultNumDraftTokens is speculative_generate_step's num_draft_tokens
// default, used when SpeculativeOptions.NumDraftTokens is 0 (mlx_lm's CLI,
// and mlxgo's, default to 3).
const DefaultNumDraftTokens = 2

// WindowModel is a Model that also returns the logits of several positions
// of one forward: the verify window of speculative decoding.
type WindowModel[C Cache] interface {
	Model[C]
	// WindowLogits runs ids (int32, shape [1, L]) through the model,
	// appending them to cache, and returns the logits of the last n
	// positions (1 <= n <= L), shape [1, n, V], in the model's dtype.
	WindowLogits(ids backend.Array, cache []C, n int) (backend.Array, error)
}

// Drafter proposes the tokens a speculative generation verifies: a draft
// model ([NewDraftModel]) or prompt lookup ([NewPromptLookup]).
type Drafter interface {
	// validate checks, before anything runs, that the drafter can work on
	// history (the session's tokens and the prompt).
	validate(history []int32) error
	// begin is called once per generation, on the backend's thread, with
	// the whole sequence (the session's tokens and the prompt).
	begin(history []int32, sp *speculation) error
	// propose returns at most n tokens to follow history, on the backend's
	// thread. history grows by the accepted tokens between calls.
	propose(history []int32, n int, sp *speculation) ([]int32, error)
	// end is called when the generation is over, on the backend's thread.
	end()
}

// SpeculativeOptions configure Session.GenerateSpeculative.
type SpeculativeOptions struct {
	// Options are the generation's options, as for Generate. The sampler
	// and the processors apply to the drafter's model and to the target,
	// as in speculative_generate_step.
	Options
	// NumDraftTokens is the most tokens drafted per verify step (mlx_lm's
	// num_draft_tokens); 0 means DefaultNumDraftTokens.
	NumDraftTokens int
}

// SpeculativeResult is what GenerateSpeculative returns: Result, and how
// the drafts fared.
type SpeculativeResult struct {
	Result
	// FromDraft has one entry per token of Result.Tokens: whether it was a
	// draft token the target accepted (mlx_lm's from_draft).
	FromDraft []bool
	// Drafted counts the tokens proposed and verified; Accepted those of
	// them that were handed out (a final EOS included).
	Drafted, Accepted int
	// Steps counts the target's forwards after the prompt (verify steps).
	Steps int
}

// speculation is the state one speculative generation shares with its
// drafter: the sampler and the processors, so that a draft model picks
// its tokens as the target does (mlx_lm uses one sampler for both).
type speculation struct {
	b       backend.Backend
	opts    Options
	sampler *Sampler
	device  bool // greedy without processors: argmax on the backend
	ctxBase int  // history[ctxBase:] is the processors' context
}

// pick chooses one token per row of logits ([1, R, V] or [R, V]). Row i's
// processors' context is context(i). It runs inside a scope of the
// caller's, on the backend's thread, and waits for the tokens.
func (sp *speculation) pick(logits backend.Array, context func(i int) []int32) ([]int32, error) {
	b := sp.b
	s := logits.Shape()
	if len(s) == 3 && s[0] == 1 {
		logits = b.Reshape(logits, s[1], s[2])
	} else if len(s) != 2 {
		return nil, fmt.Errorf("model logits are %v %v, want [1, R, V] or [R, V]", logits.DType(), s)
	}
	if rounder(logits.DType()) == nil {
		return nil, fmt.Errorf("model logits are %v %v, want BF16, F16 or F32", logits.DType(), s)
	}
	rows, V := logits.Shape()[0], logits.Shape()[1]
	if sp.opts.Processors.Enabled() {
		h, err := b.ToHost(logits)
		if err != nil {
			return nil, err
		}
		all := h.ToFloat32()
		for i := range rows {
			if err := sp.opts.Processors.Process(context(i), all[i*V:(i+1)*V], h.DType); err != nil {
				return nil, err
			}
		}
		logits = b.FromHost(tensor.FromFloat32(h.Shape, all).Convert(h.DType))
	}
	lp := b.Binary(backend.Subtract, logits, b.LogSumExp(logits, -1, true))
	out := make([]int32, rows)
	if sp.device {
		h, err := b.ToHost(b.Argmax(lp, -1, false))
		if err != nil {
			return nil, err
		}
		for i, v := range h.ToFloat64() {
			out[i] = int32(v)
		}
		return out, nil
	}
	h, err := b.ToHost(lp)
	if err != nil {
		return nil, err
	}
	all := h.ToFloat32()
	for i := range rows {
		if out[i], err = sp.sampler.Sample(all[i*V:(i+1)*V], h.DType); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// forwardWindow runs ids through m, appending to cache, computes the logits of
// the last rows positions and picks a token from each of the last pick of
// them, keeping the caches' State out of the step's scope. context(i) is
// the processors' context of picked row i.
func forwardWindow[C Cache](sp *speculation, m WindowModel[C], cache []C, ids []int32, rows, pick int, context func(i int) []int32) ([]int32, error) {
	var toks []int32
	err := do(sp.b, func(sc backend.Scope) error {
		logits, err := m.WindowLogits(idsArray(sp.b, ids), cache, rows)
		if err != nil {
			return err
		}
		sc.Keep(states(cache)...)
		s := logits.Shape()
		if len(s) != 3 || s[0] != 1 || s[1] != rows {
			return fmt.Errorf("model logits are %v, want [1, %d, V]", s, rows)
		}
		if pick < rows {
			logits = sp.b.Slice(logits, []int{0, rows - pick, 0}, []int{1, rows, s[2]})
		}
		toks, err = sp.pick(logits, context)
		return err
	})
	return toks, err
}

// GenerateSpeculative generates as Session.Generate does, with speculative
// decoding in the manner of mlx_lm's speculative_generate_step: each step
// the drafter proposes up to NumDraftTokens tokens (never more than the
// tokens left to generate), the target runs its pending token and the
// drafts in one forward (the verify window, m.WindowLogits over all of
// them), picks a token from each of those positions with the sampler and
// processors, and accepts the drafts while they equal its own picks; its
// pick after the last accepted draft comes next, and the caches are
// trimmed back to the accepted tokens. Each draft token equals the token
// the target picks at its position, so greedy decoding gives exactly the
// tokens of Generate (up to ties that a forward of several positions
// breaks another way than one of a single position).
//
// Tokens handed to onToken say whether they came from the draft. EOS,
// MaxTokens and the callback end generation as in Generate; afterwards the
// session holds the prompt and every generated token, as after Generate.
//
// The processors' context starts at the whole prompt or its last token
// (Options.PromptContext); speculative_generate_step's is the last prompt
// token (LastPromptToken). With a sampler that draws random numbers, the
// draws run in another order than Generate's (the drafts', then one per
// verified position), so a seeded run differs from Generate's and from
// mlx_lm's (which samples the verify window with one call).
func (s *Session[C]) GenerateSpeculative(prompt []int32, d Drafter, opts SpeculativeOptions, onToken func(Token) bool) (SpeculativeResult, error) {
	var res SpeculativeResult
	wm, ok := s.m.(WindowModel[C])
	if !ok {
		return res, fmt.Errorf("generate: speculative decoding needs a model with WindowLogits; %T has none", s.m)
	}
	if d == nil {
		return res, errors.New("generate: speculative decoding without a drafter")
	}
	if opts.NumDraftTokens == 0 {
		opts.NumDraftTokens = DefaultNumDraftTokens
	}
	if opts.NumDraftTokens < 0 {
		return res, fmt.Errorf("generate: num_draft_tokens is %d, want at least 1", opts.NumDraftTokens)
	}
	g, err := newGenerator(s.m, prompt, opts.Options)
	if err != nil {
		return res, err
	}
	sp := &speculation{b: s.b, opts: g.opts, sampler: g.sampler, device: g.device}
	start := time.Now()
	held := len(s.tokens)
	history := append(slices.Clone(s.tokens), prompt...)
	if err := d.validate(history); err != nil {
		return res, fmt.Errorf("generate: drafter: %w", err)
	}
	sp.ctxBase = held
	if g.opts.PromptContext == LastPromptToken {
		sp.ctxBase = len(history) - 1
	}
	err = s.b.Do(func() (err error) {
		defer d.end()
		if err := s.ensureCache(); err != nil {
			return err
		}
		res, history, err = speculate(s, wm, d, sp, history, opts.NumDraftTokens, start, onToken)
		return err
	})
	res.Stats.PeakBytes = s.b.Stats().PeakBytes
	res.Stats.PeakRSSBytes = procmem.PeakRSS()
	if err != nil {
		s.Release()
		return res, err
	}
	// history is everything the caches must hold; they hold a prefix of it
	// (or more: drafts past a stop, trimmed by speculate).
	return res, s.advance(history[held:])
}

// speculate is the loop; it returns the whole sequence the caches hold at
// the end.
func speculate[C Cache](s *Session[C], m WindowModel[C], d Drafter, sp *speculation, history []int32, k int, start time.Time, onToken func(Token) bool) (res SpeculativeResult, _ []int32, err error) {
	opts := sp.opts
	res.Stats.PromptTokens = len(history) - len(s.tokens)
	if err := Prefill(m, s.cache, history[len(s.tokens):len(history)-1], opts.PrefillStepSize); err != nil {
		return res, nil, err
	}
	if err := d.begin(history, sp); err != nil {
		return res, nil, fmt.Errorf("generate: drafter: %w", err)
	}
	cached := len(history) - 1 // tokens in the target's caches
	ntoks := 0
	var firstAt time.Time
	// emit hands out one token; it reports whether generation goes on.
	emit := func(tok int32, fromDraft bool) bool {
		history = append(history, tok)
		ntoks++
		now := time.Now()
		if ntoks == 1 {
			firstAt = now
			res.Stats.TimeToFirstToken = now.Sub(start)
			if sec := res.Stats.TimeToFirstToken.Seconds(); sec > 0 {
				res.Stats.PromptTPS = float64(res.Stats.PromptTokens) / sec
			}
		}
		res.Stats.GenerationTokens = ntoks
		if sec := now.Sub(firstAt).Seconds(); sec > 0 {
			res.Stats.GenerationTPS = float64(ntoks) / sec
		}
		if fromDraft {
			res.Accepted++
		}
		if slices.Contains(opts.EOS, tok) {
			res.FinishReason = FinishStop
			return false
		}
		res.Tokens = append(res.Tokens, tok)
		res.FromDraft = append(res.FromDraft, fromDraft)
		if onToken != nil && !onToken(Token{ID: tok, Index: ntoks - 1, FromDraft: fromDraft}) {
			res.FinishReason = FinishCallback
			return false
		}
		if ntoks%256 == 1 {
			clearCache(sp.b)
		}
		if opts.MaxTokens > 0 && ntoks == opts.MaxTokens {
			res.FinishReason = FinishLength
			return false
		}
		return true
	}
	for {
		n := k
		if opts.MaxTokens > 0 {
			n = min(n, opts.MaxTokens-ntoks)
		}
		drafts, err := d.propose(history, n, sp)
		if err != nil {
			return res, nil, fmt.Errorf("generate: drafter: %w", err)
		}
		if len(drafts) > n {
			return res, nil, fmt.Errorf("generate: drafter proposed %d tokens, want at most %d", len(drafts), n)
		}
		base := len(history)
		win := append(history[cached:base:base], drafts...)
		toks, err := forwardWindow(sp, m, s.cache, win, len(win), len(drafts)+1, func(i int) []int32 {
			return append(history[sp.ctxBase:base:base], drafts[:i]...)
		})
		if err != nil {
			return res, nil, fmt.Errorf("generate: verify step: %w", err)
		}
		res.Steps++
		res.Drafted += len(drafts)
		cached = base + len(drafts)
		more := true
		a := 0
		for ; a < len(drafts) && more && toks[a] == drafts[a]; a++ {
			more = emit(toks[a], true)
		}
		if more {
			more = emit(toks[a], false)
		}
		// The caches hold history[:base] and the drafts, of which the first
		// a agree with history: trim the rest.
		keep := base + a
		if err := trimCaches(s.cache, cached-keep); err != nil {
			return res, nil, err
		}
		cached = keep
		if !more {
			break
		}
	}
	// Complete the session: run the last token(s) handed out, not yet in
	// the caches, through the model (a Session holds every token).
	if cached < len(history) {
		if err := Prefill(m, s.cache, history[cached:], opts.PrefillStepSize); err != nil {
			return res, nil, fmt.Errorf("generate: appending the last token: %w", err)
		}
	}
	return res, history, nil
}

// trimCaches drops the last n tokens of every cache. A cache that cannot
// be trimmed (a rotating cache past its window) is an error even for n = 0:
// past its window a verify step sees another window than one-token steps
// would, and the next rejected draft could not be trimmed.
func trimCaches[C Cache](cache []C, n int) error {
	if i := untrimmable(cache); i >= 0 {
		return fmt.Errorf("generate: speculative decoding: cache %d is %s; keep the whole sequence in the window (prompt, max tokens and drafts)", i, pastWindow)
	}
	if n == 0 {
		return nil
	}
	for i, c := range cache {
		if got := c.Trim(n); got != n {
			return fmt.Errorf("generate: cache %d trimmed %d tokens of %d", i, got, n)
		}
	}
	return nil
}
