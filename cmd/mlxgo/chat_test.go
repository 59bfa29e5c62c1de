package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// chatML is SmolLM2's kind of template, without a default system message.
const chatML = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}`

// linkFixtureModel links a fixture checkpoint's config.json and weights into dir.
func linkFixtureModel(t *testing.T, ckpt, dir string) {
	t.Helper()
	src, err := filepath.Abs(filepath.Join(fixtures, "models", ckpt))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config.json", "model.safetensors", "model.safetensors.index.json"} {
		os.Remove(filepath.Join(dir, f))
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// textFixture is a fixture checkpoint (vocab 1000) with a tokenizer in which
// every id is one character and nothing merges, so decoding any ids and
// encoding the text gives the same ids back: <|im_start|> (0) and
// <|im_end|> (1, the EOS) are special, 2..96 are ASCII ' '..'~', 97..998
// CJK ideographs and 999 is '\n'.
func textFixture(t *testing.T, template string) string {
	return textFixtureOf(t, "optiq-f32", template)
}

func textFixtureOf(t *testing.T, ckpt, template string) string {
	t.Helper()
	dir := t.TempDir()
	linkFixtureModel(t, ckpt, dir)
	vocab := map[string]int{}
	id := 2
	for c := ' '; c <= '~'; c++ {
		vocab[string(c)] = id
		id++
	}
	for r := rune(0x4E00); id < 999; r++ {
		vocab[string(r)] = id
		id++
	}
	vocab["\n"] = 999
	tj := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 0, "content": "<|im_start|>", "special": true},
			{"id": 1, "content": "<|im_end|>", "special": true},
		},
		"normalizer": nil, "pre_tokenizer": nil, "post_processor": nil,
		"decoder": map[string]any{"type": "Fuse"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	}
	tc := map[string]any{"eos_token": "<|im_end|>", "bos_token": nil}
	if template != "" {
		tc["chat_template"] = template
	}
	writeJSONFile(t, filepath.Join(dir, "tokenizer.json"), tj)
	writeJSONFile(t, filepath.Join(dir, "tokenizer_config.json"), tc)
	return dir
}

func writeJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// oracle computes what the chat should do, independently of chat.go: the
// tokenizer renders and encodes, and generate.Generate runs each prompt from
// an empty cache.
type oracle struct {
	t   *testing.T
	tok *tokenizer.Tokenizer
	m   *minicpm5.Model
	eos []int32
	max int
}

func newOracle(t *testing.T, dir string, eos []int32, maxTokens int) *oracle {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); b.Close() })
	return &oracle{t: t, tok: tok, m: m, eos: eos, max: maxTokens}
}

// ids renders msgs (role, content pairs) with the generation prompt and encodes them.
func (o *oracle) ids(msgs ...string) []int32 {
	var ms []tokenizer.Message
	for i := 0; i < len(msgs); i += 2 {
		ms = append(ms, tokenizer.Message{Role: msgs[i], Content: msgs[i+1]})
	}
	text, err := o.tok.ApplyChatTemplate(ms, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		o.t.Fatal(err)
	}
	return o.tok.EncodeSpecial(text, false)
}

// answer is greedy generation from an empty cache: the tokens (a final EOS
// included) and the reply text.
func (o *oracle) answer(prompt []int32) ([]int32, string) {
	res, err := generate.Generate(o.m, prompt, generate.Options{MaxTokens: o.max, EOS: o.eos}, nil)
	if err != nil {
		o.t.Fatal(err)
	}
	gen := slices.Clone(res.Tokens)
	if res.FinishReason == generate.FinishStop {
		gen = append(gen, o.eos[0])
	}
	return gen, o.tok.Decode(res.Tokens)
}

var (
	cacheLine  = regexp.MustCompile(`(?m)^\((cache: .*)\)$`)
	promptLine = regexp.MustCompile(`(?m)^prompt: (\d+) tokens, `)
)

// chatTurns splits a chat transcript into the cache notes and the prompt
// token counts of the statistics lines.
func chatTurns(out string) (notes []string, prompts []int) {
	for _, m := range cacheLine.FindAllStringSubmatch(out, -1) {
		notes = append(notes, m[1])
	}
	for _, m := range promptLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		prompts = append(prompts, n)
	}
	return notes, prompts
}

// runChatScript runs mlxgo chat with script as stdin.
func runChatScript(t *testing.T, script string, args ...string) (int, string, string) {
	t.Helper()
	old := stdin
	stdin = strings.NewReader(script)
	defer func() { stdin = old }()
	return mlxgo(append([]string{"chat"}, args...)...)
}

// TestChatReusesCache drives mlxgo chat with a script of two turns, /reset,
// a third turn and end of input. The second turn must run only the tokens
// after the cached ones (the first prompt and every token of the first
// answer, its EOS included if it stopped there) and answer exactly as a
// generation over the whole rendered conversation from an empty cache does.
// After /reset the conversation starts again from an empty cache.
func TestChatReusesCache(t *testing.T) {
	dir := textFixture(t, chatML)
	const maxTokens = 6
	o := newOracle(t, dir, []int32{1}, maxTokens)
	const system, q1, q2, q3 = "Be brief.", "hello there", "and again?", "new start"

	ids1 := o.ids("system", system, "user", q1)
	gen1, reply1 := o.answer(ids1)
	ids2 := o.ids("system", system, "user", q1, "assistant", reply1, "user", q2)
	cached := append(slices.Clone(ids1), gen1...)
	if !slices.Equal(ids2[:len(cached)], cached) {
		t.Fatalf("the fixture tokenizer should re-encode the first answer exactly: turn 2 renders to %v, which does not start with the cached %v", ids2, cached)
	}
	_, reply2 := o.answer(ids2)
	ids3 := o.ids("system", system, "user", q3)

	rc, stdout, stderr := runChatScript(t, q1+"\n"+q2+"\n/reset\n"+q3+"\n", "--model", dir, "--backend", "cpu",
		"--max-tokens", strconv.Itoa(maxTokens), "--system", system)
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	notes, prompts := chatTurns(stdout)
	wantNotes := []string{
		fmt.Sprintf("cache: new conversation, prefilled %d tokens", len(ids1)),
		fmt.Sprintf("cache: reused %d tokens, prefilled %d new", len(cached), len(ids2)-len(cached)),
		fmt.Sprintf("cache: new conversation, prefilled %d tokens", len(ids3)),
	}
	wantPrompts := []int{len(ids1), len(ids2) - len(cached), len(ids3)}
	if !slices.Equal(notes, wantNotes) || !slices.Equal(prompts, wantPrompts) {
		t.Errorf("got cache notes %q and prompt counts %v\nwant %q and %v\ntranscript:\n%s", notes, prompts, wantNotes, wantPrompts, stdout)
	}
	for i, reply := range []string{reply1, reply2} {
		if !strings.Contains(stdout, ">>> "+reply+"\n") {
			t.Errorf("turn %d: the transcript lacks the answer %q (greedy from an empty cache):\n%s", i+1, reply, stdout)
		}
	}
	if !strings.Contains(stdout, "(conversation reset)") {
		t.Errorf("no reset line in:\n%s", stdout)
	}
}

// TestChatCutsCacheBack: when the rendering of the conversation does not
// extend the cached tokens (here a template that drops earlier assistant
// turns, so the cached answer is not in it), the cache is cut back to the
// common prefix and the rest prefilled, and the answer equals a generation
// from an empty cache.
func TestChatCutsCacheBack(t *testing.T) {
	const dropAnswers = `{% for message in messages %}{% if message['role'] != 'assistant' %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
	dir := textFixture(t, dropAnswers)
	o := newOracle(t, dir, []int32{1}, 4)
	ids1 := o.ids("user", "first")
	gen1, reply1 := o.answer(ids1)
	ids2 := o.ids("user", "first", "assistant", reply1, "user", "second")
	_, reply2 := o.answer(ids2)
	keep := commonPrefixForTest(append(slices.Clone(ids1), gen1...), ids2)
	if keep == 0 || keep >= len(ids1)+len(gen1) {
		t.Fatalf("fixture: want a partial common prefix, got %d of %d cached tokens", keep, len(ids1)+len(gen1))
	}
	rc, stdout, stderr := runChatScript(t, "first\nsecond\n/exit\nnever sent\n", "--model", dir, "--backend", "cpu", "--max-tokens", "4")
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	notes, prompts := chatTurns(stdout)
	want := fmt.Sprintf("cache: the conversation's tokens leave the %d cached ones at token %d; cut the cache back to %d tokens, prefilled %d", len(ids1)+len(gen1), keep, keep, len(ids2)-keep)
	if len(notes) != 2 || notes[1] != want || !slices.Equal(prompts, []int{len(ids1), len(ids2) - keep}) {
		t.Errorf("got notes %q, prompt counts %v; want two turns, the second %q with %d prompt tokens (after /exit nothing more)\n%s", notes, prompts, want, len(ids2)-keep, stdout)
	}
	if !strings.Contains(stdout, ">>> "+reply2+"\n") {
		t.Errorf("the second answer is not %q (greedy from an empty cache):\n%s", reply2, stdout)
	}
}

