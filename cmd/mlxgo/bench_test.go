package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/bench"
	"github.com/mlxgo/mlxgo/synth"
)

// TestMain lets the test binary stand in for mlxgo: with
// MLXGO_TEST_AS_MLXGO=1 it runs the command line instead of the tests, so
// that mlxgo bench's child processes (os.Executable: this binary) work.
func TestMain(m *testing.M) {
	if os.Getenv("MLXGO_TEST_AS_MLXGO") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

const testModels = "../../conformance/testdata/models"

// touch creates path (and its directory) with contents.
func touch(t *testing.T, path, contents string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(contents), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestParseModels(t *testing.T) {
	dir := t.TempDir()
	// a: twin a.gguf next to it; b: twin b/model.gguf; c: none; d: no config.json.
	for _, n := range []string{"a", "b", "c"} {
		touch(t, filepath.Join(dir, n, "config.json"), "{}")
	}
	touch(t, filepath.Join(dir, "a.gguf"), "")
	touch(t, filepath.Join(dir, "b", "model.gguf"), "")
	touch(t, filepath.Join(dir, "d", "x"), "")
	touch(t, filepath.Join(dir, "other.gguf"), "")
	touch(t, filepath.Join(dir, "x", "a", "config.json"), "{}")
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	cache := filepath.Join(dir, "cache")
	type ck struct{ name, model, gguf string }
	for _, tc := range []struct {
		name, list string
		want       []ck
		args       [][]string // synth flags per entry (nil: a directory)
		err        string     // error substring; "" for success
	}{
		{"dir with DIR.gguf", a, []ck{{"a", a, a + ".gguf"}}, [][]string{nil}, ""},
		{"dir with DIR/model.gguf", b + "/", []ck{{"b", b, filepath.Join(b, "model.gguf")}}, [][]string{nil}, ""},
		{"dir without twin", c, []ck{{"c", c, ""}}, [][]string{nil}, ""},
		{"dir=gguf", c + "=" + filepath.Join(dir, "other.gguf"), []ck{{"c", c, filepath.Join(dir, "other.gguf")}}, [][]string{nil}, ""},
		{"same base names told apart", a + " , " + filepath.Join(dir, "x", "a"), []ck{{a, a, a + ".gguf"}, {filepath.Join(dir, "x", "a"), filepath.Join(dir, "x", "a"), ""}}, [][]string{nil, nil}, ""},
		{"synth preset alone", "synth:minicpm5-1b", []ck{{"synth-minicpm5-1b-optiq", filepath.Join(cache, "synth-minicpm5-1b-optiq"), filepath.Join(cache, "synth-minicpm5-1b-optiq.gguf")}},
			[][]string{{"--preset", "minicpm5-1b"}}, ""},
		{"synth quant dtype flags", "synth:smollm2-135m:q4g32:f16:gguf-q4=q4_1:embed-bits=8",
			[]ck{{"synth-smollm2-135m-q4g32-f16-embed-bits-8-gguf-q4-q4_1", filepath.Join(cache, "synth-smollm2-135m-q4g32-f16-embed-bits-8-gguf-q4-q4_1"), filepath.Join(cache, "synth-smollm2-135m-q4g32-f16-embed-bits-8-gguf-q4-q4_1.gguf")}},
			[][]string{{"--preset", "smollm2-135m", "--quant", "q4g32", "--dtype", "f16", "--gguf-q4", "q4_1", "--embed-bits", "8"}}, ""},
		{"synth bf16 dtype is the default name", "synth:llama3.2-1b:q8g32:bf16", []ck{{"synth-llama3.2-1b-q8g32", filepath.Join(cache, "synth-llama3.2-1b-q8g32"), filepath.Join(cache, "synth-llama3.2-1b-q8g32.gguf")}},
			[][]string{{"--preset", "llama3.2-1b", "--quant", "q8g32", "--dtype", "bf16"}}, ""},
		{"synth dense", "synth:smollm2-360m:f16", []ck{{"synth-smollm2-360m-f16", filepath.Join(cache, "synth-smollm2-360m-f16"), filepath.Join(cache, "synth-smollm2-360m-f16.gguf")}},
			[][]string{{"--preset", "smollm2-360m", "--quant", "f16"}}, ""},
		{"synth without twin", "synth:tiny:q3g64", []ck{{"synth-tiny-q3g64", filepath.Join(cache, "synth-tiny-q3g64"), ""}},
			[][]string{{"--preset", "tiny", "--quant", "q3g64"}}, ""},
		{"dir and synth", c + ",synth:tiny", []ck{{"c", c, ""}, {"synth-tiny-optiq", filepath.Join(cache, "synth-tiny-optiq"), filepath.Join(cache, "synth-tiny-optiq.gguf")}},
			[][]string{nil, {"--preset", "tiny"}}, ""},

		{"empty entry", a + ",,", nil, nil, "an empty entry"},
		{"missing dir", filepath.Join(dir, "nope"), nil, nil, `--models entry "` + filepath.Join(dir, "nope") + `": ` + filepath.Join(dir, "nope") + " is not a directory"},
		{"not a checkpoint", filepath.Join(dir, "d"), nil, nil, `--models entry "` + filepath.Join(dir, "d") + `": ` + filepath.Join(dir, "d") + " has no config.json"},
		{"empty gguf", c + "=", nil, nil, `--models entry "` + c + `=": no GGUF file after '='`},
		{"missing gguf", c + "=" + filepath.Join(dir, "no.gguf"), nil, nil, "GGUF twin " + filepath.Join(dir, "no.gguf") + " is not a file"},
		{"no dir", "=x.gguf", nil, nil, `--models entry "=x.gguf": no checkpoint directory`},
		{"twice", a + "," + a + "/", nil, nil, "are the same checkpoint"},
		{"synth no preset", "synth:", nil, nil, `--models entry "synth:": no preset after synth:`},
		{"synth bad preset", "synth:gpt2", nil, nil, `--models entry "synth:gpt2": --preset "gpt2"`},
		{"synth bad quant", "synth:tiny:q7", nil, nil, `--models entry "synth:tiny:q7": synth: quant "q7": 7 bits`},
		{"synth bad dtype", "synth:tiny:q4:f64", nil, nil, `--dtype "f64"`},
		{"synth third positional", "synth:tiny:q4:f16:f32", nil, nil, `"f32": a third field without '='`},
		{"synth positional after flag", "synth:tiny:embed-bits=8:q4", nil, nil, `"q4" after a FLAG=VALUE field`},
		{"synth reserved flag", "synth:tiny:out=/tmp/x", nil, nil, `"out=/tmp/x": want FLAG=VALUE with an mlxgo synth flag other than`},
		{"synth unknown flag", "synth:tiny:colour=red", nil, nil, `--models entry "synth:tiny:colour=red": flag provided but not defined: -colour`},
		{"synth empty field", "synth:tiny::f16", nil, nil, "an empty field"},
		{"synth same twice", "synth:tiny,synth:tiny:optiq", nil, nil, `"synth:tiny" and "synth:tiny:optiq" are the same checkpoint`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseModels(tc.list, cache)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d entries %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				e := got[i]
				if g := (ck{e.ck.Name, e.ck.Model, e.ck.GGUF}); g != w {
					t.Errorf("entry %d: got %+v, want %+v", i, g, w)
				}
				if (e.ck.GGUF == "") != (e.ck.NoGGUF != "") {
					t.Errorf("entry %d: twin %q but NoGGUF %q: want exactly one", i, e.ck.GGUF, e.ck.NoGGUF)
				}
				if !slices.Equal(e.synthArgs, tc.args[i]) {
					t.Errorf("entry %d: synth args %q, want %q", i, e.synthArgs, tc.args[i])
				}
			}
		})
	}
}

