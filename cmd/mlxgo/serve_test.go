package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/tensor"
)

// startServe runs mlxgo serve in the test's process on a free loopback
// port and returns its base URL and its stderr; the server stops when the
// test ends.
func startServe(t *testing.T, args ...string) (string, func() string) {
	t.Helper()
	pr, pw := io.Pipe()
	var errOut syncBuf
	serveStop = make(chan struct{})
	stop := serveStop
	done := make(chan int, 1)
	go func() {
		done <- run(append([]string{"serve", "--port", "0", "--backend", "cpu"}, args...), pw, &errOut)
		pw.Close()
	}()
	t.Cleanup(func() {
		close(stop)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("mlxgo serve did not stop within 10 s")
		}
		serveStop = nil
	})
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), " on http://"); ok && strings.HasPrefix(sc.Text(), "serving ") {
			go io.Copy(io.Discard, pr)
			return "http://" + strings.Fields(rest)[0], errOut.String
		}
	}
	t.Fatalf("mlxgo serve did not start; stderr:\n%s", errOut.String())
	return "", nil
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// generatedText is the text mlxgo generate printed: between the load line
// and the statistics line.
func generatedText(t *testing.T, out string) string {
	t.Helper()
	_, rest, ok := strings.Cut(out, "\n")
	end := strings.LastIndex(rest, "\nprompt: ")
	if !ok || end < 0 {
		t.Fatalf("no text in mlxgo generate's output %q", out)
	}
	return rest[:end]
}

// TestServeOpenAIClient: the official openai Python client (pinned in the
// oracle requirements) against mlxgo serve: chat, completions, streaming
// with usage, stop strings, seeded sampling equal to mlxgo generate --seed,
// cancellation mid-stream (the sequence dropped, memory back to idle), and
// OpenAI errors (testdata/openai_client.py).
func TestServeOpenAIClient(t *testing.T) {
	py := testenv.Python(t)
	if err := exec.Command(py, "-c", "import openai").Run(); err != nil {
		testenv.Missing(t, "the openai package is not in .venv (make venv installs conformance/oracle/requirements.txt)")
	}
	dir := textFixture(t, chatML)
	rc, out, errOut := mlxgo("generate", "--model", dir, "--prompt", "Hi", "--temp", "0.9", "--seed", "42", "--max-tokens", "10", "--backend", "cpu")
	if rc != 0 {
		t.Fatalf("generate: exit %d: %s", rc, errOut)
	}
	seeded := generatedText(t, out)
	url, logs := startServe(t, "--model", dir, "--max-tokens", "12")
	cmd := exec.Command(py, filepath.Join("testdata", "openai_client.py"), url, seeded)
	res, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(res), "ok: 14 checks") {
		t.Fatalf("openai_client.py: %v\n%s\nserver log:\n%s", err, res, logs())
	}
	t.Logf("openai_client.py:\n%s", res)
	n := 0
	for _, l := range strings.Split(logs(), "\n") {
		if strings.HasPrefix(l, "request ") {
			n++
		}
	}
	if n != 11 {
		t.Errorf("%d request lines logged, want 11 (one per POST of openai_client.py):\n%s", n, logs())
	}
}

// TestServeFlags: bad flags are usage errors naming the flag.
func TestServeFlags(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--model is required"},
		{[]string{"--model", model, "--port", "70000"}, "--port 70000"},
		{[]string{"--model", model, "--max-concurrency", "0"}, "--max-concurrency 0"},
		{[]string{"--model", model, "--queue-size", "-1"}, "--queue-size -1"},
		{[]string{"--model", model, "--max-body-bytes", "10"}, "--max-body-bytes 10"},
		{[]string{"--model", model, "--write-timeout", "0s"}, "--write-timeout 0s"},
		{[]string{"--model", model, "--prefill-budget", "-1"}, "--prefill-budget -1"},
		{[]string{"--model", model, "--prompt-cache-dir", "/tmp/x", "--prompt-cache-bytes", "0"}, "--prompt-cache-dir needs a prompt cache"},
		{[]string{"--model", model, "--kv-cache", "turbo", "--prompt-cache-dir", "/tmp/x"}, "--prompt-cache-dir with --kv-cache turbo:k8v3: the prompt cache holds full caches only"},
		{[]string{"--model", model, "--kv-bits", "3"}, "KV bits 3"},
		{[]string{"--model", model, "--kv-cache", "zip"}, `--kv-cache "zip"`},
		{[]string{"--model", model, "--port", "0"}, "has no tokenizer.json, which mlxgo serve needs"},
	} {
		rc, _, errOut := mlxgo(append([]string{"serve"}, c.args...)...)
		if rc != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", c.args, rc, errOut, c.want)
		}
	}
	if rc, out, _ := mlxgo("serve", "--help"); rc != 0 || !strings.Contains(out, "usage: mlxgo serve") || !strings.Contains(out, "--max-concurrency") {
		t.Errorf("serve --help: exit %d\n%s", rc, out)
	}
}

