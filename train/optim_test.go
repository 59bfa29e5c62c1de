package train

import (
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	_ "github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tensor"
)

// optimOracle runs an mlx.optimizers optimizer (built as mlx_lm.lora
// builds it, with build_schedule for a schedule) for a few updates of a
// two-parameter tree with given gradients, printing the parameters and
// the learning rate after each update.
const optimOracle = `
import json, sys
import numpy as np
import mlx.core as mx
import mlx.optimizers as optim
from mlx_lm.tuner.utils import build_schedule
mx.set_default_device(mx.cpu)
a = json.loads(sys.argv[1])
lr = build_schedule(a["schedule"]) if a["schedule"] else a["lr"]
opt = {"adam": optim.Adam, "adamw": optim.AdamW, "sgd": optim.SGD}[a["kind"]](learning_rate=lr, **a["config"])
params = {"a": mx.array(np.array(a["p0"], np.float32)), "b": mx.array(np.array(a["p1"], np.float32))}
out = []
for g0, g1 in a["grads"]:
    params = opt.apply_gradients({"a": mx.array(np.array(g0, np.float32)), "b": mx.array(np.array(g1, np.float32))}, params)
    mx.eval(params)
    out.append({"a": np.array(params["a"]).tolist(), "b": np.array(params["b"]).tolist(), "lr": float(opt.learning_rate.item())})
print(json.dumps(out))
`

func values(n, k int, s float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(float64((i*7919+k*131)%97-48) / 48 * s)
	}
	return v
}

