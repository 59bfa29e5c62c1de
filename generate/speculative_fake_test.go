package generate

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// WindowLogits makes the fake a WindowModel: the fake logits of each of
// the last n positions of ids.
func (m *fakeModel) WindowLogits(ids backend.Array, cache []*fakeCache, n int) (backend.Array, error) {
	L := ids.Shape()[1]
	first := cache[0].offset
	h, err := m.b.ToHost(ids)
	if err != nil {
		return nil, err
	}
	toks := h.ToFloat64()
	if _, _, err := m.forward(ids, cache); err != nil {
		return nil, err
	}
	var rows []float32
	for i := L - n; i < L; i++ {
		rows = append(rows, fakeLogits(int(toks[i]), first+i)...)
	}
	return m.b.FromHost(tensor.FromFloat32(tensor.Shape{1, n, fakeV}, rows).Convert(tensor.BF16)), nil
}

// wrongDrafter proposes tokens the fake never picks first (every other
// one right), to exercise rejection and the caches' trim.
type wrongDrafter struct{ want []int32 } // the greedy continuation

func (w *wrongDrafter) validate([]int32) error            { return nil }
func (w *wrongDrafter) begin([]int32, *speculation) error { return nil }
func (w *wrongDrafter) end()                              {}
func (w *wrongDrafter) propose(history []int32, n int, _ *speculation) ([]int32, error) {
	var out []int32
	for i := range n {
		j := len(history) - fakePromptLen + i
		if j >= len(w.want) {
			break
		}
		t := w.want[j]
		if (j+i)%3 == 2 {
			t = (t + 1) % fakeV
		}
		out = append(out, t)
	}
	return out, nil
}

const fakePromptLen = 7

