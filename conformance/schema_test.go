package conformance

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	_ "github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestEveryRunnerHasASchema: a runner without a schema could never be validated.
func TestEveryRunnerHasASchema(t *testing.T) {
	for _, op := range Supported() {
		if _, ok := schemas[op]; !ok {
			t.Errorf("runner %s has no schema in schema.go", op)
		}
	}
	for op := range schemas {
		if _, ok := runners[op]; !ok {
			t.Errorf("schema for %s, which has no runner", op)
		}
	}
}

// TestFixturesValidate: every case the oracle wrote passes Validate and its arrays file
// holds exactly what its manifest lists.
func TestFixturesValidate(t *testing.T) {
	cases, err := Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if err := Validate(c); err != nil {
			t.Error(err)
			continue
		}
		a, err := c.OpenArrays()
		if err != nil {
			t.Error(err)
			continue
		}
		if err := validateArrays(c, a); err != nil {
			t.Error(err)
		}
		a.Close()
	}
}

const addCase = "testdata/ops/add__bcast__f32__3x1x5_4x1"

// editedCase copies the add fixture into a temporary directory with its manifest edited
// (and, when arrays is not nil, its arrays file rewritten by it), and loads it.
func editedCase(t *testing.T, edit func(m map[string]any), arrays func(names []string, ts []*tensor.Dense) ([]string, []*tensor.Dense)) *Case {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(addCase + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(m)
	}
	out, _ := json.Marshal(m)
	path := filepath.Join(dir, "c.json")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := tensor.OpenSafetensors(addCase + ".safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := f.Names()
	var ts []*tensor.Dense
	for _, n := range names {
		d, err := f.TensorCopy(n)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, d)
	}
	if arrays != nil {
		names, ts = arrays(names, ts)
	}
	if err := tensor.WriteSafetensors(filepath.Join(dir, m["arrays"].(string)), names, ts, nil); err != nil {
		t.Fatal(err)
	}
	c, err := LoadCase(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBadCasesFail: cases whose inputs, outputs, params, tolerance class or arrays do not
// match what the runner reads passed before (issue 19); each is now a failure naming the
// case and the mismatch.
func TestBadCasesFail(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if rs := CheckAs(b, editedCase(t, nil, nil), nil); len(rs) != 1 || !rs[0].Pass {
		t.Fatalf("the unedited copy does not pass: %v", rs)
	}
	drop := func(name string) func([]string, []*tensor.Dense) ([]string, []*tensor.Dense) {
		return func(ns []string, ts []*tensor.Dense) ([]string, []*tensor.Dense) {
			var on []string
			var ot []*tensor.Dense
			for i, n := range ns {
				if n != name {
					on, ot = append(on, n), append(ot, ts[i])
				}
			}
			return on, ot
		}
	}
	add := func(name string) func([]string, []*tensor.Dense) ([]string, []*tensor.Dense) {
		return func(ns []string, ts []*tensor.Dense) ([]string, []*tensor.Dense) {
			return append(ns, name), append(ts, ts[0])
		}
	}
	cases := []struct {
		name   string
		edit   func(m map[string]any)
		arrays func([]string, []*tensor.Dense) ([]string, []*tensor.Dense)
		want   string
	}{
		{"unknown param", func(m map[string]any) { m["params"].(map[string]any)["alpha"] = 2.0 }, nil, `unknown param "alpha"`},
		{"param of the wrong type", func(m map[string]any) { m["params"].(map[string]any)["views"] = "none" }, nil, `param "views" = none, want an object`},
		{"one input", func(m map[string]any) {
			m["inputs"] = []any{"a"}
			m["params"].(map[string]any)["input_order"] = []any{"a"}
		}, nil, "inputs [a], want [a, b]"},
		{"input_order differs", func(m map[string]any) { m["params"].(map[string]any)["input_order"] = []any{"b", "a"} }, nil, "input_order"},
		{"no outputs", func(m map[string]any) { m["outputs"] = []any{}; m["references"] = []any{} }, nil, "outputs [], want y"},
		{"unknown output", func(m map[string]any) { m["outputs"] = []any{"z"}; m["references"] = []any{} }, nil, "outputs [z], want y"},
		{"reference not an output", func(m map[string]any) { m["references"] = []any{"q"} }, nil, `reference "q" is not one of the outputs`},
		{"unknown tolerance class", func(m map[string]any) { m["tolerance"] = "loose" }, nil, `"loose"`},
		{"no tolerance class", func(m map[string]any) { delete(m, "tolerance") }, nil, "has no tolerance class"},
		{"only info outputs", func(m map[string]any) { m["tolerance"] = InfoClass }, nil, "checks no output"},
		{"output_tolerance for a non-output", func(m map[string]any) { m["output_tolerance"] = map[string]any{"z": "add"} }, nil, `output_tolerance names "z"`},
		{"unknown op", func(m map[string]any) { m["op"] = "frobnicate" }, nil, `no runner for op op "frobnicate"`},
		{"array missing", nil, drop("in.b"), "arrays file lacks in.b"},
		{"reference missing", nil, drop("ref.y"), "arrays file lacks ref.y"},
		{"extra array", nil, add("in.c"), `arrays file holds "in.c"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := editedCase(t, c.edit, c.arrays)
			rs := CheckAs(b, k, nil)
			if len(rs) != 1 || rs[0].Pass || !strings.Contains(rs[0].Detail+rs[0].String(), c.want) || !strings.Contains(rs[0].String(), k.Name) {
				t.Fatalf("got %v, want one failure naming the case and containing %q", rs, c.want)
			}
		})
	}
}

// TestPanickingCaseFails: a runner that panics (with a value that is not a backend error)
// becomes a failure naming the case, not a crash of the suite.
func TestPanickingCaseFails(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	orig := runners["add"]
	runners["add"] = func(backend.Backend, *Case, *Arrays) (map[string]*tensor.Dense, error) {
		var m map[string]int
		m["boom"]++ // a nil map write: a runtime panic
		return nil, nil
	}
	defer func() { runners["add"] = orig }()
	k := editedCase(t, nil, nil)
	rs := CheckAs(b, k, nil)
	if len(rs) != 1 || rs[0].Pass || !strings.Contains(rs[0].String(), k.Name) || !strings.Contains(rs[0].String(), "nil map") {
		t.Fatalf("got %v, want one failure naming the case and the panic", rs)
	}
}

// TestFillShapeChecked: zeros and full cases with a huge or negative shape are errors naming
// the case, before the backend is asked to allocate.
func TestFillShapeChecked(t *testing.T) {
	for _, shape := range [][]any{{1e6, 1e6}, {-1.0}, {1e12}} {
		c := &Case{Name: "bad", Op: "zeros", DType: "float32", Params: map[string]any{"shape": shape}}
		if _, err := runZeros(nil, c, nil); err == nil || !strings.Contains(err.Error(), "case bad") || !strings.Contains(err.Error(), "shape") {
			t.Errorf("shape %v: got %v, want an error naming case bad and its shape", shape, err)
		}
	}
}
