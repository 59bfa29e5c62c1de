package loadtest

import (
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
