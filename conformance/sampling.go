package conformance

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/tensor"
)

// Runners for the sampling transforms and the random numbers. mlxgo samples
// on the host (package generate), identically whichever backend computed the
// logits, so these runners ignore the backend; they are held to MLX exactly.
func init() {
	register("apply_top_p", rowRunner("logprobs", func(c *Case, x []float32, dt tensor.DType) error {
		p, err := c.Float("top_p")
		generate.ApplyTopP(x, p)
		return err
	}))
	register("apply_min_p", rowRunner("logprobs", func(c *Case, x []float32, dt tensor.DType) error {
		p, err := c.Float("min_p")
		if err != nil {
			return err
		}
		keep, err := c.Int("min_tokens_to_keep")
		generate.ApplyMinP(x, p, keep, dt)
		return err
	}))
	register("apply_top_k", rowRunner("logprobs", func(c *Case, x []float32, dt tensor.DType) error {
		k, err := c.Int("top_k")
		if err != nil {
			return err
		}
		if k <= 0 || k >= len(x) {
			return fmt.Errorf("case %s: top_k = %d, want an integer in (0, %d) for rows of %d values", c.Name, k, len(x), len(x))
		}
		generate.ApplyTopK(x, k)
		return nil
	}))
	register("temperature", rowRunner("logprobs", func(c *Case, x []float32, dt tensor.DType) error {
		t, err := c.Float("temp")
		generate.ScaleTemp(x, t, dt)
		return err
	}))
	register("repetition_penalty", runRepetitionPenalty)
	register("categorical", runCategorical)
	register("categorical_sampling", runCategoricalSampling)
	register("make_sampler", runMakeSampler)
	register("random_key", runRandomKey)
	register("random_split", runRandomSplit)
	register("random_uniform", runRandomUniform)
}

// oneRow returns the single row of a [1, V] input as float32, and its dtype.
func oneRow(c *Case, a *Arrays, name string) ([]float32, *tensor.Dense, error) {
	d, err := a.Input(name)
	if err != nil {
		return nil, nil, err
	}
	if len(d.Shape) != 2 || d.Shape[0] != 1 {
		return nil, nil, fmt.Errorf("case %s: input %s has shape %v, want [1, V] (generation samples one row)", c.Name, name, d.Shape)
	}
	return d.ToFloat32(), d, nil
}

// rowRunner applies a transform to the single row of input name and returns
// it, in the input's dtype, as output "y".
func rowRunner(name string, f func(c *Case, x []float32, dt tensor.DType) error) runner {
	return func(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
		x, d, err := oneRow(c, a, name)
		if err != nil {
			return nil, err
		}
		if err := f(c, x, d.DType); err != nil {
			return nil, err
		}
		return map[string]*tensor.Dense{"y": tensor.FromFloat32(d.Shape, x).Convert(d.DType)}, nil
	}
}

func runRepetitionPenalty(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	x, d, err := oneRow(c, a, "logits")
	if err != nil {
		return nil, err
	}
	tokens, err := a.Input("tokens")
	if err != nil {
		return nil, err
	}
	p, err := c.Float("penalty")
	if err != nil {
		return nil, err
	}
	n, err := c.Int("context_size")
	if err != nil {
		return nil, err
	}
	o := generate.ProcessorOptions{RepetitionPenalty: p, RepetitionContextSize: n}
	if err := o.Process(tokens.Int32s(), x, d.DType); err != nil {
		return nil, err
	}
	return map[string]*tensor.Dense{"y": tensor.FromFloat32(d.Shape, x).Convert(d.DType)}, nil
}

func token(t int) map[string]*tensor.Dense {
	return map[string]*tensor.Dense{"token": tensor.FromUint32(tensor.Shape{1}, []uint32{uint32(t)})}
}

func keyInput(a *Arrays) ([2]uint32, error) {
	k, err := a.Input("key")
	if err != nil {
		return [2]uint32{}, err
	}
	w := k.Uint32s()
	if len(w) != 2 {
		return [2]uint32{}, fmt.Errorf("key has %d words, want 2", len(w))
	}
	return [2]uint32{w[0], w[1]}, nil
}

