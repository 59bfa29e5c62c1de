package generate_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
)

// TestSpeculativeCacheKinds: speculative greedy decoding on a quantized,
// rotating or TurboQuant cache (the target's and the draft model's caches
// of that kind) gives exactly the tokens plain greedy decoding gives on
// that kind, on float32 checkpoints on the CPU backend: the target drafting
// for itself (every draft accepted), another checkpoint drafting (drafts
// rejected, the caches trimmed) and prompt lookup. The quantized caches
// convert during the prefill (quantized_kv_start below the prompt length),
// where plain and speculative decoding convert at the same point; the
// rotating window holds the whole sequence (see
// TestSpeculativeRotatingPastWindow for what happens past it).
func TestSpeculativeCacheKinds(t *testing.T) {
	const n = 16
	p := ids(11, 5)
	tiny, b := loadTiny(t, "optiq-f32")
	tinyDraft := loadTinyWith(t, b, "q4g64-f32")
	h64 := head64Model(t, nil, 0)
	h64Draft := head64Model(t, h64.Backend(), 99) // other weights of the same shapes
	for _, tc := range []struct {
		name     string
		m, draft *minicpm5.Model
		o        nn.CacheOptions
	}{
		{"kv8g32-start0", tiny, tinyDraft, nn.CacheOptions{KVBits: 8, KVGroupSize: 32}},
		{"kv4g32-start6", tiny, tinyDraft, nn.CacheOptions{KVBits: 4, KVGroupSize: 32, QuantizedKVStart: 6}},
		{"rotating-32", tiny, tinyDraft, nn.CacheOptions{MaxKVSize: 32}},
		{"turbo-k8v3", h64, h64Draft, nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 8, VBits: 3}}},
		{"turbo-k4v2-eager", h64, h64Draft, nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 4, VBits: 2}, TurboEager: true}},
	} {
		view, err := tc.m.WithCache(tc.o)
		if err != nil {
			t.Fatal(err)
		}
		dview, err := tc.draft.WithCache(tc.o)
		if err != nil {
			t.Fatal(err)
		}
		res, err := generate.Generate(view, p, generate.Options{MaxTokens: n, PrefillStepSize: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := res.Tokens
		self, err := generate.NewDraftModel[nn.KVCache](view)
		if err != nil {
			t.Fatal(err)
		}
		other, _ := generate.NewDraftModel[nn.KVCache](dview)
		lookup, _ := generate.NewPromptLookup(2)
		for _, d := range []struct {
			name string
			d    generate.Drafter
			k    int
		}{{"self", self, 3}, {"other", other, 2}, {"lookup2", lookup, 4}} {
			t.Run(tc.name+"/"+d.name, func(t *testing.T) {
				s, _ := generate.NewSession[nn.KVCache](view)
				defer s.Release()
				got, err := s.GenerateSpeculative(p, d.d, generate.SpeculativeOptions{Options: generate.Options{MaxTokens: n, PrefillStepSize: 4}, NumDraftTokens: d.k}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Tokens, want) {
					t.Fatalf("got %v, want %v (Generate on the same cache kind)", got.Tokens, want)
				}
				t.Logf("%d of %d drafts accepted, %d verify steps", got.Accepted, got.Drafted, got.Steps)
				if d.name == "self" && got.Accepted != got.Drafted {
					t.Errorf("self drafting accepted %d of %d", got.Accepted, got.Drafted)
				}
				if d.name == "other" && got.Accepted == got.Drafted {
					t.Errorf("the other checkpoint's drafts were all accepted (%d): no trim was tested", got.Drafted)
				}
			})
		}
		self.Release()
		other.Release()
	}
}

// TestSpeculativeRotatingPastWindow: once a verify step takes a rotating
// cache past its window, tokens are evicted that a rejected draft would
// need back, so the trim is refused with an error naming the cache (mlx_lm's
// RotatingKVCache is not trimmable then) instead of computing on a wrong
// window.
func TestSpeculativeRotatingPastWindow(t *testing.T) {
	m, b := loadTiny(t, "optiq-f32")
	view, err := m.WithCache(nn.CacheOptions{MaxKVSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	dview, err := loadTinyWith(t, b, "q4g64-f32").WithCache(nn.CacheOptions{MaxKVSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := generate.NewDraftModel[nn.KVCache](dview)
	defer d.Release()
	s, _ := generate.NewSession[nn.KVCache](view)
	defer s.Release()
	_, err = s.GenerateSpeculative(ids(11, 5), d, generate.SpeculativeOptions{Options: generate.Options{MaxTokens: 24, PrefillStepSize: 4}, NumDraftTokens: 3}, nil)
	if err == nil || !strings.Contains(err.Error(), "past its window") {
		t.Fatalf("got %v, want an error about trimming a rotating cache past its window", err)
	}
}

// TestSessionRotatingPastWindow: a session on a rotating cache that has
// evicted tokens refuses Trim (releasing the session) and Reuse starts over
// (keeps nothing) rather than trimming a window that lost what it needs;
// within the window both trim as on the full cache.
func TestSessionRotatingPastWindow(t *testing.T) {
	m, _ := loadTiny(t, "optiq-f32")
	view, err := m.WithCache(nn.CacheOptions{MaxKVSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := generate.NewSession[nn.KVCache](view)
	defer s.Release()
	p := ids(10, 3)
	if err := s.Append(p, 4); err != nil {
		t.Fatal(err)
	}
	if kept, err := s.Reuse(append(p[:8:8], 1, 2)); err != nil || kept != 8 || s.Len() != 8 {
		t.Fatalf("within the window: Reuse kept %d (session %d tokens), %v; want 8", kept, s.Len(), err)
	}
	if err := s.Append(ids(12, 4), 4); err != nil { // 20 tokens: past the window of 16
		t.Fatal(err)
	}
	held := s.Tokens()
	if kept, err := s.Reuse(append(held[:18:18], 7, 7)); err != nil || kept != 0 || s.Len() != 0 {
		t.Errorf("past the window: Reuse kept %d (session %d tokens), %v; want 0 (start over)", kept, s.Len(), err)
	}
	if err := s.Append(held, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.Trim(18); err == nil || !strings.Contains(err.Error(), "past its window") || s.Len() != 0 {
		t.Errorf("past the window: Trim gave %v with %d tokens held; want an error and the session released", err, s.Len())
	}
}