// TestLoadTestShort: the load test's short run (make test; make load-test
// is the full one): 16 clients, 64 requests on the tiny checkpoint with
// four sequences decoding and four waiting, so that some requests are
// rejected (429), with cancellations and malformed bodies; no error, and
// the server's arrays besides its prompt cache back at their level before;
// and --cpuprofile's profile of the server.
func TestLoadTestShort(t *testing.T) {
	dir := textFixture(t, chatML)
	prof := filepath.Join(t.TempDir(), "serve.prof")
	rc, out, errOut := mlxgo("loadtest", "--model", dir, "--backend", "cpu", "--clients", "16", "--requests", "64", "--cpuprofile", prof,
		"--duration", "60s", "--tokens", "24", "--prompt-words", "2,10,30", "--cancel", "0.1", "--malformed", "0.1", "--slow", "0.1", "--max-concurrency", "4", "--queue-size", "4", "--prompt-cache-bytes", "2000000")
	t.Logf("mlxgo loadtest:\n%s", out)
	if rc != 0 {
		t.Fatalf("exit %d\n%s", rc, errOut)
	}
	for _, want := range []string{"requests: 64 |", "load test: ok", "time to first token: p50", "server memory: before"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	var tokens, steadyTokens int
	var elapsed, steady, tps, steadyTPS float64
	tl := out[strings.Index(out, "throughput: "):]
	if _, err := fmt.Sscanf(tl, "throughput: %d completion tokens in %g s = %g tok/s aggregate\nsteady throughput: %d completion tokens in the first %g s, while every client had a request to send = %g tok/s",
		&tokens, &elapsed, &tps, &steadyTokens, &steady, &steadyTPS); err != nil {
		t.Fatalf("throughput lines %q: %v", strings.Join(strings.SplitN(tl, "\n", 3)[:2], "\n"), err)
	}
	if steadyTokens <= 0 || steady <= 0 || steady > elapsed || steadyTPS <= 0 {
		t.Errorf("steady throughput: %d tokens in %g s of %g: want some tokens in a window within the run", steadyTokens, steady, elapsed)
	}
	var ok, cancelled, malformed, oversized, rejected, cut, errs int
	line := out[strings.Index(out, "requests: "):]
	if _, err := fmt.Sscanf(line, "requests: 64 | ok %d | cancelled mid-stream %d | malformed (400) %d | oversized (413) %d | rejected (429, then retried) %d | cut by the time limit %d | errors %d",
		&ok, &cancelled, &malformed, &oversized, &rejected, &cut, &errs); err != nil {
		t.Fatalf("counts line %q: %v", strings.SplitN(line, "\n", 2)[0], err)
	}
	if ok == 0 || cancelled == 0 || malformed == 0 || rejected == 0 || errs != 0 {
		t.Errorf("ok %d, cancelled %d, malformed %d, rejected %d, errors %d: want every kind but errors", ok, cancelled, malformed, rejected, errs)
	}
	var prompt, cached int
	pl := out[strings.Index(out, "prompts: "):]
	if _, err := fmt.Sscanf(pl, "prompts: %d tokens, %d of them from the prompt cache", &prompt, &cached); err != nil {
		t.Fatalf("prompts line %q: %v", strings.SplitN(pl, "\n", 2)[0], err)
	}
	if prompt < ok || cached < 0 || cached >= prompt {
		t.Errorf("%d prompt tokens, %d of them cached, over %d whole answers: want at least one uncached token a request", prompt, cached, ok)
	}
	// The engine's line: the steps decoded at most four rows each
	// (--max-concurrency 4) and handed out at least the tokens the
	// clients counted (cancelled streams stop reading before their end).
	var steps, prefilled int
	var rows, stepMS, decodeS, prefillS, share float64
	el := out[strings.Index(out, "engine: "):]
	if _, err := fmt.Sscanf(el, "engine: %d decode steps of %g rows, %g ms a step (%g s); prefill %d tokens in %g s, %g%% of the run",
		&steps, &rows, &stepMS, &decodeS, &prefilled, &prefillS, &share); err != nil {
		t.Fatalf("engine line %q: %v", strings.SplitN(el, "\n", 2)[0], err)
	}
	if steps <= 0 || rows < 1 || rows > 4 || float64(steps)*rows < float64(tokens)-0.01*float64(steps) || stepMS <= 0 || decodeS > elapsed ||
		prefilled < ok || prefilled > prompt || prefillS <= 0 || share <= 0 || share > 100 {
		t.Errorf("engine: %d steps of %g rows, %g ms a step (%g s), prefill %d tokens in %g s (%g%%); want 1-4 rows a step handing out at least the %d tokens received, at most %d prompt tokens prefilled, within the run's %g s",
			steps, rows, stepMS, decodeS, prefilled, prefillS, share, tokens, prompt, elapsed)
	}
	checkProfile(t, prof)
}

// TestLoadTestFlags: bad flags are usage errors; --url must be loopback.
func TestLoadTestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give --model (a server in this process) or --url"},
		{[]string{"--url", "http://10.1.2.3:8080"}, "is not on loopback"},
		{[]string{"--url", "http://127.0.0.1:1", "--clients", "0"}, "--clients 0"},
		{[]string{"--url", "http://127.0.0.1:1", "--cpuprofile", "p.out"}, "--cpuprofile profiles the server in this process"},
		{[]string{"--url", "http://127.0.0.1:1", "--cancel", "0.9", "--malformed", "0.1", "--slow", "0.1"}, "adding up to at most 1"},
	} {
		rc, _, errOut := mlxgo(append([]string{"loadtest"}, c.args...)...)
		if rc != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("loadtest %v: exit %d, stderr %q; want 2 and %q", c.args, rc, errOut, c.want)
		}
	}
}

