package generate

import (
	"fmt"
	"slices"
)

// PromptLookup is a Drafter that needs no model: prompt lookup decoding
// (llama.cpp's lookup example and its server's ngram-simple speculative
// type). It takes the last N tokens of the sequence (the prompt and what
// was generated so far), finds their most recent earlier occurrence, and
// proposes the tokens that followed it. When that occurrence overlaps the
// end of the sequence (the last N tokens repeat with period p < the
// tokens wanted), the proposal continues the period. No occurrence, or a
// sequence of N tokens or fewer, proposes nothing: the step is then a plain
// decode step. Unknown tokens (a loaded prompt cache's) are never proposed.
type PromptLookup struct {
	n int
}

// NewPromptLookup returns a prompt-lookup drafter matching n-grams of n
// tokens (n >= 1).
func NewPromptLookup(n int) (*PromptLookup, error) {
	if n < 1 {
		return nil, fmt.Errorf("prompt lookup: n-gram size %d, want at least 1", n)
	}
	return &PromptLookup{n: n}, nil
}

// Lookup returns at most k tokens that followed the most recent earlier
// occurrence of the last N tokens of history (see PromptLookup).
func (p *PromptLookup) Lookup(history []int32, k int) []int32 {
	N, L := p.n, len(history)
	if k <= 0 || L <= N {
		return nil
	}
	key := history[L-N:]
	if slices.Contains(key, Unknown) {
		return nil
	}
	for i := L - N - 1; i >= 0; i-- {
		if !equal(history[i:i+N], key) {
			continue
		}
		// history[i+N:] followed the match; past the end of history the
		// continuation repeats with period L-N-i (history[j] for j >= L
		// is history[j-(L-N-i)]).
		period := L - N - i
		out := make([]int32, k) // k is the caller's draft count, not input data
		for t := range out {
			j := i + N + t
			for j >= L {
				j -= period
			}
			if history[j] == Unknown { // a loaded cache's token: not a proposal
				return out[:t]
			}
			out[t] = history[j]
		}
		return out
	}
	return nil
}

func equal(a, b []int32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}

func (p *PromptLookup) validate([]int32) error { return nil }

func (p *PromptLookup) begin([]int32, *speculation) error { return nil }

func (p *PromptLookup) propose(history []int32, n int, _ *speculation) ([]int32, error) {
	return p.Lookup(history, n), nil
}

func (p *PromptLookup) end() {}
