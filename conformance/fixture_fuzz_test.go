package conformance

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
)

var fuzzCaseSeeds = []string{
	"testdata/ops/add__bcast__f32__3x1x5_4x1",
	"testdata/ops/abs__bf16__3x67",
}

// FuzzCase: any case manifest with any arrays file either fails to load, or is checked on
// the cpu backend without panicking, and never passes unless it validates.
func FuzzCase(f *testing.F) {
	for _, s := range fuzzCaseSeeds {
		m, err := os.ReadFile(s + ".json")
		if err != nil {
			f.Fatal(err)
		}
		a, err := os.ReadFile(s + ".safetensors")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m, a)
	}
	entries, _ := filepath.Glob("testdata/ops/*.json")
	for i, p := range entries {
		if i%40 != 0 { // a spread of ops, not all 900 cases
			continue
		}
		m, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		a, err := os.ReadFile(p[:len(p)-len(".json")] + ".safetensors")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m, a)
	}
	f.Add([]byte(`{"format": 1, "name": "z", "kind": "op", "op": "zeros", "dtype": "float32", "inputs": [], "outputs": ["y"], "params": {"shape": [1000000, 1000000]}, "tolerance": "zeros", "arrays": "z.safetensors"}`), []byte{})
	f.Add([]byte(`{"format": 1, "name": "k", "kind": "op", "op": "apply_top_k", "dtype": "float32", "inputs": ["logprobs"], "outputs": ["y"], "params": {"top_k": -5}, "tolerance": "apply_top_k", "arrays": "k.safetensors"}`), []byte{})
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	f.Fuzz(func(t *testing.T, manifest, arrays []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "c.json")
		if err := os.WriteFile(path, manifest, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadCase(path)
		if err != nil || c.Kind != "op" {
			return // a model case would need a checkpoint; Load confines its path
		}
		if err := os.WriteFile(filepath.Join(dir, c.ArraysFile), arrays, 0o644); err != nil {
			return // e.g. "arrays": "sub/x.safetensors" without sub/
		}
		valid := Validate(c) == nil
		for _, r := range CheckAs(b, c, nil) {
			if r.Pass && !valid {
				t.Fatalf("case %s passed without validating", c.Name)
			}
		}
	})
}

// FuzzLoadIndex: any manifest.json either fails to load with an error or lists cases inside
// the fixture directory.
func FuzzLoadIndex(f *testing.F) {
	f.Add([]byte(`{"format": 1, "cases": [{"name": "c", "kind": "op", "file": "c.json"}]}`))
	f.Add([]byte(`{"format": 1, "cases": [{"name": "c", "kind": "op", "file": "../c.json"}]}`))
	f.Add([]byte(`{"format": 1, "cases": [{"name": "c", "kind": "op", "file": "/etc/passwd"}]}`))
	f.Add([]byte(`{"format": 2}`))
	good := []byte(`{"format": 1, "name": "c", "kind": "op", "op": "abs", "arrays": "c.safetensors"}`)
	f.Fuzz(func(t *testing.T, index []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "manifest.json"), index, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "c.json"), good, 0o644); err != nil {
			t.Fatal(err)
		}
		cases, err := Load(dir)
		if err != nil {
			return
		}
		for _, c := range cases {
			if rel, err := filepath.Rel(dir, c.Path); err != nil || !filepath.IsLocal(rel) {
				t.Fatalf("case %s read from %s, outside %s", c.Name, c.Path, dir)
			}
		}
	})
}
