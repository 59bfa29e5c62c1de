package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

const fixtureDir = "../conformance/testdata/tokenizers"

// fixtureNames are the tokenizers conformance/oracle/tokenizer_fixtures.py trains.
var fixtureNames = []string{"bytelevel-gpt2", "bytelevel-llama3", "spm-llama2", "spm-metaspace"}

type stringCase struct {
	Text               string   `json:"text"`
	IDs                []int32  `json:"ids"`
	IDsNoSpecial       []int32  `json:"ids_no_special"`
	Decoded            string   `json:"decoded"`
	DecodedSkipSpecial string   `json:"decoded_skip_special"`
	PreTokens          []string `json:"pre_tokens"`
	TransformersIDs    []int32  `json:"transformers_ids"`
}

type chatCase struct {
	Name                string           `json:"name"`
	Messages            []Message        `json:"messages"`
	AddGenerationPrompt bool             `json:"add_generation_prompt"`
	Extra               map[string]any   `json:"extra"`
	Tools               []map[string]any `json:"tools"`
	Text                *string          `json:"text"`
	Error               *string          `json:"error"`
}

type fixture struct {
	Name       string       `json:"name"`
	VocabSize  int          `json:"vocab_size"`
	Strings    []stringCase `json:"strings"`
	DecodeEach []string     `json:"decode_each"`
	Fuzz       []stringCase `json:"fuzz"`
	CorpusIDs  []int32      `json:"corpus_ids"`
	Chat       []chatCase   `json:"chat"`
}

func loadFixture(t testing.TB, name string) (*Tokenizer, *fixture) {
	t.Helper()
	dir := filepath.Join(fixtureDir, name)
	tok, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatalf("reading oracle cases: %v", err)
	}
	var f fixture
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s/cases.json: %v", dir, err)
	}
	if len(f.Strings) == 0 || len(f.DecodeEach) == 0 || len(f.Chat) == 0 {
		t.Fatalf("%s/cases.json: empty case lists", dir)
	}
	return tok, &f
}

func TestEncodeMatchesOracle(t *testing.T) {
	for _, name := range fixtureNames {
		tok, f := loadFixture(t, name)
		if tok.VocabSize() != f.VocabSize {
			t.Errorf("VocabSize: got %d, want %d (%s)", tok.VocabSize(), f.VocabSize, name)
		}
		for i, c := range f.Strings {
			if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
				t.Errorf("Encode(%q): got %v, want %v (%s, string %d)", c.Text, got, c.IDs, name, i)
			}
			if got := tok.Encode(c.Text); !slices.Equal(got, c.TransformersIDs) {
				t.Errorf("Encode(%q): got %v, want transformers' %v (%s, string %d)", c.Text, got, c.TransformersIDs, name, i)
			}
			if got := tok.EncodeSpecial(c.Text, false); !slices.Equal(got, c.IDsNoSpecial) {
				t.Errorf("EncodeSpecial(%q, false): got %v, want %v (%s, string %d)", c.Text, got, c.IDsNoSpecial, name, i)
			}
		}
		for i, c := range f.Fuzz {
			if got := tok.EncodeSpecial(c.Text, false); !slices.Equal(got, c.IDsNoSpecial) {
				t.Errorf("EncodeSpecial(%q, false): got %v, want %v (%s, fuzz %d)", c.Text, got, c.IDsNoSpecial, name, i)
			}
		}
		corpus, err := os.ReadFile("../conformance/oracle/corpus/mixed.txt")
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.EncodeSpecial(string(corpus), false); !slices.Equal(got, f.CorpusIDs) {
			i := 0
			for i < min(len(got), len(f.CorpusIDs)) && got[i] == f.CorpusIDs[i] {
				i++
			}
			t.Errorf("EncodeSpecial(corpus): %d ids, want %d; first difference at index %d (%s)", len(got), len(f.CorpusIDs), i, name)
		}
	}
}

// TestPreTokenizerMatchesOracle runs the pre-tokenizer alone on each raw string, which checks
// the split scanners directly (different splits can still give the same ids).
func TestPreTokenizerMatchesOracle(t *testing.T) {
	for _, name := range fixtureNames {
		tok, f := loadFixture(t, name)
		if tok.pre == nil {
			continue
		}
		for i, c := range append(slices.Clone(f.Strings), f.Fuzz...) {
			var got []string
			tok.pre.split(piece{s: c.Text, first: true}, func(p piece) { got = append(got, p.text()) })
			if c.PreTokens == nil {
				t.Fatalf("%s: oracle has no pre_tokens for %q", name, c.Text)
			}
			if !slices.Equal(got, c.PreTokens) && !(len(got) == 0 && len(c.PreTokens) == 0) {
				t.Errorf("pre-tokenize(%q): got %q, want %q (%s, case %d)", c.Text, got, c.PreTokens, name, i)
			}
		}
	}
}

