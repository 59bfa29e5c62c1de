package train

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// datasetOracle tokenizes data directories with mlx_lm's own
// load_local_dataset and the tokenizer mlx_lm loads, and prints each
// set's (tokens, offset) pairs, or the error mlx_lm raises, as JSON.
const datasetOracle = `
import json, sys, types
from pathlib import Path
from mlx_lm.tokenizer_utils import load
from mlx_lm.tuner.datasets import load_local_dataset
out = {}
for c in json.loads(sys.argv[1]):
    tok = load(Path(c["tokenizer"]))
    try:
        sets = load_local_dataset(Path(c["data"]), tok, types.SimpleNamespace(mask_prompt=c["mask"]))
        out[c["name"]] = [[list(map(list, zip(*[s.process(s[i]) for i in range(len(s))]))) if len(s) else [[], []]][0] for s in sets]
        out[c["name"]] = [[{"tokens": list(map(int, t)), "offset": o} for t, o in (zip(*p) if p[0] else [])] for p in out[c["name"]]]
    except ValueError as e:
        out[c["name"]] = str(e)
print(json.dumps(out))
`

type dataCase struct {
	Name      string `json:"name"`
	Tokenizer string `json:"tokenizer"`
	Data      string `json:"data"`
	Mask      bool   `json:"mask"`
}

// TestLoadDirMatchesMLXLM tokenizes text, chat and prompt-completion
// data directories, with and without --mask-prompt, through two
// tokenizers, and compares every sequence and offset to mlx_lm's
// datasets (text with --mask-prompt must fail in both).
func TestLoadDirMatchesMLXLM(t *testing.T) {
	py := testenv.Python(t)
	root := testenv.RepoRoot(t)
	var cases []dataCase
	for _, tk := range []string{"bytelevel-llama3", "spm-llama2"} {
		for _, d := range []string{"data", "chat", "completions"} {
			for _, mask := range []bool{false, true} {
				cases = append(cases, dataCase{
					Name:      fmt.Sprintf("%s/%s/mask=%v", tk, d, mask),
					Tokenizer: filepath.Join(root, "conformance", "testdata", "tokenizers", tk),
					Data:      filepath.Join(root, "train", "testdata", d),
					Mask:      mask,
				})
			}
		}
	}
	arg, _ := json.Marshal(cases)
	out, err := exec.Command(py, "-c", datasetOracle, string(arg)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("oracle: %v", err)
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			tok, err := tokenizer.Load(c.Tokenizer)
			if err != nil {
				t.Fatal(err)
			}
			text := &chat.Text{Tok: tok, Template: true}
			tr, va, te, err := LoadDir(c.Data, text, DataOptions{MaskPrompt: c.Mask})
			var msg string
			if json.Unmarshal(want[c.Name], &msg) == nil {
				if err == nil || !strings.Contains(err.Error(), "not supported") {
					t.Fatalf("mlx_lm refuses (%s); LoadDir: %v", msg, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sets [3][]struct {
				Tokens []int32 `json:"tokens"`
				Offset int     `json:"offset"`
			}
			if err := json.Unmarshal(want[c.Name], &sets); err != nil {
				t.Fatal(err)
			}
			n := 0
			for s, got := range [][]Example{tr, va, te} {
				if len(got) != len(sets[s]) {
					t.Fatalf("set %d: %d examples, mlx_lm %d", s, len(got), len(sets[s]))
				}
				for i, w := range sets[s] {
					g := got[i]
					if fmt.Sprint(g.Tokens) != fmt.Sprint(w.Tokens) || g.Offset != w.Offset {
						t.Errorf("set %d line %d: tokens %v offset %d, mlx_lm %v offset %d", s, i+1, g.Tokens, g.Offset, w.Tokens, w.Offset)
					}
					n++
				}
			}
			if n == 0 {
				t.Fatal("no examples compared")
			}
		})
	}
}

// TestLoadFileErrors: bad lines are errors naming the file and line.
func TestLoadFileErrors(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "tokenizers", "bytelevel-llama3"))
	if err != nil {
		t.Fatal(err)
	}
	text := &chat.Text{Tok: tok, Template: true}
	for _, c := range []struct{ name, body, want string }{
		{"not json", `{"text":"a"}` + "\n{oops\n", "train.jsonl:2: not a JSON object"},
		{"blank line", `{"text":"a"}` + "\n\n", "train.jsonl:2: not a JSON object"},
		{"array", `["a"]` + "\n", "train.jsonl:1: not a JSON object"},
		{"unknown format", `{"body":"a"}` + "\n", `train.jsonl:1: unsupported data format`},
		{"missing text", `{"text":"a"}` + "\n" + `{"txt":"b"}` + "\n", `train.jsonl:2 (text format): no field "text"`},
		{"text not string", `{"text":3}` + "\n", `train.jsonl:1 (text format): field "text" is not a string`},
		{"missing completion", `{"prompt":"a","completion":"b"}` + "\n" + `{"prompt":"a"}` + "\n", `train.jsonl:2 (completions format): no field "completion"`},
		{"bad messages", `{"messages":[{"role":"user"}]}` + "\n", `train.jsonl:1 (chat format): messages[0] needs a string role and a string content`},
		{"empty messages", `{"messages":[]}` + "\n", `train.jsonl:1 (chat format): field "messages" has no messages`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "train.jsonl"), []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, _, err := LoadDir(dir, text, DataOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
