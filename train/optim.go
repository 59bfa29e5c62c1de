package train

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Optimizer is an optimizer of mlx.optimizers over a fixed list of
// parameters: each Update computes the step's learning rate from the
// schedule at the number of updates done so far, counts the step, and
// returns the new parameters (apply_gradients). Its arithmetic is
// MLX's, op for op in float32 with Python's float constants rounded to
// float32 as MLX's weak scalars are, through the backend's ops.
type Optimizer struct {
	b     backend.Backend
	kind  string
	cfg   OptimizerConfig
	lr    Schedule
	step  int
	rate  backend.Array
	state [][]backend.Array // per parameter: m, v (Adam) or v (SGD)
}

// OptimizerConfig holds mlx.optimizers' constructor arguments
// (mlx_lm's optimizer_config); zero fields take MLX's defaults when
// built through NewOptimizer with defaults applied by the caller (see
// DefaultOptimizerConfig).
type OptimizerConfig struct {
	Betas          [2]float64 `yaml:"betas" json:"betas"`
	Eps            float64    `yaml:"eps" json:"eps"`
	WeightDecay    float64    `yaml:"weight_decay" json:"weight_decay"`
	BiasCorrection bool       `yaml:"bias_correction" json:"bias_correction"`
	Momentum       float64    `yaml:"momentum" json:"momentum"`
	Dampening      float64    `yaml:"dampening" json:"dampening"`
	Nesterov       bool       `yaml:"nesterov" json:"nesterov"`
}

// DefaultOptimizerConfig returns MLX's defaults for an optimizer kind:
// Adam betas (0.9, 0.999), eps 1e-8, no bias correction; AdamW the same
// with weight_decay 0.01; SGD no momentum, decay or dampening.
func DefaultOptimizerConfig(kind string) OptimizerConfig {
	c := OptimizerConfig{Betas: [2]float64{0.9, 0.999}, Eps: 1e-8}
	if kind == "adamw" {
		c.WeightDecay = 0.01
	}
	return c
}

// check returns an error naming an argument of kind's constructor that
// MLX refuses, or that is NaN or infinite (which MLX would accept and
// train into NaN weights).
func (cfg OptimizerConfig) check(kind string) error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	for _, v := range []float64{cfg.Eps, cfg.WeightDecay, cfg.Momentum, cfg.Dampening} {
		if !finite(v) {
			return fmt.Errorf("train: optimizer_config.%s: %+v: every argument must be a finite number", kind, cfg)
		}
	}
	switch kind {
	case "adam", "adamw":
		for i, beta := range cfg.Betas {
			if !(beta >= 0 && beta < 1) {
				return fmt.Errorf("train: Adam beta%d should be in [0, 1), %v was provided instead", i+1, beta)
			}
		}
		if cfg.Eps < 0 {
			return fmt.Errorf("train: Adam epsilon should be >=0, %v was provided instead", cfg.Eps)
		}
	case "sgd":
		if cfg.Nesterov && (cfg.Momentum <= 0 || cfg.Dampening != 0) {
			return fmt.Errorf("train: Nesterov momentum requires a momentum and zero dampening")
		}
	default:
		return fmt.Errorf("train: unsupported optimizer %q (want adam, adamw or sgd)", kind)
	}
	return nil
}

// NewOptimizer returns mlx.optimizers' Adam ("adam"), AdamW ("adamw")
// or SGD ("sgd") with the learning rate schedule lr.
func NewOptimizer(b backend.Backend, kind string, lr Schedule, cfg OptimizerConfig) (*Optimizer, error) {
	if err := cfg.check(kind); err != nil {
		return nil, err
	}
	if err := lr.check(); err != nil {
		return nil, err
	}
	o := &Optimizer{b: b, kind: kind, cfg: cfg, lr: lr}
	o.rate = lr.value(b, 0)
	return o, nil
}

// LearningRate is the learning rate of the last update (before any, the
// schedule's value at step 0): mlx's optimizer.learning_rate.
func (o *Optimizer) LearningRate() backend.Array { return o.rate }

// Step is the number of updates done.
func (o *Optimizer) Step() int { return o.step }

// State returns the optimizer's arrays (the learning rate and each
// parameter's moments), for evaluation.
func (o *Optimizer) State() []backend.Array {
	out := []backend.Array{o.rate}
	for _, s := range o.state {
		out = append(out, s...)
	}
	return out
}

func (o *Optimizer) scalar(v float64) backend.Array {
	return o.b.Full(tensor.Shape{}, v, tensor.F32)
}

// Update returns params updated with grads (same order and shapes); the
// state and learning-rate arrays it replaces are released, params are
// not. It is begin, apply and commit.
func (o *Optimizer) Update(params, grads []backend.Array) ([]backend.Array, error) {
	sc, err := o.begin(params, len(grads))
	if err != nil {
		return nil, err
	}
	out, state := o.apply(params, grads, o.state, sc)
	o.commit(state)
	return out, nil
}

