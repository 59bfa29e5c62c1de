package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/conformance"
)

const fixtures = "../../conformance/testdata"

// mlxgo runs the command in-process and returns its exit status and output.
func mlxgo(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	rc := run(args, &out, &errOut)
	return rc, out.String(), errOut.String()
}

// greedyFixture returns a greedy case's prompt and the oracle's tokens.
func greedyFixture(t *testing.T, ckpt string) (prompt, want []int32, c *conformance.Case) {
	t.Helper()
	c, err := conformance.LoadCase(filepath.Join(fixtures, "models", ckpt, "cases", "model__"+ckpt+"__greedy__32.json"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.OpenArrays()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	in, err := a.Input("ids")
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output("tokens")
	if err != nil {
		t.Fatal(err)
	}
	prompt = append(prompt, in.Int32s()...)
	for _, v := range out.ToFloat64() {
		want = append(want, int32(v))
	}
	return prompt, want, c
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// generated parses the "generated: 1 2 3" line.
func generated(t *testing.T, stdout string) []int32 {
	t.Helper()
	for _, line := range strings.Split(stdout, "\n") {
		rest, ok := strings.CutPrefix(line, "generated:")
		if !ok {
			continue
		}
		var ids []int32
		for _, f := range strings.Fields(rest) {
			v, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("generated line %q: %v", line, err)
			}
			ids = append(ids, int32(v))
		}
		return ids
	}
	t.Fatalf("no \"generated:\" line in output:\n%s", stdout)
	return nil
}

// TestGenerateOracleTokens runs `mlxgo generate` on the float32 fixture
// checkpoints with their greedy cases' prompts and settings and requires
// mlx_lm's tokens exactly (the oracle chose prompts whose top-2 margins are
// far above float32 summation-order noise), and the statistics line.
func TestGenerateOracleTokens(t *testing.T) {
	for _, ckpt := range []string{"optiq-f32", "q4g64-f32", "q8g32-f32", "fp-f32", "tied-f32", "llama3rope-f32"} {
		t.Run(ckpt, func(t *testing.T) {
			prompt, want, c := greedyFixture(t, ckpt)
			maxTokens, err := c.Int("max_tokens")
			if err != nil {
				t.Fatal(err)
			}
			step, err := c.Int("prefill_step_size")
			if err != nil {
				t.Fatal(err)
			}
			rc, stdout, stderr := mlxgo("generate", "--model", filepath.Join(fixtures, "models", ckpt),
				"--prompt-ids", joinIDs(prompt), "--max-tokens", strconv.Itoa(maxTokens),
				"--prefill-step", strconv.Itoa(step), "--backend", "cpu")
			if rc != 0 {
				t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
			}
			got := generated(t, stdout)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got tokens %v\nwant (mlx_lm) %v", got, want)
			}
			stats := fmt.Sprintf(`(?m)^prompt: %d tokens, [0-9.]+ tok/s \| generation: %d tokens, [0-9.]+ tok/s \| time to first token [0-9.]+ ms \| peak memory [0-9.]+ MB`, len(prompt), len(want))
			if !regexp.MustCompile(stats).MatchString(stdout) {
				t.Errorf("no statistics line matching %q in:\n%s", stats, stdout)
			}
			if !regexp.MustCompile(`(?m)^loaded .* on cpu in [0-9.]+ ms`).MatchString(stdout) {
				t.Errorf("no load time line in:\n%s", stdout)
			}
		})
	}
}

// TestGenerateFastWithProfile runs the approximate "fast" precision (its
// numerics are judged in conformance's TestFastPrecision) and requires
// the asked-for number of tokens and a CPU profile in pprof's gzip format.
func TestGenerateFastWithProfile(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.prof")
	rc, stdout, stderr := mlxgo("generate", "--model", filepath.Join(fixtures, "models", "optiq-f32"),
		"--prompt-ids", "1,2,3", "--max-tokens", "5", "--backend", "cpu", "--precision", "fast", "--cpuprofile", prof)
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	if got := generated(t, stdout); len(got) != 5 {
		t.Errorf("got %d tokens %v, want 5", len(got), got)
	}
	checkProfile(t, prof)
}

// checkProfile requires a CPU profile in pprof's gzip format at path.
func checkProfile(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		t.Errorf("profile %s: %d bytes, want a gzip-compressed pprof profile", path, len(data))
	}
}

