package chat_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// tokDir is a fixture tokenizer with a ChatML-like chat template that has
// an enable_thinking switch.
var tokDir = filepath.Join("..", "conformance", "testdata", "tokenizers", "bytelevel-llama3")

func loadText(t *testing.T) *chat.Text {
	t.Helper()
	testenv.Need(t, filepath.Join(tokDir, "tokenizer.json"), "the oracle's tokenizer fixtures; run `make oracle`")
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		t.Fatal(err)
	}
	return &chat.Text{Tok: tok, Template: true}
}

// oracleScript renders each case with transformers' apply_chat_template
// (continue_final_message=True, add_generation_prompt=False: what
// mlx_lm.cache_prompt renders) and with mlx_lm.generate's suffix after a
// prompt cache (the conversation rendered with the generation prompt, cut
// where "<query>" starts when the last content is "<query>"), and encodes
// both without special tokens.
const oracleScript = `
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = []
for c in json.loads(sys.argv[2]):
    msgs, extra = c["messages"], c["extra"]
    cont = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False, continue_final_message=True, **extra)
    full = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **extra)
    probe = [dict(m) for m in msgs]
    probe[-1]["content"] = "<query>"
    p = tok.apply_chat_template(probe, tokenize=False, add_generation_prompt=True, **extra)
    after = full[p.index("<query>"):]
    out.append({"continue": cont, "continue_ids": tok.encode(cont, add_special_tokens=False),
                "after": after, "after_ids": tok.encode(after, add_special_tokens=False)})
print(json.dumps(out))
`

type renderCase struct {
	Name     string
	Messages []tokenizer.Message
	Extra    map[string]any
}

// MarshalJSON writes the case as the oracle script reads it.
func (c renderCase) MarshalJSON() ([]byte, error) {
	var ms []map[string]string
	for _, m := range c.Messages {
		ms = append(ms, map[string]string{"role": m.Role, "content": m.Content})
	}
	return json.Marshal(map[string]any{"messages": ms, "extra": c.Extra})
}

// TestRenderOracle: RenderContinue and RenderAfter give transformers' and
// mlx_lm's texts, and their encodings the same ids.
func TestRenderOracle(t *testing.T) {
	tm := loadText(t)
	py := testenv.Python(t)
	user := func(s string) tokenizer.Message { return tokenizer.Message{Role: "user", Content: s} }
	cases := []renderCase{
		{"user", []tokenizer.Message{user("Hello there")}, map[string]any{}},
		{"trailing-space", []tokenizer.Message{user("Hello there ")}, map[string]any{}},
		{"system", []tokenizer.Message{{Role: "system", Content: "Be brief."}, user("What is 2+2?")}, map[string]any{}},
		{"no-think", []tokenizer.Message{user("Is 97 prime?")}, map[string]any{"enable_thinking": false}},
		{"turns", []tokenizer.Message{user("a"), {Role: "assistant", Content: "b"}, user("c\nd")}, map[string]any{}},
	}
	arg, _ := json.Marshal(cases)
	cmd := exec.Command(py, "-c", oracleScript, tokDir, string(arg))
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED=0")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var want []struct {
		Continue    string  `json:"continue"`
		ContinueIDs []int32 `json:"continue_ids"`
		After       string  `json:"after"`
		AfterIDs    []int32 `json:"after_ids"`
	}
	if err := json.Unmarshal(out, &want); err != nil || len(want) != len(cases) {
		t.Fatalf("oracle output %s: %v", out, err)
	}
	for i, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			tm.Extra = c.Extra
			got, err := tm.RenderContinue(c.Messages)
			if err != nil {
				t.Fatal(err)
			}
			if got != want[i].Continue {
				t.Errorf("RenderContinue: got %q, want %q", got, want[i].Continue)
			}
			if ids := tm.Tok.EncodeSpecial(got, false); !slices.Equal(ids, want[i].ContinueIDs) {
				t.Errorf("RenderContinue ids: got %v, want %v", ids, want[i].ContinueIDs)
			}
			after, err := tm.RenderAfter(c.Messages)
			if err != nil {
				t.Fatal(err)
			}
			if after != want[i].After {
				t.Errorf("RenderAfter: got %q, want %q", after, want[i].After)
			}
			if ids := tm.Tok.EncodeSpecial(after, false); !slices.Equal(ids, want[i].AfterIDs) {
				t.Errorf("RenderAfter ids: got %v, want %v", ids, want[i].AfterIDs)
			}
		})
	}
}

