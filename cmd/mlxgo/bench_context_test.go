package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/bench"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/synth"
)

// TestBenchContextEndToEnd runs the context sweep on the tiny fixture
// checkpoint (contexts 64 and 128, the full and the 8-bit quantized cache)
// with a stand-in llama-bench that records its arguments and prints canned
// results at both depths: one table per measure with a row per
// configuration and kind (llama.cpp's f16 and q8_0 rows from the canned
// values, with the ratio to the first context), llama-bench asked for -d,
// -fa 1 and the kind's cache type, and --report re-rendering the JSON.
func TestBenchContextEndToEnd(t *testing.T) {
	t.Setenv("MLXGO_TEST_AS_MLXGO", "1")
	dir := t.TempDir()
	twin := filepath.Join(dir, "optiq.gguf")
	if err := synth.WriteGGUF(twin, synth.Presets["tiny"], nil); err != nil {
		t.Fatal(err)
	}
	llama, argsLog := filepath.Join(dir, "llama-bench"), filepath.Join(dir, "args.log")
	canned := `[{"n_prompt": 8, "n_gen": 0, "n_depth": 64, "avg_ts": 160, "samples_ts": [160]},
{"n_prompt": 0, "n_gen": 3, "n_depth": 64, "avg_ts": 40, "samples_ts": [40]},
{"n_prompt": 8, "n_gen": 0, "n_depth": 128, "avg_ts": 120, "samples_ts": [120]},
{"n_prompt": 0, "n_gen": 3, "n_depth": 128, "avg_ts": 30, "samples_ts": [30]}]`
	touch(t, llama, "#!/bin/sh\necho \"$@\" >> "+argsLog+"\ncat <<'EOF'\n"+canned+"\nEOF\n")
	if err := os.Chmod(llama, 0o755); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "results")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--model", filepath.Join(testModels, "optiq-bf16"), "--gguf", twin, "--contexts", "64,128",
		"--context-prefill", "8", "--decode-tokens", "3", "--reps", "1", "--warmup", "0", "--kv-cache", "full,quantized", "--kv-group-size", "32",
		"--configs", "cpu-reference,llama.cpp", "--llama-bench", llama, "--python", filepath.Join(dir, "no-python"), "--results", results}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	table, _, ok := strings.Cut(out.String(), "\nResults: ")
	if !ok {
		t.Fatalf("no Results line in\n%s", out.String())
	}
	for _, want := range []string{
		"| config | cache | B/token | decode tok/s @64 | decode tok/s @128 |",
		"| cpu-reference | full | 768 | ", "| cpu-reference | quantized 8-bit g32 | 432 | ",
		"| llama.cpp | q8_0 | 408 | 40.0 (n=1) | 30.0 (n=1) (0.75×) |",
		"| llama.cpp | f16 | 768 | 160 (n=1) | 120 (n=1) (0.75×) |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("missing %q in\n%s", want, table)
		}
	}
	args, err := os.ReadFile(argsLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"-d 64,128 -ctk f16 -ctv f16 -fa 1", "-d 64,128 -ctk q8_0 -ctv q8_0 -fa 1", "-p 8 -n 3"} {
		if !strings.Contains(string(args), want) {
			t.Errorf("llama-bench arguments %q lack %q", args, want)
		}
	}
	jsons, _ := filepath.Glob(filepath.Join(results, "*-context.json"))
	if len(jsons) != 1 {
		t.Fatalf("got result files %v, want one context JSON", jsons)
	}
	out.Reset()
	if code := run([]string{"bench", "--report", jsons[0]}, &out, &errb); code != 0 {
		t.Fatalf("--report: exit %d: %s", code, errb.String())
	}
	if out.String() != table {
		t.Errorf("--report:\n%s\nwant the run's table:\n%s", out.String(), table)
	}
}

// TestBenchContextMLXLM runs the context sweep's mlx_lm rows
// (bench/mlx_lm_driver.py --contexts on the oracle venv) beside the CPU
// backend on the tiny fixture checkpoint, the full and the 8-bit quantized
// cache at contexts 64 and 128: every row has both points with positive
// prefill and decode speeds at the context's depth, and mlx_lm's memory per
// cached token, summed over its own caches' arrays, is ours (768 bytes
// full, 432 quantized in groups of 32).
func TestBenchContextMLXLM(t *testing.T) {
	t.Setenv("MLXGO_TEST_AS_MLXGO", "1")
	py := testenv.Python(t)
	root := testenv.RepoRoot(t)
	results := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--model", filepath.Join(testModels, "optiq-bf16"), "--contexts", "64,128",
		"--context-prefill", "8", "--decode-tokens", "3", "--reps", "1", "--warmup", "0", "--kv-cache", "full,quantized", "--kv-group-size", "32",
		"--configs", "cpu-reference,mlx_lm", "--python", py, "--driver", filepath.Join(root, "bench", "mlx_lm_driver.py"), "--results", results}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	jsons, _ := filepath.Glob(filepath.Join(results, "*-context.json"))
	if len(jsons) != 1 {
		t.Fatalf("got result files %v, want one context JSON", jsons)
	}
	data, err := os.ReadFile(jsons[0])
	if err != nil {
		t.Fatal(err)
	}
	var res bench.ContextResult
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	bytesPer := map[string]float64{}
	for _, r := range res.Rows {
		if r.Err != "" {
			t.Errorf("%s %s: %s", r.Config, r.Kind, r.Err)
			continue
		}
		if len(r.Points) != 2 {
			t.Errorf("%s %s: %d points, want 2", r.Config, r.Kind, len(r.Points))
			continue
		}
		for i, p := range r.Points {
			if ctx := []int{64, 128}[i]; p.Context != ctx || p.PrefillDepth != ctx || p.DecodeDepth != ctx || !(p.PrefillTPS.Median > 0) || !(p.DecodeTPS.Median > 0) {
				t.Errorf("%s %s: point %d: %+v", r.Config, r.Kind, i, p)
			}
		}
		bytesPer[r.Config+"/"+r.Kind] = r.BytesPerToken
	}
	for kind, want := range map[string]float64{"full": 768, "quantized": 432} {
		if got, ours := bytesPer["mlx_lm/"+kind], bytesPer["cpu-reference/"+kind]; got != want || ours != want {
			t.Errorf("%s cache: %v bytes per token in mlx_lm, %v in ours, want %v", kind, got, ours, want)
		}
	}
}

// TestBenchContextUsageErrors: bad sweep flags are named before anything
// is measured or written.
func TestBenchContextUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--contexts", "4k,1k"}, "want them ascending"},
		{[]string{"--contexts", "1x"}, `context "1x"`},
		{[]string{"--contexts", "1k", "--kv-cache", "turbo:k3v3"}, `--kv-cache turbo:k3v3: turboquant key bits 3`},
		{[]string{"--contexts", "1k", "--kv-cache", "paged"}, `--kv-cache paged: KV cache kind "paged": want one of full, quantized, rotating, turbo`},
		{[]string{"--contexts", "1k", "--kv-cache", "quantized", "--kv-bits", "5"}, "KV bits 5"},
		{[]string{"--contexts", "1k", "--kv-cache", "rotating", "--max-kv-size", "3"}, "max KV size 3"},
		{[]string{"--contexts", "1k", "--context-prefill", "0"}, "--context-prefill 0"},
		{[]string{"--contexts", "1k", "--models", "synth:tiny"}, "--contexts measures one checkpoint"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bench", "--synth-cache", "/nonexistent/cache"}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
