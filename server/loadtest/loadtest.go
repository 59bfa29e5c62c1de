// Package loadtest drives an OpenAI-compatible server (mlxgo serve,
// mlx_lm.server, llama-server) with many concurrent clients and reports
// throughput, latencies and errors: mlxgo loadtest and make load-test.
//
// Each client sends requests one after another until the request budget
// or the time is spent: chat and completions, streamed and not, with short,
// medium and long prompts, a share cancelled mid-stream (the client closes
// the connection after a chunk or two), a share of malformed bodies
// (which must be answered 400, or 413 for one over the server's cap) and a
// share of slow clients (the body sent 32 bytes every 20 ms, a stream left
// unread for 300 ms), which must be answered in full. A 429 (the server's queue full) counts as
// a deliberate rejection, after which the client waits its Retry-After (at
// most 200 ms) and sends another request in its place. Anything else that is not a 200 is an error. Where the
// server reports its memory at GET /health (mlxgo serve does), the backend's
// live arrays and bytes besides its prompt cache must be back at their
// level before the run once it is idle.
//
// Besides the whole run's throughput, a run reports its steady throughput:
// the completion tokens delivered while every client still had a request
// to send, up to the first moment one of them found the request budget
// spent (from then on fewer clients load the server, the tail of a run of
// finite requests), over that time. Requests answered whole by then count
// their usage; requests still running count the streamed chunks received
// by then (one a token with text), a non-streamed one nothing, so a run
// that streams every request (Stream 1) counts exactly.
package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlxgo/mlxgo/server"
)

// Options configure a run.
type Options struct {
	URL       string        // the server's base URL, e.g. http://127.0.0.1:8080
	Model     string        // the model field of requests ("": GET /v1/models's first, else none)
	Clients   int           // concurrent clients
	Requests  int           // requests in all (the run stops at Requests or Duration)
	Duration  time.Duration // the longest the run may take
	MaxTokens int           // the most tokens a request asks for (each asks 1/4 to all of it)
	Cancel    float64       // share of requests cancelled mid-stream (0.1)
	Malformed float64       // share of malformed bodies (0.05), one in seven of them over 2 MiB
	Slow      float64       // share of slow clients (0.05): the body trickles in, a stream is not read for 300 ms
	Stream    float64       // share of the requests (not cancelled, not malformed) that stream (0.5)
	// Seed seeds the mix of requests: the i-th request sent (a 429's
	// replacement is the same request again) draws its kind, length and
	// prompt from a stream of its own, so that runs with any number of
	// clients send the same first Requests requests.
	Seed uint64
	// PromptWords are the prompt lengths, in words, requests choose from
	// (nil: 4, 48 and 400: short, medium, long).
	PromptWords []int
	// Warmup requests go out one at a time before the run and count in
	// nothing (a short completion each): a fresh server's first request
	// pays for work done once, such as packing the weights.
	Warmup int
}

// Report is a run's outcome.
type Report struct {
	// Requests are the requests answered (or cut): OK, Cancelled,
	// Malformed, Oversized, Cut and Errors add up to it. Rejected counts the 429s
	// besides, each followed by another request.
	Requests, OK, Cancelled, Malformed, Rejected int
	// Cut are requests the run's end (Duration) interrupted.
	Cut int
	// Oversized are malformed bodies over the server's cap answered 413.
	Oversized int
	// Errors are answers that were none of the above (a malformed body
	// not answered 400 included), with up to 5 samples.
	Errors       int
	ErrorSamples []string
	// Resent are requests net/http sent again on a new connection because
	// the server had closed the kept-alive one they went out on before
	// answering (each is counted once above, by its final answer).
	Resent int

	Tokens int // completion tokens of the requests answered whole (usage)
	// PromptTokens are those requests' prompt tokens, CachedTokens the
	// part of them the server's prompt cache supplied (usage).
	PromptTokens, CachedTokens int
	Elapsed                    time.Duration // the run's wall time
	// Steady and SteadyTokens are the time from the start while every
	// client had a request to send, and the tokens delivered in it (the
	// package doc says how they are counted).
	Steady       time.Duration
	SteadyTokens int
	TTFT, ITL    []time.Duration
	// Before and After are the server's memory before the run and once
	// idle after it (nil when the server does not report it).
	Before, After *server.MemoryStats
	// EngineBefore and EngineAfter are the server's engine counters at
	// the same moments (nil when the server does not report them): their
	// difference is the run's decode steps, prefill and time in each.
	EngineBefore, EngineAfter *server.EngineStats
}

