package generate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestSessionForwards checks which forwards a Session's Generate and Append
// run on the fake model: the prompt chunked as Generate chunks it, one step
// per generated token, and the last token (or the EOS) run through the
// model too, so that the cache holds every token.
func TestSessionForwards(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		prompt  int
		eosAt   int // stop at the reference's token with this index; -1: none
		want    []int
		wantLen int // tokens the session holds: prompt + generated (EOS included)
	}{
		{"greedy/length", Options{MaxTokens: 3, PrefillStepSize: 4}, 6, -1, []int{4, 1, 1, 1, 1, 1}, 6 + 3},
		{"sampled/length", Options{MaxTokens: 3, PrefillStepSize: 4, Sampler: SamplerOptions{Temp: 1, Seed: 2}}, 6, -1, []int{4, 1, 1, 1, 1, 1}, 6 + 3},
		{"greedy/max1", Options{MaxTokens: 1}, 1, -1, []int{1, 1}, 1 + 1},
		{"greedy/eos", Options{MaxTokens: 8, PrefillStepSize: 4}, 5, 2, []int{4, 1, 1, 1, 1}, 5 + 3},
		{"sampled/eos", Options{MaxTokens: 8, PrefillStepSize: 4, Sampler: SamplerOptions{Temp: 1, Seed: 2}}, 5, 2, []int{4, 1, 1, 1, 1}, 5 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			if tc.eosAt >= 0 {
				ref, err := Generate(newFake(t), fakePrompt(tc.prompt), opts, nil)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(ref.Tokens[:tc.eosAt], ref.Tokens[tc.eosAt]) {
					t.Fatalf("fixture: token %d of %v appears earlier", tc.eosAt, ref.Tokens)
				}
				opts.EOS = []int32{ref.Tokens[tc.eosAt]}
			}
			m := newFake(t)
			s, err := NewSession(m)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Release()
			res, err := s.Generate(fakePrompt(tc.prompt), opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.calls, tc.want) {
				t.Errorf("got forward lengths %v, want %v", m.calls, tc.want)
			}
			want := append(fakePrompt(tc.prompt), res.Tokens...)
			if res.FinishReason == FinishStop {
				want = append(want, opts.EOS[0])
			}
			if s.Len() != tc.wantLen || !slices.Equal(s.Tokens(), want) || s.Caches()[0].Offset() != tc.wantLen {
				t.Errorf("session holds %v (cache offset %d), want %v (%d tokens)", s.Tokens(), s.Caches()[0].Offset(), want, tc.wantLen)
			}
		})
	}
}