// begin starts an update of params by n gradients: it makes the state
// on the first one (zeros, as mlx.optimizers' init), sets the step's
// learning rate (the schedule at the number of updates done so far,
// releasing the last one) and counts the step. It returns the step's
// scalars for apply, computed on the host side of a compiled step: the
// learning rate and, for Adam with bias correction, 1-β1^t and 1-β2^t.
func (o *Optimizer) begin(params []backend.Array, n int) ([]backend.Array, error) {
	if len(params) != n {
		return nil, fmt.Errorf("train: %d parameters and %d gradients", len(params), n)
	}
	if o.state == nil {
		o.state = make([][]backend.Array, len(params))
		n := map[string]int{"adam": 2, "adamw": 2, "sgd": 1}[o.kind]
		for i, p := range params {
			for k := 0; k < n; k++ {
				o.state[i] = append(o.state[i], o.b.Zeros(p.Shape(), p.DType()))
			}
		}
	} else if len(o.state) != len(params) {
		return nil, fmt.Errorf("train: %d parameters, the optimizer has state for %d", len(params), len(o.state))
	}
	o.b.Release(o.rate)
	o.rate = o.lr.value(o.b, o.step)
	o.step++
	sc := []backend.Array{o.rate}
	if (o.kind == "adam" || o.kind == "adamw") && o.cfg.BiasCorrection {
		// b1**step and b2**step: float32 powers, here from float64 and
		// rounded (MLX's powf may differ in the last bit).
		t := float64(o.step)
		p1 := float32(math.Pow(float64(float32(o.cfg.Betas[0])), t))
		p2 := float32(math.Pow(float64(float32(o.cfg.Betas[1])), t))
		sc = append(sc, o.scalar(float64(1-p1)), o.scalar(float64(1-p2)))
	}
	return sc, nil
}

// apply is apply_gradients on explicit arrays: the new parameters and
// state from params, grads, state (per parameter, as State orders it)
// and the step's scalars sc (begin's). It reads nothing else that
// changes between steps, so a compiled step may trace it.
func (o *Optimizer) apply(params, grads []backend.Array, state [][]backend.Array, sc []backend.Array) ([]backend.Array, [][]backend.Array) {
	out := make([]backend.Array, len(params))
	next := make([][]backend.Array, len(params))
	for i := range params {
		next[i] = append([]backend.Array(nil), state[i]...)
		switch o.kind {
		case "adam":
			out[i] = o.adam(grads[i], params[i], next[i], sc)
		case "adamw":
			out[i] = o.adamW(grads[i], params[i], next[i], sc)
		case "sgd":
			out[i] = o.sgd(grads[i], params[i], next[i], sc)
		}
	}
	return out, next
}

// commit makes state the optimizer's, releasing the arrays it replaces.
func (o *Optimizer) commit(state [][]backend.Array) {
	for i := range o.state {
		for k, a := range o.state[i] {
			if a != state[i][k] {
				o.b.Release(a)
			}
		}
	}
	o.state = state
}

// adam is Adam.apply_single: m and v updated in state, the new parameter
// returned.
func (o *Optimizer) adam(g, p backend.Array, state, sc []backend.Array) backend.Array {
	b, c := o.b, o.cfg
	add := func(x, y backend.Array) backend.Array { return b.Binary(backend.Add, x, y) }
	mul := func(x, y backend.Array) backend.Array { return b.Binary(backend.Multiply, x, y) }
	b1, b2 := c.Betas[0], c.Betas[1]
	m := add(mul(o.scalar(b1), state[0]), mul(o.scalar(1-b1), g))
	v := add(mul(o.scalar(b2), state[1]), mul(o.scalar(1-b2), b.Unary(backend.Square, g)))
	state[0], state[1] = m, v
	if c.BiasCorrection {
		c1 := b.Binary(backend.Divide, sc[0], sc[1])
		c2 := b.Unary(backend.Rsqrt, sc[2])
		den := add(mul(b.Unary(backend.Sqrt, v), c2), o.scalar(c.Eps))
		return b.Binary(backend.Subtract, p, b.Binary(backend.Divide, mul(c1, m), den))
	}
	den := add(b.Unary(backend.Sqrt, v), o.scalar(c.Eps))
	return b.Binary(backend.Subtract, p, b.Binary(backend.Divide, mul(sc[0], m), den))
}

// adamW is AdamW.apply_single: the parameter decayed by 1 - lr·λ, then
// Adam.
func (o *Optimizer) adamW(g, p backend.Array, state, sc []backend.Array) backend.Array {
	b := o.b
	decay := b.Binary(backend.Subtract, o.scalar(1), b.Binary(backend.Multiply, sc[0], o.scalar(o.cfg.WeightDecay)))
	return o.adam(g, b.Binary(backend.Multiply, p, decay), state, sc)
}

// sgd is SGD.apply_single.
func (o *Optimizer) sgd(g, p backend.Array, state, sc []backend.Array) backend.Array {
	b, c := o.b, o.cfg
	mul := func(x, y backend.Array) backend.Array { return b.Binary(backend.Multiply, x, y) }
	if c.WeightDecay != 0 {
		g = b.Binary(backend.Add, g, mul(o.scalar(c.WeightDecay), p))
	}
	if c.Momentum <= 0 {
		return b.Binary(backend.Subtract, p, mul(sc[0], g))
	}
	v := mul(o.scalar(c.Momentum), state[0])
	if c.Dampening > 0 {
		v = b.Binary(backend.Add, v, mul(o.scalar(1-c.Dampening), g))
	} else {
		v = b.Binary(backend.Add, v, g)
	}
	update := v
	if c.Nesterov {
		update = b.Binary(backend.Add, g, mul(o.scalar(c.Momentum), v))
	}
	state[0] = v
	return b.Binary(backend.Subtract, p, mul(sc[0], update))
}
