// Package kvquality measures what a KV cache kind costs in quality against
// the full cache, as the seed's TurboQuant table does: the model decodes
// greedily with the full cache, and every other cache is teacher-forced
// through the same tokens in lockstep, so each step compares next-token
// distributions on identical contexts (KL(full ‖ other) in nats, and
// whether the argmax agrees); optionally each cache then decodes freely and
// its tokens are compared with the full cache's. It also counts the bytes a
// cached token costs. The measurement is slow (one forward per cache per
// step): `mlxgo kvquality` runs it, no unit test does.
package kvquality

import (
	"fmt"
	"io"
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// Kind is a cache to measure: a name for the table and its options.
type Kind struct {
	Name    string
	Options nn.CacheOptions
}

// Row is one kind's measurement.
type Row struct {
	Name          string
	MeanKL, MaxKL float64 // KL(full ‖ kind) of next-token distributions, nats, over the steps
	Top1          float64 // fraction of steps whose argmax is the full cache's greedy token
	FreePrefix    int     // free-running greedy tokens equal to the full cache's before the first difference (-1: not run)
	FreeMatch     float64 // fraction of free-running positions equal to the full cache's tokens
	BytesPerToken int     // bytes one cached token costs over every layer
}

// Result is a measurement: the steps decoded, the bfloat16 full cache's
// bytes per token, and one row per kind.
type Result struct {
	Steps           int
	FullBF16Bytes   int
	Rows            []Row
	ReferenceTokens []int32
}

// BytesPerToken is what one token costs in a cache of kind o over layers
// layers of Hk KV heads of head_dim d: bfloat16 keys and values for the
// full cache (and a rotating one), MLX's packed codes with float16-sized
// scales and biases for the quantized one, the five TurboQuant parts.
func BytesPerToken(o nn.CacheOptions, layers, hk, d int) int {
	per := 2 * d * 2
	switch {
	case o.Turbo != (turboquant.Scheme{}):
		per = o.Turbo.BytesPerTokenHead(d)
	case o.KVBits > 0:
		per = 2 * (d*o.KVBits/8 + 2*2*d/o.KVGroupSize)
	}
	return layers * hk * per
}

// Measure decodes steps tokens after prompt. progress, when not nil, gets a
// line every 64 steps. Call it outside the backend's Do.
func Measure(m *minicpm5.Model, prompt []int32, steps int, kinds []Kind, freeRun bool, progress io.Writer) (Result, error) {
	cfg := m.Config()
	res := Result{Steps: steps, FullBF16Bytes: BytesPerToken(nn.CacheOptions{}, cfg.NumHiddenLayers, cfg.NumKeyValueHeads, cfg.HeadDim)}
	for _, k := range kinds {
		if _, err := m.WithCache(k.Options); err != nil {
			return res, fmt.Errorf("%s: %w", k.Name, err)
		}
		res.Rows = append(res.Rows, Row{Name: k.Name, FreePrefix: -1,
			BytesPerToken: BytesPerToken(k.Options, cfg.NumHiddenLayers, cfg.NumKeyValueHeads, cfg.HeadDim)})
	}
	b := m.Backend()
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		caches := [][]nn.KVCache{m.NewCacheWith(nn.CacheOptions{})}
		for _, k := range kinds {
			caches = append(caches, m.NewCacheWith(k.Options))
		}
		defer func() {
			for _, cs := range caches {
				release(cs)
			}
		}()
		lps := make([][]float64, len(caches))
		for i, cs := range caches {
			if lps[i], err = prefill(m, prompt, cs); err != nil {
				return err
			}
		}
		for step := range steps {
			tok := argmax(lps[0])
			res.ReferenceTokens = append(res.ReferenceTokens, int32(tok))
			for i := range kinds {
				kl := klDiv(lps[0], lps[i+1])
				res.Rows[i].MeanKL += kl / float64(steps)
				res.Rows[i].MaxKL = max(res.Rows[i].MaxKL, kl)
				if argmax(lps[i+1]) == tok {
					res.Rows[i].Top1 += 1 / float64(steps)
				}
			}
			if step == steps-1 {
				break
			}
			for i, cs := range caches {
				if lps[i], err = decode(m, int32(tok), cs); err != nil {
					return err
				}
			}
			if progress != nil && (step+1)%64 == 0 {
				fmt.Fprintf(progress, "teacher-forced step %d/%d\n", step+1, steps)
			}
		}
		if !freeRun {
			return nil
		}
		for i, k := range kinds {
			got, err := greedy(m, prompt, steps, k.Options)
			if err != nil {
				return err
			}
			r := &res.Rows[i]
			r.FreePrefix = len(got)
			for j, t := range got {
				if t == res.ReferenceTokens[j] {
					r.FreeMatch += 1 / float64(steps)
				} else if r.FreePrefix == len(got) {
					r.FreePrefix = j
				}
			}
			if progress != nil {
				fmt.Fprintf(progress, "free run %s done\n", k.Name)
			}
		}
		return nil
	})
	return res, err
}

func release(cs []nn.KVCache) {
	for _, c := range cs {
		c.Release()
	}
}

// prefill runs the prompt (one chunk, then the last token) and returns the
// last position's log-probabilities.
func prefill(m *minicpm5.Model, prompt []int32, cache []nn.KVCache) ([]float64, error) {
	logits, err := m.PrefillLast(prompt, cache, 2048)
	if err != nil {
		return nil, err
	}
	return logprobs(m.Backend(), logits)
}

func decode(m *minicpm5.Model, tok int32, cache []nn.KVCache) ([]float64, error) {
	b := m.Backend()
	ids := b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{tok}))
	defer b.Release(ids)
	logits, err := m.LastLogits(ids, cache)
	if err != nil {
		return nil, err
	}
	return logprobs(b, logits)
}

// greedy decodes steps tokens after prompt with a fresh cache of kind o.
func greedy(m *minicpm5.Model, prompt []int32, steps int, o nn.CacheOptions) ([]int32, error) {
	cache := m.NewCacheWith(o)
	defer release(cache)
	lp, err := prefill(m, prompt, cache)
	if err != nil {
		return nil, err
	}
	var out []int32
	for range steps {
		tok := int32(argmax(lp))
		out = append(out, tok)
		if len(out) == steps {
			break
		}
		if lp, err = decode(m, tok, cache); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// logprobs is log_softmax of the last row of logits, in float64; logits is
// released.
func logprobs(b backend.Backend, logits backend.Array) ([]float64, error) {
	h, err := b.ToHost(logits)
	b.Release(logits)
	if err != nil {
		return nil, err
	}
	v := h.ToFloat64()
	n := h.Shape[len(h.Shape)-1]
	v = v[len(v)-n:]
	mx := math.Inf(-1)
	for _, x := range v {
		mx = max(mx, x)
	}
	var s float64
	for _, x := range v {
		s += math.Exp(x - mx)
	}
	lse := mx + math.Log(s)
	out := make([]float64, n)
	for i, x := range v {
		out[i] = x - lse
	}
	return out, nil
}

// klDiv is KL(p ‖ q) of two log-probability vectors.
func klDiv(p, q []float64) float64 {
	var kl float64
	for i := range p {
		if pi := math.Exp(p[i]); pi > 0 {
			kl += pi * (p[i] - q[i])
		}
	}
	return kl
}

func argmax(v []float64) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
