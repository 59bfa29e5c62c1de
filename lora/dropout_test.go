package lora

import (
	"encoding/json"
	"math"
	"os/exec"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// dropoutOracle runs mlx_lm's LoRALinear in training mode with dropout
// after mx.random.seed: two calls on the same input (two masks), then
// one in eval mode.
const dropoutOracle = `
import json, sys
import numpy as np
import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tuner.lora import LoRALinear
a = json.loads(sys.argv[1])
n_in, n_out, r = 32, 8, 4
f = lambda n, k: (((np.arange(n) * 37 + k) % 23 - 11) / 11).astype(np.float32)
base = nn.Linear(n_in, n_out, bias=False)
base.weight = mx.array(f(n_out * n_in, 1).reshape(n_out, n_in) * 0.1)
layer = LoRALinear.from_base(base, r=r, dropout=a["p"], scale=2.0)
layer.lora_a = mx.array(f(n_in * r, 2).reshape(n_in, r) * 0.2)
layer.lora_b = mx.array(f(r * n_out, 3).reshape(r, n_out) * 0.2)
x = mx.array(f(3 * n_in, 4).reshape(3, n_in))
mx.random.seed(a["seed"])
layer.train()
y1, y2 = layer(x), layer(x)
layer.eval()
y3 = layer(x)
print(json.dumps([np.array(y).ravel().tolist() for y in (y1, y2, y3)]))
`

func formula(n, k int, s float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(float64((i*37+k)%23-11)/11) * float32(s)
	}
	return v
}

// TestDropoutMatchesMLX: nn.LoRALinear with lora.Dropout draws mlx_lm's
// masks from the seeded key sequence, call after call: an oracle-exact
// backend gives MLX's bits, the others float32 noise; without Dropout the
// layer is mlx_lm's in eval mode.
func TestDropoutMatchesMLX(t *testing.T) {
	args, _ := json.Marshal(map[string]any{"p": 0.25, "seed": 11})
	out, err := exec.Command(testenv.Python(t), "-c", dropoutOracle, string(args)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var want [3][]float64
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for _, name := range backend.Names() {
		t.Run(name, func(t *testing.T) {
			b, err := backend.Open(name, backend.Options{Device: "cpu"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			var got [3][]float64
			err = b.Do(func() (err error) {
				defer backend.Recover(&err)
				// mlx_lm's from_base on float32 [8, 32], rank 4: formula values
				w := make([]float32, 8*32)
				copy(w, formula(8*32, 1, 0.1))
				l := &nn.LoRALinear{B: b, Scale: 2,
					Base:  &nn.Dense{B: b, Weight: b.FromHost(tensor.FromFloat32(tensor.Shape{8, 32}, w))},
					LoraA: b.FromHost(tensor.FromFloat32(tensor.Shape{32, 4}, formula(32*4, 2, 0.2))),
					LoraB: b.FromHost(tensor.FromFloat32(tensor.Shape{4, 8}, formula(4*8, 3, 0.2)))}
				x := b.FromHost(tensor.FromFloat32(tensor.Shape{3, 32}, formula(3*32, 4, 1)))
				if l.Dropout, err = Dropout(b, 0.25, generate.NewRNG(11)); err != nil {
					return err
				}
				ys := []backend.Array{l.Forward(x), l.Forward(x)}
				l.Dropout = nil
				ys = append(ys, l.Forward(x))
				for i, y := range ys {
					d, err := b.ToHost(y)
					if err != nil {
						return err
					}
					got[i] = d.ToFloat64()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			differ := 0.0
			for i := range want {
				for j, w := range want[i] {
					d := math.Abs(got[i][j] - w)
					if b.OracleExact() && d != 0 || d > 1e-5*(1+math.Abs(w)) {
						t.Fatalf("call %d [%d]: %v, mlx_lm %v", i, j, got[i][j], w)
					}
					differ = math.Max(differ, math.Abs(want[i][j]-want[2][j]))
				}
			}
			if differ == 0 {
				t.Errorf("dropout left every output as in eval mode: the masks were not checked")
			}
		})
	}
}

func TestDropoutErrors(t *testing.T) {
	for _, p := range []float64{-0.1, 1, math.NaN()} {
		if _, err := Dropout(nil, p, generate.NewRNG(0)); err == nil {
			t.Errorf("Dropout(%v): no error", p)
		}
	}
}
