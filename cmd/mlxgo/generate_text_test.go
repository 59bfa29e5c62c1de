package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// runGenerateText runs mlxgo generate with in as stdin.
func runGenerateText(in string, args ...string) (int, string, string) {
	old := stdin
	stdin = strings.NewReader(in)
	defer func() { stdin = old }()
	return mlxgo(append([]string{"generate"}, args...)...)
}

// TestGenerateText: with --prompt, the prompt is rendered with the chat
// template (or not, with --raw), encoded, and the answer printed as text
// equal to greedy generation's decoded tokens, followed by the statistics
// line with the prompt's token count.
func TestGenerateText(t *testing.T) {
	dir := textFixture(t, chatML)
	o := newOracle(t, dir, []int32{1}, 5)
	tok := o.tok
	withThink := func(v bool, msgs ...string) []int32 {
		var ms []tokenizer.Message
		for i := 0; i < len(msgs); i += 2 {
			ms = append(ms, tokenizer.Message{Role: msgs[i], Content: msgs[i+1]})
		}
		text, err := tok.ApplyChatTemplate(ms, tokenizer.ChatOptions{AddGenerationPrompt: true, Extra: map[string]any{"enable_thinking": v}})
		if err != nil {
			t.Fatal(err)
		}
		return tok.EncodeSpecial(text, false)
	}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		ids   []int32
	}{
		{"template", "", []string{"--prompt", "What is 2+2?"}, o.ids("user", "What is 2+2?")},
		{"stdin", "What is 2+2?\n", []string{"--prompt", "-"}, o.ids("user", "What is 2+2?")},
		{"system", "", []string{"--prompt", "Hi", "--system", "Be kind."}, o.ids("system", "Be kind.", "user", "Hi")},
		{"raw", "", []string{"--prompt", "Hi <|im_end|>", "--raw"}, tok.Encode("Hi <|im_end|>")},
		{"no-think", "", []string{"--prompt", "Hi", "--no-think"}, withThink(false, "user", "Hi")},
		{"think", "", []string{"--prompt", "Hi", "--think"}, withThink(true, "user", "Hi")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, reply := o.answer(tc.ids)
			args := append([]string{"--model", dir, "--backend", "cpu", "--max-tokens", "5"}, tc.args...)
			rc, stdout, stderr := runGenerateText(tc.stdin, args...)
			if rc != 0 {
				t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
			}
			lines := strings.SplitN(stdout, "\n", 2)
			if !strings.HasPrefix(lines[0], "loaded ") || len(lines) < 2 {
				t.Fatalf("want the load line first, got:\n%s", stdout)
			}
			want := fmt.Sprintf("%s\nprompt: %d tokens, ", reply, len(tc.ids))
			if !strings.HasPrefix(lines[1], want) || !strings.Contains(lines[1], "peak memory") {
				t.Errorf("got output after the load line\n%q\nwant it to start with %q (greedy from the %d prompt tokens) and end with the statistics", lines[1], want, len(tc.ids))
			}
		})
	}
	if slices.Equal(withThink(false, "user", "Hi"), withThink(true, "user", "Hi")) {
		t.Error("fixture: the template's enable_thinking switch changes nothing")
	}
}

