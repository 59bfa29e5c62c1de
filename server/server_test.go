package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/server"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// chatML is SmolLM2's kind of template, without a default system message.
const chatML = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// modelDir is a fixture checkpoint (optiq-f32: vocab 1000, context 256)
// with a tokenizer in which every id is one character and nothing merges:
// <|im_start|> (0) and <|im_end|> (1, the EOS) are special, 2..96 are
// ASCII ' '..'~', 97..998 CJK ideographs and 999 is '\n'. So every
// generated token is one character of text, and a stop string of two
// characters spans two tokens.
func modelDir(t testing.TB) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "conformance", "testdata", "models", "optiq-f32"))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Need(t, filepath.Join(src, "config.json"), "run `make oracle`")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "model.safetensors.index.json"} {
		if err := os.Symlink(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
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
	writeJSON(t, filepath.Join(dir, "tokenizer.json"), map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 0, "content": "<|im_start|>", "special": true},
			{"id": 1, "content": "<|im_end|>", "special": true},
		},
		"normalizer": nil, "pre_tokenizer": nil, "post_processor": nil,
		"decoder": map[string]any{"type": "Fuse"},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	})
	writeJSON(t, filepath.Join(dir, "tokenizer_config.json"), map[string]any{"eos_token": "<|im_end|>", "bos_token": nil, "chat_template": chatML})
	return dir
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixture is a running server and an independent oracle: the same
// checkpoint on a backend of its own, the tokenizer, generate.Generate.
type fixture struct {
	t    testing.TB
	url  string
	srv  *server.Server
	log  *syncBuffer
	tok  *tokenizer.Tokenizer
	m    *minicpm5.Model // the oracle's model
	b    backend.Backend // the server's backend
	base backend.Stats   // the server's backend before it served
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// smallBuffers accepts connections with small kernel send buffers, so
// that a client that stops reading blocks the server's writes soon (as on
// a slow network) instead of after megabytes of loopback buffer.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

func newFixture(t testing.TB, edit func(*server.Config)) *fixture {
	t.Helper()
	return newFixtureWith(t, backend.Options{}, edit)
}

// newFixtureWith is newFixture with the options of both backends (the
// server's and the oracle's); PackWeights is the server's only.
func newFixtureWith(t testing.TB, opts backend.Options, edit func(*server.Config)) *fixture {
	t.Helper()
	dir := modelDir(t)
	ck, err := checkpoint.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := chat.Load(dir, ck)
	if err != nil {
		t.Fatal(err)
	}
	open := func(opts backend.Options) (backend.Backend, *minicpm5.Model) {
		b, err := cpu.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		m, err := minicpm5.Load(b, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(); b.Close() })
		return b, m
	}
	b, m := open(opts)
	oracle := opts
	oracle.PackWeights = false
	_, om := open(oracle)
	f := &fixture{t: t, tok: tm.Tok, m: om, b: b, base: b.Stats(), log: &syncBuffer{}}
	cfg := server.Config{Model: m, ModelID: "tiny", Text: tm, ContextLength: ck.MaxPositionEmbeddings,
		Defaults: server.Defaults{MaxTokens: 12, RepetitionContext: 20}, MaxConcurrency: 4, PrefillConcurrency: 2,
		PrefillStep: 8, Log: f.log}
	if edit != nil {
		edit(&cfg)
	}
	f.srv, err = server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(f.srv.Handler())
	hs.Listener = smallBuffers{hs.Listener}
	f.srv.ConfigureHTTP(hs.Config)
	hs.Start()
	f.url = hs.URL
	t.Cleanup(func() { hs.Close(); f.srv.Close() })
	return f
}

