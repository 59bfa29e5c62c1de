package conformance

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// Runners for the model cases (conformance/README.md, "Model fixtures").
// Each reproduces conformance/oracle/models.py step for step on the case's
// checkpoint, loaded with models/minicpm5.
func init() {
	register("model:prefill", runPrefill)
	register("model:hidden", runHidden)
	register("model:decode", runDecode)
	register("model:greedy", runGreedy)
}

// modelKey names a checkpoint loaded on one backend.
type modelKey struct {
	b   backend.Backend
	dir string
}

// loaded holds the models LoadModels loaded, until ReleaseModels.
var loaded = struct {
	sync.Mutex
	m map[modelKey]*minicpm5.Model
}{m: map[modelKey]*minicpm5.Model{}}

func keyOf(b backend.Backend, c *Case) modelKey {
	dir := filepath.Clean(c.CheckpointDir())
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return modelKey{b, dir}
}

// LoadModels loads, on b, the checkpoint of every model case in cases that
// is not loaded yet, so that Check reuses one model per checkpoint instead
// of loading it for each case. Without it Check still runs model cases, each
// on a model loaded for it alone. Call it outside Backend.Do, and call
// ReleaseModels(b) before closing b.
func LoadModels(b backend.Backend, cases []*Case) error {
	for _, c := range cases {
		if c.Kind != "model" {
			continue
		}
		k := keyOf(b, c)
		loaded.Lock()
		_, ok := loaded.m[k]
		loaded.Unlock()
		if ok {
			continue
		}
		var m *minicpm5.Model
		err := b.Do(func() (err error) {
			defer backend.Recover(&err)
			m, err = minicpm5.Load(b, k.dir)
			return err
		})
		if err != nil {
			return fmt.Errorf("conformance: case %s: loading checkpoint: %w", c.Name, err)
		}
		loaded.Lock()
		loaded.m[k] = m
		loaded.Unlock()
	}
	return nil
}

// ReleaseModels closes every model LoadModels loaded on b. Call it before
// closing b; calling it when nothing is loaded does nothing.
func ReleaseModels(b backend.Backend) error {
	loaded.Lock()
	var ms []*minicpm5.Model
	for k, m := range loaded.m {
		if k.b == b {
			ms = append(ms, m)
			delete(loaded.m, k)
		}
	}
	loaded.Unlock()
	if len(ms) == 0 {
		return nil
	}
	var errs []error
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		for _, m := range ms {
			errs = append(errs, m.Close())
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// model returns the case's model on b, its prompt (input "ids", int32 [N]
// with N >= 1) and what to call when done with the model: the one
// LoadModels loaded, or else one loaded now for this case only. It runs
// inside Check's Backend.Do and scope, so a model loaded here has its
// weights in that scope and must not outlive the case.
func model(b backend.Backend, c *Case, a *Arrays) (*minicpm5.Model, []int32, func(), error) {
	ids, err := a.Input("ids")
	if err != nil {
		return nil, nil, nil, err
	}
	if ids.DType != tensor.I32 || len(ids.Shape) != 1 || ids.Shape[0] < 1 {
		return nil, nil, nil, fmt.Errorf("case %s: input ids is %v %v, want int32 [N] with N >= 1", c.Name, ids.DType, ids.Shape)
	}
	k := keyOf(b, c)
	loaded.Lock()
	m, ok := loaded.m[k]
	loaded.Unlock()
	if !ok {
		if m, err = minicpm5.Load(b, k.dir); err != nil {
			return nil, nil, nil, fmt.Errorf("case %s: loading checkpoint: %w", c.Name, err)
		}
	}
	done := func() {
		if !ok {
			m.Close()
		}
	}
	want, err := tensor.ParseDType(c.DType)
	if err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("case %s: dtype: %w", c.Name, err)
	}
	if m.DType() != want {
		done()
		return nil, nil, nil, fmt.Errorf("case %s: dtype %s, but checkpoint %s computes in %s", c.Name, c.DType, k.dir, m.DType().MLXName())
	}
	return m, ids.Int32s(), done, nil
}

func releaseCache(cache []nn.KVCache) {
	for _, c := range cache {
		c.Release()
	}
}

// runPrefill: the prompt through a fresh cache in chunks of
// prefill_step_size, every position's logits [N, V].
func runPrefill(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	m, ids, done, err := model(b, c, a)
	if err != nil {
		return nil, err
	}
	defer done()
	step, err := c.Int("prefill_step_size")
	if err != nil {
		return nil, err
	}
	cache := m.NewCache()
	defer releaseCache(cache)
	logits, err := m.Prefill(ids, cache, step)
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"logits": b.Reshape(logits, len(ids), -1)})
}

// runHidden: one forward without a cache, the residual stream after every
// layer ("h.0", ...), after the final norm ("norm") and the logits, each
// [N, ·].
func runHidden(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	m, ids, done, err := model(b, c, a)
	if err != nil {
		return nil, err
	}
	defer done()
	n := len(ids)
	out, err := m.Forward(b.FromHost(tensor.FromInt32(tensor.Shape{1, n}, ids)), nil, minicpm5.ForwardOptions{CaptureHidden: true})
	if err != nil {
		return nil, err
	}
	res := map[string]backend.Array{
		"norm":   b.Reshape(out.Norm, n, -1),
		"logits": b.Reshape(out.Logits, n, -1),
	}
	for i, h := range out.Hidden {
		res[fmt.Sprintf("h.%d", i)] = b.Reshape(h, n, -1)
	}
	return host(b, res)
}