// TestRender: with the template the rendering has the generation prompt;
// without, the last message is encoded as it is (special tokens added).
func TestRender(t *testing.T) {
	tm := loadText(t)
	msgs := []tokenizer.Message{{Role: "user", Content: "Hi"}}
	text, err := tm.Tok.ApplyChatTemplate(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(text, "<|im_start|>assistant\n") {
		t.Fatalf("fixture: the template's generation prompt is not ChatML's: %q", text)
	}
	got, err := tm.Render(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if want := tm.Tok.EncodeSpecial(text, false); !slices.Equal(got, want) {
		t.Errorf("Render: got %v, want %v", got, want)
	}
	tm.Template = false
	got, err = tm.Render(append(msgs, tokenizer.Message{Role: "user", Content: "raw text"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := tm.Tok.Encode("raw text"); !slices.Equal(got, want) {
		t.Errorf("Render without template: got %v, want %v", got, want)
	}
	if _, err := tm.Render(nil); err == nil {
		t.Error("Render(nil): got no error")
	}
	if !loadText(t).HasThinkingSwitch() {
		t.Error("HasThinkingSwitch: got false for a template with enable_thinking")
	}
}

// TestStopTokens: tokenizer_config's eos_token, then config.json's and
// generation_config.json's eos_token_id, each once; a generation_config.json
// that does not parse is ignored, as mlx_lm ignores it (it was an error
// here while the loader ignored it with a warning: issue 19).
func TestStopTokens(t *testing.T) {
	tm := loadText(t)
	eos, ok := tm.Tok.EOS()
	if !ok {
		t.Fatal("fixture: no eos_token")
	}
	for _, tc := range []struct {
		name    string
		cfgEOS  []int
		genJSON string
		want    []int32
		err     string
	}{
		{"tokenizer-only", nil, "", []int32{eos}, ""},
		{"config", []int{int(eos), 7}, "", []int32{eos, 7}, ""},
		{"generation-number", []int{7}, `{"eos_token_id": 9}`, []int32{eos, 7, 9}, ""},
		{"generation-list", nil, `{"eos_token_id": [9, 7, 9]}`, []int32{eos, 9, 7}, ""},
		{"generation-null", nil, `{"eos_token_id": null}`, []int32{eos}, ""},
		{"generation-bad", nil, `{"eos_token_id": "x"}`, nil, "eos_token_id is \"x\""},
		{"generation-not-json", nil, `{`, []int32{eos}, ""},
		// A link to /dev/zero was read without end (issue 19; the
		// checkpoint loader, which reads the file first, refused it).
		{"generation-dev-zero", nil, "@zero", nil, "generation_config.json: not a regular file: it is a device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.genJSON == "@zero" {
				if err := os.Symlink("/dev/zero", filepath.Join(dir, "generation_config.json")); err != nil {
					t.Fatal(err)
				}
			} else if tc.genJSON != "" {
				if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(tc.genJSON), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := chat.StopTokens(dir, &checkpoint.Config{EOSTokenIDs: tc.cfgEOS}, tm.Tok)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestLoadNoTokenizer(t *testing.T) {
	if _, err := chat.Load(t.TempDir(), &checkpoint.Config{}); err == nil || !strings.Contains(err.Error(), "no tokenizer.json") {
		t.Errorf("got %v, want an error naming tokenizer.json", err)
	}
}

// TestRenderErrors: a conversation the template cannot continue or cut is
// an error saying why.
func TestRenderErrors(t *testing.T) {
	tm := loadText(t)
	user := []tokenizer.Message{{Role: "user", Content: "Hi"}}
	if _, err := tm.RenderContinue(nil); err == nil {
		t.Error("RenderContinue(nil): got no error")
	}
	if _, err := tm.RenderAfter(nil); err == nil {
		t.Error("RenderAfter(nil): got no error")
	}
	for _, tc := range []struct {
		name, template string
		call           func(*chat.Text) error
		want           string
	}{
		{"continue/no-content", "{{ 'fixed' }}", func(c *chat.Text) error { _, err := c.RenderContinue(user); return err }, "never reads a message's content"},
		{"continue/dropped", "{% for m in messages %}{% if m.content == 'x' %}{{ m.content }}{% endif %}{% endfor %}", func(c *chat.Text) error { _, err := c.RenderContinue(user); return err }, "does not appear"},
		{"after/dropped", "{% for m in messages %}{% if m.content == 'x' %}{{ m.content }}{% endif %}{% endfor %}", func(c *chat.Text) error { _, err := c.RenderAfter(user); return err }, "drops the last message's content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tj, err := os.ReadFile(filepath.Join(tokDir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			cfg, _ := json.Marshal(map[string]any{"chat_template": tc.template, "eos_token": "<|im_end|>"})
			tok, err := tokenizer.New(tj, cfg, "tokenizer.json", "tokenizer_config.json")
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.call(&chat.Text{Tok: tok, Template: true}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
