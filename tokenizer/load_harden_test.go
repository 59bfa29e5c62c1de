package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadNonRegularFiles: tokenizer.json or tokenizer_config.json that is a directory or a
// symbolic link to /dev/zero gets an error naming the file (a read without end before).
func TestLoadNonRegularFiles(t *testing.T) {
	src := filepath.Join(fixtureDir, "bytelevel-gpt2")
	for _, file := range []string{"tokenizer.json", "tokenizer_config.json"} {
		for _, kind := range []string{"directory", "device"} {
			t.Run(file+"/"+kind, func(t *testing.T) {
				dir := t.TempDir()
				for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
					data, err := os.ReadFile(filepath.Join(src, f))
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				path := filepath.Join(dir, file)
				os.Remove(path)
				var err error
				if kind == "directory" {
					err = os.Mkdir(path, 0o755)
				} else {
					err = os.Symlink("/dev/zero", path)
				}
				if err != nil {
					t.Fatal(err)
				}
				_, err = Load(dir)
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "it is a "+kind) {
					t.Fatalf("got %v, want an error naming %s as a %s", err, path, kind)
				}
			})
		}
	}
}

// TestHugeTokenIDs: a vocabulary or added-token id of 2^31-1 sized the id table by it (32 GB);
// now an error before the allocation.
func TestHugeTokenIDs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtureDir, "bytelevel-gpt2", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(doc map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		f(doc)
		out, _ := json.Marshal(doc)
		return out
	}
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"vocab id", edit(func(d map[string]any) { d["model"].(map[string]any)["vocab"].(map[string]any)["zzzz"] = 2147483647 }),
			"vocab id 2147483647 is far beyond"},
		{"added id", edit(func(d map[string]any) {
			d["added_tokens"] = append(d["added_tokens"].([]any), map[string]any{"id": 2147483647, "content": "<big>", "special": true})
		}), "added_tokens: id 2147483647 is far beyond"},
		{"empty vocabulary", edit(func(d map[string]any) {
			m := d["model"].(map[string]any)
			m["vocab"], m["merges"] = map[string]any{}, []any{}
			d["added_tokens"] = []any{}
		}), "the vocabulary is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := New(c.data, nil, "bad.json", "")
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.json") {
				n := 0
				if tok != nil {
					n = tok.VocabSize()
				}
				t.Fatalf("got (%d tokens, %v), want an error naming bad.json containing %q", n, err, c.want)
			}
		})
	}
}

// TestEOSTokenInVocabulary: an eos_token missing from the vocabulary was accepted, and
// generation never stopped on it.
func TestEOSTokenInVocabulary(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtureDir, "bytelevel-gpt2", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(data, []byte(`{"eos_token": "<|no such token|>"}`), "tok.json", "cfg.json")
	if err == nil || !strings.Contains(err.Error(), "cfg.json") || !strings.Contains(err.Error(), "eos_token") || !strings.Contains(err.Error(), "<|no such token|>") {
		t.Fatalf("got %v, want an error naming cfg.json, eos_token and the token", err)
	}
	cfg, err := os.ReadFile(filepath.Join(fixtureDir, "bytelevel-gpt2", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := New(data, cfg, "tok.json", "cfg.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.EOS(); !ok {
		t.Errorf("the fixture's eos_token %q is not found", tok.Config().EOSToken)
	}
}
