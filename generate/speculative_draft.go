package generate

import (
	"fmt"
	"slices"
)

// DraftModel is a Drafter that runs a second, smaller model with the same
// vocabulary (mlx_lm's draft_model). It holds a Session of its own, kept
// between generations so that a continued sequence only prefills the new
// tokens; Release frees it. A DraftModel serves one generation at a time.
type DraftModel[D Cache] struct {
	s *Session[D]
	m WindowModel[D]
}

// NewDraftModel returns a drafter running m. The caller checks that m's
// vocabulary is the target's (the CLI compares the tokenizers).
func NewDraftModel[D Cache](m WindowModel[D]) (*DraftModel[D], error) {
	s, err := NewSession[D](m)
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	return &DraftModel[D]{s: s, m: m}, nil
}

// Session returns the draft model's session (its caches hold the sequence
// the last generation ended with, except the tokens it never ran).
func (d *DraftModel[D]) Session() *Session[D] { return d.s }

// Release frees the draft model's caches.
func (d *DraftModel[D]) Release() { d.s.Release() }

// validate refuses a sequence with Unknown tokens: the draft model would
// have to run them.
func (d *DraftModel[D]) validate(history []int32) error {
	if i := slices.Index(history, Unknown); i >= 0 {
		return fmt.Errorf("the sequence holds a token of unknown id at %d (from a prompt cache file), which the draft model cannot run", i)
	}
	return nil
}

// begin prefills everything but the last token of history, reusing what
// the session already holds, as speculative_generate_step prefills the
// draft model's cache.
func (d *DraftModel[D]) begin(history []int32, sp *speculation) error {
	if d.m.Backend() != sp.b {
		return fmt.Errorf("the draft model is on backend %s, the target on another (%s): load both on one", d.m.Backend().Name(), sp.b.Name())
	}
	if err := d.sync(history); err != nil {
		return err
	}
	s := d.s
	n := len(history) - 1
	if len(s.tokens) >= n {
		return nil
	}
	if err := Prefill(d.m, s.cache, history[len(s.tokens):n], sp.opts.PrefillStepSize); err != nil {
		s.Release()
		return err
	}
	return s.advance(history[len(s.tokens):n])
}

// sync trims the session to the longest prefix it shares with history,
// leaving at least the last token of history to run.
func (d *DraftModel[D]) sync(history []int32) error {
	s := d.s
	kept := min(CommonPrefix(s.tokens, history), len(history)-1)
	if kept == 0 {
		s.Release()
	} else if err := s.Trim(kept); err != nil {
		return err
	}
	return s.ensureCache()
}

// propose runs the tokens of history the session lacks (the target's last
// token, and the last accepted draft when every draft was accepted) in one
// forward, then one token at a time: n draft tokens, each picked with the
// generation's sampler and processors (speculative_generate_step's
// _draft_generate). The last draft is not run, so the session then holds
// history and the first n-1 drafts.
func (d *DraftModel[D]) propose(history []int32, n int, sp *speculation) ([]int32, error) {
	if n <= 0 {
		return nil, nil
	}
	if err := d.sync(history); err != nil {
		return nil, err
	}
	s := d.s
	in := history[len(s.tokens):]
	ctx := history[sp.ctxBase:]
	drafts := make([]int32, 0, n)
	for range n {
		c := append(slices.Clip(ctx), drafts...)
		t, err := forwardWindow(sp, d.m, s.cache, in, len(in), 1, func(int) []int32 { return c })
		if err != nil {
			s.Release()
			return nil, err
		}
		if err := s.advance(in); err != nil {
			return nil, err
		}
		drafts = append(drafts, t[0])
		in = t
	}
	return drafts, nil
}

func (d *DraftModel[D]) end() {}