// The synth entries of make bench-matrix (the Makefile's BENCH_MODELS):
// each names a checkpoint with a GGUF twin of the arithmetic claimed.
func TestBenchMatrixEntries(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(string(mk), "\n") {
		if v, ok := strings.CutPrefix(line, "BENCH_MODELS ?= "); ok {
			for _, e := range strings.Split(v, ",") {
				if strings.HasPrefix(e, "synth:") {
					listed = append(listed, e)
				}
			}
		}
	}
	if listed == nil {
		t.Log("NOTE: the Makefile has no BENCH_MODELS line yet: only the list below is checked")
	}
	for _, c := range []struct {
		entry          string
		q4, quant      string
		embedBits      int
		wantTwinLayout string
	}{
		{"synth:smollm2-135m:q4g32:f16:embed-bits=8:gguf-q4=q4_1", "q4_1", "q4g32", 8, "Q4_1 + Q8_0 embedding"},
		{"synth:llama3.2-1b:q4g32", "q4_0", "q4g32", 0, "Q4_0"},
		{"synth:qwen2.5-0.5b:q8g32", "q4_0", "q8g32", 0, "Q8_0"},
		{"synth:smollm2-360m:f16", "q4_0", "f16", 0, "F16"},
		{"synth:minicpm5-1b", "q4_0", "optiq", 0, "Q4_0/Q8_0"},
	} {
		if listed != nil && !slices.Contains(listed, c.entry) {
			t.Errorf("%s: not in the Makefile's BENCH_MODELS (%q)", c.entry, listed)
		}
		listed = slices.DeleteFunc(listed, func(e string) bool { return e == c.entry })
		es, err := parseModels(c.entry, t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", c.entry, err)
		}
		if es[0].ck.GGUF == "" {
			t.Errorf("%s: no GGUF twin: %s", c.entry, es[0].ck.NoGGUF)
		}
		s, _, _, err := parseSynthFlags(append(es[0].synthArgs, "--out", "x"), &bytes.Buffer{})
		if err != nil || s.Q4Type != c.q4 || s.Quant != c.quant || s.EmbedBits != c.embedBits {
			t.Errorf("%s: got quant %s, gguf-q4 %s, embed bits %d (%v); want %s, %s, %d (%s)", c.entry, s.Quant, s.Q4Type, s.EmbedBits, err, c.quant, c.q4, c.embedBits, c.wantTwinLayout)
		}
	}
	if len(listed) > 0 {
		t.Errorf("the Makefile's BENCH_MODELS has synth: entries this test does not check: %q", listed)
	}
}

