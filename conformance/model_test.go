package conformance_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
)

// modelCases returns the model cases of testdata.
func modelCases(t *testing.T) []*conformance.Case {
	t.Helper()
	cases, err := conformance.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var out []*conformance.Case
	for _, c := range cases {
		if c.Kind == "model" {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatal("no model cases in testdata/manifest.json")
	}
	return out
}

// TestLoadModelsReuse runs the optiq-f32 model cases on models loaded once
// by LoadModels, requires the same verdicts as with a model loaded per case,
// and requires ReleaseModels to give back every array the models held.
func TestLoadModelsReuse(t *testing.T) {
	cases := conformance.Filter(modelCases(t), "model/optiq-f32/")
	for _, name := range backend.Names() {
		t.Run(name, func(t *testing.T) {
			b, err := backend.Open(name, backend.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var perCase []string
			for _, c := range cases {
				for _, r := range conformance.Check(b, c) {
					perCase = append(perCase, verdict(r))
				}
			}
			before := b.Stats().LiveArrays
			if err := conformance.LoadModels(b, cases); err != nil {
				t.Fatal(err)
			}
			if got := b.Stats().LiveArrays; got <= before {
				t.Fatalf("got %d live arrays after LoadModels, want more than %d (the weights)", got, before)
			}
			var reused []string
			for _, c := range cases {
				for _, r := range conformance.Check(b, c) {
					reused = append(reused, verdict(r))
				}
			}
			if err := conformance.ReleaseModels(b); err != nil {
				t.Fatal(err)
			}
			if got := b.Stats().LiveArrays; got != before {
				t.Errorf("got %d live arrays after ReleaseModels, want %d", got, before)
			}
			if a, w := strings.Join(reused, "\n"), strings.Join(perCase, "\n"); a != w {
				t.Errorf("verdicts with LoadModels:\n%s\nwant (one model per case):\n%s", a, w)
			}
		})
	}
}

// verdict is a result without its detail text, for comparing runs.
func verdict(r conformance.Result) string {
	r.Detail = ""
	return r.String()
}

// TestDefaultCheckpoint extracts the embedded checkpoint and requires it to
// be testdata/models/optiq-f32 byte for byte, with its greedy case where
// DefaultGreedyCase says and every case passing on the cpu backend.
func TestDefaultCheckpoint(t *testing.T) {
	dir, cleanup, err := conformance.DefaultCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	src := filepath.Join("testdata", "models", "optiq-f32")
	var files []string
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range files {
		want, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Errorf("extracted checkpoint lacks %s: %v", rel, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("extracted %s differs from %s", rel, filepath.Join(src, rel))
		}
	}
	g, err := conformance.LoadCase(filepath.Join(dir, conformance.DefaultGreedyCase.Path))
	if err != nil {
		t.Fatal(err)
	}
	if g.Name != conformance.DefaultGreedyCase.Name || g.Op != "greedy" {
		t.Errorf("got case %q op %q at %s, want %q op greedy", g.Name, g.Op, conformance.DefaultGreedyCase.Path, conformance.DefaultGreedyCase.Name)
	}
	cases, err := conformance.CheckpointCases(dir)
	if err != nil {
		t.Fatal(err)
	}
	manifests := 0
	for _, rel := range files {
		if strings.HasPrefix(rel, "cases"+string(filepath.Separator)) && strings.HasSuffix(rel, ".json") {
			manifests++
		}
	}
	if len(cases) != manifests || manifests == 0 {
		t.Fatalf("got %d cases from CheckpointCases(%s), want %d (the manifests in %s/cases)", len(cases), dir, manifests, src)
	}
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range cases {
		for _, r := range conformance.Check(b, c) {
			if !r.Pass {
				t.Error(r.String())
			}
		}
	}
}

// TestModelDTypeMismatch requires a model case whose dtype disagrees with
// its checkpoint to fail with a message naming both.
func TestModelDTypeMismatch(t *testing.T) {
	dir, cleanup, err := conformance.DefaultCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	p := filepath.Join(dir, "cases", "model__optiq-f32__prefill__len7.json")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`"dtype": "float32"`), []byte(`"dtype": "bfloat16"`), 1)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := conformance.LoadCase(p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rs := conformance.Check(b, c)
	if len(rs) != 1 || rs[0].Pass || !strings.Contains(rs[0].Detail, "dtype bfloat16") || !strings.Contains(rs[0].Detail, "float32") {
		t.Fatalf("got %v, want one failure naming dtype bfloat16 and the checkpoint's float32", rs)
	}
}