// TestChatRotatingPastWindow: with --max-kv-size the conversation soon
// passes the window; a cache that would have to be cut back then cannot be
// (it evicted tokens), so the turn starts over from an empty cache, says
// so, and answers as a generation of the whole rendering on an empty
// rotating cache.
func TestChatRotatingPastWindow(t *testing.T) {
	const dropAnswers = `{% for message in messages %}{% if message['role'] != 'assistant' %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`
	dir := textFixture(t, dropAnswers)
	o := newOracle(t, dir, []int32{1}, 4)
	view, err := o.m.WithCache(nn.CacheOptions{MaxKVSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	ids1 := o.ids("user", "first")
	res1, err := generate.Generate(view, ids1, generate.Options{MaxTokens: 4, EOS: o.eos}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reply1 := o.tok.Decode(res1.Tokens)
	ids2 := o.ids("user", "first", "assistant", reply1, "user", "second")
	res2, err := generate.Generate(view, ids2, generate.Options{MaxTokens: 4, EOS: o.eos}, nil)
	if err != nil {
		t.Fatal(err)
	}
	common := commonPrefixForTest(ids1, ids2)
	if len(ids1) <= 8 || common == 0 {
		t.Fatalf("fixture: want a first prompt past the window of 8 and a common prefix, got %d tokens sharing %d", len(ids1), common)
	}
	rc, stdout, stderr := runChatScript(t, "first\nsecond\n", "--model", dir, "--backend", "cpu", "--max-tokens", "4", "--max-kv-size", "8")
	if rc != 0 {
		t.Fatalf("exit %d, stderr:\n%s", rc, stderr)
	}
	notes, _ := chatTurns(stdout)
	want := fmt.Sprintf("cache: reset (a rotating cache past its window cannot be cut back to the %d tokens the conversation shares with it), prefilled all %d tokens", common, len(ids2))
	if len(notes) != 2 || notes[1] != want {
		t.Errorf("got notes %q, want the second %q\n%s", notes, want, stdout)
	}
	if reply2 := o.tok.Decode(res2.Tokens); !strings.Contains(stdout, ">>> "+reply2+"\n") {
		t.Errorf("the second answer is not %q (greedy on an empty rotating cache):\n%s", reply2, stdout)
	}
}

func commonPrefixForTest(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestChatErrors(t *testing.T) {
	dir := textFixture(t, chatML)
	noTemplate := textFixture(t, "")
	noTokenizer := t.TempDir()
	linkFixtureModel(t, "tied-f32", noTokenizer)
	for _, tc := range []struct {
		name string
		args []string
		rc   int
		want []string
	}{
		{"think-without-switch", []string{"--model", textFixture(t, strings.ReplaceAll(chatML, "enable_thinking", "x")), "--think"}, 2, []string{"--think", "enable_thinking"}},
		{"think-and-no-think", []string{"--model", dir, "--think", "--no-think"}, 2, []string{"mutually exclusive"}},
		{"no-template", []string{"--model", noTemplate}, 2, []string{"no chat template", "generate --raw"}},
		{"no-tokenizer", []string{"--model", noTokenizer}, 2, []string{"tokenizer.json", "--prompt-ids"}},
		{"no-model", nil, 2, []string{"--model is required"}},
		{"bad-temp", []string{"--model", dir, "--temp", "-1"}, 2, []string{"--temp -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, _, stderr := runChatScript(t, "hi\n", append(tc.args, "--backend", "cpu")...)
			if rc != tc.rc {
				t.Errorf("got exit %d, want %d (stderr %q)", rc, tc.rc, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not contain %q", stderr, w)
				}
			}
		})
	}
}

func TestChatHelp(t *testing.T) {
	rc, stdout, _ := mlxgo("chat", "--help")
	if rc != 0 {
		t.Fatalf("got exit %d, want 0", rc)
	}
	for _, w := range []string{"Examples:", "mlxgo chat --model", "/reset", "/exit", "-system", "-temp", "-backend", "-no-think"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("help does not contain %q:\n%s", w, stdout)
		}
	}
}

// TestChatUnknownCommandAndFailedTurns: a one-word line starting with "/"
// that is not a command is refused on stderr and never reaches the model (as
// in ollama); a conversation whose every message failed exits 1.
func TestChatUnknownCommandAndFailedTurns(t *testing.T) {
	dir := textFixture(t, chatML)
	rc, stdout, stderr := runChatScript(t, "/help\nhello there\n", "--model", dir, "--backend", "cpu", "--max-tokens", "2")
	if rc != 0 || !strings.Contains(stderr, "unknown command /help (the commands are /reset, /exit and /quit)") {
		t.Errorf("got exit %d, stderr %q; want 0 and the unknown-command line", rc, stderr)
	}
	if notes, _ := chatTurns(stdout); len(notes) != 1 {
		t.Errorf("got %d turns, want 1 (the command is not a message):\n%s", len(notes), stdout)
	}
	failing := textFixture(t, `{{ raise_exception('this template refuses every conversation') }}`)
	rc, _, stderr = runChatScript(t, "hello\nagain\n", "--model", failing, "--backend", "cpu")
	if rc != 1 || !strings.Contains(stderr, "every message of the conversation failed (2)") || !strings.Contains(stderr, "this template refuses every conversation") {
		t.Errorf("got exit %d, stderr %q; want 1, each failure and the summary", rc, stderr)
	}
}