// mlxgo bench --models end to end on two tiny fixture checkpoints and a
// tiny synth: entry (written by the run), with a stand-in llama-bench
// printing canned numbers for the entries with a twin: one table, one
// JSON file, and --report renders the same table from it.
// cannedLlamaBench writes into dir the tiny preset's GGUF (a twin) and a
// llama-bench script that prints canned results: prefill 8 at 160 tok/s,
// decode 3 at 40.
func cannedLlamaBench(t *testing.T, dir string) (twin, llama string) {
	t.Helper()
	twin = filepath.Join(dir, "optiq.gguf")
	if err := synth.WriteGGUF(twin, synth.Presets["tiny"], nil); err != nil {
		t.Fatal(err)
	}
	llama = filepath.Join(dir, "llama-bench")
	canned := `[{"n_prompt": 8, "n_gen": 0, "avg_ts": 160, "samples_ts": [160]}, {"n_prompt": 0, "n_gen": 3, "avg_ts": 40, "samples_ts": [40]}]`
	touch(t, llama, "#!/bin/sh\ncat <<'EOF'\n"+canned+"\nEOF\n")
	if err := os.Chmod(llama, 0o755); err != nil {
		t.Fatal(err)
	}
	return twin, llama
}

func TestBenchModelsEndToEnd(t *testing.T) {
	start := time.Now()
	t.Setenv("MLXGO_TEST_AS_MLXGO", "1")
	dir := t.TempDir()
	twin, llama := cannedLlamaBench(t, dir)
	results, cache := filepath.Join(dir, "results"), filepath.Join(dir, "cache")
	optiq, tied := filepath.Join(testModels, "optiq-bf16"), filepath.Join(testModels, "tied-bf16")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--models", optiq + "=" + twin + "," + tied + ",synth:tiny:q8g32", "--synth-cache", cache,
		"--reps", "1", "--warmup", "0", "--prompt-lens", "8", "--decode-tokens", "3", "--configs", "cpu-reference,llama.cpp",
		"--llama-bench", llama, "--python", filepath.Join(dir, "no-python"), "--results", results}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	table, _, ok := strings.Cut(out.String(), "\nResults: ")
	if !ok {
		t.Fatalf("no Results line in\n%s", out.String())
	}
	// One table: a header, and rows for each checkpoint's configurations.
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| checkpoint ") && !strings.HasPrefix(line, "| --- ") {
			rows++
		}
	}
	for _, want := range []string{"| optiq-bf16 | cpu-reference | ", "|  | llama.cpp | 160 (n=1) | 40.0 (n=1) | — |",
		"| tied-bf16 | cpu-reference | ", "| synth-tiny-q8g32 | cpu-reference | ",
		"- tied-bf16: " + tied + " (", "no llama.cpp row: no GGUF twin at " + tied + ".gguf"} {
		if !strings.Contains(table, want) {
			t.Errorf("missing %q in\n%s", want, table)
		}
	}
	if rows != 5 || strings.Count(table, "| checkpoint |") != 1 {
		t.Errorf("got %d rows, want 5 in one table (optiq and synth: cpu-reference, llama.cpp; tied: cpu-reference)\n%s", rows, table)
	}
	for _, f := range []string{filepath.Join(cache, "synth-tiny-q8g32", "config.json"), filepath.Join(cache, "synth-tiny-q8g32.gguf")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the synth: entry was not written: %v", err)
		}
	}
	jsons, _ := filepath.Glob(filepath.Join(results, "*.json"))
	if len(jsons) != 1 {
		t.Fatalf("got result files %v, want one JSON", jsons)
	}
	out.Reset()
	if code := run([]string{"bench", "--report", jsons[0]}, &out, &errb); code != 0 {
		t.Fatalf("--report: exit %d: %s", code, errb.String())
	}
	if got, _, _ := strings.Cut(out.String(), "\nChart: "); got != table {
		t.Errorf("--report:\n%s\nwant the run's table:\n%s", got, table)
	}
	t.Logf("took %v", time.Since(start))
}