// want is what the oracle generates for prompt ids: the text (stop token
// excluded), the tokens and the finish reason.
func (f *fixture) want(ids []int32, opts generate.Options) (string, []int32, string) {
	f.t.Helper()
	opts.EOS = []int32{1}
	res, err := generate.Generate(f.m, ids, opts, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.tok.Decode(res.Tokens), res.Tokens, res.FinishReason
}

// render is the chat template's prompt ids for role/content pairs.
func (f *fixture) render(pairs ...string) []int32 {
	var msgs []tokenizer.Message
	for i := 0; i < len(pairs); i += 2 {
		msgs = append(msgs, tokenizer.Message{Role: pairs[i], Content: pairs[i+1]})
	}
	text, err := f.tok.ApplyChatTemplate(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return f.tok.EncodeSpecial(text, false)
}

// post sends body to route and returns the status and the decoded JSON.
func (f *fixture) post(route, body string) (int, map[string]any, http.Header) {
	f.t.Helper()
	resp, err := http.Post(f.url+route, "application/json", strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		f.t.Fatalf("%s: status %d, body %q is not JSON: %v", route, resp.StatusCode, data, err)
	}
	return resp.StatusCode, out, resp.Header
}

// stream sends a streamed request and returns its data events, [DONE] last.
func (f *fixture) stream(route, body string) []string {
	f.t.Helper()
	resp, err := http.Post(f.url+route, "application/json", strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		f.t.Fatalf("%s: status %d, Content-Type %q: %s", route, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			f.t.Fatalf("SSE line %q does not start with \"data: \"", line)
		}
		events = append(events, data)
	}
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		f.t.Fatalf("stream does not end with data: [DONE]: %q", events)
	}
	return events
}

// get reads a path in a JSON map.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// waitIdle waits until the server holds no sequence and returns its memory.
func (f *fixture) waitIdle() server.MemoryStats {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := f.srv.Memory()
		if err != nil {
			f.t.Fatal(err)
		}
		if m.Sequences == 0 || time.Now().After(deadline) {
			return m
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkIdle: every array the server's backend holds besides the prefix
// cache's was there before it served.
func (f *fixture) checkIdle() {
	f.t.Helper()
	m := f.waitIdle()
	if m.Sequences != 0 || m.LiveArrays-m.PromptCacheArrays != f.base.LiveArrays || m.LeakedByGC != f.base.LeakedByGC {
		f.t.Errorf("idle server: %d sequences, %d live arrays (%d in the prompt cache), %d freed unreleased by the safety net; want 0, %d (the baseline) and %d",
			m.Sequences, m.LiveArrays, m.PromptCacheArrays, m.LeakedByGC, f.base.LiveArrays, f.base.LeakedByGC)
	}
}

// TestChatAndCompletions: greedy answers equal the oracle's (Generate on
// the rendered prompt), with OpenAI's response fields, streamed and not.
func TestChatAndCompletions(t *testing.T) {
	f := newFixture(t, nil)
	ids := f.render("system", "Be brief.", "user", "What is 2+2?")
	text, toks, finish := f.want(ids, generate.Options{MaxTokens: 12})
	status, got, _ := f.post("/v1/chat/completions", `{"model": "tiny", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]}]}`)
	gen := len(toks)
	if finish == generate.FinishStop {
		gen++ // the stop token is counted
	}
	if status != 200 || get(got, "object") != "chat.completion" || !strings.HasPrefix(get(got, "id").(string), "chatcmpl-") ||
		get(got, "model") != "tiny" || get(got, "choices", 0, "message", "content") != text ||
		get(got, "choices", 0, "message", "role") != "assistant" || get(got, "choices", 0, "finish_reason") != finish ||
		get(got, "usage", "prompt_tokens") != float64(len(ids)) || get(got, "usage", "completion_tokens") != float64(gen) ||
		get(got, "usage", "total_tokens") != float64(len(ids)+gen) || get(got, "usage", "prompt_tokens_details", "cached_tokens") != 0.0 {
		t.Errorf("chat: status %d, got %v; want content %q, finish %s, %d prompt and %d completion tokens", status, got, text, finish, len(ids), gen)
	}

	// Completions from token ids and from text, streamed with usage.
	ids = []int32{5, 6, 7, 8, 9}
	text, toks, finish = f.want(ids, generate.Options{MaxTokens: 9})
	status, got, _ = f.post("/v1/completions", `{"prompt": [5, 6, 7, 8, 9], "max_tokens": 9}`)
	if status != 200 || get(got, "object") != "text_completion" || get(got, "choices", 0, "text") != text || get(got, "choices", 0, "finish_reason") != finish {
		t.Errorf("completions: status %d, got %v; want text %q, finish %s", status, got, text, finish)
	}
	events := f.stream("/v1/completions", `{"prompt": [[5, 6, 7, 8, 9]], "max_tokens": 9, "stream": true, "stream_options": {"include_usage": true}}`)
	var streamed strings.Builder
	for i, e := range events[:len(events)-2] {
		var c map[string]any
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatal(err)
		}
		streamed.WriteString(get(c, "choices", 0, "text").(string))
		if _, ok := c["usage"]; !ok || c["usage"] != nil {
			t.Errorf("chunk %d: usage is %v, want null before the last chunk (include_usage)", i, c["usage"])
		}
		if last := i == len(events)-3; (get(c, "choices", 0, "finish_reason") != nil) != last {
			t.Errorf("chunk %d: finish_reason %v", i, get(c, "choices", 0, "finish_reason"))
		}
	}
	var usage map[string]any
	json.Unmarshal([]byte(events[len(events)-2]), &usage)
	if streamed.String() != text || len(get(usage, "choices").([]any)) != 0 || get(usage, "usage", "completion_tokens") == nil {
		t.Errorf("streamed %q, want %q; usage chunk %v", streamed.String(), text, usage)
	}

	// Chat streamed: role first, content deltas, an empty final delta.
	ids = f.render("user", "Hi")
	text, _, finish = f.want(ids, generate.Options{MaxTokens: 12})
	events = f.stream("/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "stream": true}`)
	streamed.Reset()
	for i, e := range events[:len(events)-1] {
		var c map[string]any
		json.Unmarshal([]byte(e), &c)
		if (get(c, "choices", 0, "delta", "role") == "assistant") != (i == 0) || get(c, "object") != "chat.completion.chunk" {
			t.Errorf("chunk %d: %s", i, e)
		}
		if s, ok := get(c, "choices", 0, "delta", "content").(string); ok {
			streamed.WriteString(s)
		}
		if _, has := c["usage"]; has {
			t.Errorf("chunk %d has usage without include_usage: %s", i, e)
		}
	}
	var last map[string]any
	json.Unmarshal([]byte(events[len(events)-2]), &last)
	if streamed.String() != text || get(last, "choices", 0, "finish_reason") != finish {
		t.Errorf("chat stream: %q (%v), want %q (%s)", streamed.String(), get(last, "choices", 0, "finish_reason"), text, finish)
	}
	for _, want := range []string{"/v1/chat/completions status=200", "/v1/completions status=200 stream=true prompt=5", "ttft="} {
		if !strings.Contains(f.log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, f.log.String())
		}
	}
	if n := strings.Count(f.log.String(), "\n"); n != 4 {
		t.Errorf("%d log lines for 4 requests:\n%s", n, f.log.String())
	}
	f.checkIdle()
}

// TestStopStrings: a stop string spanning two tokens ends the text before
// it, with finish_reason stop, streamed or not, and no part of it is sent.
func TestStopStrings(t *testing.T) {
	f := newFixture(t, nil)
	ids := []int32{5, 6, 7, 8, 9}
	text, _, _ := f.want(ids, generate.Options{MaxTokens: 12})
	r := []rune(text)
	if len(r) < 6 {
		t.Fatalf("the oracle's text %q is too short for the test", text)
	}
	stop := string(r[3:5]) // tokens 3 and 4: one character each
	want := text[:strings.Index(text, stop)]
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"prompt": [5, 6, 7, 8, 9], "max_tokens": 12, "stop": ["zzzz", %q], "stream": %v}`, stop, stream)
		var got, finish string
		if stream {
			for _, e := range f.stream("/v1/completions", body) {
				var c map[string]any
				if json.Unmarshal([]byte(e), &c) == nil {
					got += get(c, "choices", 0, "text").(string)
					if fr, ok := get(c, "choices", 0, "finish_reason").(string); ok {
						finish = fr
					}
				}
			}
		} else {
			_, c, _ := f.post("/v1/completions", body)
			got, finish = get(c, "choices", 0, "text").(string), get(c, "choices", 0, "finish_reason").(string)
		}
		if got != want || finish != "stop" {
			t.Errorf("stream %v, stop %q: got %q (%s), want %q (stop); the text without it is %q", stream, stop, got, finish, want, text)
		}
	}
	f.checkIdle()
}

// TestSeedAndLogprobs: a seeded sampled request gives Generate's tokens with
// that seed, whatever else runs; logprobs and top_logprobs are the
// generator's (BatchGenerate alone), largest first.
func TestSeedAndLogprobs(t *testing.T) {
	f := newFixture(t, nil)
	ids := []int32{3, 4, 5}
	text, _, _ := f.want(ids, generate.Options{MaxTokens: 10, Sampler: generate.SamplerOptions{Temp: 0.9, Seed: 42}})
	var wg sync.WaitGroup
	for range 3 { // unseeded requests running alongside
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.post("/v1/completions", `{"prompt": [9, 8, 7, 6], "max_tokens": 10, "temperature": 1.0}`)
		}()
	}
	for range 2 {
		_, got, _ := f.post("/v1/completions", `{"prompt": [3, 4, 5], "max_tokens": 10, "temperature": 0.9, "seed": 42}`)
		if get(got, "choices", 0, "text") != text {
			t.Errorf("seed 42: got %q, want Generate's %q", get(got, "choices", 0, "text"), text)
		}
	}
	wg.Wait()

	res, _, err := generate.BatchGenerate(f.m, [][]int32{f.render("user", "Hi")}, generate.BatchOptions{MaxTokens: 4, StopTokens: []int32{1}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, got, _ := f.post("/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "logprobs": true, "top_logprobs": 3}`)
	content, _ := get(got, "choices", 0, "logprobs", "content").([]any)
	if len(content) != len(res[0].Tokens) {
		t.Fatalf("logprobs of %d tokens, want %d: %v", len(content), len(res[0].Tokens), got)
	}
	for i, c := range content {
		lp := get(c, "logprob").(float64)
		top := get(c, "top_logprobs").([]any)
		if float32(lp) != res[0].Logprobs[i] || get(c, "token") != f.tok.Decode(res[0].Tokens[i:i+1]) || len(top) != 3 ||
			get(top, 0, "logprob").(float64) != lp || get(top, 1, "logprob").(float64) > lp || get(top, 2, "logprob").(float64) > get(top, 1, "logprob").(float64) {
			t.Errorf("token %d: %v, want token %q logprob %v first of 3 (greedy)", i, c, f.tok.Decode(res[0].Tokens[i:i+1]), res[0].Logprobs[i])
		}
	}
	f.checkIdle()
}

