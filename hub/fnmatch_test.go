package hub

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// fnmatchCases are patterns and names with the answer of Python 3.11's
// fnmatch.fnmatchcase (after huggingface_hub's trailing-'/' rule);
// TestPatternMatchesPython asks Python for every one of them.
var fnmatchCases = []struct {
	pattern, name string
	want          bool
}{
	{"*.json", "config.json", true},
	{"*.json", "sub/dir/extra.json", true}, // '*' crosses '/'
	{"*.json", "config.jsonl", false},
	{"model*.safetensors", "model-00001-of-00002.safetensors", true},
	{"model*.safetensors", "consolidated.safetensors", false},
	{"tokenizer.model", "tokenizer.model", true},
	{"tokenizer.model", "tokenizer_model", false},
	{"?.txt", "a.txt", true},
	{"?.txt", "ab.txt", false},
	{"?.txt", "/.txt", true},
	{"[abc]*", "b.json", true},
	{"[!abc]*", "b.json", false},
	{"[!abc]*", "d.json", true},
	{"[a-c]x", "bx", true},
	{"[a-c]x", "dx", false},
	{"[z-a]x", "zx", false}, // reversed range: matches nothing
	{"[!z-a]x", "qx", true}, // its negation: any character
	{"[]]x", "]x", true},
	{"[!]]x", "]x", false},
	{"[a-]x", "-x", true},
	{"[-a]x", "-x", true},
	{"[a-c-e]x", "-x", true},
	{"[a-c-e]x", "dx", false},
	{"[a", "[a", true}, // unclosed '[' is literal
	{"[a", "a", false},
	{"sub/", "sub/extra.json", true}, // trailing '/' takes the folder
	{"sub/", "subway.json", false},
	{"*", "", true},
	{"**", "a/b", true},
	{"a*b*c", "aXbYc", true},
	{"a*b*c", "aXbYcZ", false},
	{"*a*a*a*a*b", strings.Repeat("a", 60), false},
	{"Config.json", "config.json", false}, // case-sensitive
	{"*.JSON", "x.json", false},
	{"é*", "été.json", true},
	{"\\*", "\\x", true}, // '\' is not an escape in fnmatch
	{"[\\]x", "\\x", true},
	{".*", ".gitattributes", true},
	{"*.[jt]xt", "a.txt", true},
	{"a?c", "a\nc", true},
}

func TestPatternMatch(t *testing.T) {
	for _, tc := range fnmatchCases {
		p, err := CompilePattern(tc.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tc.pattern, err)
		}
		if got := p.Match(tc.name); got != tc.want {
			t.Errorf("%q matches %q: got %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{"", "\xff*"} {
		if _, err := CompilePatterns([]string{"*.json", bad}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("pattern %q: got %v, want an error naming it", bad, err)
		}
	}
}

// TestPatternMatchesPython checks every case, and the default patterns on
// a list of repo files, against huggingface_hub's filter_repo_objects in
// the oracle venv: the independent implementation the matcher copies.
func TestPatternMatchesPython(t *testing.T) {
	py := testenv.Python(t)
	type query struct {
		Patterns []string `json:"patterns"`
		Names    []string `json:"names"`
	}
	var qs []query
	for _, tc := range fnmatchCases {
		qs = append(qs, query{[]string{tc.pattern}, []string{tc.name}})
	}
	repoFiles := []string{"config.json", "model.safetensors", "model-00001-of-00002.safetensors", "model.safetensors.index.json",
		"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.txt", "merges.txt",
		"chat_template.jinja", "qwen.tiktoken", "generation_config.json", "README.md", ".gitattributes", "modeling_x.py",
		"original/consolidated.00.pth", "pytorch_model.bin", "weights.npz", "added_tokens.jsonl", "sub/extra.json"}
	qs = append(qs, query{DefaultAllowPatterns, repoFiles})
	in, _ := json.Marshal(qs)
	script := `
import json, sys
from huggingface_hub.utils import filter_repo_objects
out = [list(filter_repo_objects(q["names"], allow_patterns=q["patterns"])) for q in json.loads(sys.stdin.read())]
print(json.dumps(out))`
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var want [][]string
	if err := json.Unmarshal(out, &want); err != nil || len(want) != len(qs) {
		t.Fatalf("python answered %q: %v", out, err)
	}
	for i, q := range qs {
		ps, err := CompilePatterns(q.Patterns)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range q.Names {
			if MatchAny(ps, n) {
				got = append(got, n)
			}
		}
		if strings.Join(got, "\x00") != strings.Join(want[i], "\x00") {
			t.Errorf("patterns %q on %q: got %q, huggingface_hub %q", q.Patterns, q.Names, got, want[i])
		}
	}
}

// matchPlain is the textbook recursive definition of fnmatch over the
// compiled items, exponential but obviously right: the reference for
// Match's one-star backtracking loop.
func matchPlain(items []patItem, name []rune) bool {
	if len(items) == 0 {
		return len(name) == 0
	}
	if items[0].kind == patStar {
		for i := 0; i <= len(name); i++ {
			if matchPlain(items[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	return len(name) > 0 && items[0].one(name[0]) && matchPlain(items[1:], name[1:])
}

// FuzzPatternMatch checks Match against matchPlain on any pattern and
// name, and that nothing panics.
func FuzzPatternMatch(f *testing.F) {
	for _, tc := range fnmatchCases {
		f.Add(tc.pattern, tc.name)
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		p, err := CompilePattern(pattern)
		if err != nil {
			return
		}
		got := p.Match(name)
		if len(p.items) > 16 || len([]rune(name)) > 32 {
			return // keep the reference's backtracking small
		}
		if want := matchPlain(p.items, []rune(name)); got != want {
			t.Errorf("%q matches %q: Match %v, the plain matcher %v", pattern, name, got, want)
		}
	})
}