// TestBenchModelsRounds: a matrix of two rounds pairs its ratios by round
// (the cell carries the rounds' range) and reads the bandwidth before the
// checkpoint in each round (the note counts the readings), and its JSON
// keeps each round's values.
func TestBenchModelsRounds(t *testing.T) {
	t.Setenv("MLXGO_TEST_AS_MLXGO", "1")
	dir := t.TempDir()
	twin, llama := cannedLlamaBench(t, dir)
	results := filepath.Join(dir, "results")
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--models", filepath.Join(testModels, "optiq-bf16") + "=" + twin,
		"--reps", "2", "--rounds", "2", "--warmup", "0", "--prompt-lens", "8", "--decode-tokens", "3", "--configs", "cpu-reference,llama.cpp",
		"--llama-bench", llama, "--python", filepath.Join(dir, "no-python"), "--results", results}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	paired := regexp.MustCompile(`\| optiq-bf16 \| cpu-reference \| .* \| [0-9.]+× \([0-9.]+–[0-9.]+\) / [0-9.]+× \([0-9.]+–[0-9.]+\) @8 \|`)
	if !paired.MatchString(out.String()) {
		t.Errorf("no paired ratios on the cpu-reference row in\n%s", out.String())
	}
	if !strings.Contains(out.String(), "and before each checkpoint in every round 2 readings, median ") {
		t.Errorf("no note on the rounds' bandwidth readings in\n%s", out.String())
	}
	jsons, _ := filepath.Glob(filepath.Join(results, "*.json"))
	if len(jsons) != 1 {
		t.Fatalf("got result files %v, want one JSON", jsons)
	}
	res, err := bench.ReadResult(jsons[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(res.BandwidthProbes) != 2 {
		t.Errorf("bandwidth probes %v, want two", res.BandwidthProbes)
	}
	for _, c := range res.Checkpoints[0].Configs {
		if len(c.DecodeRounds) != 2 || len(c.BandwidthRounds) != 2 || len(c.Prompts) != 1 || len(c.Prompts[0].Rounds) != 2 {
			t.Errorf("%s: decode rounds %v, bandwidth rounds %v, prompts %+v; want two of each", c.Name, c.DecodeRounds, c.BandwidthRounds, c.Prompts)
		}
	}
}

func TestBenchModelsUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--models", "synth:tiny", "--model", "x"}, "--models replaces --model and --gguf"},
		{[]string{"--models", "synth:nope"}, `--models entry "synth:nope"`},
		{[]string{"--models", "synth:tiny", "--llama-bench", "/no/such/llama-bench"}, "--llama-bench /no/such/llama-bench is not a file"},
		{[]string{"--models", "synth:tiny", "--reps", "2", "--rounds", "3"}, "--rounds 3: want 1 to --reps (2)"},
		{[]string{"--decode-tokens", "2"}, "--decode-tokens 2: want >= 3"},
		// Each out-of-range count is named; flags of another mode, or the
		// child runs' internal flags, were ignored and the benchmark ran
		// (issue 19).
		{[]string{"--reps", "0"}, "--reps 0: want >= 1"},
		{[]string{"--warmup", "-1"}, "--warmup -1: want >= 0"},
		{[]string{"--threads", "-1"}, "--threads -1: want >= 0"},
		{[]string{"--num-draft-tokens", "-2"}, "--num-draft-tokens -2: want >= 1"},
		{[]string{"--kv-cache", "bogus"}, "--kv-cache applies only to the context sweep (--contexts)"},
		{[]string{"--ids-file", "/dev/zero"}, "--ids-file is internal to the child runs"},
		// Before any synth: entry is written.
		{[]string{"--models", "synth:tiny", "--synth-cache", "/nonexistent/cache", "--configs", "gpu"}, `unknown configuration "gpu"`},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bench"}, c.args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// TestBenchReportNotRegular: --report of a link to /dev/zero was read
// without end (issue 19); it is refused by name.
func TestBenchReportNotRegular(t *testing.T) {
	zero := filepath.Join(t.TempDir(), "r.json")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--report", zero}, &out, &errb); code != 1 || !strings.Contains(errb.String(), zero+": not a regular file") {
		t.Errorf("exit %d, stderr %q; want 1 and a not-a-regular-file error naming %s", code, errb.String(), zero)
	}
}
