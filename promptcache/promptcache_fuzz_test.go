package promptcache_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/tensor"
)

// cacheFile prefills prompt into a session of m with caches of kind o and
// returns the prompt cache file mlxgo writes for it (for the full,
// rotating and quantized kinds, mlx_lm's format: TestMLXInterop,
// TestRotatingInterop and TestQuantizedInterop hold those files to
// mlx_lm's; for turbo, our TurboQuant format).
func cacheFile(t testing.TB, m *minicpm5.Model, o nn.CacheOptions) []byte {
	t.Helper()
	view, err := m.WithCache(o)
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
	if err := m.Backend().Do(func() (err error) {
		f, err = promptcache.FromCaches(m.Backend(), s.Caches(), map[string]string{"model": "head64"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzRead: any prompt cache file either fails to read with an error
// naming it, fails Check against the model with an error, or restores
// caches that the model continues from (one decode step); nothing panics
// and nothing is allocated beyond what the file holds. Seeds: a file of
// every kind mlxgo reads (mlx_lm's KVCache, RotatingKVCache and
// QuantizedKVCache, and our TurboQuantKVCache, eager and deferred), their
// halves, and hand-broken headers.
func FuzzRead(f *testing.F) {
	m := head64(f)
	dtypes, err := m.CacheDTypes()
	if err != nil {
		f.Fatal(err)
	}
	shape := promptcache.ModelShape(m.Config(), dtypes)
	var good [][]byte
	for _, o := range []nn.CacheOptions{
		{},
		{MaxKVSize: 6},
		{KVBits: 8, KVGroupSize: 32},
		{KVBits: 4, KVGroupSize: 64},
		{Turbo: turboquant.Scheme{KBits: 4, VBits: 2}},
		{Turbo: turboquant.Scheme{KBits: 8, VBits: 3}, TurboEager: true},
	} {
		data := cacheFile(f, m, o)
		good = append(good, data)
		f.Add(data)
		f.Add(data[:len(data)/2])
	}
	hdr := func(h string) []byte { return append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...) }
	for _, h := range []string{
		`{"__metadata__": {"1.0": "KVCache"}}`,
		`{"__metadata__": {"1.0": "ChunkedKVCache", "2.0": ""}}`,
		`{"__metadata__": {"1.1048576": "KVCache"}}`,
		`{"__metadata__": {"1.0": "KVCache", "2.1.0": "0.2", "2.1.1": "string"}}`,
		`{"__metadata__": {"1.0": "KVCache", "2.1.0": "0.2", "2.1.1": "scalar"}, "0.0": {"dtype": "F32", "shape": [1, 2, 4294967296, 64], "data_offsets": [0, 0]}}`,
		`{"__metadata__": {"1.0": "KVCache", "2.1.0": "0.2", "2.1.1": "scalar"}, "0.0": {"dtype": "F32", "shape": [1, 2, 1, 64], "data_offsets": [0, 512]}, "0.1": {"dtype": "F32", "shape": [1, 2, 1, 64], "data_offsets": [0, 512]}, "0.2": {"dtype": "I32", "shape": [], "data_offsets": [512, 516]}}` + strings.Repeat("\x00", 512) + "\xff\xff\xff\x7f",
		`{"__metadata__": {"1.0": "QuantizedKVCache"}}`,
		`{"__metadata__": {"1.0": "TurboQuantKVCache"}}`,
	} {
		f.Add(hdr(h))
	}
	// The well-formed seeds restore and run (so the target reaches the
	// model, not only the parser).
	for i, data := range good {
		if err := restoreAndStep(f, m, shape, data); err != nil {
			f.Fatalf("seed %d: %v", i, err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := restoreAndStep(t, m, shape, data); err != nil && !strings.Contains(err.Error(), "c.safetensors") {
			t.Fatalf("error %q does not name the file", err)
		}
	})
}

// restoreAndStep writes data to a file, reads it as a prompt cache,
// checks it against shape, restores its caches on m's backend and decodes
// one token from them. An error names the file.
func restoreAndStep(t testing.TB, m *minicpm5.Model, shape promptcache.Shape, data []byte) error {
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	pc, err := promptcache.Read(path)
	if err != nil {
		return err
	}
	for i, l := range pc.Layers {
		for _, x := range []*tensor.Dense{l.Keys, l.Values} {
			if x == nil || len(x.Shape) != 4 {
				t.Fatalf("layer %d of a file read without error: keys or values %v", i, x)
			}
		}
	}
	if err := pc.Check(shape); err != nil {
		return &pathError{path, err}
	}
	var caches []nn.KVCache
	if err := m.Backend().Do(func() (err error) { caches, err = pc.Caches(m.Backend()); return err }); err != nil {
		return &pathError{path, err}
	}
	s, err := generate.ResumeSession(m, caches, nil)
	if err != nil {
		for _, c := range caches {
			c.Release()
		}
		return &pathError{path, err}
	}
	defer s.Release()
	if _, err := s.Generate([]int32{11}, generate.Options{MaxTokens: 1}, nil); err != nil {
		t.Fatalf("caches restored from %s do not run: %v", path, err)
	}
	return nil
}

// pathError names the file an error of a later step came from.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }
