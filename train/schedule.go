package train

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Schedule is a learning rate: a constant (Name empty, Init the rate) or
// mlx_lm's lr_schedule config as build_schedule reads it: Name one of
// mlx.optimizers.schedulers' cosine_decay (init, decay_steps[, end]) or
// linear_schedule (init, end, steps) with Arguments in order, and an
// optional linear Warmup over that many steps from WarmupInit to
// Arguments[0], joined at Warmup+1 (join_schedules). exponential_decay
// and step_decay are not implemented (refused by name).
type Schedule struct {
	Init       float64   `yaml:"-" json:"-"`
	Name       string    `yaml:"name" json:"name"`
	Arguments  []float64 `yaml:"arguments" json:"arguments"`
	Warmup     int       `yaml:"warmup" json:"warmup"`
	WarmupInit float64   `yaml:"warmup_init" json:"warmup_init"`
}

// Constant is the learning rate lr at every step.
func Constant(lr float64) Schedule { return Schedule{Init: lr} }

func (s Schedule) check() error {
	if s.Name == "" {
		return nil
	}
	for _, v := range append([]float64{s.WarmupInit}, s.Arguments...) {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1<<31 {
			return fmt.Errorf("train: lr_schedule %s: arguments %v, warmup_init %v: each must be a finite number of magnitude at most 2^31", s.Name, s.Arguments, s.WarmupInit)
		}
	}
	switch s.Name {
	case "cosine_decay":
		if len(s.Arguments) < 2 || len(s.Arguments) > 3 {
			return fmt.Errorf("train: lr_schedule cosine_decay: %d arguments, want init, decay_steps[, end]", len(s.Arguments))
		}
		if s.Arguments[1] < 1 || s.Arguments[1] != math.Trunc(s.Arguments[1]) {
			return fmt.Errorf("train: lr_schedule cosine_decay: decay_steps must be an integer greater than 0, but got %v", s.Arguments[1])
		}
	case "linear_schedule":
		if len(s.Arguments) != 3 {
			return fmt.Errorf("train: lr_schedule linear_schedule: %d arguments, want init, end, steps", len(s.Arguments))
		}
		if s.Arguments[2] < 1 || s.Arguments[2] != math.Trunc(s.Arguments[2]) {
			return fmt.Errorf("train: lr_schedule linear_schedule: steps must be an integer greater than 0, but got %v", s.Arguments[2])
		}
	default:
		return fmt.Errorf("train: lr_schedule %q is not implemented (want cosine_decay or linear_schedule)", s.Name)
	}
	if s.Warmup < 0 || s.Warmup > 1<<31 {
		return fmt.Errorf("train: lr_schedule warmup %d: want 0 to 2^31", s.Warmup)
	}
	return nil
}

// value is the schedule at step (the number of updates done), a float32
// scalar computed with MLX's ops and constants.
func (s Schedule) value(b backend.Backend, step int) backend.Array {
	f := func(v float64) backend.Array { return b.Full(tensor.Shape{}, v, tensor.F32) }
	add := func(x, y backend.Array) backend.Array { return b.Binary(backend.Add, x, y) }
	mul := func(x, y backend.Array) backend.Array { return b.Binary(backend.Multiply, x, y) }
	linear := func(init, end float64, steps, step int) backend.Array {
		return add(mul(f(float64(min(step, steps))), f((end-init)/float64(steps))), f(init))
	}
	if s.Name == "" {
		return f(s.Init)
	}
	if s.Warmup > 0 {
		if step < s.Warmup+1 {
			return linear(s.WarmupInit, s.Arguments[0], s.Warmup, step)
		}
		step -= s.Warmup + 1
	}
	a := s.Arguments
	switch s.Name {
	case "linear_schedule":
		return linear(a[0], a[1], int(a[2]), step)
	default: // cosine_decay
		end := 0.0
		if len(a) == 3 {
			end = a[2]
		}
		n := int(a[1])
		c := b.Unary(backend.Cos, mul(f(math.Pi/float64(n)), f(float64(min(step, n)))))
		decay := mul(f(0.5), add(f(1), c))
		return add(f(end), mul(decay, f(a[0]-end)))
	}
}