// TestPrefixCache: a second turn reuses the first's cache (cached_tokens)
// and still answers what the oracle gives for the whole conversation; the
// cache stays within its byte bound. Both batch layouts of the full cache:
// mlx_lm's shared buffer and per-row caches with the options mlxgo serve
// passes (whose unused group size once made the prefix fall back unseen).
func TestPrefixCache(t *testing.T) {
	for _, perRow := range []bool{false, true} {
		t.Run(fmt.Sprintf("per-row=%v", perRow), func(t *testing.T) { testPrefixCache(t, perRow) })
	}
}

func testPrefixCache(t *testing.T, perRow bool) {
	f := newFixture(t, func(c *server.Config) {
		c.PromptCacheBytes = 1 << 20
		if perRow {
			view, err := c.Model.(*minicpm5.Model).WithCache(nn.CacheOptions{PerRow: true, KVGroupSize: 64, QuantizedKVStart: 5000})
			if err != nil {
				t.Fatal(err)
			}
			c.Model = view
		}
	})
	ids := f.render("user", "Hello there")
	first, _, _ := f.want(ids, generate.Options{MaxTokens: 6})
	_, got, _ := f.post("/v1/chat/completions", `{"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 6}`)
	if get(got, "choices", 0, "message", "content") != first {
		t.Fatalf("first turn %v, want %q", got, first)
	}
	turn := []string{"user", "Hello there", "assistant", first, "user", "And then?"}
	ids2 := f.render(turn...)
	second, _, _ := f.want(ids2, generate.Options{MaxTokens: 6})
	body, _ := json.Marshal(map[string]any{"max_tokens": 6, "messages": []map[string]string{
		{"role": turn[0], "content": turn[1]}, {"role": turn[2], "content": turn[3]}, {"role": turn[4], "content": turn[5]}}})
	_, got, _ = f.post("/v1/chat/completions", string(body))
	cached := get(got, "usage", "prompt_tokens_details", "cached_tokens").(float64)
	shared := generate.CommonPrefix(ids, ids2)
	if get(got, "choices", 0, "message", "content") != second || cached < float64(shared) || cached >= float64(len(ids2)) {
		t.Errorf("second turn: %v; want content %q and cached_tokens >= %d (the prompts share %d tokens) < %d", got, second, shared, shared, len(ids2))
	}
	m := f.waitIdle()
	if m.PromptCacheSeqs == 0 || m.PromptCacheBytes > 1<<20 {
		t.Errorf("prompt cache: %d sequences, %d bytes; want some, within %d", m.PromptCacheSeqs, m.PromptCacheBytes, 1<<20)
	}
	f.checkIdle()
}