// TestOptimizersMatchMLX: Adam, AdamW and SGD (with and without their
// options) and the schedules of build_schedule, eight updates each. An
// oracle-exact backend gives MLX's bits; the CPU backend is held to 1e-6
// relative (its elementwise float32 ops are MLX's; sqrt, rsqrt and cos
// may differ in the last bit).
func TestOptimizersMatchMLX(t *testing.T) {
	py := testenv.Python(t)
	cases := []struct {
		name, kind string
		cfg        map[string]any
		sched      *Schedule
	}{
		{"adam", "adam", map[string]any{}, nil},
		{"adam/bias_correction", "adam", map[string]any{"bias_correction": true, "betas": []float64{0.8, 0.99}, "eps": 1e-6}, nil},
		{"adamw", "adamw", map[string]any{}, nil},
		{"adamw/wd0.1", "adamw", map[string]any{"weight_decay": 0.1}, nil},
		{"sgd", "sgd", map[string]any{}, nil},
		{"sgd/momentum", "sgd", map[string]any{"momentum": 0.9, "weight_decay": 0.01, "dampening": 0.1}, nil},
		{"sgd/nesterov", "sgd", map[string]any{"momentum": 0.9, "nesterov": true}, nil},
		{"adam/cosine", "adam", map[string]any{}, &Schedule{Name: "cosine_decay", Arguments: []float64{1e-2, 5}}},
		{"adam/cosine_end_warmup", "adam", map[string]any{}, &Schedule{Name: "cosine_decay", Arguments: []float64{1e-2, 4, 1e-3}, Warmup: 3, WarmupInit: 1e-4}},
		{"sgd/linear_warmup", "sgd", map[string]any{}, &Schedule{Name: "linear_schedule", Arguments: []float64{1e-2, 1e-3, 3}, Warmup: 2}},
	}
	const steps = 8
	p0, p1 := values(12, 0, 1), values(5, 1, 0.3)
	var grads [][2][]float32
	for s := 0; s < steps; s++ {
		grads = append(grads, [2][]float32{values(12, 2+s, 0.5), values(5, 20+s, 2)})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sched := Constant(1e-2)
			var pySched any
			if c.sched != nil {
				sched = *c.sched
				pySched = map[string]any{"name": sched.Name, "arguments": sched.Arguments, "warmup": sched.Warmup, "warmup_init": sched.WarmupInit}
			}
			arg, _ := json.Marshal(map[string]any{"kind": c.kind, "config": c.cfg, "lr": 1e-2, "schedule": pySched, "p0": p0, "p1": p1, "grads": grads})
			out, err := exec.Command(py, "-c", optimOracle, string(arg)).Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
				}
				t.Fatal(err)
			}
			var want []struct {
				A, B []float64
				LR   float64
			}
			if err := json.Unmarshal(out, &want); err != nil {
				t.Fatal(err)
			}
			cfg := DefaultOptimizerConfig(c.kind)
			raw, _ := json.Marshal(c.cfg)
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			for _, name := range backend.Names() {
				t.Run(name, func(t *testing.T) {
					b, err := backend.Open(name, backend.Options{Device: "cpu"})
					if err != nil {
						t.Fatal(err)
					}
					defer b.Close()
					err = b.Do(func() (err error) {
						defer backend.Recover(&err)
						opt, err := NewOptimizer(b, c.kind, sched, cfg)
						if err != nil {
							return err
						}
						params := []backend.Array{b.FromHost(tensor.FromFloat32(tensor.Shape{3, 4}, p0)), b.FromHost(tensor.FromFloat32(tensor.Shape{5}, p1))}
						for s, g := range grads {
							gs := []backend.Array{b.FromHost(tensor.FromFloat32(tensor.Shape{3, 4}, g[0])), b.FromHost(tensor.FromFloat32(tensor.Shape{5}, g[1]))}
							if params, err = opt.Update(params, gs); err != nil {
								return err
							}
							lr, err := b.ToHost(opt.LearningRate())
							if err != nil {
								return err
							}
							check(t, b, fmt.Sprintf("step %d lr", s+1), []float64{want[s].LR}, lr.ToFloat64())
							for k, w := range [][]float64{want[s].A, want[s].B} {
								got, err := b.ToHost(params[k])
								if err != nil {
									return err
								}
								check(t, b, fmt.Sprintf("step %d param %d", s+1, k), w, got.ToFloat64())
							}
						}
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}

func check(t *testing.T, b backend.Backend, what string, want, got []float64) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d values, MLX %d", what, len(got), len(want))
	}
	for i := range want {
		if b.OracleExact() && got[i] != want[i] || !b.OracleExact() && math.Abs(got[i]-want[i]) > 1e-6*math.Max(math.Abs(want[i]), 1e-30) {
			t.Fatalf("%s[%d]: %v, MLX %v (%s)", what, i, got[i], want[i], b.Name())
		}
	}
}

func TestOptimizerErrors(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range []struct {
		kind  string
		cfg   OptimizerConfig
		sched Schedule
		want  string
	}{
		{"adafactor", DefaultOptimizerConfig("adam"), Constant(1), `unsupported optimizer "adafactor"`},
		{"adam", OptimizerConfig{Betas: [2]float64{1, 0.9}}, Constant(1), "beta1 should be in [0, 1)"},
		{"sgd", OptimizerConfig{Nesterov: true}, Constant(1), "Nesterov momentum requires"},
		{"adam", DefaultOptimizerConfig("adam"), Schedule{Name: "step_decay", Arguments: []float64{1, 0.5, 2}}, `"step_decay" is not implemented`},
		{"adam", DefaultOptimizerConfig("adam"), Schedule{Name: "cosine_decay", Arguments: []float64{1}}, "want init, decay_steps"},
		{"adam", DefaultOptimizerConfig("adam"), Schedule{Name: "cosine_decay", Arguments: []float64{1, 0}}, "decay_steps must be an integer greater than 0"},
		{"adam", DefaultOptimizerConfig("adam"), Schedule{Name: "linear_schedule", Arguments: []float64{1, 0, 2.5}}, "steps must be an integer"},
	} {
		if _, err := NewOptimizer(b, c.kind, c.sched, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v %+v: got %v, want %q", c.kind, c.cfg, c.sched, err, c.want)
		}
	}
}
