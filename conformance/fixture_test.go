package conformance

import (
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