// TestLoadTestUnreachable: a server that cannot be reached failed with
// "1 errors ... no request was answered", naming neither the server nor
// the cause (issue 19); the first error is in the message now.
func TestLoadTestUnreachable(t *testing.T) {
	rc, _, errOut := mlxgo("loadtest", "--url", "http://127.0.0.1:9", "--requests", "1", "--clients", "1")
	if rc != 1 || !strings.Contains(errOut, "the first: ") || !strings.Contains(errOut, "127.0.0.1:9") {
		t.Errorf("exit %d, stderr %q; want 1 and the first error, naming 127.0.0.1:9", rc, errOut)
	}
}

// fixtureIDs maps textFixture's text back to its ids (one per character).
func fixtureIDs(t *testing.T, text string) []int32 {
	t.Helper()
	var ids []int32
	for _, r := range text {
		switch {
		case r >= ' ' && r <= '~':
			ids = append(ids, int32(r-' ')+2)
		case r >= 0x4E00 && r < 0x4E00+999-97:
			ids = append(ids, int32(r-0x4E00)+97)
		case r == '\n':
			ids = append(ids, 999)
		default:
			t.Fatalf("text %q: %q is not in the fixture's vocabulary", text, r)
		}
	}
	return ids
}

// TestServeAdapterPath: mlxgo serve --adapter-path answers with mlx_lm's
// greedy tokens for the model with those adapters (a directory as
// mlx_lm.lora writes it; adapterOracle), which differ from its tokens
// without them, which mlxgo serve gives without the flag; --kv-cache full
// is accepted (the batch generator's cache).
func TestServeAdapterPath(t *testing.T) {
	dir := textFixture(t, chatML)
	ad := t.TempDir()
	ids := []int32{3, 14, 15, 92, 65, 35, 89, 79}
	args, _ := json.Marshal(map[string]any{"path": filepath.Join(fixtures, "models", "optiq-f32"), "dir": ad, "ids": ids, "n": 12})
	out, err := exec.Command(testenv.Python(t), "-c", adapterOracle, string(args)).CombinedOutput()
	if err != nil {
		t.Fatalf("oracle: %v\n%s", err, out)
	}
	var want struct{ Plain, Adapted []int32 }
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(want.Plain) == fmt.Sprint(want.Adapted) {
		t.Fatalf("the adapters do not change mlx_lm's tokens (%v): the test would check nothing", want.Plain)
	}
	body, _ := json.Marshal(map[string]any{"prompt": ids, "max_tokens": 12})
	for _, c := range []struct {
		extra []string
		want  []int32
	}{{[]string{"--kv-cache", "full"}, want.Plain}, {[]string{"--adapter-path", ad}, want.Adapted}} {
		url, logs := startServe(t, append([]string{"--model", dir}, c.extra...)...)
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Choices []struct{ Text string }
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(got.Choices) != 1 {
			t.Fatalf("%v: status %d, %+v, %v\n%s", c.extra, resp.StatusCode, got, err, logs())
		}
		w := c.want
		if i := slices.Index(w, 1); i >= 0 {
			w = w[:i] // the EOS (<|im_end|>) ends the text
		}
		if g := fixtureIDs(t, got.Choices[0].Text); fmt.Sprint(g) != fmt.Sprint(w) {
			t.Errorf("%v: served tokens %v, want (mlx_lm) %v", c.extra, g, w)
		}
	}
}