// Throughput is completion tokens per second of the run.
func (r *Report) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Tokens) / r.Elapsed.Seconds()
}

// SteadyThroughput is completion tokens per second while every client
// had a request to send.
func (r *Report) SteadyThroughput() float64 {
	if r.Steady <= 0 {
		return 0
	}
	return float64(r.SteadyTokens) / r.Steady.Seconds()
}

// percentile returns the p-th percentile of d (nearest rank), 0 if empty.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Write prints the report.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "requests: %d | ok %d | cancelled mid-stream %d | malformed (400) %d | oversized (413) %d | rejected (429, then retried) %d | cut by the time limit %d | errors %d\n",
		r.Requests, r.OK, r.Cancelled, r.Malformed, r.Oversized, r.Rejected, r.Cut, r.Errors)
	for _, s := range r.ErrorSamples {
		fmt.Fprintf(w, "  error: %s\n", s)
	}
	if r.Resent > 0 {
		fmt.Fprintf(w, "resent on a new connection (the server closed a kept-alive one before answering): %d\n", r.Resent)
	}
	fmt.Fprintf(w, "throughput: %d completion tokens in %.1f s = %.1f tok/s aggregate\n", r.Tokens, r.Elapsed.Seconds(), r.Throughput())
	fmt.Fprintf(w, "steady throughput: %d completion tokens in the first %.1f s, while every client had a request to send = %.1f tok/s\n",
		r.SteadyTokens, r.Steady.Seconds(), r.SteadyThroughput())
	fmt.Fprintf(w, "prompts: %d tokens, %d of them from the prompt cache\n", r.PromptTokens, r.CachedTokens)
	fmt.Fprintf(w, "time to first token: p50 %s, p99 %s (%d streamed requests)\n", ms(percentile(r.TTFT, 50)), ms(percentile(r.TTFT, 99)), len(r.TTFT))
	fmt.Fprintf(w, "inter-token latency: p50 %s, p99 %s (%d gaps)\n", ms(percentile(r.ITL, 50)), ms(percentile(r.ITL, 99)), len(r.ITL))
	if r.Before != nil && r.After != nil {
		fmt.Fprintf(w, "server memory: before %d arrays, %d bytes (prompt cache %d arrays); idle after %d arrays, %d bytes (prompt cache %d arrays, %d bytes, %d sequences); %d sequences held; %d arrays freed unreleased by the safety net\n",
			r.Before.LiveArrays, r.Before.LiveBytes, r.Before.PromptCacheArrays, r.After.LiveArrays, r.After.LiveBytes,
			r.After.PromptCacheArrays, r.After.PromptCacheBytes, r.After.PromptCacheSeqs, r.After.Sequences, r.After.LeakedByGC-r.Before.LeakedByGC)
		if r.After.PackedBytes > 0 {
			fmt.Fprintf(w, "packed weights: %d bytes after (%d before); mapped weights they replaced, given back: %d bytes\n", r.After.PackedBytes, r.Before.PackedBytes, r.After.ReleasedBytes)
		}
	} else {
		fmt.Fprintln(w, "server memory: not reported by the server (GET /health)")
	}
	if e := r.engineWork(); e != nil {
		fmt.Fprintf(w, "engine: %d decode steps of %.2f rows, %.2f ms a step (%.1f s); prefill %d tokens in %.2f s, %.0f%% of the run\n",
			e.Steps, ratio(float64(e.GeneratedTokens), float64(e.Steps)), 1000*ratio(e.DecodeSeconds, float64(e.Steps)), e.DecodeSeconds,
			e.PromptTokens, e.PrefillSeconds, 100*ratio(e.PrefillSeconds, r.Elapsed.Seconds()))
	}
}