// runDecode: generate_step's single-token steps after a chunked prefill of
// all prompt tokens but the last, with teacher forcing: step 0 feeds the
// last prompt token and step i > 0 the oracle's out.tokens[i], so that every
// step's logits are comparable even where our argmax differs. Outputs: the
// raw logits [steps, V], logprobs = logits − logsumexp(logits) in the model
// dtype [steps, V], and tokens [steps] — the last prompt token, then our
// argmax of each step but the last (what a free-running decode would feed).
func runDecode(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	m, ids, done, err := model(b, c, a)
	if err != nil {
		return nil, err
	}
	defer done()
	step, err := c.Int("prefill_step_size")
	if err != nil {
		return nil, err
	}
	steps, err := c.Int("steps")
	if err != nil {
		return nil, err
	}
	if err := argmaxSampler(c); err != nil {
		return nil, err
	}
	fedT, err := a.Output("tokens")
	if err != nil {
		return nil, err
	}
	if fedT.DType.IsFloat() || len(fedT.Shape) != 1 || fedT.Shape[0] != steps || steps < 1 {
		return nil, fmt.Errorf("case %s: out.tokens is %v %v, want integer [steps = %d]", c.Name, fedT.DType, fedT.Shape, steps)
	}
	fed := fedT.ToFloat64()
	if int32(fed[0]) != ids[len(ids)-1] {
		return nil, fmt.Errorf("case %s: out.tokens[0] is %v, want the last prompt token %d", c.Name, fed[0], ids[len(ids)-1])
	}

	view, err := cacheView(m, c)
	if err != nil {
		return nil, err
	}
	cache := view.NewCache()
	defer releaseCache(cache)
	var logits, logprobs []backend.Array
	tokens := []int32{ids[len(ids)-1]}
	for i := range steps {
		var l backend.Array
		if i == 0 {
			l, err = m.PrefillLast(ids, cache, step)
		} else {
			x := b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{int32(fed[i])}))
			var out minicpm5.Output
			out, err = m.Forward(x, cache, minicpm5.ForwardOptions{})
			l = out.Logits
		}
		if err != nil {
			return nil, fmt.Errorf("case %s: decode step %d: %w", c.Name, i, err)
		}
		l = b.Reshape(l, 1, -1)
		lp := b.Binary(backend.Subtract, l, b.LogSumExp(l, -1, true))
		if err := b.Eval(append(cacheState(cache), l, lp)...); err != nil {
			return nil, fmt.Errorf("case %s: decode step %d: %w", c.Name, i, err)
		}
		logits, logprobs = append(logits, l), append(logprobs, lp)
		if i+1 < steps {
			h, err := b.ToHost(lp)
			if err != nil {
				return nil, err
			}
			tokens = append(tokens, int32(generate.Argmax(h.ToFloat32()))) // lp is bf16, f16 or f32: exact in float32
		}
	}
	out, err := host(b, map[string]backend.Array{
		"logits":   b.Concatenate(0, logits...),
		"logprobs": b.Concatenate(0, logprobs...),
	})
	if err != nil {
		return nil, err
	}
	out["tokens"] = tensor.FromInt32(tensor.Shape{steps}, tokens).Convert(fedT.DType)
	return out, nil
}

// runGreedy: generate.Generate with the default (greedy) sampler, up to
// max_tokens tokens, prefill in chunks of prefill_step_size, no stop tokens
// (generate_step has none); output "tokens" in the dtype the oracle stored.
func runGreedy(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	m, ids, done, err := model(b, c, a)
	if err != nil {
		return nil, err
	}
	defer done()
	step, err := c.Int("prefill_step_size")
	if err != nil {
		return nil, err
	}
	maxTokens, err := c.Int("max_tokens")
	if err != nil {
		return nil, err
	}
	if maxTokens < 1 {
		return nil, fmt.Errorf("case %s: max_tokens %d, want >= 1", c.Name, maxTokens)
	}
	if err := argmaxSampler(c); err != nil {
		return nil, err
	}
	want, err := a.Output("tokens")
	if err != nil {
		return nil, err
	}
	if want.DType.IsFloat() {
		return nil, fmt.Errorf("case %s: out.tokens is %v, want an integer dtype", c.Name, want.DType)
	}
	view, err := cacheView(m, c)
	if err != nil {
		return nil, err
	}
	res, err := generate.Generate(view, ids, generate.Options{MaxTokens: maxTokens, PrefillStepSize: step}, nil)
	if err != nil {
		return nil, err
	}
	toks := tensor.FromInt32(tensor.Shape{len(res.Tokens)}, res.Tokens)
	return map[string]*tensor.Dense{"tokens": toks.Convert(want.DType)}, nil
}

// argmaxSampler fails unless the case's sampler is argmax (absent = argmax).
func argmaxSampler(c *Case) error {
	s, err := c.String("sampler")
	if err != nil {
		return err
	}
	if s != "" && s != "argmax" {
		return fmt.Errorf("case %s: sampler %q, this runner knows only \"argmax\"", c.Name, s)
	}
	return nil
}

func cacheState(cache []nn.KVCache) []backend.Array {
	var out []backend.Array
	for _, c := range cache {
		out = append(out, c.State()...)
	}
	return out
}
