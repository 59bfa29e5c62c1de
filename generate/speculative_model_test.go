package generate_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
)

// loadTinyWith loads a fixture checkpoint on b (a draft model shares the
// target's backend).
func loadTinyWith(t *testing.T, b backend.Backend, name string) *minicpm5.Model {
	t.Helper()
	dir := fixtureDir() + "/models/" + name
	testenv.Need(t, dir+"/config.json", "the oracle's tiny checkpoints; run `make oracle`")
	var m *minicpm5.Model
	if err := b.Do(func() (err error) { m, err = minicpm5.Load(b, dir); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Do(func() error { return m.Close() }) })
	return m
}

// lookupRun simulates prompt lookup against a known greedy continuation,
// on the host: per verify step, the proposal (Lookup of the sequence so
// far, at most the tokens left) and how many of it match the continuation;
// it returns the drafted and accepted counts and the from-draft marks that
// GenerateSpeculative must report when it reproduces the continuation.
func lookupRun(p *generate.PromptLookup, prompt, cont []int32, k int) (drafted, accepted int, fromDraft []bool) {
	hist := slices.Clone(prompt)
	for len(hist)-len(prompt) < len(cont) {
		done := len(hist) - len(prompt)
		prop := p.Lookup(hist, min(k, len(cont)-done))
		drafted += len(prop)
		a := 0
		for a < len(prop) && prop[a] == cont[done+a] {
			a++
		}
		accepted += a
		for i := range a {
			fromDraft = append(fromDraft, true)
			hist = append(hist, cont[done+i])
		}
		if len(hist)-len(prompt) < len(cont) {
			fromDraft = append(fromDraft, false)
			hist = append(hist, cont[len(hist)-len(prompt)])
		}
	}
	return drafted, accepted, fromDraft
}

// TestSpeculativeModel: on the tiny f32 checkpoints (every backend compiled
// in), speculative greedy decoding with the target drafting for itself,
// another checkpoint of the same vocabulary drafting, and prompt lookup
// gives exactly Generate's tokens; self drafting accepts every draft;
// prompt lookup accepts exactly what a host simulation of its proposals
// against those tokens accepts; a second generation continuing the session
// (both models' caches) equals a fresh generation of the whole sequence.
func TestSpeculativeModel(t *testing.T) {
	for _, be := range backend.Names() {
		for _, ckpt := range []string{"optiq-f32", "fp-f32"} {
			m, b := loadTinyOn(t, be, ckpt)
			draft := loadTinyWith(t, b, "q4g64-f32")
			p1, p2 := ids(11, 5), ids(4, 6)
			const n = 16
			want1 := greedy(t, m, p1, n)
			whole := append(append(slices.Clone(p1), want1...), p2...)
			want2 := greedy(t, m, whole, n)
			self, err := generate.NewDraftModel[nn.KVCache](m)
			if err != nil {
				t.Fatal(err)
			}
			other, _ := generate.NewDraftModel[nn.KVCache](draft)
			lookup, _ := generate.NewPromptLookup(2)
			for _, tc := range []struct {
				name string
				d    generate.Drafter
				k    int
			}{{"self", self, 3}, {"q4g64", other, 2}, {"lookup2", lookup, 4}} {
				t.Run(fmt.Sprintf("%s/%s/%s", be, ckpt, tc.name), func(t *testing.T) {
					s, _ := generate.NewSession[nn.KVCache](m)
					defer s.Release()
					opts := generate.SpeculativeOptions{Options: generate.Options{MaxTokens: n, PrefillStepSize: 4}, NumDraftTokens: tc.k}
					for i, c := range []struct{ p, want []int32 }{{p1, want1}, {p2, want2}} {
						got, err := s.GenerateSpeculative(c.p, tc.d, opts, nil)
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(got.Tokens, c.want) {
							t.Fatalf("generation %d: got %v, want %v (Generate)", i, got.Tokens, c.want)
						}
						t.Logf("generation %d: %d of %d drafts accepted, %d verify steps", i, got.Accepted, got.Drafted, got.Steps)
						switch tc.name {
						case "self":
							if got.Accepted != got.Drafted {
								t.Errorf("generation %d: self drafting accepted %d of %d", i, got.Accepted, got.Drafted)
							}
						case "lookup2":
							hist := s.Tokens()[:s.Len()-n-len(c.p)]
							hist = append(hist, c.p...)
							dr, ac, fd := lookupRun(lookup, hist, c.want, tc.k)
							if got.Drafted != dr || got.Accepted != ac || !slices.Equal(got.FromDraft, fd) {
								t.Errorf("generation %d: drafted %d, accepted %d, from draft %v; want %d, %d, %v", i, got.Drafted, got.Accepted, got.FromDraft, dr, ac, fd)
							}
						}
					}
					if want := append(slices.Clone(whole), want2...); !slices.Equal(s.Tokens(), want) {
						t.Errorf("the session holds %v, want %v", s.Tokens(), want)
					}
				})
			}
			self.Release()
			other.Release()
		}
	}
}

// TestPromptLookupRepetitive: on a prompt that repeats a phrase, the tied
// checkpoint (whose greedy runs repeat their input's last token, see
// conformance/oracle/models.py) gives a repetitive output of which prompt
// lookup accepts most tokens, still giving Generate's.
func TestPromptLookupRepetitive(t *testing.T) {
	m, _ := loadTiny(t, "tied-f32")
	phrase := []int32{17, 401, 93, 250, 7}
	var p []int32
	for range 4 {
		p = append(p, phrase...)
	}
	const n = 24
	want := greedy(t, m, p, n)
	lookup, _ := generate.NewPromptLookup(3)
	s, _ := generate.NewSession[nn.KVCache](m)
	defer s.Release()
	got, err := s.GenerateSpeculative(p, lookup, generate.SpeculativeOptions{Options: generate.Options{MaxTokens: n, PrefillStepSize: 4}, NumDraftTokens: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Tokens, want) {
		t.Fatalf("got %v, want %v (Generate)", got.Tokens, want)
	}
	dr, ac, _ := lookupRun(lookup, p, want, 8)
	t.Logf("greedy %v: %d of %d drafts accepted in %d verify steps", want, got.Accepted, got.Drafted, got.Steps)
	if got.Drafted != dr || got.Accepted != ac {
		t.Errorf("drafted %d, accepted %d; want %d, %d", got.Drafted, got.Accepted, dr, ac)
	}
	if got.Accepted < n/2 {
		t.Errorf("accepted %d of %d tokens from the lookup, want at least half on a repetitive prompt", got.Accepted, n)
	}
}
