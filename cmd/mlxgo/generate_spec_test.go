package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var draftLineRe = regexp.MustCompile(`\| draft: (\d+) of (\d+) drafted tokens accepted \(\d+%\), (\d+) verify steps( \||\n)`)

// TestGenerateSpeculativeOracleTokens: with a draft model (another tiny
// checkpoint of the same vocabulary, or the model itself) or prompt lookup,
// mlxgo generate prints mlx_lm's greedy tokens for the greedy cases, and the
// statistics line ends with the drafts' count (self drafting accepts all).
func TestGenerateSpeculativeOracleTokens(t *testing.T) {
	models := filepath.Join(fixtures, "models")
	for _, tc := range []struct {
		ckpt  string
		flags []string
	}{
		{"optiq-f32", []string{"--draft-model", filepath.Join(models, "q4g64-f32")}},
		{"fp-f32", []string{"--draft-model", filepath.Join(models, "fp-f32"), "--num-draft-tokens", "4"}},
		{"tied-f32", []string{"--prompt-lookup", "2", "--num-draft-tokens", "5"}},
	} {
		t.Run(tc.ckpt+"/"+tc.flags[0], func(t *testing.T) {
			prompt, want, c := greedyFixture(t, tc.ckpt)
			maxTokens, err := c.Int("max_tokens")
			if err != nil {
				t.Fatal(err)
			}
			args := append([]string{"generate", "--model", filepath.Join(models, tc.ckpt),
				"--prompt-ids", joinIDs(prompt), "--max-tokens", strconv.Itoa(maxTokens), "--backend", "cpu"}, tc.flags...)
			rc, stdout, stderr := mlxgo(args...)
			if rc != 0 {
				t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
			}
			if got := generated(t, stdout); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("got tokens %v\nwant (mlx_lm) %v", got, want)
			}
			m := draftLineRe.FindStringSubmatch(stdout)
			if m == nil {
				t.Fatalf("no draft statistics in:\n%s", stdout)
			}
			acc, _ := strconv.Atoi(m[1])
			drafted, _ := strconv.Atoi(m[2])
			steps, _ := strconv.Atoi(m[3])
			// Each verify step hands out its accepted drafts and then the
			// model's own token, except a last step that reached
			// --max-tokens among the drafts.
			if acc > drafted || steps+acc < len(want) || steps+acc > len(want)+1 {
				t.Errorf("accepted %d of %d in %d steps for %d tokens: want accepted <= drafted and steps + accepted = tokens (+1)", acc, drafted, steps, len(want))
			}
			if strings.Contains(tc.flags[1], tc.ckpt) && acc != drafted {
				t.Errorf("self drafting accepted %d of %d", acc, drafted)
			}
		})
	}
}

// TestGenerateSpeculativeText: a text prompt with a draft model of the same
// tokenizer prints what plain generation prints.
func TestGenerateSpeculativeText(t *testing.T) {
	dir := textFixture(t, chatML)
	draft := textFixtureOf(t, "q4g64-f32", chatML)
	args := []string{"--model", dir, "--backend", "cpu", "--max-tokens", "8", "--prompt", "What is 2+2?"}
	rc, plain, stderr := runGenerateText("", args...)
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	rc, spec, stderr := runGenerateText("", append(args, "--draft-model", draft)...)
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	text := func(out string) string { return strings.SplitN(out, "\nprompt: ", 2)[0] }
	plainText := strings.SplitN(text(plain), "\n", 2)[1]
	specLines := strings.SplitN(text(spec), "\n", 3)
	if len(specLines) < 3 || !strings.HasPrefix(specLines[1], "loaded draft model "+draft) {
		t.Fatalf("want the load lines of both models first, got:\n%s", spec)
	}
	if specLines[2] != plainText {
		t.Errorf("speculative text %q, want %q (plain generation)", specLines[2], plainText)
	}
	if !draftLineRe.MatchString(spec) {
		t.Errorf("no draft statistics in:\n%s", spec)
	}
}

// TestGenerateSpeculativeErrors: a draft model of another vocabulary
// (config.json's vocab_size, or a tokenizer with other tokens), both
// drafters at once, a draft count below 1, a negative n-gram size and a
// draft count without a drafter are usage errors naming what is wrong.
func TestGenerateSpeculativeErrors(t *testing.T) {
	dir := textFixture(t, chatML)
	otherTok := textFixtureOf(t, "q4g64-f32", chatML)
	var tj map[string]any
	b, err := os.ReadFile(filepath.Join(otherTok, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		t.Fatal(err)
	}
	vocab := tj["model"].(map[string]any)["vocab"].(map[string]any)
	vocab["a"], vocab["b"] = vocab["b"], vocab["a"] // ids 67 and 68 swapped
	writeJSONFile(t, filepath.Join(otherTok, "tokenizer.json"), tj)

	otherSize := t.TempDir()
	linkFixtureModel(t, "q4g64-f32", otherSize)
	cfgPath := filepath.Join(otherSize, "config.json")
	var cfg map[string]any
	if b, err = os.ReadFile(cfgPath); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["vocab_size"] = 999
	os.Remove(cfgPath)
	writeJSONFile(t, cfgPath, cfg)

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"tokenizer", []string{"--prompt", "hi", "--draft-model", otherTok}, []string{"--draft-model " + otherTok, "another tokenizer", `token 67 is "b"`, `"a" in ` + dir}},
		{"vocab-size", []string{"--prompt-ids", "1,2", "--draft-model", otherSize}, []string{"--draft-model " + otherSize, "vocab_size 999", "1000 in " + dir}},
		{"both", []string{"--prompt", "hi", "--draft-model", otherTok, "--prompt-lookup", "2"}, []string{"--draft-model and --prompt-lookup are mutually exclusive"}},
		{"num-draft-0", []string{"--prompt", "hi", "--prompt-lookup", "2", "--num-draft-tokens", "0"}, []string{"--num-draft-tokens 0: want >= 1"}},
		{"lookup-negative", []string{"--prompt", "hi", "--prompt-lookup", "-1"}, []string{"--prompt-lookup -1", "n-gram size >= 1"}},
		{"num-draft-alone", []string{"--prompt", "hi", "--num-draft-tokens", "2"}, []string{"--num-draft-tokens applies to speculative decoding"}},
		{"lookup-rotating", []string{"--prompt", "hi", "--prompt-lookup", "2", "--max-kv-size", "16"}, []string{"--max-kv-size 16 with speculative decoding", "must fit in the window"}},
		{"draft-quantized", []string{"--prompt", "hi", "--draft-model", otherTok, "--kv-bits", "8"}, []string{"--kv-bits 8: KV group size 64 does not divide the model's head_dim 32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := runGenerateText("", append([]string{"--model", dir, "--backend", "cpu"}, tc.args...)...)
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

func TestGenerateSpeculativeHelpText(t *testing.T) {
	rc, stdout, _ := mlxgo("generate", "--help")
	if rc != 0 {
		t.Fatalf("got exit %d, want 0", rc)
	}
	for _, w := range []string{"-draft-model", "-num-draft-tokens", "(default 3)", "-prompt-lookup", "--draft-model smollm2-mlx", "--prompt-lookup 3", "ngram-simple"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("help does not contain %q", w)
		}
	}
}