// engineWork is the engine's work during the run (EngineAfter less
// EngineBefore), or nil when the server reports none.
func (r *Report) engineWork() *server.EngineStats {
	a, b := r.EngineAfter, r.EngineBefore
	if a == nil || b == nil {
		return nil
	}
	return &server.EngineStats{Steps: a.Steps - b.Steps, GeneratedTokens: a.GeneratedTokens - b.GeneratedTokens,
		DecodeSeconds: a.DecodeSeconds - b.DecodeSeconds, PromptTokens: a.PromptTokens - b.PromptTokens,
		PrefillSeconds: a.PrefillSeconds - b.PrefillSeconds}
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// Check fails when an answer was an error, the server's memory besides
// its prompt cache is not back at its level before the run, or the
// backend's safety net freed arrays nobody released during it.
func (r *Report) Check() error {
	var errs []string
	if r.Errors > 0 {
		e := fmt.Sprintf("%d errors besides deliberate 429s and malformed 400s", r.Errors)
		if len(r.ErrorSamples) > 0 {
			e += " (the first: " + r.ErrorSamples[0] + ")"
		}
		errs = append(errs, e)
	}
	if r.OK == 0 {
		errs = append(errs, "no request was answered")
	}
	if r.Before != nil && r.After != nil {
		if r.After.Sequences != 0 {
			errs = append(errs, fmt.Sprintf("the server still holds %d sequences", r.After.Sequences))
		}
		b, a := r.Before.LiveArrays-r.Before.PromptCacheArrays, r.After.LiveArrays-r.After.PromptCacheArrays
		bb, ab := r.Before.LiveBytes-r.Before.PromptCacheBytes, r.After.LiveBytes-r.After.PromptCacheBytes
		if a != b || ab != bb {
			errs = append(errs, fmt.Sprintf("live arrays besides the prompt cache: %d (%d bytes) after, %d (%d bytes) before: a leak", a, ab, b, bb))
		}
		if n := r.After.LeakedByGC - r.Before.LeakedByGC; n != 0 {
			errs = append(errs, fmt.Sprintf("%d arrays were dropped without a release (freed by the garbage-collector safety net): a leak", n))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// Run runs the load. It fails only when the server cannot be reached at
// all; errors of single requests are counted in the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Clients < 1 || o.Requests < 1 || o.Duration <= 0 || o.MaxTokens < 1 {
		return nil, fmt.Errorf("loadtest: clients %d, requests %d, duration %v, max tokens %d: want each >= 1", o.Clients, o.Requests, o.Duration, o.MaxTokens)
	}
	client := &http.Client{Timeout: o.Duration + 30*time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.Clients, MaxIdleConns: o.Clients}}
	poster := &poster{client: client}
	if o.Model == "" {
		// The first model of GET /v1/models; where that fails (mlx_lm.server
		// answers it from the Hugging Face cache) requests name no model,
		// which servers of one model take as theirs.
		var models struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := getJSON(ctx, client, o.URL+"/v1/models", &models); err == nil && len(models.Data) > 0 {
			o.Model = models.Data[0].ID
		}
	}
	for i := range o.Warmup {
		if err := warmup(ctx, client, o); err != nil {
			return nil, fmt.Errorf("loadtest: warm-up request %d of %d: %w", i+1, o.Warmup, err)
		}
	}
	rep := &Report{}
	rep.Before, rep.EngineBefore = health(ctx, client, o.URL)
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var mu sync.Mutex
	answered, inflight, issued := 0, 0, 0
	var resend []int // requests answered 429, to be sent again
	start := time.Now()
	var steadyEnd time.Time // the first moment a client found the budget spent
	var done []result       // every request's outcome, with its times
	idle := func() {        // under mu
		if steadyEnd.IsZero() {
			steadyEnd = time.Now()
		}
	}
	var wg sync.WaitGroup
	for range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				if answered >= o.Requests {
					idle()
					mu.Unlock()
					return
				}
				if answered+inflight >= o.Requests {
					// The budget is claimed; a 429 may give a slot back.
					idle()
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					continue
				}
				inflight++
				k := issued
				if n := len(resend); n > 0 {
					k, resend = resend[n-1], resend[:n-1]
				} else {
					issued++
				}
				mu.Unlock()
				r := one(ctx, poster, o, rand.New(rand.NewPCG(o.Seed, uint64(k))))
				r.end = time.Now()
				mu.Lock()
				rep.add(r)
				done = append(done, r)
				inflight--
				if r.kind != "rejected" { // a 429 does not use up the budget: the request goes again
					answered++
				} else {
					resend = append(resend, k)
				}
				mu.Unlock()
				if r.retry > 0 {
					select {
					case <-time.After(r.retry):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	rep.Resent = int(poster.resent.Load())
	rep.Elapsed = end.Sub(start)
	if steadyEnd.IsZero() || steadyEnd.After(end) {
		steadyEnd = end // the time limit came first: every client was busy to the end
	}
	rep.Steady = steadyEnd.Sub(start)
	rep.SteadyTokens = tokensBy(done, steadyEnd)
	if rep.Before != nil {
		deadline := time.Now().Add(10 * time.Second)
		for {
			rep.After, rep.EngineAfter = health(context.Background(), client, o.URL)
			if rep.After == nil || rep.After.Sequences == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return rep, nil
}

// usage is the part of a response's usage object the report reads.
type usage struct {
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokens        int `json:"prompt_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// result is one request's outcome.
type result struct {
	kind   string // ok, cancelled, malformed, rejected, error
	err    string
	usage  usage // of a request answered whole
	ttft   time.Duration
	itl    []time.Duration
	retry  time.Duration
	chunks []time.Time // when each streamed chunk with text arrived
	end    time.Time   // when the request ended
}

// tokensBy counts the completion tokens delivered by t: the usage of the
// requests answered whole by then, and the streamed chunks received by
// then of the requests (answered whole later, or cut) still running at t.
func tokensBy(rs []result, t time.Time) int {
	n := 0
	for _, r := range rs {
		switch {
		case r.kind == "ok" && !r.end.After(t):
			n += r.usage.CompletionTokens
		case r.kind == "ok" || r.kind == "cut":
			for _, c := range r.chunks {
				if !c.After(t) {
					n++
				}
			}
		}
	}
	return n
}

func (r *Report) add(x result) {
	if x.kind != "rejected" {
		r.Requests++
	}
	switch x.kind {
	case "ok":
		r.OK++
		r.Tokens += x.usage.CompletionTokens
		r.PromptTokens += x.usage.PromptTokens
		r.CachedTokens += x.usage.PromptTokensDetails.CachedTokens
	case "cancelled":
		r.Cancelled++
	case "malformed":
		r.Malformed++
	case "oversized":
		r.Oversized++
	case "rejected":
		r.Rejected++
	case "cut":
		r.Cut++
	default:
		r.Errors++
		if len(r.ErrorSamples) < 5 {
			r.ErrorSamples = append(r.ErrorSamples, x.err)
		}
	}
	if x.ttft > 0 {
		r.TTFT = append(r.TTFT, x.ttft)
	}
	r.ITL = append(r.ITL, x.itl...)
}

// malformedBodies are requests a server must answer 400.
var malformedBodies = []string{
	`{"messages": [{"role": "user", "content": "Hi"}`,
	`{"prompt": 12, "max_tokens": "eight"}`,
	`not json at all`,
	`{"prompt": "hello", "max_tokens": -3}`,
	`{"messages": "hello"}`,
	``,
}

// words make prompts of a chosen length.
var words = strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches near an old river bank")

func prompt(rng *rand.Rand, lengths []int) string {
	if len(lengths) == 0 {
		lengths = []int{4, 48, 400} // short, medium, long
	}
	n := lengths[rng.IntN(len(lengths))]
	var sb strings.Builder
	sb.WriteString("Summarise this: ")
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(words[rng.IntN(len(words))])
	}
	return sb.String()
}

// one sends one request of a random kind.
func one(ctx context.Context, client *poster, o Options, rng *rand.Rand) result {
	x := rng.Float64()
	if x < o.Malformed {
		k := rng.IntN(len(malformedBodies) + 1)
		body, what := "", ""
		if k == len(malformedBodies) {
			body, what = strings.Repeat("[", 2<<20), "2 MiB of '['"
		} else {
			body, what = malformedBodies[k], strconv.Quote(malformedBodies[k])
		}
		route := []string{"/v1/chat/completions", "/v1/completions"}[rng.IntN(2)]
		resp, err := client.post(ctx, o.URL+route, body)
		if err != nil {
			return result{kind: "error", err: fmt.Sprintf("malformed body %s: %v", what, err)}
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		switch resp.StatusCode {
		case http.StatusBadRequest:
			return result{kind: "malformed"}
		case http.StatusRequestEntityTooLarge:
			return result{kind: "oversized"}
		case http.StatusTooManyRequests:
			return rejected(resp)
		}
		return result{kind: "error", err: fmt.Sprintf("malformed body %s answered %d, want 400 (or 413)", what, resp.StatusCode)}
	}
	cancelAfter := 0
	stream := rng.Float64() < o.Stream
	slow := false
	switch {
	case x < o.Malformed+o.Cancel:
		stream, cancelAfter = true, 1+rng.IntN(2)
	case x < o.Malformed+o.Cancel+o.Slow:
		slow = true
	}
	chat := rng.IntN(2) == 0
	req := map[string]any{"max_tokens": max(1, o.MaxTokens/4+rng.IntN(o.MaxTokens-o.MaxTokens/4+1)), "stream": stream}
	if o.Model != "" {
		req["model"] = o.Model
	}
	if stream {
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	route := "/v1/completions"
	if chat {
		route = "/v1/chat/completions"
		req["messages"] = []map[string]string{{"role": "user", "content": prompt(rng, o.PromptWords)}}
	} else {
		req["prompt"] = prompt(rng, o.PromptWords)
	}
	if rng.IntN(4) == 0 {
		req["temperature"], req["seed"] = 0.8, rng.IntN(1000)
	}
	body, _ := json.Marshal(req)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var in io.Reader = bytes.NewReader(body)
	if slow {
		in = &trickle{r: in}
	}
	resp, err := client.postReader(rctx, o.URL+route, in, int64(len(body)))
	if err != nil {
		if ctx.Err() != nil {
			return result{kind: "cut"} // the run's time is up
		}
		return result{kind: "error", err: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		io.Copy(io.Discard, resp.Body)
		return rejected(resp)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return result{kind: "error", err: fmt.Sprintf("%s answered %d: %s", route, resp.StatusCode, b)}
	}
	if !stream {
		var out struct {
			Usage   usage             `json:"usage"`
			Choices []json.RawMessage `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 {
			return result{kind: "error", err: fmt.Sprintf("%s: a 200 without one choice: %v", route, err)}
		}
		return result{kind: "ok", usage: out.Usage}
	}
	r := result{kind: "ok"}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	last := start
	chunks, done := 0, false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var c struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
			Error any    `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil || c.Error != nil {
			return result{kind: "error", err: fmt.Sprintf("%s: stream event %q (%v)", route, data, err)}
		}
		if c.Usage != nil {
			r.usage = *c.Usage
		}
		if len(c.Choices) == 0 || c.Choices[0].Text == "" && c.Choices[0].Delta.Content == "" {
			continue
		}
		now := time.Now()
		if chunks == 0 {
			r.ttft = now.Sub(start)
		} else {
			r.itl = append(r.itl, now.Sub(last))
		}
		last = now
		chunks++
		r.chunks = append(r.chunks, now)
		if slow && chunks == 1 {
			time.Sleep(300 * time.Millisecond) // a client that stops reading for a while
			last = time.Now()
		}
		if cancelAfter > 0 && chunks >= cancelAfter {
			cancel()
			r.kind = "cancelled"
			return r
		}
	}
	if !done {
		if ctx.Err() != nil {
			return result{kind: "cut", chunks: r.chunks} // the run's time is up
		}
		return result{kind: "error", err: fmt.Sprintf("%s: stream ended without [DONE] (%v)", route, sc.Err())}
	}
	return r // finished (before the chunk it was to be cancelled at, if any)
}

func rejected(resp *http.Response) result {
	d := 200 * time.Millisecond
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		d = min(d, time.Duration(s)*time.Second)
	}
	return result{kind: "rejected", retry: d}
}

// poster sends the load's requests and counts those net/http sent again.
type poster struct {
	client *http.Client
	resent atomic.Int64
}

func (p *poster) post(ctx context.Context, url, body string) (*http.Response, error) {
	return p.postReader(ctx, url, strings.NewReader(body), int64(len(body)))
}

// postReader posts n bytes from body with a Content-Length (as clients
// send it; mlx_lm.server refuses a chunked body). A body net/http can
// send again (not a trickle) goes with an Idempotency-Key, so that where
// the server closes the kept-alive connection a request went out on
// before answering it (llama-server does now and then), net/http sends it
// again on a new connection, as OpenAI's clients retry connection errors;
// such requests are counted (p.resent).
func (p *poster) postReader(ctx context.Context, url string, body io.Reader, n int64) (*http.Response, error) {
	var conns atomic.Int32
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns.Add(1) }})
	req, err := http.NewRequestWithContext(ctx, "POST", url, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = n
	req.Header.Set("Content-Type", "application/json")
	if req.GetBody != nil {
		req.Header.Set("Idempotency-Key", strconv.FormatInt(idempotencyKeys.Add(1), 10))
	}
	resp, err := p.client.Do(req)
	if conns.Load() > 1 {
		p.resent.Add(1)
	}
	return resp, err
}

// idempotencyKeys numbers the requests of the process.
var idempotencyKeys atomic.Int64

// trickle reads 32 bytes at a time, 20 ms apart: a slow client's body.
type trickle struct {
	r io.Reader
}

func (t *trickle) Read(p []byte) (int, error) {
	time.Sleep(20 * time.Millisecond)
	return t.r.Read(p[:min(len(p), 32)])
}

func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// warmup sends one short completion and reads its answer whole.
func warmup(ctx context.Context, client *http.Client, o Options) error {
	req := map[string]any{"prompt": "Warm up: one two three", "max_tokens": 4}
	if o.Model != "" {
		req["model"] = o.Model
	}
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, data)
	}
	return nil
}

// health reads the server's memory and engine counters from GET /health
// (each nil when absent).
func health(ctx context.Context, client *http.Client, url string) (*server.MemoryStats, *server.EngineStats) {
	var h struct {
		Memory *server.MemoryStats `json:"memory"`
		Engine *server.EngineStats `json:"engine"`
	}
	if getJSON(ctx, client, url+"/health", &h) != nil {
		return nil, nil
	}
	return h.Memory, h.Engine
}
