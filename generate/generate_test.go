package generate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPrefillChunks(t *testing.T) {
	for _, tc := range []struct {
		prompt, step int
		want         []int
	}{
		{1, 4, []int{1}},
		{2, 4, []int{1, 1}},
		{5, 4, []int{4, 1}},
		{6, 4, []int{4, 1, 1}},
		{23, 5, []int{5, 5, 5, 5, 2, 1}},
		{3000, 0, []int{2048, 951, 1}}, // 0 = mlx_lm's default 2048
	} {
		t.Run(fmt.Sprintf("prompt=%d/step=%d", tc.prompt, tc.step), func(t *testing.T) {
			m := newFake(t)
			res, err := Generate(m, fakePrompt(tc.prompt), Options{MaxTokens: 1, PrefillStepSize: tc.step}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.calls, tc.want) {
				t.Fatalf("got forward lengths %v, want %v", m.calls, tc.want)
			}
			if len(res.Tokens) != 1 || res.FinishReason != FinishLength {
				t.Fatalf("got %v %q, want one token and %q", res.Tokens, res.FinishReason, FinishLength)
			}
		})
	}
}

func TestStopConditions(t *testing.T) {
	for _, sampled := range []bool{false, true} {
		opts := Options{MaxTokens: 12}
		if sampled {
			opts.Sampler = SamplerOptions{Temp: 1, Seed: 3}
		}
		name := fmt.Sprintf("sampled=%v", sampled)
		ref, err := Generate(newFake(t), fakePrompt(9), opts, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name+"/length", func(t *testing.T) {
			if len(ref.Tokens) != 12 || ref.FinishReason != FinishLength || ref.Stats.GenerationTokens != 12 || ref.Stats.PromptTokens != 9 {
				t.Fatalf("got %d tokens, %q, stats %+v; want 12, %q", len(ref.Tokens), ref.FinishReason, ref.Stats, FinishLength)
			}
		})
		t.Run(name+"/eos", func(t *testing.T) {
			// The first position of the reference's 6th token's value, so
			// that it cannot have appeared before.
			k := 5
			for slices.Contains(ref.Tokens[:k], ref.Tokens[k]) {
				k++
			}
			o := opts
			o.EOS = []int32{-5, ref.Tokens[k]}
			var seen []int32
			res, err := Generate(newFake(t), fakePrompt(9), o, func(tok Token) bool {
				if tok.Index != len(seen) {
					t.Errorf("got index %d, want %d", tok.Index, len(seen))
				}
				seen = append(seen, tok.ID)
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tokens, ref.Tokens[:k]) || !slices.Equal(seen, res.Tokens) || res.FinishReason != FinishStop || res.Stats.GenerationTokens != k+1 {
				t.Fatalf("got %v (callback %v) %q %d generated; want %v %q %d", res.Tokens, seen, res.FinishReason, res.Stats.GenerationTokens, ref.Tokens[:k], FinishStop, k+1)
			}
		})
		t.Run(name+"/callback", func(t *testing.T) {
			n := 0
			res, err := Generate(newFake(t), fakePrompt(9), opts, func(Token) bool { n++; return n < 3 })
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Tokens, ref.Tokens[:3]) || res.FinishReason != FinishCallback {
				t.Fatalf("got %v %q, want %v %q", res.Tokens, res.FinishReason, ref.Tokens[:3], FinishCallback)
			}
		})
	}
	t.Run("default-max-tokens", func(t *testing.T) {
		res, err := Generate(newFake(t), fakePrompt(3), Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tokens) != 256 || res.FinishReason != FinishLength {
			t.Fatalf("got %d tokens %q, want 256 %q", len(res.Tokens), res.FinishReason, FinishLength)
		}
	})
}

// TestLiveArraysFlat generates 1,000 tokens and requires the backend's live
// arrays to be the same at tokens 10 and 999 of 1,000, and back to zero after.
func TestLiveArraysFlat(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"greedy-device", Options{}},
		{"sampled", Options{Sampler: SamplerOptions{Temp: 0.9, TopP: 0.95, Seed: 1}}},
		{"greedy-penalty", Options{Processors: ProcessorOptions{RepetitionPenalty: 1.2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFake(t)
			o := tc.opts
			o.MaxTokens = 1000
			o.PrefillStepSize = 4
			var at10, at999 int
			res, err := Generate(m, fakePrompt(11), o, func(tok Token) bool {
				switch tok.Index {
				case 9:
					at10 = m.b.Stats().LiveArrays
				case 998: // the last token has no next step scheduled behind it
					at999 = m.b.Stats().LiveArrays
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Tokens) != 1000 {
				t.Fatalf("got %d tokens, want 1000", len(res.Tokens))
			}
			if at10 != at999 || at10 == 0 {
				t.Fatalf("live arrays: got %d at token 10 and %d at token 999, want equal and non-zero", at10, at999)
			}
			if s := m.b.Stats(); s.LiveArrays != 0 || s.LeakedByGC != 0 {
				t.Fatalf("after Generate: got %d live arrays, %d leaked to the GC; want 0, 0", s.LiveArrays, s.LeakedByGC)
			}
			if res.Stats.PeakBytes <= 0 || res.Stats.TimeToFirstToken <= 0 || res.Stats.PromptTPS <= 0 || res.Stats.GenerationTPS <= 0 {
				t.Fatalf("stats not filled in: %+v", res.Stats)
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prompt []int32
		opts   Options
		fail   bool
		want   string
	}{
		{"empty-prompt", nil, Options{}, false, "empty prompt"},
		{"negative-step", fakePrompt(3), Options{PrefillStepSize: -1}, false, "prefill step size"},
		{"negative-temp", fakePrompt(3), Options{Sampler: SamplerOptions{Temp: -1}}, false, "temp"},
		{"xtc", fakePrompt(3), Options{Sampler: SamplerOptions{Temp: 1, XTCProbability: 0.5}}, false, "XTC"},
		{"min-p-range", fakePrompt(3), Options{Sampler: SamplerOptions{Temp: 1, MinP: 1.5}}, false, "min_p"},
		{"top-k-vocab", fakePrompt(3), Options{Sampler: SamplerOptions{Temp: 1, TopK: fakeV}}, false, "top_k"},
		{"penalty", fakePrompt(3), Options{Processors: ProcessorOptions{RepetitionPenalty: -2}}, false, "repetition penalty"},
		{"prompt-context", fakePrompt(3), Options{PromptContext: 7}, false, "prompt context"},
		{"logits-shape", fakePrompt(3), Options{}, true, "want [1, V] or [1, 1, V]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFake(t)
			m.fail = tc.fail
			_, err := Generate(m, tc.prompt, tc.opts, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
			if s := m.b.Stats(); s.LiveArrays != 0 {
				t.Fatalf("got %d live arrays after the error, want 0", s.LiveArrays)
			}
		})
	}
}