// TestGenerateTextStopsAtEOS: generation stops at any id of
// tokenizer_config.json's eos_token, config.json's and
// generation_config.json's eos_token_id; eosIDs gathers all three.
func TestGenerateTextStopsAtEOS(t *testing.T) {
	dir := textFixture(t, chatML)
	o := newOracle(t, dir, []int32{1}, 5)
	ids := o.ids("user", "What is 2+2?")
	gen, _ := o.answer(ids)
	if len(gen) < 3 || slices.Contains(gen[:3], 1) {
		t.Fatalf("fixture: want 3 answer tokens before any EOS, got %v", gen)
	}
	// Make the third answer token a stop token through generation_config.json.
	writeJSONFile(t, filepath.Join(dir, "generation_config.json"), map[string]any{"eos_token_id": []int32{gen[2], 7}})
	cfg, err := checkpoint.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := chat.StopTokens(dir, cfg, o.tok)
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{1}
	for _, id := range append(slices.Clone(cfg.EOSTokenIDs), int(gen[2]), 7) {
		if !slices.Contains(want, int32(id)) {
			want = append(want, int32(id))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("eosIDs: got %v, want %v", got, want)
	}
	rc, stdout, stderr := runGenerateText("", "--model", dir, "--backend", "cpu", "--max-tokens", "5", "--prompt", "What is 2+2?")
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	wantText := o.tok.Decode(gen[:2]) + "\nprompt: "
	if !strings.Contains(stdout, wantText) || !strings.Contains(stdout, "generation: 3 tokens") || !strings.Contains(stdout, "finish: stop") {
		t.Errorf("want the two tokens before the stop token %d as text (%q), 3 generated tokens and finish: stop; got:\n%s", gen[2], wantText, stdout)
	}

	for _, bad := range []string{`{"eos_token_id": "x"}`, `{"eos_token_id": [1, "x"]}`} {
		if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := chat.StopTokens(dir, cfg, o.tok); err == nil || !strings.Contains(err.Error(), "generation_config.json") {
			t.Errorf("generation_config.json %s: got %v, want an error naming the file", bad, err)
		}
	}
	// One that does not parse is ignored, as mlx_lm ignores it; the loader
	// warns about it (issue 19).
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`not json`), 0o644); err != nil {
		t.Fatal(err)
	}
	only := []int32{1} // tokenizer_config.json's eos_token and config.json's ids
	for _, id := range cfg.EOSTokenIDs {
		if !slices.Contains(only, int32(id)) {
			only = append(only, int32(id))
		}
	}
	if got, err := chat.StopTokens(dir, cfg, o.tok); err != nil || !slices.Equal(got, only) {
		t.Errorf("generation_config.json not json: got %v, %v; want %v and no error", got, err, only)
	}
}

func TestGenerateTextErrors(t *testing.T) {
	dir := textFixture(t, chatML)
	noTemplate := textFixture(t, "")
	noSwitch := textFixture(t, strings.ReplaceAll(chatML, "enable_thinking", "x"))
	noTokenizer := t.TempDir()
	linkFixtureModel(t, "optiq-f32", noTokenizer)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"prompt-and-ids", []string{"--model", dir, "--prompt", "hi", "--prompt-ids", "1,2"}, []string{"--prompt and --prompt-ids are mutually exclusive"}},
		{"no-prompt", []string{"--model", dir}, []string{"--prompt TEXT or --prompt-ids is required"}},
		{"no-tokenizer", []string{"--model", noTokenizer, "--prompt", "hi"}, []string{noTokenizer, "no tokenizer.json", "tokenizer_config.json", "--prompt-ids"}},
		{"think-without-switch", []string{"--model", noSwitch, "--prompt", "hi", "--think"}, []string{"--think", "no enable_thinking switch"}},
		{"no-think-without-switch", []string{"--model", noSwitch, "--prompt", "hi", "--no-think"}, []string{"--no-think", "no enable_thinking switch"}},
		{"think-and-no-think", []string{"--model", dir, "--prompt", "hi", "--think", "--no-think"}, []string{"mutually exclusive"}},
		{"raw-and-system", []string{"--model", dir, "--prompt", "hi", "--raw", "--system", "s"}, []string{"--raw skips the chat template"}},
		{"ids-and-system", []string{"--model", dir, "--prompt-ids", "1", "--system", "s"}, []string{"not to --prompt-ids"}},
		{"system-without-template", []string{"--model", noTemplate, "--prompt", "hi", "--system", "s"}, []string{"no chat_template", "--system"}},
		{"empty-raw-prompt", []string{"--model", dir, "--prompt", "", "--raw"}, []string{"--prompt is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := runGenerateText("", append(tc.args, "--backend", "cpu")...)
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
	// Without a template the prompt is encoded as it is, with a note.
	rc, stdout, stderr := runGenerateText("", "--model", noTemplate, "--prompt", "hi", "--backend", "cpu", "--max-tokens", "2")
	if rc != 0 || !strings.Contains(stderr, "no chat_template") || !strings.Contains(stdout, "prompt: 2 tokens") {
		t.Errorf("no template: got exit %d, stderr %q, stdout %q; want 0, a note and the 2 raw prompt tokens", rc, stderr, stdout)
	}
}

func TestGenerateHelpText(t *testing.T) {
	rc, stdout, _ := mlxgo("generate", "--help")
	if rc != 0 {
		t.Fatalf("got exit %d, want 0", rc)
	}
	for _, w := range []string{"Examples:", `--prompt "What is the capital of France?"`, "--prompt -", "-raw", "-think", "-no-think", "-system", "org/name"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("help does not contain %q:\n%s", w, stdout)
		}
	}
}
