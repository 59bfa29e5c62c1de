package generate_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	_ "github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
)

// loadTiny loads a fixture checkpoint on a fresh CPU backend.
func loadTiny(t *testing.T, name string) (*minicpm5.Model, backend.Backend) {
	return loadTinyOn(t, "cpu", name)
}

// loadTinyOn loads a fixture checkpoint on a fresh backend of that name.
func loadTinyOn(t *testing.T, be, name string) (*minicpm5.Model, backend.Backend) {
	t.Helper()
	dir := fixtureDir() + "/models/" + name
	testenv.Need(t, dir+"/config.json", "the oracle's tiny checkpoints; run `make oracle`")
	b, err := backend.Open(be, backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var m *minicpm5.Model
	err = b.Do(func() (err error) { m, err = minicpm5.Load(b, dir); return err })
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Do(func() error { return m.Close() }); b.Close() })
	return m, b
}

func greedy(t *testing.T, m *minicpm5.Model, prompt []int32, n int) []int32 {
	t.Helper()
	res, err := generate.Generate(m, prompt, generate.Options{MaxTokens: n, PrefillStepSize: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Tokens
}

func ids(n, seed int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*131 + seed*17 + 3) % 1000)
	}
	return p
}

// TestSessionModel runs sessions on the tiny f32 checkpoints (every backend
// compiled in):
// a continued, trimmed or forked session must generate exactly what a
// generation of the whole sequence from an empty cache generates, a fork's
// writes must not reach the session it came from (copy on write), and
// releasing every session must leave no live array.
func TestSessionModel(t *testing.T) {
	for _, tc := range sessionCases() {
		be, ckpt := tc[0], tc[1]
		m, b := loadTinyOn(t, be, ckpt)
		ckpt = be + "/" + ckpt
		opts := generate.Options{MaxTokens: 6, PrefillStepSize: 4}
		p1, p2, p3 := ids(9, 1), ids(3, 2), ids(5, 3)
		live := b.Stats().LiveArrays
		t.Run(ckpt+"/continue", func(t *testing.T) {
			s, _ := generate.NewSession[nn.KVCache](m)
			defer s.Release()
			r1, err := s.Generate(p1, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := s.Generate(p2, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			whole := append(append(slices.Clone(p1), r1.Tokens...), p2...)
			if want := greedy(t, m, whole, 6); !slices.Equal(r2.Tokens, want) {
				t.Errorf("got %v, want %v", r2.Tokens, want)
			}
			if s.Len() != len(whole)+6 {
				t.Errorf("session holds %d tokens, want %d", s.Len(), len(whole)+6)
			}
		})
		t.Run(ckpt+"/trim", func(t *testing.T) {
			s, _ := generate.NewSession[nn.KVCache](m)
			defer s.Release()
			if _, err := s.Generate(p1, opts, nil); err != nil {
				t.Fatal(err)
			}
			if err := s.Trim(len(p1)); err != nil {
				t.Fatal(err)
			}
			r, err := s.Generate(p2, opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := greedy(t, m, append(slices.Clone(p1), p2...), 6); !slices.Equal(r.Tokens, want) {
				t.Errorf("got %v, want %v", r.Tokens, want)
			}
		})
		t.Run(ckpt+"/fork", func(t *testing.T) {
			s, _ := generate.NewSession[nn.KVCache](m)
			defer s.Release()
			if err := s.Append(p1, 4); err != nil {
				t.Fatal(err)
			}
			f, err := s.Fork()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Release()
			// s overwrites positions 4.. of the buffers f shares with it,
			// then f continues from p1: the write must have copied.
			if err := s.Trim(4); err != nil {
				t.Fatal(err)
			}
			for i, c := range []struct {
				s      *generate.Session[nn.KVCache]
				prompt []int32
			}{{s, p3}, {f, p2}, {s, p2}} {
				before := c.s.Tokens()
				r, err := c.s.Generate(c.prompt, opts, nil)
				if err != nil {
					t.Fatal(err)
				}
				whole := append(before, c.prompt...)
				if want := greedy(t, m, whole, 6); !slices.Equal(r.Tokens, want) {
					t.Errorf("generation %d: got %v, want %v", i, r.Tokens, want)
				}
			}
		})
		t.Run(ckpt+"/released", func(t *testing.T) {
			if got := b.Stats().LiveArrays; got != live {
				t.Errorf("got %d live arrays after the sessions, want %d (as before them)", got, live)
			}
		})
	}
}

// sessionCases are the (backend, checkpoint) pairs of TestSessionModel.
func sessionCases() [][2]string {
	var out [][2]string
	for _, be := range backend.Names() {
		for _, ckpt := range []string{"optiq-f32", "fp-f32"} {
			out = append(out, [2]string{be, ckpt})
		}
	}
	return out
}

// TestSessionAppendMatchesGenerate: Append then Generate of the last token
// gives what Generate of the whole prompt gives.
func TestSessionAppendMatchesGenerate(t *testing.T) {
	m, _ := loadTiny(t, "optiq-f32")
	for _, n := range []int{1, 4, 9} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := ids(n+1, n)
			s, _ := generate.NewSession[nn.KVCache](m)
			defer s.Release()
			if err := s.Append(p[:n], 4); err != nil {
				t.Fatal(err)
			}
			r, err := s.Generate(p[n:], generate.Options{MaxTokens: 5}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := greedy(t, m, p, 5); !slices.Equal(r.Tokens, want) {
				t.Errorf("got %v, want %v", r.Tokens, want)
			}
		})
	}
}
