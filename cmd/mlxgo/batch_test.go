package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
)

// runBatchLines runs mlxgo batch with lines as the prompts file on stdin.
func runBatchLines(lines string, args ...string) (int, string, string) {
	old := stdin
	stdin = strings.NewReader(lines)
	defer func() { stdin = old }()
	return mlxgo(append([]string{"batch", "--prompts", "-", "--backend", "cpu"}, args...)...)
}

// TestBatchCLI: every kind of line, answered in input order, each answer
// equal to greedy Generate on that prompt alone (the oracle of chat_test.go:
// the tokenizer renders and encodes, generate.Generate runs the prompt),
// with two sequences decoding at once so that the later prompts wait and
// join; the stop token (1, <|im_end|>) counted in generation_tokens but not
// in token_ids or text.
func TestBatchCLI(t *testing.T) {
	dir := textFixture(t, chatML)
	o := newOracle(t, dir, []int32{1}, 6)
	lines := strings.Join([]string{
		`{"prompt": "What is 2+2?", "id": "q1"}`,
		``,
		`{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}`,
		`{"prompt_ids": [5, 6, 7, 8, 9, 10, 11], "id": 7}`,
		`{"prompt": "Count to three.", "max_tokens": 2}`,
		`{"prompt": "xyz"}`,
	}, "\n")
	wantIDs := [][]int32{
		o.ids("user", "What is 2+2?"),
		o.ids("system", "Be brief.", "user", "Hi"),
		{5, 6, 7, 8, 9, 10, 11},
		o.ids("user", "Count to three."),
		o.ids("user", "xyz"),
	}
	// A second stop token from generation_config.json: the third token
	// prompt 0 generates alone, so that answers stop too.
	first, err := generate.Generate(o.m, wantIDs[0], generate.Options{MaxTokens: 6, EOS: o.eos}, nil)
	if err != nil || len(first.Tokens) < 3 {
		t.Fatalf("prompt 0 alone: %v, %v", first.Tokens, err)
	}
	stop := first.Tokens[2]
	writeJSONFile(t, filepath.Join(dir, "generation_config.json"), map[string]any{"eos_token_id": stop})
	eos := []int32{1, stop}
	rc, out, errOut := runBatchLines(lines, "--model", dir, "--max-tokens", "6", "--max-batch", "2", "--prefill-step", "3")
	if rc != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", rc, out, errOut)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) != len(wantIDs) {
		t.Fatalf("got %d output lines, want %d:\n%s", len(got), len(wantIDs), out)
	}
	stops := 0
	for i, line := range got {
		var r struct {
			Index            int             `json:"index"`
			ID               json.RawMessage `json:"id"`
			Text             *string         `json:"text"`
			TokenIDs         []int32         `json:"token_ids"`
			FinishReason     string          `json:"finish_reason"`
			PromptTokens     int             `json:"prompt_tokens"`
			GenerationTokens int             `json:"generation_tokens"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		maxTok := 6
		if i == 3 {
			maxTok = 2
		}
		res, err := generate.Generate(o.m, wantIDs[i], generate.Options{MaxTokens: maxTok, EOS: eos}, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantTokens, wantFinish, text := res.Tokens, res.FinishReason, o.tok.Decode(res.Tokens)
		gen := res.Tokens
		if wantFinish == generate.FinishStop {
			gen = append(slices.Clone(gen), stop) // counted in generation_tokens
			stops++
		}
		if r.Index != i || !slices.Equal(r.TokenIDs, wantTokens) || r.FinishReason != wantFinish ||
			r.Text == nil || *r.Text != text || r.PromptTokens != len(wantIDs[i]) || r.GenerationTokens != len(gen) {
			t.Errorf("line %d: got %s, want index %d, token_ids %v, text %q, finish %s, prompt_tokens %d, generation_tokens %d",
				i, line, i, wantTokens, text, wantFinish, len(wantIDs[i]), len(gen))
		}
	}
	if !strings.Contains(got[0], `"id":"q1"`) || !strings.Contains(got[2], `"id":7`) || strings.Contains(got[1], `"id"`) {
		t.Errorf("ids not echoed as given:\n%s", out)
	}
	for _, want := range []string{"loaded ", "[5/5] line ", "batch: 5 prompts | prompt: ", "tok/s aggregate"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if stops == 0 {
		t.Errorf("no answer stopped at a stop token: the test does not check stops")
	}
}

// TestBatchCLISeed: a line with a seed of its own gives what mlxgo generate
// gives with that seed, whatever else is in the batch.
func TestBatchCLISeed(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	rc, out, errOut := mlxgo("generate", "--model", model, "--prompt-ids", "3,4,5", "--temp", "0.9", "--seed", "42", "--max-tokens", "8", "--backend", "cpu")
	if rc != 0 {
		t.Fatalf("generate: exit %d: %s", rc, errOut)
	}
	var want []int32
	for _, l := range strings.Split(out, "\n") {
		if f, ok := strings.CutPrefix(l, "generated:"); ok {
			for _, s := range strings.Fields(f) {
				var v int32
				fmt.Sscan(s, &v)
				want = append(want, v)
			}
		}
	}
	lines := `{"prompt_ids": [9, 8, 7, 6], "temperature": 0.7}
{"prompt_ids": [3, 4, 5], "temperature": 0.9, "seed": 42}
{"prompt_ids": [1], "temperature": 1.0}`
	for _, maxBatch := range []string{"1", "3"} {
		rc, out, errOut = runBatchLines(lines, "--model", model, "--max-tokens", "8", "--max-batch", maxBatch, "--seed", "5")
		if rc != 0 {
			t.Fatalf("batch: exit %d: %s", rc, errOut)
		}
		var r struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		if err := json.Unmarshal([]byte(strings.Split(out, "\n")[1]), &r); err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 || !slices.Equal(r.TokenIDs, want) {
			t.Errorf("--max-batch %s: seeded line gave %v, generate --seed 42 %v", maxBatch, r.TokenIDs, want)
		}
	}
}

// TestBatchCLIErrors: each bad input is a usage error (exit 2) naming the
// line and what is wrong, before any generation.
func TestBatchCLIErrors(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	many := strings.Repeat(`{"prompt_ids": [1]}`+"\n", 4)
	for _, c := range []struct {
		name, lines string
		args        []string
		want        string
	}{
		{"unknown-field", `{"prompt_ids": [1], "tempp": 1}`, nil, `line 1: json: unknown field "tempp"`},
		{"not-json", "{\"prompt_ids\": [1]}\nhello", nil, "line 2: invalid character 'h'"},
		{"two-kinds", `{"prompt_ids": [1], "prompt": "x"}`, nil, `line 1: want exactly one of "prompt", "messages" and "prompt_ids"`},
		{"no-kind", `{"id": 3}`, nil, `line 1: want exactly one of`},
		{"empty-ids", `{"prompt_ids": []}`, nil, `line 1: "prompt_ids" is empty`},
		{"negative-id", `{"prompt_ids": [-1]}`, nil, `line 1: prompt_ids[0] is -1`},
		{"vocab", "\n" + `{"prompt_ids": [1, 1000]}`, nil, "line 2: token 1 is 1000, out of the vocabulary (vocab_size 1000"},
		{"max-tokens", `{"prompt_ids": [1], "max_tokens": 0}`, nil, `line 1: "max_tokens" is 0, want >= 1`},
		{"temp", `{"prompt_ids": [1], "temp": -1}`, nil, `line 1: "temp" is -1, want >= 0`},
		{"temp-twice", `{"prompt_ids": [1], "temp": 1, "temperature": 1}`, nil, `"temperature" and "temp" are the same setting`},
		{"top-k", `{"prompt_ids": [1], "temperature": 1, "top_k": 5000}`, nil, "top_k"},
		{"two-values", `{"prompt_ids": [1]} {"prompt_ids": [2]}`, nil, "line 1: more than one JSON value"},
		{"empty-file", "\n\n", nil, "no prompts"},
		{"limit", many, []string{"--max-prompts", "3"}, "more than 3 prompts (line 4), over the configured limit --max-prompts 3"},
		{"max-batch", `{"prompt_ids": [1]}`, []string{"--max-batch", "0"}, "--max-batch 0: want >= 1"},
		{"turbo-head-dim", `{"prompt_ids": [1]}`, []string{"--kv-cache", "turbo"}, "head_dim 32 is not supported"},
		{"kv-group-head-dim", `{"prompt_ids": [1]}`, []string{"--kv-bits", "8"}, "KV group size 64 does not divide the model's head_dim 32"},
		{"text-no-tokenizer", `{"prompt": "hi"}`, nil, "has no tokenizer.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rc, out, errOut := runBatchLines(c.lines, append([]string{"--model", model}, c.args...)...)
			if rc != 2 || !strings.Contains(errOut, c.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, no output and an error containing %q", rc, out, errOut, c.want)
			}
		})
	}
	if rc, _, errOut := mlxgo("batch", "--model", model, "--prompts", filepath.Join(t.TempDir(), "missing.jsonl")); rc != 2 || !strings.Contains(errOut, "missing.jsonl") {
		t.Errorf("missing file: exit %d, stderr %q", rc, errOut)
	}
	long := filepath.Join(t.TempDir(), "long.jsonl")
	if err := os.WriteFile(long, []byte(`{"prompt_ids": [1]}`+"\n"+strings.Repeat(" ", maxBatchLine+1)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, _, errOut := mlxgo("batch", "--model", model, "--prompts", long); rc != 2 || !strings.Contains(errOut, "line 2: longer than") {
		t.Errorf("long line: exit %d, stderr %q", rc, errOut)
	}
}

// TestBatchCLIKVCache: mlxgo batch with a quantized KV cache (converting
// part way through the prompts) gives each line what mlxgo generate gives
// that prompt alone with the same flags.
func TestBatchCLIKVCache(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	prompts := [][]int32{{9, 8, 7, 6, 5}, {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8}}
	kv := []string{"--kv-cache", "quantized", "--kv-bits", "4", "--kv-group-size", "32", "--quantized-kv-start", "4"}
	var lines []string
	for _, p := range prompts {
		lines = append(lines, fmt.Sprintf(`{"prompt_ids": [%s]}`, joinIDs(p)))
	}
	rc, out, errOut := runBatchLines(strings.Join(lines, "\n"), append([]string{"--model", model, "--max-tokens", "5", "--prefill-step", "3", "--max-batch", "2"}, kv...)...)
	if rc != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", rc, errOut)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) != len(prompts) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(prompts), out)
	}
	for i, p := range prompts {
		var r struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		if err := json.Unmarshal([]byte(got[i]), &r); err != nil {
			t.Fatal(err)
		}
		rc, gout, gerr := mlxgo(append([]string{"generate", "--model", model, "--prompt-ids", joinIDs(p), "--max-tokens", "5", "--prefill-step", "3", "--backend", "cpu"}, kv...)...)
		if rc != 0 {
			t.Fatalf("generate: exit %d, stderr:\n%s", rc, gerr)
		}
		if want := generated(t, gout); fmt.Sprint(r.TokenIDs) != fmt.Sprint(want) {
			t.Errorf("prompt %d: batch %v, generate %v", i, r.TokenIDs, want)
		}
	}
}

// TestBatchHelp: --help prints the usage, its examples and the flags.
func TestBatchHelp(t *testing.T) {
	rc, out, _ := mlxgo("batch", "--help")
	for _, want := range []string{"usage: mlxgo batch", "Examples:", "--max-batch", "--prompts", `"prompt_ids"`} {
		if rc != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d; --help output lacks %q", rc, want)
		}
	}
	if _, out, _ := mlxgo("help"); !strings.Contains(out, "batch ") {
		t.Errorf("mlxgo help does not list batch:\n%s", out)
	}
}
