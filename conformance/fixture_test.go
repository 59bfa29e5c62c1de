package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadConfinesPaths: the paths a manifest or a case names stay inside
// the fixture directory (a hostile manifest cannot make Load read
// elsewhere), and the error names the field and the path.
func TestLoadConfinesPaths(t *testing.T) {
	const good = `{"format": 1, "name": "c", "kind": "op", "op": "abs", "arrays": "c.safetensors"}`
	cases := []struct {
		name, file, caseJSON, want string
	}{
		{"file parent", "../c.json", good, `file "../c.json" is not a path inside`},
		{"file absolute", "/etc/passwd", good, `file "/etc/passwd" is not a path inside`},
		{"file empty", "", good, `file "" is not a path inside`},
		{"arrays parent", "c.json", strings.Replace(good, `"c.safetensors"`, `"../../x.safetensors"`, 1), `arrays "../../x.safetensors" is not a path inside`},
		{"arrays absolute", "c.json", strings.Replace(good, `"c.safetensors"`, `"/dev/zero"`, 1), `arrays "/dev/zero" is not a path inside`},
		{"checkpoint far", "c.json", strings.Replace(good, `"kind": "op"`, `"kind": "model", "checkpoint": "../../.."`, 1), `checkpoint "../../.." is neither`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			manifest := `{"format": 1, "cases": [{"name": "c", "kind": "op", "file": "` + c.file + `"}]}`
			if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte(c.caseJSON), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestRandomParamsChecked: random_split and random_uniform cases with a
// count or shape out of range are errors naming the case, checked before
// anything is allocated or read (a nil Arrays is never touched).
func TestRandomParamsChecked(t *testing.T) {
	cases := []struct {
		op     string
		params map[string]any
		want   string
	}{
		{"random_split", map[string]any{"num": -3.0}, "num = -3, want an integer in [1, "},
		{"random_split", map[string]any{"num": 0.0}, "num = 0, want"},
		{"random_split", map[string]any{"num": 1e15}, "want an integer in [1, "},
		{"random_uniform", map[string]any{"shape": []any{-1.0}, "low": 0.0, "high": 1.0}, "shape[0] = -1, want an integer in [0, "},
		{"random_uniform", map[string]any{"shape": []any{2.5}, "low": 0.0, "high": 1.0}, "shape[0] = 2.5, want"},
		{"random_uniform", map[string]any{"shape": []any{1e12}, "low": 0.0, "high": 1.0}, "shape[0] = 1e+12, want"},
		{"random_uniform", map[string]any{"shape": []any{4096.0, 4096.0, 4096.0}, "low": 0.0, "high": 1.0}, "holds more than"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%v", tc.op, tc.params), func(t *testing.T) {
			c := &Case{Name: "bad", Op: tc.op, Params: tc.params}
			run := runRandomSplit
			if tc.op == "random_uniform" {
				run = runRandomUniform
			}
			_, err := run(nil, c, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "case bad") {
				t.Errorf("got %v, want an error naming case bad and containing %q", err, tc.want)
			}
		})
	}
}
