package loadtest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTokensBy: the steady window's count takes the usage of requests
// answered whole by its end and the chunks received by then of those still
// running (answered later, or cut), nothing of other kinds.
func TestTokensBy(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	ok := func(tokens, endMS int, chunks ...int) result {
		return result{kind: "ok", usage: usage{CompletionTokens: tokens}, end: t0.Add(time.Duration(endMS) * time.Millisecond), chunks: at(chunks...)}
	}
	for _, c := range []struct {
		name string
		rs   []result
		byMS int
		want int
	}{
		{"none", nil, 100, 0},
		{"whole before the end: usage, not chunks", []result{ok(7, 50, 10, 20)}, 100, 7},
		{"ending exactly at the end counts whole", []result{ok(7, 100, 10, 20)}, 100, 7},
		{"running at the end: chunks by then", []result{ok(7, 150, 10, 90, 100, 120)}, 100, 3},
		{"non-streamed running at the end: nothing", []result{ok(7, 150)}, 100, 0},
		{"cut: chunks by the end", []result{{kind: "cut", chunks: at(10, 60, 110)}}, 100, 2},
		{"cancelled, rejected, malformed, errors: nothing", []result{
			{kind: "cancelled", chunks: at(10)}, {kind: "rejected"}, {kind: "malformed"}, {kind: "error", chunks: at(5)}}, 100, 0},
		{"a mix", []result{ok(5, 40), ok(9, 300, 50, 150), {kind: "cut", chunks: at(99, 101)}, ok(3, 99, 1, 2, 3)}, 100, 5 + 1 + 1 + 3},
	} {
		if got := tokensBy(c.rs, t0.Add(time.Duration(c.byMS)*time.Millisecond)); got != c.want {
			t.Errorf("%s: %d tokens, want %d", c.name, got, c.want)
		}
	}
}

// TestSteadyThroughput: tokens over the window, 0 for an empty window.
func TestSteadyThroughput(t *testing.T) {
	for _, c := range []struct {
		r    Report
		want float64
	}{
		{Report{Steady: 2 * time.Second, SteadyTokens: 300}, 150},
		{Report{Steady: 0, SteadyTokens: 300}, 0},
		{Report{Steady: time.Second}, 0},
	} {
		if got := c.r.SteadyThroughput(); got != c.want {
			t.Errorf("%d tokens in %v: %g tok/s, want %g", c.r.SteadyTokens, c.r.Steady, got, c.want)
		}
	}
}

// TestWarmup: Options.Warmup requests reach the server before the run's,
// one at a time, and count in nothing; a warm-up the server refuses stops
// the run with an error naming it.
func TestWarmup(t *testing.T) {
	var mu sync.Mutex
	var seen []string // "warm" or "run", in arrival order
	fail := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" && r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		warm := strings.Contains(string(body), "Warm up")
		mu.Lock()
		seen = append(seen, map[bool]string{true: "warm", false: "run"}[warm])
		refuse := warm && fail
		mu.Unlock()
		if refuse {
			http.Error(w, `{"error": {"message": "busy"}}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices": [{"text": "ok", "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}`)
	}))
	defer srv.Close()
	o := Options{URL: srv.URL, Clients: 1, Requests: 3, Duration: 10 * time.Second, MaxTokens: 4, Stream: 0, Warmup: 2, PromptWords: []int{2}}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"warm", "warm", "run", "run", "run"}; !slices.Equal(seen, want) {
		t.Errorf("requests arrived as %v, want %v", seen, want)
	}
	if rep.Requests != 3 || rep.OK != 3 || rep.Tokens != 6 {
		t.Errorf("report: %d requests, %d ok, %d tokens; want 3, 3, 6 (the warm-ups not counted)", rep.Requests, rep.OK, rep.Tokens)
	}
	mu.Lock()
	seen, fail = nil, true
	mu.Unlock()
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "warm-up request 1 of 2: status 500") {
		t.Errorf("a refused warm-up: error %v, want one naming warm-up request 1 of 2 and its status", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Errorf("after a refused warm-up the server saw %v, want that request alone", seen)
	}
}

// TestSameRequestsAnyClients: one client and four send the same requests
// (Options.Seed: the i-th request sent draws from a stream of its own), and
// a request answered 429 goes again in its place, the same request.
func TestSameRequestsAnyClients(t *testing.T) {
	var mu sync.Mutex
	var bodies []string // answered 200, in arrival order
	arrivals, refuse := 0, map[int]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost { // /v1/models, /health: none here
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		arrivals++
		if refuse[arrivals] {
			mu.Unlock()
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error": {"message": "busy"}}`, http.StatusTooManyRequests)
			return
		}
		bodies = append(bodies, r.URL.Path+" "+string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices": [{"text": "ok", "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}`)
	}))
	defer srv.Close()
	run := func(clients int, refused ...int) []string {
		t.Helper()
		mu.Lock()
		bodies, arrivals, refuse = nil, 0, map[int]bool{}
		for _, a := range refused {
			refuse[a] = true
		}
		mu.Unlock()
		o := Options{URL: srv.URL, Clients: clients, Requests: 12, Duration: 10 * time.Second, MaxTokens: 64, Stream: 0, Seed: 7}
		rep, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK != 12 || rep.Rejected != len(refused) {
			t.Fatalf("%d clients: %d ok, %d rejected; want 12 and %d", clients, rep.OK, rep.Rejected, len(refused))
		}
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(bodies)
		slices.Sort(out)
		return out
	}
	one := run(1)
	if len(slices.Compact(slices.Clone(one))) < 6 {
		t.Fatalf("one client's 12 requests hold only %d distinct bodies: the mix does not vary", len(slices.Compact(slices.Clone(one))))
	}
	for _, c := range []struct {
		clients int
		refused []int
	}{{4, nil}, {4, []int{2, 5}}, {12, []int{1}}} {
		if got := run(c.clients, c.refused...); !slices.Equal(got, one) {
			t.Errorf("%d clients (429 at arrivals %v) sent other requests than one client:\n got %q\nwant %q", c.clients, c.refused, got, one)
		}
	}
}
