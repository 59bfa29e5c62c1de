package main

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runDiff(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	rc := run(append([]string{"diff"}, args...), &out, &errOut)
	return rc, out.String(), errOut.String()
}

// TestDiffDefault: `mlxgo diff` alone compares the CPU backend with the
// oracle's taps on the embedded checkpoint, and passes.
func TestDiffDefault(t *testing.T) {
	rc, out, errOut := runDiff("--format", "json")
	if rc != 0 {
		t.Fatalf("mlxgo diff: exit %d, want 0\n%s%s", rc, out, errOut)
	}
	var r struct {
		FirstFail string `json:"first_fail"`
		BLabel    string `json:"b_label"`
		Taps      []struct {
			Name string `json:"name"`
			Pass bool   `json:"pass"`
		} `json:"taps"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("json output: %v\n%s", err, out)
	}
	if r.FirstFail != "" || len(r.Taps) != 42 || !strings.Contains(r.BLabel, "mlx_lm") {
		t.Errorf("got first_fail %q, %d taps, B %q; want none, 42, the oracle dump", r.FirstFail, len(r.Taps), r.BLabel)
	}
}

func TestDiffFlags(t *testing.T) {
	dir := filepath.Join("..", "..", "conformance", "testdata", "models", "q4g64-bf16")
	png := filepath.Join(t.TempDir(), "growth.png")
	save := filepath.Join(t.TempDir(), "a.safetensors")
	rc, out, errOut := runDiff("--model", dir, "--a", "cpu", "--b", "cpu:high", "--op", "layers.0.sdpa", "--format", "markdown", "--plot", png, "--save-a", save)
	if rc != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", rc, out, errOut)
	}
	for _, want := range []string{"| layers.0.attn | BF16 |", "replay of layers.0.attn in isolation", "cpu:high [B]", "plot: " + png} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	checkPNG(t, png)
	// The saved dump is a valid side: comparing it with the same backend is exact and passes.
	rc, out, errOut = runDiff("--model", dir, "--a", save, "--b", "cpu", "--op", "none")
	if rc != 0 || !strings.Contains(out, "all 42 taps within tolerance") {
		t.Errorf("saved dump vs cpu: exit %d\n%s%s", rc, out, errOut)
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}

func TestDiffBadInput(t *testing.T) {
	dir := filepath.Join("..", "..", "conformance", "testdata", "models", "optiq-f32")
	for _, c := range []struct {
		name string
		args []string
		rc   int
		msg  string
	}{
		{"unknown-backend", []string{"--a", "nosuch"}, 2, `backend "nosuch" is not compiled in`},
		{"bad-ids", []string{"--prompt-ids", "1,x"}, 2, "--prompt-ids"},
		{"bad-format", []string{"--format", "xml"}, 2, "--format"},
		{"negative-worst", []string{"--worst", "-1"}, 2, "--worst -1, want >= 1"},
		{"zero-worst", []string{"--worst", "0"}, 2, "--worst 0, want >= 1"},
		// --exact was checked only after both forward passes had run (issue 19).
		{"bad-exact", []string{"--exact", "maybe"}, 2, `--exact "maybe", want auto, on or off`},
		{"ids-vs-dump", []string{"--model", dir, "--prompt-ids", "1,2"}, 1, "was recorded for prompt"},
		{"bad-op", []string{"--model", dir, "--op", "layers.0.nosuch"}, 1, "no tap is made by an op"},
		{"id-too-large", []string{"--model", dir, "--b", "cpu:high", "--prompt-ids", "5000"}, 1, "vocab_size"},
		{"not-a-dump", []string{"--model", dir, "--b", filepath.Join(dir, "model.safetensors")}, 1, "mlxgo-taps"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc, out, errOut := runDiff(c.args...)
			if rc != c.rc || !strings.Contains(errOut, c.msg) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q\n%s", rc, errOut, c.rc, c.msg, out)
			}
		})
	}
}