// TestSpeculativeFake: on the fake model, speculative decoding with a
// drafter of the model itself, prompt lookup and a drafter that is wrong
// one time in three gives Generate's tokens, with or without processors,
// stops where Generate stops (EOS among accepted drafts, MaxTokens, the
// callback), marks the tokens that came from the draft, and leaves the
// session holding the prompt and every generated token.
func TestSpeculativeFake(t *testing.T) {
	m := newFake(t)
	prompt := fakePromptLen
	p := fakePrompt(prompt)
	plain, err := Generate(m, p, Options{MaxTokens: 20, PrefillStepSize: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := plain.Tokens
	pen := ProcessorOptions{RepetitionPenalty: 1.3, RepetitionContextSize: 6}
	for _, tc := range []struct {
		name string
		opts Options
		k    int
		stop bool // the callback stops after 5 tokens
	}{
		{"greedy", Options{MaxTokens: 20}, 3, false},
		{"k1", Options{MaxTokens: 20}, 1, false},
		{"k5-max7", Options{MaxTokens: 7}, 5, false},
		{"eos", Options{MaxTokens: 20, EOS: []int32{full[9]}}, 4, false},
		{"callback", Options{MaxTokens: 20}, 3, true},
		{"penalty", Options{MaxTokens: 20, Processors: pen}, 3, false},
		{"penalty-last", Options{MaxTokens: 20, Processors: pen, PromptContext: LastPromptToken}, 3, false},
	} {
		tc.opts.PrefillStepSize = 3
		want, err := Generate(m, p, tc.opts, func(tok Token) bool { return !tc.stop || tok.Index < 4 })
		if err != nil {
			t.Fatal(err)
		}
		self, _ := NewDraftModel[*fakeCache](m)
		lookup, _ := NewPromptLookup(1)
		drafters := map[string]Drafter{"self": self, "lookup": lookup, "wrong": &wrongDrafter{want: want.Tokens}}
		for _, dn := range []string{"self", "lookup", "wrong"} {
			t.Run(fmt.Sprintf("%s/%s", tc.name, dn), func(t *testing.T) {
				s, _ := NewSession(m)
				defer s.Release()
				var seen []Token
				got, err := s.GenerateSpeculative(p, drafters[dn], SpeculativeOptions{Options: tc.opts, NumDraftTokens: tc.k},
					func(tok Token) bool { seen = append(seen, tok); return !tc.stop || tok.Index < 4 })
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Tokens, want.Tokens) || got.FinishReason != want.FinishReason {
					t.Fatalf("got %v (%s), want %v (%s)", got.Tokens, got.FinishReason, want.Tokens, want.FinishReason)
				}
				if got.Stats.GenerationTokens != want.Stats.GenerationTokens {
					t.Errorf("got %d generation tokens, want %d", got.Stats.GenerationTokens, want.Stats.GenerationTokens)
				}
				accepted := 0
				for i, tok := range seen {
					if tok.ID != got.Tokens[i] || tok.Index != i || tok.FromDraft != got.FromDraft[i] {
						t.Fatalf("callback token %d is %+v, want id %d from draft %v", i, tok, got.Tokens[i], got.FromDraft[i])
					}
					if tok.FromDraft {
						accepted++
					}
				}
				if got.FinishReason == FinishStop {
					accepted = got.Accepted // the EOS is not handed to the callback
				}
				if accepted != got.Accepted || got.Accepted > got.Drafted {
					t.Errorf("accepted %d (callback) / %d (result) of %d drafted", accepted, got.Accepted, got.Drafted)
				}
				if dn == "self" && got.FinishReason == FinishLength && got.Accepted != got.Drafted {
					t.Errorf("self drafting accepted %d of %d drafts, want all", got.Accepted, got.Drafted)
				}
				if dn == "wrong" && got.Accepted == got.Drafted {
					t.Errorf("a wrong drafter had all %d drafts accepted", got.Drafted)
				}
				if dn != "lookup" && got.Steps >= got.Stats.GenerationTokens && tc.k > 1 {
					t.Errorf("%d verify steps for %d tokens: drafts saved no step", got.Steps, got.Stats.GenerationTokens)
				}
				// The session holds the prompt and every generated token,
				// the EOS included: continuing it equals a fresh run.
				held := append(slices.Clone(p), want.Tokens...)
				if got.FinishReason == FinishStop {
					held = append(held, tc.opts.EOS...)
				}
				if !slices.Equal(s.Tokens(), held) || s.Caches()[0].Offset() != len(held) {
					t.Fatalf("session holds %v (offset %d), want %v", s.Tokens(), s.Caches()[0].Offset(), held)
				}
			})
		}
		self.Release()
	}
}

// TestSpeculativeBadInput: a negative draft count, a nil drafter and a
// model without WindowLogits are errors; the session is left alone.
func TestSpeculativeBadInput(t *testing.T) {
	m := newFake(t)
	s, _ := NewSession(m)
	defer s.Release()
	lookup, _ := NewPromptLookup(2)
	if _, err := s.GenerateSpeculative(fakePrompt(4), lookup, SpeculativeOptions{NumDraftTokens: -1}, nil); err == nil {
		t.Error("NumDraftTokens -1: no error")
	}
	if _, err := s.GenerateSpeculative(fakePrompt(4), nil, SpeculativeOptions{}, nil); err == nil {
		t.Error("nil drafter: no error")
	}
	if _, err := NewPromptLookup(0); err == nil {
		t.Error("NewPromptLookup(0): no error")
	}
	type plain struct{ Model[*fakeCache] }
	ps, _ := NewSession[*fakeCache](plain{m})
	if _, err := ps.GenerateSpeculative(fakePrompt(4), lookup, SpeculativeOptions{}, nil); err == nil {
		t.Error("a model without WindowLogits: no error")
	}
	if s.Len() != 0 {
		t.Errorf("the session holds %d tokens after bad input, want 0", s.Len())
	}
}

// TestPromptLookup: hand-worked cases of the n-gram match.
func TestPromptLookup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []int32
		n, k    int
		want    []int32
	}{
		// last 2 = (3,4); earlier at index 2, followed by 5, 6, 7.
		{"match", []int32{1, 2, 3, 4, 5, 6, 7, 3, 4}, 2, 3, []int32{5, 6, 7}},
		// the most recent of two matches of (9): index 3, followed by 4.
		{"recent", []int32{9, 1, 2, 9, 4, 9}, 1, 1, []int32{4}},
		// no earlier (5, 6)
		{"none", []int32{1, 2, 3, 5, 6}, 2, 3, nil},
		{"short", []int32{1, 2}, 2, 3, nil},
		// (1,2) last matched at index 3, followed by 3 then the end: the
		// period 3 continues: 3, 1, 2, 3, 1.
		{"periodic", []int32{1, 2, 3, 1, 2, 3, 1, 2}, 2, 5, []int32{3, 1, 2, 3, 1}},
		// one token repeated: period 1.
		{"run", []int32{5, 7, 7}, 1, 4, []int32{7, 7, 7, 7}},
		{"k0", []int32{7, 7, 7}, 1, 0, nil},
		// Unknown ids (a loaded cache's) are never matched nor proposed.
		{"unknown-key", []int32{1, Unknown, 1, Unknown}, 1, 2, nil},
		{"unknown-after", []int32{4, 5, Unknown, 9, 4, 5}, 2, 3, nil},
		{"unknown-later", []int32{4, 5, 6, Unknown, 4, 5}, 2, 3, []int32{6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPromptLookup(tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Lookup(tc.history, tc.k); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDraftModelUnknown: a session resumed with tokens of unknown id
// cannot be drafted for by a model (it would have to run them): an error
// before anything runs, the session left as it was; prompt lookup works.
func TestDraftModelUnknown(t *testing.T) {
	m := newFake(t)
	s, _ := NewSession(m)
	defer s.Release()
	if err := s.Append(fakePrompt(5), 0); err != nil {
		t.Fatal(err)
	}
	r, err := ResumeSession(m, s.Caches(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.cache, s.tokens = nil, nil // r owns the caches now
	defer r.Release()
	d, _ := NewDraftModel[*fakeCache](m)
	defer d.Release()
	opts := SpeculativeOptions{Options: Options{MaxTokens: 4}}
	if _, err := r.GenerateSpeculative([]int32{3}, d, opts, nil); err == nil || !strings.Contains(err.Error(), "unknown id at 0") {
		t.Errorf("got %v, want an error naming the unknown token", err)
	}
	if r.Len() != 5 {
		t.Fatalf("the session holds %d tokens after the error, want 5", r.Len())
	}
	lookup, _ := NewPromptLookup(1)
	if _, err := r.GenerateSpeculative([]int32{3}, lookup, opts, nil); err != nil {
		t.Errorf("prompt lookup on a resumed session: %v", err)
	}
}

// TestSpeculativeSampled: with a sampler that draws random numbers,
// speculative decoding runs to MaxTokens, and a seeded run repeats itself
// exactly (the draws come in a fixed order: the drafts', then one per
// verified position).
func TestSpeculativeSampled(t *testing.T) {
	m := newFake(t)
	opts := SpeculativeOptions{Options: Options{MaxTokens: 16, Sampler: SamplerOptions{Temp: 1, Seed: 11}}, NumDraftTokens: 3}
	run := func(d Drafter) SpeculativeResult {
		s, _ := NewSession(m)
		defer s.Release()
		res, err := s.GenerateSpeculative(fakePrompt(6), d, opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tokens) != 16 || res.FinishReason != FinishLength {
			t.Fatalf("got %d tokens (%s), want 16 (length)", len(res.Tokens), res.FinishReason)
		}
		return res
	}
	d, _ := NewDraftModel[*fakeCache](m)
	defer d.Release()
	a, b := run(d), run(d)
	if !slices.Equal(a.Tokens, b.Tokens) || !slices.Equal(a.FromDraft, b.FromDraft) {
		t.Errorf("two seeded runs differ: %v %v / %v %v", a.Tokens, a.FromDraft, b.Tokens, b.FromDraft)
	}
	plain, err := Generate(m, fakePrompt(6), Options{MaxTokens: 16}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a.Tokens, plain.Tokens) {
		t.Errorf("a sampled run at temperature 1 gave the greedy tokens %v: the sampler was not used", a.Tokens)
	}
}
