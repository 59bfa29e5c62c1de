package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func TestReadPreferencesForms(t *testing.T) {
	u := func(s string) tokenizer.Message { return tokenizer.Message{Role: "user", Content: s} }
	cases := []struct {
		name, line string
		want       Preference
	}{
		{"strings", `{"prompt": "q", "chosen": "a", "rejected": "b"}`,
			Preference{Prompt: []tokenizer.Message{u("q")}, Chosen: "a", Rejected: "b"}},
		{"system", `{"system": "s", "prompt": "q", "chosen": "a", "rejected": "b"}`,
			Preference{Prompt: []tokenizer.Message{{Role: "system", Content: "s"}, u("q")}, Chosen: "a", Rejected: "b"}},
		{"messages", `{"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]}`,
			Preference{Prompt: []tokenizer.Message{u("q")}, Chosen: "a", Rejected: "b"}},
		{"implicit prompt", `{"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "b"}]}`,
			Preference{Prompt: []tokenizer.Message{u("q")}, Chosen: "a", Rejected: "b"}},
		{"messages prompt, string replies", `{"prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": ""}`,
			Preference{Prompt: []tokenizer.Message{u("q")}, Chosen: "a", Rejected: ""}},
	}
	for _, c := range cases {
		got, err := ReadPreferences(strings.NewReader("\n"+c.line+"\n"), "f.jsonl")
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		c.want.Source = "f.jsonl:2"
		if len(got) != 1 || !slices.Equal(got[0].Prompt, c.want.Prompt) || got[0].Chosen != c.want.Chosen || got[0].Rejected != c.want.Rejected || got[0].Source != c.want.Source {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestReadPreferencesErrors(t *testing.T) {
	good := `{"prompt": "q", "chosen": "a", "rejected": "b"}`
	cases := []struct{ name, line, want string }{
		{"not JSON", `{"prompt": `, "not a JSON object"},
		{"array", `[1, 2]`, "not a JSON object"},
		{"no rejected", `{"prompt": "q", "chosen": "a"}`, `no field "rejected"`},
		{"no chosen", `{"prompt": "q", "rejected": "a"}`, `no field "chosen"`},
		{"prompt a number", `{"prompt": 3, "chosen": "a", "rejected": "b"}`, `"prompt" is neither a string nor a list of messages`},
		{"system a number", `{"system": 1, "prompt": "q", "chosen": "a", "rejected": "b"}`, `"system" is not a string`},
		{"empty prompt list", `{"prompt": [], "chosen": "a", "rejected": "b"}`, "no messages"},
		{"message without role", `{"prompt": [{"content": "q"}], "chosen": "a", "rejected": "b"}`, "prompt[0] needs a string role"},
		{"two chosen messages", `{"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "c"}], "rejected": "b"}`, "holds 2 messages"},
		{"chosen from the user", `{"prompt": "q", "chosen": [{"role": "user", "content": "a"}], "rejected": "b"}`, "the assistant's"},
		{"prompt ends with the assistant", `{"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}], "chosen": "a", "rejected": "b"}`, "ends with an assistant message"},
		{"implicit, different prompts", `{"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "rejected": [{"role": "user", "content": "r"}, {"role": "assistant", "content": "b"}]}`, "agree on every message"},
		{"implicit, too short", `{"chosen": [{"role": "assistant", "content": "a"}], "rejected": [{"role": "assistant", "content": "b"}]}`, "whole conversations"},
		{"implicit, strings", `{"chosen": "a", "rejected": "b"}`, "neither a string nor a list"},
		{"implicit, last from the user", `{"chosen": [{"role": "user", "content": "q"}, {"role": "user", "content": "a"}], "rejected": [{"role": "user", "content": "q"}, {"role": "user", "content": "b"}]}`, "must be the assistant's"},
	}
	for _, c := range cases {
		_, err := ReadPreferences(strings.NewReader(good+"\n"+c.line+"\n"+good), "d/train.jsonl")
		if err == nil || !strings.Contains(err.Error(), "d/train.jsonl:2:") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming d/train.jsonl:2 and %q", c.name, err, c.want)
		}
	}
}

// TestPreferenceTokenize tokenizes the preference test sets with two
// test tokenizers and compares each pair with the same conversations
// read as mlx_lm chat data with --mask-prompt (LoadFile, checked against
// mlx_lm by TestLoadDirMatchesMLXLM): prompt + chosen must be the chosen
// conversation's tokens, the prompt its offset, and likewise rejected.
func TestPreferenceTokenize(t *testing.T) {
	root := testenv.RepoRoot(t)
	for _, tk := range []string{"spm-llama2"} {
		for _, set := range []string{"preference", "preference-chat"} {
			t.Run(tk+"/"+set, func(t *testing.T) {
				text := testText(t, tk)
				path := filepath.Join(root, "train", "testdata", set, "train.jsonl")
				pairs, err := LoadPreferenceFile(path, text, 0)
				if err != nil {
					t.Fatal(err)
				}
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				prefs, err := ReadPreferences(f, path)
				f.Close()
				if err != nil || len(prefs) != len(pairs) || len(pairs) == 0 {
					t.Fatalf("%d preferences (%v), %d pairs", len(prefs), err, len(pairs))
				}
				// The same conversations as mlx_lm chat data.
				var buf bytes.Buffer
				for _, p := range prefs {
					for _, resp := range []string{p.Chosen, p.Rejected} {
						msgs := append(slices.Clip(p.Prompt), tokenizer.Message{Role: "assistant", Content: resp})
						var list []map[string]string
						for _, m := range msgs {
							list = append(list, map[string]string{"role": m.Role, "content": m.Content})
						}
						raw, _ := json.Marshal(map[string]any{"messages": list})
						buf.Write(append(raw, '\n'))
					}
				}
				chatFile := filepath.Join(t.TempDir(), "chat.jsonl")
				if err := os.WriteFile(chatFile, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				exs, err := LoadFile(chatFile, text, DataOptions{MaskPrompt: true})
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range pairs {
					c, r := exs[2*i], exs[2*i+1]
					if !slices.Equal(append(slices.Clip(p.Prompt), p.Chosen...), c.Tokens) || len(p.Prompt) != c.Offset ||
						!slices.Equal(append(slices.Clip(p.Prompt), p.Rejected...), r.Tokens) || len(p.Prompt) != r.Offset {
						t.Errorf("%s: pair %v / %v / %v, chat data %v (offset %d) and %v (offset %d)", p.Source, p.Prompt, p.Chosen, p.Rejected, c.Tokens, c.Offset, r.Tokens, r.Offset)
					}
				}
			})
		}
	}
}

// TestPreferenceTokenizeErrors: a template whose prompt is no prefix of
// the conversation, a pair over --max-seq-length and a missing file are
// errors naming the file (and line).
func TestPreferenceTokenizeErrors(t *testing.T) {
	root := testenv.RepoRoot(t)
	text := testText(t, "spm-llama2")
	dir := t.TempDir()
	// The llama3 test template renders an empty think block after the
	// generation prompt only: its prompt is no prefix of the conversation.
	_, err := LoadPreferenceFile(filepath.Join(root, "train", "testdata", "preference", "train.jsonl"), testText(t, "bytelevel-llama3"), 0)
	if err == nil || !strings.Contains(err.Error(), "train.jsonl:1: the chat template's rendering") {
		t.Errorf("llama3 test template: error %v, want one naming line 1 and the template", err)
	}
	long := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(long, []byte(`{"prompt": "q", "chosen": "a", "rejected": "b"}`+"\n"+`{"prompt": "a much longer question than the first", "chosen": "a", "rejected": "b"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := LoadPreferenceFile(long, text, 0)
	if err != nil || len(first) != 2 {
		t.Fatalf("%v, %d pairs", err, len(first))
	}
	limit := first[0].Layout().T()
	_, err = LoadPreferenceFile(long, text, limit)
	if err == nil || !strings.Contains(err.Error(), long+":2:") || !strings.Contains(err.Error(), "--max-seq-length") {
		t.Errorf("error %v, want one naming %s:2 and --max-seq-length", err, long)
	}
	if _, err := LoadPreferenceFile(filepath.Join(dir, "missing.jsonl"), text, 0); err == nil || !os.IsNotExist(errorsUnwrapAll(err)) {
		t.Errorf("missing file: %v", err)
	}
	if _, _, _, err := LoadPreferenceDir(filepath.Join(dir, "nodir"), text, 0); err == nil {
		t.Error("missing directory accepted")
	}
}

// testText is a test tokenizer of conformance/testdata/tokenizers with
// its chat template.
func testText(t *testing.T, name string) *chat.Text {
	tok, err := tokenizer.Load(filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "tokenizers", name))
	if err != nil {
		t.Fatal(err)
	}
	return &chat.Text{Tok: tok, Template: true}
}

func errorsUnwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

var sourceRE = regexp.MustCompile(`^fuzz\.jsonl:([0-9]+)$`)

// FuzzReadPreferences: no input panics the reader; it returns records
// whose prompt ends with a non-assistant message and whose source names
// a line of the input, or an error naming the file and a line.
func FuzzReadPreferences(f *testing.F) {
	root := filepath.Join("testdata")
	for _, set := range []string{"preference", "preference-chat"} {
		for _, n := range []string{"train.jsonl", "valid.jsonl"} {
			raw, err := os.ReadFile(filepath.Join(root, set, n))
			if err != nil {
				continue
			}
			f.Add(raw)
			sc := bufio.NewScanner(bytes.NewReader(raw))
			for sc.Scan() {
				f.Add(append([]byte(nil), sc.Bytes()...))
			}
		}
	}
	for _, bad := range []string{
		`{"prompt": `, `[]`, `null`, `{"chosen": "a", "rejected": "b"}`, `{"prompt": "q", "chosen": 1, "rejected": "b"}`,
		`{"prompt": [{"role": "user"}], "chosen": "a", "rejected": "b"}`, `{"prompt": [], "chosen": [], "rejected": []}`,
		`{"chosen": [{"role": "user", "content": "q"}], "rejected": []}`, "\n\n\n", `{"prompt": "q", "chosen": "a", "rejected": "b", "system": null}`,
	} {
		f.Add([]byte(bad))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		prefs, err := ReadPreferences(bytes.NewReader(data), "fuzz.jsonl")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "train: fuzz.jsonl") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, p := range prefs {
			m := sourceRE.FindStringSubmatch(p.Source)
			if m == nil {
				t.Fatalf("source %q", p.Source)
			}
			if len(p.Prompt) == 0 || p.Prompt[len(p.Prompt)-1].Role == "assistant" {
				t.Fatalf("%s: prompt %+v", p.Source, p.Prompt)
			}
			if n := atoi(m[1]); n < 1 || n > lines {
				t.Fatalf("source line %s of %d lines", m[1], lines)
			}
		}
	})
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