// TestMergesStringFormat loads a byte-level and a SentencePiece fixture with merges rewritten in the
// older "a b" string form and checks the ids do not change.
func TestMergesStringFormat(t *testing.T) {
	for _, name := range []string{"bytelevel-gpt2", "spm-llama2"} {
		_, f := loadFixture(t, name)
		dir := filepath.Join(fixtureDir, name)
		data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		model := doc["model"].(map[string]any)
		merges := model["merges"].([]any)
		for i, m := range merges {
			p := m.([]any)
			merges[i] = p[0].(string) + " " + p[1].(string)
		}
		data, _ = json.Marshal(doc)
		tok, err := New(data, nil, name+" (string merges)", "")
		if err != nil {
			t.Fatalf("%s with string merges: %v", name, err)
		}
		for i, c := range f.Strings {
			if got := tok.EncodeSpecial(c.Text, false); !slices.Equal(got, c.IDsNoSpecial) {
				t.Errorf("EncodeSpecial(%q): got %v, want %v (%s string merges, string %d)", c.Text, got, c.IDsNoSpecial, name, i)
			}
		}
	}
}

func TestDecodeMatchesOracle(t *testing.T) {
	for _, name := range fixtureNames {
		tok, f := loadFixture(t, name)
		for i, c := range f.Strings {
			if got := tok.Decode(c.IDs); got != c.Decoded {
				t.Errorf("Decode(%v): got %q, want %q (%s, string %d)", c.IDs, got, c.Decoded, name, i)
			}
			if got := tok.DecodeSkipSpecial(c.IDs); got != c.DecodedSkipSpecial {
				t.Errorf("DecodeSkipSpecial(%v): got %q, want %q (%s, string %d)", c.IDs, got, c.DecodedSkipSpecial, name, i)
			}
		}
		for id, want := range f.DecodeEach {
			if got := tok.Decode([]int32{int32(id)}); got != want {
				t.Errorf("Decode([%d]): got %q, want %q (%s)", id, got, want, name)
			}
		}
	}
}

// TestRoundTrip: decode(encode(x)) == x wherever the oracle's tokenizer is lossless on x
// (its decoding of its own ids gives x back), and for the byte-level tokenizer without a
// normalizer on every string (ByteLevel maps every byte to a token, so nothing is lost).
func TestRoundTrip(t *testing.T) {
	for _, name := range fixtureNames {
		tok, f := loadFixture(t, name)
		lossless := 0
		for i, c := range f.Strings {
			oracleLossless := c.DecodedSkipSpecial == c.Text && !slices.ContainsFunc(c.IDsNoSpecial, tok.IsSpecial)
			if !oracleLossless && name != "bytelevel-gpt2" {
				continue
			}
			lossless++
			ids := tok.EncodeSpecial(c.Text, false)
			if got := tok.Decode(ids); got != c.Text {
				t.Errorf("Decode(Encode(%q)): got %q (%s, string %d)", c.Text, got, name, i)
			}
		}
		if lossless < len(f.Strings)/2 {
			t.Errorf("only %d of %d strings round-trip in the oracle (%s): the test set lost its point", lossless, len(f.Strings), name)
		}
	}
}

// streamAll pushes ids into a fresh stream and returns the emitted text, checking that no
// chunk is invalid UTF-8 and that, before Flush, the text so far is a prefix of want.
func streamAll(t *testing.T, tok *Tokenizer, ids []int32, skip bool, want, where string) string {
	s := tok.NewStream(skip)
	var sb strings.Builder
	for k, id := range ids {
		chunk := s.Push(id)
		if !utf8.ValidString(chunk) {
			t.Errorf("Push: chunk %q is not valid UTF-8 (%s, token %d)", chunk, where, k)
		}
		sb.WriteString(chunk)
		if !strings.HasPrefix(want, sb.String()) {
			t.Errorf("streamed %q so far, not a prefix of the full decode %q (%s, token %d)", sb.String(), want, where, k)
			return sb.String()
		}
	}
	sb.WriteString(s.Flush())
	return sb.String()
}

func TestStreamEqualsDecodeForEveryPrefix(t *testing.T) {
	for _, name := range fixtureNames {
		tok, f := loadFixture(t, name)
		var seqs [][]int32
		for _, c := range f.Strings {
			seqs = append(seqs, c.IDs)
		}
		// Random id sequences too: byte tokens in any order, specials anywhere.
		rng := rand.New(rand.NewPCG(7, uint64(len(name))))
		for range 20 {
			ids := make([]int32, 24)
			for i := range ids {
				ids[i] = int32(rng.IntN(tok.VocabSize()))
			}
			seqs = append(seqs, ids)
		}
		for i, ids := range seqs {
			for _, skip := range []bool{false, true} {
				for k := 0; k <= len(ids); k++ {
					want := tok.decode(ids[:k], skip)
					where := fmt.Sprintf("%s/seq%d/prefix%d", name, i, k)
					if got := streamAll(t, tok, ids[:k], skip, want, where); got != want {
						t.Errorf("stream then Flush: got %q, want Decode %q (%s, skip %v)", got, want, where, skip)
					}
				}
			}
		}
	}
}