// TestServeKVCache: with --kv-bits or --kv-cache quantized, mlxgo serve's
// rows hold caches of that kind (one per row, nn.NewBatchCache) and answer
// what mlxgo generate answers alone with the same flags; the prompt cache
// is off, said on stderr. (TurboQuant rows take the same path; the
// fixtures' head_dim 32 is not a TurboQuant one: generate's
// batch_kinds_test.go checks them on a head_dim 64 checkpoint.)
func TestServeKVCache(t *testing.T) {
	dir := textFixture(t, chatML)
	ids := []int32{3, 14, 15, 92, 65, 35, 89, 79}
	body, _ := json.Marshal(map[string]any{"prompt": ids, "max_tokens": 12})
	for _, flags := range [][]string{{"--kv-bits", "8", "--kv-group-size", "32", "--quantized-kv-start", "0"}, {"--kv-cache", "quantized", "--kv-bits", "4", "--kv-group-size", "32", "--quantized-kv-start", "3"}} {
		rc, out, errOut := mlxgo(append([]string{"generate", "--model", dir, "--prompt-ids", joinIDs(ids), "--max-tokens", "12", "--backend", "cpu"}, flags...)...)
		if rc != 0 {
			t.Fatalf("generate %v: exit %d: %s", flags, rc, errOut)
		}
		want := generated(t, out)
		if i := slices.Index(want, 1); i >= 0 {
			want = want[:i] // the EOS (<|im_end|>) ends the text
		}
		url, logs := startServe(t, append([]string{"--model", dir}, flags...)...)
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Choices []struct{ Text string }
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || len(got.Choices) != 1 {
			t.Fatalf("%v: status %d, %+v, %v\n%s", flags, resp.StatusCode, got, err, logs())
		}
		if g := fixtureIDs(t, got.Choices[0].Text); fmt.Sprint(g) != fmt.Sprint(want) {
			t.Errorf("%v: served tokens %v, mlxgo generate's %v", flags, g, want)
		}
		if !strings.Contains(logs(), "the prompt cache holds full caches only; it is off") {
			t.Errorf("%v: no note that the prompt cache is off:\n%s", flags, logs())
		}
	}
}

// TestServeKVDTypePromptCacheDir: mlxgo serve --precision fast on a
// float32 model keeps its caches in bfloat16 (--kv-dtype auto), saves its
// prefix cache in that dtype to --prompt-cache-dir at shutdown, and a
// server started again with the same flags loads those files (they fit the
// caches it makes) and reuses them for the same prompt (cached_tokens).
func TestServeKVDTypePromptCacheDir(t *testing.T) {
	dir := textFixture(t, chatML)
	cache := t.TempDir()
	body := `{"prompt": [3, 14, 15, 92, 65, 35, 89, 79], "max_tokens": 4}`
	flags := []string{"--model", dir, "--precision", "fast", "--prompt-cache-dir", cache}
	post := func(t *testing.T, url string) map[string]any {
		t.Helper()
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, %v, %v", resp.StatusCode, got, err)
		}
		return got
	}
	cached := func(got map[string]any) any {
		u, _ := got["usage"].(map[string]any)
		d, _ := u["prompt_tokens_details"].(map[string]any)
		return d["cached_tokens"]
	}
	t.Run("first", func(t *testing.T) {
		url, _ := startServe(t, flags...)
		if c := cached(post(t, url)); c != 0.0 {
			t.Errorf("first request: cached_tokens %v, want 0", c)
		}
	})
	names, err := filepath.Glob(filepath.Join(cache, "*.safetensors"))
	if err != nil || len(names) != 1 {
		t.Fatalf("prompt cache files after shutdown: %v, %v; want one", names, err)
	}
	pc, err := promptcache.Read(names[0])
	if err != nil {
		t.Fatal(err)
	}
	if dt := pc.Layers[0].Keys.DType; dt != tensor.BF16 {
		t.Errorf("saved keys are %v, want bfloat16 (--kv-dtype auto with --precision fast)", dt)
	}
	t.Run("again", func(t *testing.T) {
		url, logs := startServe(t, flags...)
		if c := cached(post(t, url)); c != 7.0 {
			t.Errorf("after the restart: cached_tokens %v, want 7 (the prompt's tokens but its last)\n%s", c, logs())
		}
	})
}
