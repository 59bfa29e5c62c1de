package promptcache_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/synth"
	"github.com/mlxgo/mlxgo/tensor"
)

// head64 writes and loads a tiny float32 synthetic checkpoint with head_dim
// 64 (the fixtures' 32 is not a TurboQuant head_dim).
func head64(t testing.TB) *minicpm5.Model {
	t.Helper()
	s := synth.Presets["tiny"]
	s.HeadDim, s.Heads, s.Quant, s.DType = 64, 4, "f32", tensor.F32
	dir := t.TempDir()
	if err := synth.WriteMLX(dir, s, nil); err != nil {
		t.Fatal(err)
	}
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); b.Close() })
	return m
}

// TestTurboRoundTrip saves a TurboQuant session (deferred k4v2) and resumes
// it: the file holds TurboQuantKVCache layers with the scheme, and the
// continuation equals the one of the session it was saved from (the codes
// come back bit for bit).
func TestTurboRoundTrip(t *testing.T) {
	m := head64(t)
	view, err := m.WithCache(nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 4, VBits: 2}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := generate.NewSession[nn.KVCache](view)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if err := s.Append(prompt, 4); err != nil {
		t.Fatal(err)
	}
	var f *promptcache.File
	if err := m.Backend().Do(func() (err error) { f, err = promptcache.FromCaches(m.Backend(), s.Caches(), nil); return err }); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "turbo.safetensors")
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	res, err := s.Generate(suffix, generate.Options{MaxTokens: 6}, nil)
	if err != nil {
		t.Fatal(err)
	}
	back, err := promptcache.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if l := back.Layers[0]; l.Class != promptcache.TurboQuantKVCacheClass || l.Turbo != (turboquant.Scheme{KBits: 4, VBits: 2}) || !l.TurboDeferred || l.Offset != len(prompt) {
		t.Fatalf("layer 0: class %s, scheme %v, deferred %v, offset %d", l.Class, l.Turbo, l.TurboDeferred, l.Offset)
	}
	if got := resume(t, m, path, 6); !slices.Equal(got, res.Tokens) {
		t.Errorf("resumed: %v, the saved session continued with %v", got, res.Tokens)
	}
}

// TestTurboFileErrors: a TurboQuant state that does not fit its scheme, or
// names bits not offered, is an error naming the layer and what is wrong.
func TestTurboFileErrors(t *testing.T) {
	m := head64(t)
	view, err := m.WithCache(nn.CacheOptions{Turbo: turboquant.Default})
	if err != nil {
		t.Fatal(err)
	}
	s, err := generate.NewSession[nn.KVCache](view)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if err := s.Append(prompt, 4); err != nil {
		t.Fatal(err)
	}
	var f *promptcache.File
	if err := m.Backend().Do(func() (err error) { f, err = promptcache.FromCaches(m.Backend(), s.Caches(), nil); return err }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(l *promptcache.Layer)
		want string
	}{
		{"key-bits", func(l *promptcache.Layer) { l.Turbo.KBits = 3 }, "layer 0: TurboQuantKVCache state: turboquant key bits 3"},
		{"value-bits", func(l *promptcache.Layer) { l.Turbo.VBits = 4 }, "value codes U8 [1 2 256 24], want U8 [1 2 256 32]"},
		{"key-type", func(l *promptcache.Layer) { l.Keys = l.Keys.Convert(tensor.U8) }, "key codes U8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := *f
			g.Layers = slices.Clone(f.Layers)
			tc.edit(&g.Layers[0])
			path := filepath.Join(t.TempDir(), "bad.safetensors")
			if err := g.Write(path); err != nil {
				t.Fatal(err)
			}
			if _, err := promptcache.Read(path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// A file naming a class mlxgo does not know.
	path := filepath.Join(t.TempDir(), "good.safetensors")
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	st, err := tensor.OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var ts []*tensor.Dense
	for _, n := range st.Names() {
		d, err := st.TensorCopy(n)
		if err != nil {
			t.Fatal(err)
		}
		names, ts = append(names, n), append(ts, d)
	}
	meta := st.Metadata()
	st.Close()
	meta["1.1"] = "ChunkedKVCache"
	bad := filepath.Join(t.TempDir(), "class.safetensors")
	if err := tensor.WriteSafetensors(bad, names, ts, meta); err != nil {
		t.Fatal(err)
	}
	if _, err := promptcache.Read(bad); err == nil || !strings.Contains(err.Error(), "layer 1 is a ChunkedKVCache") {
		t.Errorf("unknown class: got %v", err)
	}
	_ = os.Remove(bad)
}