func runCategorical(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	x, _, err := oneRow(c, a, "logits")
	if err != nil {
		return nil, err
	}
	key, err := keyInput(a)
	if err != nil {
		return nil, err
	}
	return token(generate.Categorical(x, key)), nil
}

func runCategoricalSampling(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	x, d, err := oneRow(c, a, "logprobs")
	if err != nil {
		return nil, err
	}
	seed, err := c.Int("seed")
	if err != nil {
		return nil, err
	}
	temp, err := c.Float("temp")
	if err != nil {
		return nil, err
	}
	generate.ScaleTemp(x, temp, d.DType)
	return token(generate.Categorical(x, generate.NewRNG(uint64(seed)).Next())), nil
}

func runMakeSampler(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	x, d, err := oneRow(c, a, "logprobs")
	if err != nil {
		return nil, err
	}
	var o generate.SamplerOptions
	var seed, keep int
	for _, p := range []struct {
		key string
		f   *float64
	}{{"temp", &o.Temp}, {"top_p", &o.TopP}, {"min_p", &o.MinP}, {"xtc_probability", &o.XTCProbability}} {
		if *p.f, err = c.Float(p.key); err != nil {
			return nil, err
		}
	}
	if o.TopK, err = c.Int("top_k"); err != nil {
		return nil, err
	}
	if keep, err = c.Int("min_tokens_to_keep"); err != nil {
		return nil, err
	}
	if seed, err = c.Int("seed"); err != nil {
		return nil, err
	}
	o.MinTokensToKeep, o.Seed = keep, uint64(seed)
	s, err := generate.NewSampler(o)
	if err != nil {
		return nil, err
	}
	t, err := s.Sample(x, d.DType)
	if err != nil {
		return nil, err
	}
	return token(int(t)), nil
}

func runRandomKey(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	seed, err := c.Int("seed")
	if err != nil {
		return nil, err
	}
	k := generate.Key(uint64(seed))
	return map[string]*tensor.Dense{"key": tensor.FromUint32(tensor.Shape{2}, k[:])}, nil
}

// maxRandomValues caps what a random_split, random_uniform, zeros or full case may ask
// for (a fixture is a few kilobytes; its parameters are checked before
// anything is allocated).
const maxRandomValues = 1 << 22

func runRandomSplit(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	n, err := c.Int("num")
	if err != nil {
		return nil, err
	}
	if n < 1 || n > maxRandomValues/2 {
		return nil, fmt.Errorf("case %s: num = %d, want an integer in [1, %d]", c.Name, n, maxRandomValues/2)
	}
	key, err := keyInput(a)
	if err != nil {
		return nil, err
	}
	return map[string]*tensor.Dense{"keys": tensor.FromUint32(tensor.Shape{n, 2}, generate.Bits(key, 2*n))}, nil
}

func runRandomUniform(_ backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	raw, ok := c.Params["shape"].([]any)
	if !ok {
		return nil, fmt.Errorf("case %s: param shape = %v, want a list", c.Name, c.Params["shape"])
	}
	shape := make(tensor.Shape, len(raw))
	size := 1
	for i, v := range raw {
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || f < 0 || f > maxRandomValues {
			return nil, fmt.Errorf("case %s: shape[%d] = %v, want an integer in [0, %d]", c.Name, i, v, maxRandomValues)
		}
		shape[i] = int(f)
		if size *= shape[i]; size > maxRandomValues {
			return nil, fmt.Errorf("case %s: shape %v holds more than %d values", c.Name, raw, maxRandomValues)
		}
	}
	lo, err := c.Float("low")
	if err != nil {
		return nil, err
	}
	hi, err := c.Float("high")
	if err != nil {
		return nil, err
	}
	if lo != 0 || hi != 1 {
		return nil, fmt.Errorf("case %s: uniform on [%v, %v); only [0, 1) is implemented", c.Name, lo, hi)
	}
	key, err := keyInput(a)
	if err != nil {
		return nil, err
	}
	return map[string]*tensor.Dense{"u": tensor.FromFloat32(shape, generate.Uniform(key, shape.Size()))}, nil
}