// TestGenerateBadFlags requires exit status 2 and a message naming the flag
// and its value.
func TestGenerateBadFlags(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"max-tokens-not-int", []string{"--model", model, "--prompt-ids", "1", "--max-tokens", "abc"}, []string{"-max-tokens", `"abc"`}},
		{"max-tokens-zero", []string{"--model", model, "--prompt-ids", "1", "--max-tokens", "0"}, []string{"--max-tokens 0"}},
		{"id-not-int", []string{"--model", model, "--prompt-ids", "1,x,3"}, []string{"--prompt-ids", `"x"`}},
		{"id-negative", []string{"--model", model, "--prompt-ids", "1,-3"}, []string{"--prompt-ids", `"-3"`}},
		{"id-too-big-for-int32", []string{"--model", model, "--prompt-ids", "4294967296"}, []string{"--prompt-ids", `"4294967296"`}},
		{"id-out-of-vocab", []string{"--model", model, "--prompt-ids", "1,1000", "--backend", "cpu"}, []string{"--prompt-ids", "1000", "vocab_size 1000"}},
		{"no-model", []string{"--prompt-ids", "1"}, []string{"--model is required"}},
		{"no-prompt", []string{"--model", model}, []string{"--prompt-ids is required"}},
		{"model-missing", []string{"--model", "/nonexistent/mlxgo-model", "--prompt-ids", "1"}, []string{"--model", "/nonexistent/mlxgo-model"}},
		{"temp-negative", []string{"--model", model, "--prompt-ids", "1", "--temp", "-1"}, []string{"--temp -1"}},
		{"top-p-above-1", []string{"--model", model, "--prompt-ids", "1", "--top-p", "1.5"}, []string{"--top-p 1.5"}},
		{"top-p-nan", []string{"--model", model, "--prompt-ids", "1", "--top-p", "NaN"}, []string{"--top-p NaN"}},
		{"temp-nan", []string{"--model", model, "--prompt-ids", "1", "--temp", "NaN"}, []string{"--temp NaN"}},
		{"min-p-nan", []string{"--model", model, "--prompt-ids", "1", "--min-p", "NaN"}, []string{"--min-p NaN"}},
		{"repetition-penalty-nan", []string{"--model", model, "--prompt-ids", "1", "--repetition-penalty", "NaN"}, []string{"--repetition-penalty NaN"}},
		{"min-p-negative", []string{"--model", model, "--prompt-ids", "1", "--min-p", "-0.1"}, []string{"--min-p -0.1"}},
		{"top-k-negative", []string{"--model", model, "--prompt-ids", "1", "--top-k", "-2"}, []string{"--top-k -2"}},
		{"prefill-step-zero", []string{"--model", model, "--prompt-ids", "1", "--prefill-step", "0"}, []string{"--prefill-step 0"}},
		{"unknown-backend", []string{"--model", model, "--prompt-ids", "1", "--backend", "nope"}, []string{`--backend "nope"`, "not compiled in"}},
		{"unknown-precision", []string{"--model", model, "--prompt-ids", "1", "--precision", "quick"}, []string{`--precision "quick"`, "want reference, high or fast"}},
		{"pack-weights-reference", []string{"--model", model, "--prompt-ids", "1", "--backend", "cpu", "--pack-weights"}, []string{"--pack-weights", "--precision reference"}},
		{"no-pack-weights-high", []string{"--model", model, "--prompt-ids", "1", "--backend", "cpu", "--precision", "high", "--no-pack-weights"}, []string{"--no-pack-weights is for --backend cpu --precision fast or reference", "--precision high"}},
		{"pack-weights-both", []string{"--model", model, "--prompt-ids", "1", "--backend", "cpu", "--precision", "fast", "--pack-weights", "--no-pack-weights"}, []string{"--pack-weights and --no-pack-weights"}},
		{"bad-cpuprofile", []string{"--model", model, "--prompt-ids", "1", "--cpuprofile", "/nonexistent-dir/x.prof"}, []string{"--cpuprofile"}},
		{"unknown-flag", []string{"--model", model, "--prompt-ids", "1", "--bogus"}, []string{"-bogus"}},
		{"extra-argument", []string{"--model", model, "--prompt-ids", "1", "extra"}, []string{`"extra"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := mlxgo(append([]string{"generate"}, tc.args...)...)
			if rc != 2 {
				t.Errorf("got exit %d, want 2 (stderr %q)", rc, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
		})
	}
}

func TestGenerateHelp(t *testing.T) {
	rc, stdout, _ := mlxgo("generate", "--help")
	if rc != 0 {
		t.Fatalf("got exit %d, want 0", rc)
	}
	for _, w := range []string{"Examples:", "mlxgo generate --model", "-prompt-ids", "-top-p", "-repetition-penalty", "-precision"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("help does not contain %q:\n%s", w, stdout)
		}
	}
}

// TestConformRMSNorm runs the rms_norm cases on cpu and requires exit 0 and
// a table row saying all of them passed.
func TestConformRMSNorm(t *testing.T) {
	cases, err := conformance.Load(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	// the filter is a substring: it also selects the gradient cases
	// vjp/rms_norm/..., which the table counts in their own row
	sel := conformance.Filter(cases, "rms_norm")
	n := 0
	for _, c := range sel {
		if c.Op == "rms_norm" {
			n++
		}
	}
	if n == 0 {
		t.Fatal("no rms_norm cases in the fixtures")
	}
	rc, stdout, stderr := mlxgo("conform", "--backend", "cpu", "--run", "rms_norm")
	if rc != 0 {
		t.Fatalf("got exit %d, want 0; stdout:\n%s\nstderr:\n%s", rc, stdout, stderr)
	}
	row := fmt.Sprintf(`(?m)^rms_norm\s+%d\s+%d/%d ok$`, n, n, n)
	if !regexp.MustCompile(row).MatchString(stdout) || !regexp.MustCompile(fmt.Sprintf(`(?m)^TOTAL\s+%d\s+%d/%d$`, len(sel), len(sel), len(sel))).MatchString(stdout) {
		t.Errorf("table lacks row %q or its TOTAL:\n%s", row, stdout)
	}
}

// TestConformJSON runs the slice cases on cpu with --json and requires the
// op row to carry the case count and the passes, and every result to pass.
func TestConformJSON(t *testing.T) {
	cases, err := conformance.Load(fixtures)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range conformance.Filter(cases, "slice/") {
		if c.Op == "slice" {
			n++
		}
	}
	if n == 0 {
		t.Fatal("no slice cases in the fixtures")
	}
	rc, stdout, stderr := mlxgo("conform", "--backend", "cpu", "--run", "slice/", "--json")
	if rc != 0 {
		t.Fatalf("got exit %d, want 0; stderr:\n%s", rc, stderr)
	}
	var report struct {
		Ops []struct {
			Op       string
			Cases    int
			Backends map[string]struct{ Pass, Total int }
		}
		Results []conformance.Result
	}
	if err := json.Unmarshal([]byte(stdout), &report); err != nil {
		t.Fatalf("output is not the JSON report: %v\n%s", err, stdout)
	}
	if len(report.Ops) != 1 || report.Ops[0].Op != "slice" || report.Ops[0].Cases != n ||
		report.Ops[0].Backends["cpu"].Pass != n || report.Ops[0].Backends["cpu"].Total != n {
		t.Errorf("got ops %+v, want one row slice with %d cases, cpu %d/%d", report.Ops, n, n, n)
	}
	if len(report.Results) < n {
		t.Errorf("got %d results, want at least %d", len(report.Results), n)
	}
}

func TestConformUnknownBackend(t *testing.T) {
	rc, _, stderr := mlxgo("conform", "--backend", "nope", "--run", "rms_norm")
	if rc != 2 {
		t.Errorf("got exit %d, want 2", rc)
	}
	for _, w := range []string{`"nope"`, "not compiled in"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q does not contain %q", stderr, w)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	rc, _, stderr := mlxgo("frobnicate")
	if rc != 2 || !strings.Contains(stderr, `"frobnicate"`) {
		t.Errorf("got exit %d, stderr %q; want 2 and a message naming the command", rc, stderr)
	}
}

// TestDefault runs mlxgo without arguments (make run): the embedded
// checkpoint's greedy tokens must equal mlx_lm's on every backend, and the
// whole conformance suite must pass.
func TestDefault(t *testing.T) {
	_, want, _ := greedyFixture(t, "optiq-f32")
	rc, stdout, stderr := mlxgo()
	if rc != 0 {
		t.Fatalf("got exit %d, want 0; stdout:\n%s\nstderr:\n%s", rc, stdout, stderr)
	}
	tokens := fmt.Sprintf("tokens (%d): %v", len(want), want)
	for _, w := range []string{tokens, "equal to mlx_lm's: yes", "TOTAL", "model/greedy", "RESULT: ok"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("output does not contain %q:\n%s", w, stdout)
		}
	}
}

// TestReferenceDensePacking: `mlxgo generate` in the reference precision
// packs the dense weights of a float16 checkpoint where the CPU has the
// kernels (cpu.DensePackingSupported) and the 4-bit group-32 ones of a
// quantized checkpoint on AVX-512 VNNI (cpu.PackWeightsSupported), and
// reports it; --no-pack-weights packs nothing; both generate the same
// tokens.
func TestReferenceDensePacking(t *testing.T) {
	for _, q := range []struct {
		quant    string
		supports bool
	}{{"f16", cpu.DensePackingSupported()}, {"q4g32", cpu.PackWeightsSupported()}} {
		t.Run(q.quant, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "tiny-"+q.quant)
			if rc, _, errOut := mlxgo("synth", "--out", dir, "--preset", "tiny", "--quant", q.quant); rc != 0 {
				t.Fatalf("synth: exit %d\n%s", rc, errOut)
			}
			var generated []string
			for _, c := range []struct {
				flags []string
				packs bool
			}{{nil, q.supports}, {[]string{"--no-pack-weights"}, false}} {
				rc, stdout, stderr := mlxgo(append([]string{"generate", "--model", dir, "--prompt-ids", "1,2,3", "--max-tokens", "6", "--backend", "cpu"}, c.flags...)...)
				if rc != 0 {
					t.Fatalf("%v: exit %d, stderr:\n%s", c.flags, rc, stderr)
				}
				if packed := strings.Contains(stdout, "packed weights "); packed != c.packs {
					t.Fatalf("%v: want packed weights reported: %v; got:\n%s", c.flags, c.packs, stdout)
				}
				g := regexp.MustCompile(`generated: [0-9 ]+`).FindString(stdout)
				if g == "" {
					t.Fatalf("%v: no generated tokens in:\n%s", c.flags, stdout)
				}
				generated = append(generated, g)
			}
			if generated[0] != generated[1] {
				t.Errorf("packed %q, unpacked %q: want the same tokens", generated[0], generated[1])
			}
		})
	}
}
