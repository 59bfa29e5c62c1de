package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fuzzSeedDirs are the tokenizer fixtures, the seeds of the tokenizer targets.
var fuzzSeedDirs = []string{"bytelevel-gpt2", "bytelevel-llama3", "spm-llama2", "spm-metaspace"}

func readSeed(tb testing.TB, path string) []byte {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// FuzzTokenizer: any tokenizer.json and tokenizer_config.json either fail with an error
// naming the file or give a tokenizer that encodes and decodes any text without panicking.
func FuzzTokenizer(f *testing.F) {
	for _, d := range fuzzSeedDirs {
		dir := filepath.Join(fixtureDir, d)
		f.Add(readSeed(f, filepath.Join(dir, "tokenizer.json")), readSeed(f, filepath.Join(dir, "tokenizer_config.json")), "Hello, world! 你好 <|im_end|>\n\t  x")
	}
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 2147483647}, "merges": []}}`), []byte(`{}`), "a")
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}, "added_tokens": []}`), []byte(`{"chat_template": [{"name": "default"}]}`), "")
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"id": 2147483647, "content": "x"}]}`), []byte(`null`), "x")
	f.Fuzz(func(t *testing.T, tokJSON, cfgJSON []byte, text string) {
		tok, err := New(tokJSON, cfgJSON, "fuzz/tokenizer.json", "fuzz/tokenizer_config.json")
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz/tokenizer") {
				t.Fatalf("error %q names neither file", err)
			}
			return
		}
		if len(text) > 4096 {
			text = text[:4096]
		}
		ids := tok.EncodeSpecial(text, true)
		_ = tok.Decode(ids)
		_ = tok.DecodeSkipSpecial(ids)
		s := tok.NewStream(false)
		for _, id := range ids {
			s.Push(id)
		}
		s.Flush()
		_ = tok.Decode([]int32{-1, 0, int32(tok.VocabSize()), 1 << 30})
	})
}

// fuzzLimits keep one rendering of the chat-template target short.
var fuzzLimits = TemplateLimits{MaxDepth: 50, MaxOutputBytes: 1 << 20, MaxSteps: 50_000, Timeout: 2 * time.Second}

// FuzzChatTemplate: any template with any message content renders or fails with an error,
// within the limits (no crash, no hang, no huge allocation).
func FuzzChatTemplate(f *testing.F) {
	for _, d := range fuzzSeedDirs {
		cfg, err := parseConfig(readSeed(f, filepath.Join(fixtureDir, d, "tokenizer_config.json")))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(cfg.ChatTemplate, "What is 2+2?", true)
	}
	for _, src := range []string{
		`{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}`,
		`{{ 'a' * 4000000000 }}`,
		`{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`,
		`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`,
		`{{ 1/0 }}`, `{{ messages[-1]['content'] }}`, `{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}`,
		`{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}`, `{% include 'x' %}`,
		`{% block a %}x{{ self.a() }}{% endblock %}`, `{{ '{:>{}}'.format('a', 40) }}`,
		`{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set ns.l = ns.l + [i ~ 'x'] %}{% endfor %}{{ ns.l }}{{ ns.l|join('-') }}`,
		`{% macro m() %}{% call m() %}x{% endcall %}{% endmacro %}{{ m() }}`,
		`{{ range(10)|batch(3)|list }}{{ range(10)|slice(3)|list }}{{ 'a b c'|wordwrap(2) }}{{ 'x'|indent(4, true) }}`,
		`{{ messages|tojson(indent=2) }}{{ 'x'|center(80) }}{{ '%5d'|format(3) }}{{ messages[0].content|upper|replace('A', 'b') }}`,
		`{% for m in messages %}{{ m.role ~ ': ' ~ m.content|trim }}{% if loop.last %}!{% endif %}{% endfor %}`,
	} {
		f.Add(src, "hi", false)
	}
	f.Fuzz(func(t *testing.T, src, content string, gen bool) {
		if len(src) > 64<<10 {
			return
		}
		msgs := []Message{{Role: "system", Content: "s"}, {Role: "user", Content: content}}
		start := time.Now()
		_, _ = RenderChatTemplate(src, msgs, ChatOptions{AddGenerationPrompt: gen, Limits: fuzzLimits},
			map[string]any{"bos_token": "<s>", "eos_token": "</s>"})
		if d := time.Since(start); d > 3*fuzzLimits.Timeout {
			t.Fatalf("rendering took %v, limit %v", d, fuzzLimits.Timeout)
		}
	})
}