func TestChatTemplateMatchesOracle(t *testing.T) {
	for _, name := range fixtureNames {
		tok, f := loadFixture(t, name)
		for _, c := range f.Chat {
			got, err := tok.ApplyChatTemplate(c.Messages, ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt, Tools: c.Tools, Extra: c.Extra})
			switch {
			case c.Error != nil:
				var te *TemplateError
				if !errors.As(err, &te) || te.Message != *c.Error {
					t.Errorf("ApplyChatTemplate: got (%q, %v), want raise_exception(%q) (%s, %s)", got, err, *c.Error, name, c.Name)
				}
			case err != nil:
				t.Errorf("ApplyChatTemplate: %v (%s, %s)", err, name, c.Name)
			case got != *c.Text:
				t.Errorf("ApplyChatTemplate:\n got %q\nwant %q (%s, %s)", got, *c.Text, name, c.Name)
			}
		}
	}
}

func TestBadTokenizerJSON(t *testing.T) {
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
		want []string // substrings of the error
	}{
		{"malformed", data[:len(data)/2], []string{"bad.json", "not a valid tokenizer.json"}},
		{"unknown-model", edit(func(d map[string]any) { d["model"].(map[string]any)["type"] = "Unigram" }),
			[]string{"bad.json", "model type \"Unigram\""}},
		{"unknown-pre-tokenizer", edit(func(d map[string]any) { d["pre_tokenizer"] = map[string]any{"type": "UnicodeScripts"} }),
			[]string{"bad.json", "pre_tokenizer type \"UnicodeScripts\""}},
		{"unknown-normalizer", edit(func(d map[string]any) { d["normalizer"] = map[string]any{"type": "BertNormalizer"} }),
			[]string{"bad.json", "normalizer type \"BertNormalizer\""}},
		{"unknown-decoder", edit(func(d map[string]any) { d["decoder"] = map[string]any{"type": "CTC"} }),
			[]string{"bad.json", "decoder type \"CTC\""}},
		{"unknown-post-processor", edit(func(d map[string]any) { d["post_processor"] = map[string]any{"type": "Weird"} }),
			[]string{"bad.json", "post_processor type \"Weird\""}},
		{"merge-unknown-token", edit(func(d map[string]any) {
			m := d["model"].(map[string]any)
			m["merges"] = append(m["merges"].([]any), []any{"Ġt", "zzzz"})
		}), []string{"bad.json", "merges[", "\"zzzz\" is not in the vocabulary"}},
		{"split-lookahead-regex", edit(func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `a(?!b)`}, "behavior": "Isolated", "invert": false}
		}), []string{"bad.json", "pre_tokenizer \"Split\"", "a(?!b)"}},
		{"no-model", edit(func(d map[string]any) { delete(d, "model") }), []string{"bad.json", "model: missing"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := New(c.data, nil, "bad.json", "")
			if err == nil {
				t.Fatalf("New: got a tokenizer (%d tokens), want an error containing %q", tok.VocabSize(), c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	if _, err := New(data, []byte(`{"chat_template": 3}`), "ok.json", "cfg.json"); err == nil || !strings.Contains(err.Error(), "cfg.json") || !strings.Contains(err.Error(), "chat_template") {
		t.Errorf("bad tokenizer_config.json: got %v, want an error naming cfg.json and chat_template", err)
	}
}

func benchText(b *testing.B, cjk bool) string {
	data, err := os.ReadFile("../conformance/oracle/corpus/mixed.txt")
	if err != nil {
		b.Fatal(err)
	}
	// english: the ASCII prose lines; mixed-cjk: the Chinese, Japanese and Korean lines, each
	// followed by an English one.
	var english, cjkLines []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		switch {
		case strings.ContainsFunc(l, func(r rune) bool { return r >= 0x3040 && r <= 0xD7AF }):
			cjkLines = append(cjkLines, l)
		case len(l) > 40 && !strings.ContainsFunc(l, func(r rune) bool { return r > 0x7f }):
			english = append(english, l)
		}
	}
	lines := english
	if cjk {
		lines = nil
		for i, l := range cjkLines {
			lines = append(lines, l, english[i%len(english)])
		}
	}
	text := strings.Join(lines, "")
	return strings.Repeat(text, 1<<20/len(text)+1) // about 1 MiB, so the word cache does not see it all at once
}

func BenchmarkEncode(b *testing.B) {
	for _, name := range []string{"bytelevel-gpt2", "bytelevel-llama3", "spm-metaspace"} {
		for _, lang := range []string{"english", "mixed-cjk"} {
			b.Run(name+"/"+lang, func(b *testing.B) {
				tok, _ := loadFixture(b, name)
				text := benchText(b, lang == "mixed-cjk")
				b.SetBytes(int64(len(text)))
				b.ResetTimer()
				for b.Loop() {
					tok.EncodeSpecial(text, false)
				}
			})
		}
	}
}