// TestSessionContinues: a generation continuing a session sees the
// positions after the held tokens, so it gives what a generation of the
// whole sequence from an empty cache gives (the fake model's logits depend
// on the token and its position only).
func TestSessionContinues(t *testing.T) {
	for _, sampled := range []bool{false, true} {
		t.Run(fmt.Sprintf("sampled=%v", sampled), func(t *testing.T) {
			opts := Options{MaxTokens: 5}
			if sampled {
				opts.Sampler = SamplerOptions{Temp: 1, Seed: 9}
			}
			m := newFake(t)
			s, _ := NewSession(m)
			defer s.Release()
			first, err := s.Generate(fakePrompt(7), opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			second, err := s.Generate([]int32{3, 4}, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			whole := append(append(fakePrompt(7), first.Tokens...), 3, 4)
			ref, err := Generate(newFake(t), whole, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(second.Tokens, ref.Tokens) {
				t.Errorf("got %v, want %v (the whole sequence from an empty cache)", second.Tokens, ref.Tokens)
			}
			if second.Stats.PromptTokens != 2 {
				t.Errorf("got %d prompt tokens, want 2", second.Stats.PromptTokens)
			}
		})
	}
}

func TestSessionTrimReuse(t *testing.T) {
	m := newFake(t)
	s, _ := NewSession(m)
	defer s.Release()
	if err := s.Append([]int32{5, 6, 7, 8, 9}, 2); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.calls, []int{2, 2, 1}) || s.Len() != 5 {
		t.Fatalf("Append: got forwards %v and %d tokens, want [2 2 1] and 5", m.calls, s.Len())
	}
	for _, tc := range []struct {
		name   string
		prompt []int32
		kept   int
	}{
		{"extends", []int32{5, 6, 7, 8, 9, 10}, 5},
		{"equal", []int32{5, 6, 7, 8, 9}, 4}, // one token must run
		{"diverges", []int32{5, 6, 1}, 2},
		{"shorter", []int32{5}, 0},
		{"nothing", []int32{1, 2}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := s.Fork()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Release()
			kept, err := f.Reuse(tc.prompt)
			if err != nil {
				t.Fatal(err)
			}
			if kept != tc.kept || f.Len() != kept || !slices.Equal(f.Tokens(), tc.prompt[:kept]) {
				t.Errorf("got kept %d, session %v; want %d, %v", kept, f.Tokens(), tc.kept, tc.prompt[:tc.kept])
			}
			if kept > 0 && f.Caches()[0].Offset() != kept {
				t.Errorf("cache offset %d, want %d", f.Caches()[0].Offset(), kept)
			}
		})
	}
	for _, n := range []int{-1, 6} {
		if err := s.Trim(n); err == nil || !strings.Contains(err.Error(), "want 0 <= n <= 5") {
			t.Errorf("Trim(%d): got %v, want an error naming the range", n, err)
		}
	}
}

func TestSessionReleaseAll(t *testing.T) {
	m := newFake(t)
	s, _ := NewSession(m)
	if _, err := s.Generate(fakePrompt(9), Options{MaxTokens: 4, PrefillStepSize: 3}, nil); err != nil {
		t.Fatal(err)
	}
	if m.b.Stats().LiveArrays == 0 {
		t.Fatal("the session holds no arrays after a generation")
	}
	s.Release()
	s.Release()
	if st := m.b.Stats(); st.LiveArrays != 0 || s.Len() != 0 {
		t.Fatalf("after Release: %d live arrays, %d tokens; want 0, 0", st.LiveArrays, s.Len())
	}
}

func TestSessionErrorReleases(t *testing.T) {
	m := newFake(t)
	s, _ := NewSession(m)
	if _, err := s.Generate(fakePrompt(4), Options{MaxTokens: 2}, nil); err != nil {
		t.Fatal(err)
	}
	m.fail = true
	if _, err := s.Generate([]int32{1}, Options{}, nil); err == nil || !strings.Contains(err.Error(), "want [1, V]") {
		t.Fatalf("got %v, want the logits shape error", err)
	}
	if st := m.b.Stats(); st.LiveArrays != 0 || s.Len() != 0 {
		t.Fatalf("after a failed generation: %d live arrays, %d tokens; want 0, 0 (released)", st.LiveArrays, s.Len())
	}
}

func TestResumeSession(t *testing.T) {
	m := newFake(t)
	s, _ := NewSession(m)
	if err := s.Append([]int32{1, 2, 3}, 0); err != nil {
		t.Fatal(err)
	}
	r, err := ResumeSession(m, s.Caches(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Tokens(), []int32{Unknown, Unknown, Unknown}) {
		t.Errorf("got %v, want three Unknown tokens", r.Tokens())
	}
	if kept, _ := r.Reuse([]int32{1, 2, 3, 4}); kept != 0 {
		t.Errorf("Reuse over Unknown tokens kept %d, want 0", kept)
	}
	if _, err := ResumeSession(m, []*fakeCache{{b: m.b, offset: 2}}, []int32{1}); err == nil || !strings.Contains(err.Error(), "1 tokens for caches holding 2") {
		t.Errorf("got %v, want a token count error", err)
	}
	if _, err := ResumeSession(m, []*fakeCache{{b: m.b, offset: 2}, {b: m.b, offset: 1}}, nil); err == nil || !strings.Contains(err.Error(), "cache 1 holds 1 tokens") {
		t.Errorf("got %v, want an offset mismatch error", err)
	}
}

// TestSessionSetTokens: a caller that appended through Caches records the
// tokens; a count other than the caches' offset is refused.
func TestSessionSetTokens(t *testing.T) {
	m := newFake(t)
	s, _ := NewSession(m)
	defer s.Release()
	if err := s.SetTokens([]int32{1}); err == nil || !strings.Contains(err.Error(), "1 tokens for caches holding 0") {
		t.Errorf("empty session: got %v, want a count error", err)
	}
	if err := s.Append([]int32{1, 2}, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.Append(idsArray(m.b, []int32{3}), s.Caches()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTokens([]int32{1, 2}); err == nil || !strings.Contains(err.Error(), "2 tokens for caches holding 3") {
		t.Errorf("got %v, want a count error", err)
	}
	if err := s.SetTokens([]int32{1, 2, 3}); err != nil || !slices.Equal(s.Tokens(), []int32{1, 2, 3}) {
		t.Errorf("got %v, tokens %v; want nil, [1 2 3]", err, s.Tokens())
	}
}
