package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// writeModelDir writes config.json (baseConfig with edit applied) and, when gen is not "",
// generation_config.json into a new directory.
func writeModelDir(t *testing.T, edit func(map[string]any), gen string) string {
	t.Helper()
	dir := t.TempDir()
	m := baseConfig()
	m["eos_token_id"] = 2
	if edit != nil {
		edit(m)
	}
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if gen != "" {
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(gen), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadConfigNonRegularFiles: config.json as a symbolic link to /dev/zero was read without
// end; a directory gave a message naming no file (issue 19).
func TestLoadConfigNonRegularFiles(t *testing.T) {
	cases := []struct {
		name, file string
		make       func(path string) error
		want       string
	}{
		{"config symlink to /dev/zero", "config.json", func(p string) error { return os.Symlink("/dev/zero", p) }, "it is a device"},
		{"config directory", "config.json", func(p string) error { return os.Mkdir(p, 0o755) }, "it is a directory"},
		{"generation config directory", "generation_config.json", func(p string) error { return os.Mkdir(p, 0o755) }, "it is a directory"},
		{"generation config symlink to /dev/zero", "generation_config.json", func(p string) error { return os.Symlink("/dev/zero", p) }, "it is a device"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeModelDir(t, nil, "")
			path := filepath.Join(dir, c.file)
			os.Remove(path)
			if err := c.make(path); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(dir)
			wantErr(t, err, path, c.want)
		})
	}
}

// TestSafetensorsDirectory: a directory named like a shard was mapped and failed with
// "mapping: no such device".
func TestSafetensorsDirectory(t *testing.T) {
	dir := t.TempDir()
	shard := filepath.Join(dir, "model.safetensors")
	if err := os.Mkdir(shard, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := tensor.OpenSafetensorsDir(dir)
	wantErr(t, err, shard, "it is a directory")
}

// TestTokenIDFields: a negative eos_token_id was accepted, and a bad value from
// generation_config.json was reported as config.json's (issue 19).
func TestTokenIDFields(t *testing.T) {
	cases := []struct {
		name string
		edit func(map[string]any)
		gen  string
		subs []string
	}{
		{"negative eos", func(m map[string]any) { m["eos_token_id"] = -7 }, "", []string{"config.json", "eos_token_id", "-7"}},
		{"negative eos in a list", func(m map[string]any) { m["eos_token_id"] = []any{2, -7} }, "", []string{"config.json", "eos_token_id", "-7"}},
		{"negative bos", func(m map[string]any) { m["bos_token_id"] = -1 }, "", []string{"config.json", "bos_token_id", "-1"}},
		{"generation eos negative", nil, `{"eos_token_id": -7}`, []string{"generation_config.json", "eos_token_id", "-7"}},
		{"generation eos a string", nil, `{"eos_token_id": "abc"}`, []string{"generation_config.json", "eos_token_id", "integer"}},
		{"generation eos list with a string", nil, `{"eos_token_id": [2, "x"]}`, []string{"generation_config.json", "eos_token_id", "element 1"}},
		{"head_dim huge", func(m map[string]any) { m["head_dim"] = 1 << 30 }, "", []string{"config.json", "head_dim", "65536"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeModelDir(t, c.edit, c.gen)
			cfg, err := LoadConfig(dir)
			if err == nil {
				t.Fatalf("got eos %v, want an error containing %q", cfg.EOSTokenIDs, c.subs)
			}
			wantErr(t, err, c.subs...)
			if c.gen != "" && strings.Contains(err.Error(), filepath.Join(dir, "config.json")) {
				t.Errorf("error %q names config.json for generation_config.json's value", err)
			}
		})
	}
	// An eos id at or past vocab_size (1000) can never be produced: a warning.
	cfg, err := LoadConfig(writeModelDir(t, func(m map[string]any) { m["eos_token_id"] = 1000 }, ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], "eos_token_id 1000 is not below vocab_size 1000") {
		t.Errorf("eos 1000 of 1000: got warnings %q, want one about vocab_size", cfg.Warnings)
	}
}

// TestMalformedGenerationConfigWarns: an unparsable generation_config.json
// is ignored, as mlx_lm ignores it, but not silently (issue 19): LoadConfig
// returns a warning naming the file, which every command prints
// (TestLoadWarningsPrinted in cmd/mlxgo).
func TestMalformedGenerationConfigWarns(t *testing.T) {
	dir := writeModelDir(t, nil, `{"eos_token_id": `)
	cfg, err := LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, "generation_config.json") + ": ignored, does not parse"
	for _, w := range cfg.Warnings {
		if strings.Contains(w, want) {
			return
		}
	}
	t.Errorf("warnings %q: want one containing %q", cfg.Warnings, want)
}
