package bench

import (
	"fmt"
	"slices"
)

// Stat summarises repeated measurements.
type Stat struct {
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	N       int       `json:"n"`
	Samples []float64 `json:"samples"`
}

// NewStat returns the summary of samples (the zero Stat when there are none).
func NewStat(samples []float64) Stat {
	if len(samples) == 0 {
		return Stat{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: med, Min: s[0], Max: s[len(s)-1], N: len(s), Samples: samples}
}

// Spread is (max - min) / median, the relative spread of the samples.
func (s Stat) Spread() float64 {
	if s.N == 0 || s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median
}

// Format renders the median with the spread, e.g. "41.2 ±3%", with prec
// digits after the point (prec < 0: three significant digits), or "—"
// when there are no samples.
func (s Stat) Format(prec int) string {
	if s.N == 0 {
		return "—"
	}
	v := fmt.Sprintf("%.*f", prec, s.Median)
	if prec < 0 {
		v = speedLabel(s.Median)
	}
	if s.N == 1 {
		return v + " (n=1)"
	}
	return fmt.Sprintf("%s ±%.0f%%", v, 100*s.Spread()/2)
}

// RunRecord is one timed run as a child reports it. Kind "prefill": the
// prompt through a fresh cache as generation prefills it (all but the last
// token without the head, then the last token with it) until the last
// position's logits are computed, Seconds long. Kind "generate": greedy
// generation after the prompt, TTFT to the first token and Tokens the time
// (from the same start) each generated token was known.
type RunRecord struct {
	Kind    string    `json:"kind"`
	Prompt  int       `json:"prompt"`
	Warmup  bool      `json:"warmup"`
	Seconds float64   `json:"seconds,omitempty"`
	TTFT    float64   `json:"ttft_s,omitempty"`
	Tokens  []float64 `json:"token_s,omitempty"`
	// Kind "batch" (a batch sweep): Batch rows of Prompt tokens, Generated
	// tokens emitted by decode steps in Seconds of them, PromptTokens
	// prefilled in PromptSeconds.
	Batch         int     `json:"batch,omitempty"`
	Generated     int     `json:"generated,omitempty"`
	PromptTokens  int     `json:"prompt_tokens,omitempty"`
	PromptSeconds float64 `json:"prompt_seconds,omitempty"`
}

// ChildReport is what a child process prints: one JSON object.
type ChildReport struct {
	Engine string      `json:"engine"`
	Device string      `json:"device"`
	LoadS  float64     `json:"load_s"`
	Runs   []RunRecord `json:"runs"`
	// DecodePeakRSSBytes is the process's peak resident set over its
	// generation runs alone (its peak reset after the prefill runs; Linux
	// only, else 0).
	DecodePeakRSSBytes int64 `json:"decode_peak_rss_bytes,omitempty"`
	// PrefillPeakRSSBytes is the process's peak resident set before that
	// reset (which also resets the peak the kernel reports at exit, so the
	// harness takes the larger of the two as the process's peak).
	PrefillPeakRSSBytes int64 `json:"prefill_peak_rss_bytes,omitempty"`
	// PackedBytes and ReleasedBytes are the backend's Stats after the runs:
	// the weights it keeps rearranged for its kernels, and the checkpoint's
	// mapped pages those replaced and gave back (0 where nothing packs).
	PackedBytes   int64 `json:"packed_bytes,omitempty"`
	ReleasedBytes int64 `json:"released_bytes,omitempty"`
}

// PromptResult is the prefill measurement at one prompt length.
type PromptResult struct {
	Prompt     int  `json:"prompt"`
	PrefillTPS Stat `json:"prefill_tps"`
	// Rounds is each round's median prefill tok/s, in round order (absent
	// in results written before it existed).
	Rounds []float64 `json:"rounds,omitempty"`
}

// summarise computes prefill tok/s per prompt length (P / Seconds), and
// from the generate runs the time to first token, its prompt length, and
// decode tok/s: (N-2) / (t[N-1] - t[1]) for tokens t[1..N]. The last token is
// left out because an eager backend yields token k only once step k+1 is
// computed (generation is pipelined as mlx_lm's generate_step is), so token N
// follows token N-1 at once; on either kind of backend t[N-1] - t[1] spans
// N-2 decode steps.
func summarise(runs []RunRecord) (prompts []PromptResult, ttft Stat, ttftPrompt int, decode Stat) {
	byLen := map[int][]float64{}
	var order []int
	var dec, first []float64
	for _, r := range runs {
		if r.Warmup {
			continue
		}
		switch r.Kind {
		case "prefill":
			if r.Seconds <= 0 {
				continue
			}
			if _, ok := byLen[r.Prompt]; !ok {
				order = append(order, r.Prompt)
			}
			byLen[r.Prompt] = append(byLen[r.Prompt], float64(r.Prompt)/r.Seconds)
		case "generate":
			if r.TTFT > 0 {
				first = append(first, r.TTFT)
				ttftPrompt = r.Prompt
			}
			if n := len(r.Tokens); n >= 3 && r.Tokens[n-2] > r.Tokens[0] {
				dec = append(dec, float64(n-2)/(r.Tokens[n-2]-r.Tokens[0]))
			}
		}
	}
	for _, p := range order {
		prompts = append(prompts, PromptResult{Prompt: p, PrefillTPS: NewStat(byLen[p])})
	}
	return prompts, NewStat(first), ttftPrompt, NewStat(dec)
}