// TestErrors: bad requests get OpenAI's error JSON with the right status
// and a message naming what was wrong; the server goes on serving.
func TestErrors(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.MaxBodyBytes = 4096 })
	big := `{"prompt": "` + strings.Repeat("a", 5000) + `"}`
	for _, c := range []struct {
		name, method, route, body string
		status                    int
		want                      string
	}{
		{"malformed", "POST", "/v1/chat/completions", `{"messages": [`, 400, "not valid JSON"},
		{"empty", "POST", "/v1/completions", ``, 400, "body is empty"},
		{"not-object", "POST", "/v1/completions", `[1, 2]`, 400, "not valid JSON"},
		{"two-values", "POST", "/v1/completions", `{"prompt": [1]} {"prompt": [2]}`, 400, "more than one JSON value"},
		{"wrong-type", "POST", "/v1/completions", `{"prompt": [1], "max_tokens": "many"}`, 400, `"max_tokens" is a JSON string`},
		{"fraction", "POST", "/v1/completions", `{"prompt": [1], "max_tokens": 1.5}`, 400, "max_tokens"},
		{"too-big", "POST", "/v1/completions", big, 413, "over the server's limit of 4096 bytes"},
		{"n", "POST", "/v1/completions", `{"prompt": [1], "n": 2}`, 400, "n is 2"},
		{"model", "POST", "/v1/completions", `{"prompt": [1], "model": "gpt-4"}`, 404, `model "gpt-4" is not served here`},
		{"temperature", "POST", "/v1/completions", `{"prompt": [1], "temperature": -1}`, 400, "temperature is -1"},
		{"top-p", "POST", "/v1/completions", `{"prompt": [1], "top_p": 2}`, 400, "top_p is 2"},
		{"top-k-vocab", "POST", "/v1/completions", `{"prompt": [1], "temperature": 1, "top_k": 1000}`, 400, "top_k is 1000, want fewer than the vocabulary's 1000"},
		{"max-tokens", "POST", "/v1/completions", `{"prompt": [1], "max_tokens": 0}`, 400, "max_tokens is 0"},
		{"context", "POST", "/v1/completions", `{"prompt": [1], "max_tokens": 300}`, 400, "exceed the model's context of 256"},
		{"vocab", "POST", "/v1/completions", `{"prompt": [1, 1000]}`, 400, "prompt token 1 is 1000"},
		{"negative-id", "POST", "/v1/completions", `{"prompt": [-1]}`, 400, "prompt token 0 is -1"},
		{"prompts", "POST", "/v1/completions", `{"prompt": ["a", "b"]}`, 400, "holds 2 prompts"},
		{"no-prompt", "POST", "/v1/completions", `{}`, 400, "prompt is missing"},
		{"prompt-object", "POST", "/v1/completions", `{"prompt": {"a": 1}}`, 400, "prompt is not a string"},
		{"stop-count", "POST", "/v1/completions", `{"prompt": [1], "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, 400, "17 stop strings"},
		{"stop-empty", "POST", "/v1/completions", `{"prompt": [1], "stop": ""}`, 400, "stop[0] is empty"},
		{"logprobs", "POST", "/v1/completions", `{"prompt": [1], "logprobs": 6}`, 400, "logprobs is 6"},
		{"top-logprobs", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}`, 400, "needs \"logprobs\": true"},
		{"no-messages", "POST", "/v1/chat/completions", `{"messages": []}`, 400, "messages is empty"},
		{"role", "POST", "/v1/chat/completions", `{"messages": [{"role": "wizard", "content": "x"}]}`, 400, `messages[0].role is "wizard"`},
		{"image", "POST", "/v1/chat/completions", `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "only text parts"},
		{"seed", "POST", "/v1/completions", `{"prompt": [1], "seed": -5}`, 400, "seed is -5"},
		{"stream-options", "POST", "/v1/completions", `{"prompt": [1], "stream_options": {"include_usage": true}}`, 400, "stream_options applies to streamed requests"},
		{"penalty", "POST", "/v1/completions", `{"prompt": [1], "presence_penalty": 0.5}`, 400, "presence_penalty is not supported"},
		{"form", "POST", "/v1/completions", `prompt=1`, 400, "not valid JSON"},
		{"method", "GET", "/v1/completions", ``, 405, "want POST"},
		{"method-get", "POST", "/v1/models", ``, 405, "want GET"},
		{"route", "GET", "/v2/anything", ``, 404, "no route GET /v2/anything"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, f.url+c.route, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			if c.name == "form" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			data, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(data, &e); err != nil || resp.StatusCode != c.status || !strings.Contains(e.Error.Message, c.want) || e.Error.Type == "" {
				t.Errorf("status %d, body %s; want %d and an error message containing %q", resp.StatusCode, data, c.status, c.want)
			}
		})
	}
	// Still serving.
	if status, _, _ := f.post("/v1/completions", `{"prompt": [1, 2], "max_tokens": 2}`); status != 200 {
		t.Errorf("after the bad requests: status %d", status)
	}
	for _, path := range []string{"/v1/models", "/health"} {
		resp, err := http.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(data, []byte(map[string]string{"/v1/models": `"id":"tiny"`, "/health": `"status":"ok"`}[path])) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, data)
		}
	}
	f.checkIdle()
}

// gatedModel runs each BatchLogits (a decode step) only once given a
// permit, so a test can hold the engine mid-generation.
type gatedModel struct {
	generate.BatchModel
	permits chan struct{}
	entered chan struct{} // signalled (without blocking) when a step waits
}

func (g *gatedModel) BatchLogits(ids backend.Array, cache []*nn.BatchKVCache) (backend.Array, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.permits
	return g.BatchModel.BatchLogits(ids, cache)
}

func gate(c *server.Config) *gatedModel {
	g := &gatedModel{BatchModel: c.Model, permits: make(chan struct{}), entered: make(chan struct{}, 1)}
	c.Model = g
	return g
}

// TestBackpressure: with one sequence decoding and one waiting, further
// requests are answered 429 with Retry-After at once, while the first two
// complete once the engine moves.
func TestBackpressure(t *testing.T) {
	var g *gatedModel
	f := newFixture(t, func(c *server.Config) { g = gate(c); c.MaxConcurrency, c.QueueSize = 1, 1 })
	type result struct {
		status int
		retry  string
		code   any
	}
	results := make(chan result, 4)
	send := func() {
		status, got, h := f.post("/v1/completions", `{"prompt": [1, 2, 3], "max_tokens": 3}`)
		results <- result{status, h.Get("Retry-After"), get(got, "error", "code")}
	}
	go send()
	<-g.entered // the first request's prompt is in a decode step, held
	for range 3 {
		go send()
	}
	var got []result
	for range 2 {
		got = append(got, <-results)
	}
	for _, r := range got {
		if r.status != 429 || r.retry == "" || r.code != "rate_limit_exceeded" {
			t.Errorf("with the server full: status %d, Retry-After %q, code %v; want 429, a Retry-After and rate_limit_exceeded", r.status, r.retry, r.code)
		}
	}
	close(g.permits)
	for range 2 {
		if r := <-results; r.status != 200 {
			t.Errorf("an admitted request: status %d", r.status)
		}
	}
	if n := strings.Count(f.log.String(), "status=429"); n != 2 {
		t.Errorf("%d 429s logged, want 2:\n%s", n, f.log.String())
	}
	f.checkIdle()
}

// TestDisconnect: a client that goes away mid-stream cancels its sequence:
// the engine drops it (its cache rows freed) long before its max_tokens,
// and the backend's arrays are back at the baseline. The cancelled
// sequence does not enter the prefix cache (as in mlx_lm.server, whose
// cancelled sequences are removed without their cache): the same prompt
// then reuses nothing, and once answered in full, it is reused.
func TestDisconnect(t *testing.T) {
	var g *gatedModel
	f := newFixture(t, func(c *server.Config) { g = gate(c); c.PromptCacheBytes = 1 << 20 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", f.url+"/v1/completions", strings.NewReader(`{"prompt": [1, 2, 3], "max_tokens": 200, "stream": true}`))
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			r := bufio.NewReader(resp.Body)
			_, err = r.ReadString('\n') // the first event
			resp.Body.Close()
		}
		done <- err
	}()
	// Memory is answered between steps only, so it is asked on the side
	// while permits keep the engine stepping.
	mem := make(chan server.MemoryStats, 1)
	asking := false
	steps := 0
loop:
	for {
		if done == nil && !asking {
			asking = true
			go func() {
				m, _ := f.srv.Memory()
				mem <- m
			}()
		}
		select {
		case g.permits <- struct{}{}:
			steps++
		case <-time.After(5 * time.Millisecond): // the engine may be idle already
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			done = nil
		case m := <-mem:
			asking = false
			if m.Sequences == 0 {
				break loop
			}
			time.Sleep(2 * time.Millisecond)
		}
		if steps > 190 {
			t.Fatalf("the sequence ran %d steps after its client left", steps)
		}
	}
	t.Logf("the sequence left the engine %d decode steps in (max_tokens 200)", steps)
	close(g.permits)
	if !strings.Contains(f.log.String(), "status=499") {
		t.Errorf("no disconnect (499) logged:\n%s", f.log.String())
	}
	if m := f.waitIdle(); m.PromptCacheSeqs != 0 {
		t.Errorf("after the cancellation the prompt cache holds %d sequences, want 0", m.PromptCacheSeqs)
	}
	for i, want := range []float64{0, 2} {
		_, got, _ := f.post("/v1/completions", `{"prompt": [1, 2, 3], "max_tokens": 3}`)
		if c := get(got, "usage", "prompt_tokens_details", "cached_tokens"); c != want {
			t.Errorf("request %d with the cancelled prompt: cached_tokens %v, want %v (%v)", i+1, c, want, got)
		}
	}
	f.checkIdle()
}

// TestSlowClients: a client that sends its headers or body too slowly is
// dropped after the read timeout, and the server goes on serving.
func TestSlowClients(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.ReadTimeout = 300 * time.Millisecond })
	addr := strings.TrimPrefix(f.url, "http://")
	for _, c := range []struct{ name, sent string }{
		{"headers", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty"},
		{"body", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\": [1,"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, c.sent); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			start := time.Now()
			data, err := io.ReadAll(conn)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the server kept a stalled client's connection for %v", time.Since(start))
			}
			if c.name == "body" && !strings.Contains(string(data), "reading the request body") {
				t.Errorf("stalled body: got %q, want a 400 naming the body read", data)
			}
		})
	}
	if status, _, _ := f.post("/v1/completions", `{"prompt": [1, 2], "max_tokens": 2}`); status != 200 {
		t.Errorf("after the slow clients: status %d", status)
	}
	f.checkIdle()
}

// panicModel panics in its first decode step.
type panicModel struct {
	generate.BatchModel
	done bool
}

func (p *panicModel) BatchLogits(ids backend.Array, cache []*nn.BatchKVCache) (backend.Array, error) {
	if !p.done {
		p.done = true
		panic("a bug in the model")
	}
	return p.BatchModel.BatchLogits(ids, cache)
}

// TestEnginePanic: a panic inside the generator fails the request with a
// 500 naming it, the engine starts a fresh generator, the next request is
// answered and no array is left behind.
func TestEnginePanic(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Model = &panicModel{BatchModel: c.Model} })
	status, got, _ := f.post("/v1/completions", `{"prompt": [1, 2, 3], "max_tokens": 3}`)
	if msg, _ := get(got, "error", "message").(string); status != 500 || !strings.Contains(msg, "panic in the generator: a bug in the model") {
		t.Errorf("the panicking request: status %d, %v", status, got)
	}
	if status, got, _ := f.post("/v1/completions", `{"prompt": [1, 2, 3], "max_tokens": 3}`); status != 200 {
		t.Errorf("the next request: status %d, %v", status, got)
	}
	f.checkIdle()
}

// TestContextLength: without max_tokens a request generates at most what
// the context leaves (the default cut), while a max_tokens that does not
// fit, or a prompt that fills the context, is an error.
func TestContextLength(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.Defaults.MaxTokens = 300 })
	ids := make([]int, 250)
	for i := range ids {
		ids[i] = 2 + i%90
	}
	p, _ := json.Marshal(ids)
	status, got, _ := f.post("/v1/completions", `{"prompt": `+string(p)+`}`)
	if n, _ := get(got, "usage", "completion_tokens").(float64); status != 200 || n < 1 || n > 6 {
		t.Errorf("250-token prompt, default max_tokens 300, context 256: status %d, %v; want at most 6 tokens", status, got)
	}
	status, got, _ = f.post("/v1/completions", `{"prompt": `+string(p)+`, "max_tokens": 300}`)
	if status != 400 || get(got, "error", "code") != "context_length_exceeded" {
		t.Errorf("explicit max_tokens 300: status %d, %v; want 400 context_length_exceeded", status, got)
	}
	long, _ := json.Marshal(make([]int, 256))
	status, got, _ = f.post("/v1/completions", `{"prompt": `+string(long)+`}`)
	if msg, _ := get(got, "error", "message").(string); status != 400 || !strings.Contains(msg, "the prompt is 256 tokens; the model's context is 256") {
		t.Errorf("256-token prompt: status %d, %v", status, got)
	}
	f.checkIdle()
}

// TestSlowReader: a client that stops reading a stream is dropped once a
// write has waited WriteTimeout, and its sequence is cancelled. (The client
// socket's receive buffer and the server's send buffers are small so that
// the stream fills them.)
func TestSlowReader(t *testing.T) {
	f := newFixture(t, func(c *server.Config) { c.WriteTimeout = 200 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(1024)
	body := `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 220, "stream": true, "logprobs": true, "top_logprobs": 20}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(f.log.String(), "writing to the client") {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not drop a client that reads nothing; log:\n%s", f.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.checkIdle()
}

// TestPackedWeights: a server whose backend packs its weights
// (--pack-weights) answers eight concurrent requests, reports the packed
// copy in /health's memory, and holds no array more once idle. (That
// packing changes no token is TestBatchPackedWeights in generate: here
// the rows' grouping into steps depends on the clients' timing.)
func TestPackedWeights(t *testing.T) {
	f := newFixtureWith(t, backend.Options{Precision: "fast", PackWeights: true}, func(c *server.Config) {
		c.MaxConcurrency, c.PrefillConcurrency = 8, 8
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt": "request %d", "max_tokens": 12}`, i)
			if status, out, _ := f.post("/v1/completions", body); status != 200 {
				t.Errorf("request %d: status %d: %v", i, status, out)
			}
		}()
	}
	wg.Wait()
	m := f.waitIdle()
	if !cpu.PackWeightsSupported() {
		t.Log("NOTE: this CPU lacks AVX-512 VNNI: nothing is packed, only the answers were checked")
		if m.PackedBytes != 0 {
			t.Errorf("packed_bytes %d on a CPU that packs nothing", m.PackedBytes)
		}
	} else if m.PackedBytes <= 0 {
		t.Errorf("packed_bytes %d after eight concurrent requests, want the packed copy's size", m.PackedBytes)
	}
	f.checkIdle()
}

// TestHealthEngine: /health's engine counters follow the work of the
// requests served: one request alone takes one decode step per token it
// hands out (usage.completion_tokens) and one more, the first, which runs
// its last prompt token, and prefills its prompt less that token; a second
// adds its own.
func TestHealthEngine(t *testing.T) {
	f := newFixture(t, nil)
	engine := func() server.EngineStats {
		t.Helper()
		resp, err := http.Get(f.url + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var h struct {
			Engine *server.EngineStats `json:"engine"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&h); err != nil || h.Engine == nil {
			t.Fatalf("GET /health: %v, engine %v", err, h.Engine)
		}
		return *h.Engine
	}
	if e := engine(); e != (server.EngineStats{}) {
		t.Errorf("before any request: %+v, want zeros", e)
	}
	var want server.EngineStats
	for i, body := range []string{`{"prompt": [5, 6, 7, 8, 9], "max_tokens": 7}`, `{"prompt": [3, 4, 5], "max_tokens": 4}`} {
		status, got, _ := f.post("/v1/completions", body)
		n, _ := get(got, "usage", "completion_tokens").(float64)
		p, _ := get(got, "usage", "prompt_tokens").(float64)
		if status != 200 || n < 1 {
			t.Fatalf("request %d: status %d, %v", i, status, got)
		}
		want.Steps += int(n) + 1
		want.GeneratedTokens += int(n)
		want.PromptTokens += int(p) - 1
		e := engine()
		if e.Steps != want.Steps || e.GeneratedTokens != want.GeneratedTokens || e.PromptTokens != want.PromptTokens || e.DecodeSeconds <= 0 || e.PrefillSeconds <= 0 {
			t.Errorf("after request %d: %+v, want %d steps, %d tokens, %d prompt tokens and times above 0", i, e, want.Steps, want.GeneratedTokens, want.PromptTokens)
		}
	}
	f.checkIdle()
}
