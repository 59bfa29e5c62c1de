package conformance_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/train"
)

// loraOracle loads a checkpoint with mlx_lm, freezes it, converts the
// last num_layers blocks with mlx_lm's own linear_to_lora_layers, sets
// every adapter to a formula of its index in tree_flatten order and of
// its element index (so Go can set the same float32 values), and prints
// mlx_lm's training loss (tuner/trainer.py default_loss) on a batch and
// its gradients w.r.t. every adapter (nn.value_and_grad), as float32
// values in JSON.
const loraOracle = `
import json, sys
from pathlib import Path
import numpy as np
import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import load_model
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.tuner.trainer import default_loss
mx.set_default_device(mx.cpu)
a = json.loads(sys.argv[1])
model, _ = load_model(Path(a["path"]))
model.freeze()
linear_to_lora_layers(model, a["num_layers"], {"rank": a["rank"], "scale": a["scale"], "dropout": 0.0})
names, new = [], []
for k, (name, p) in enumerate(tree_flatten(model.trainable_parameters())):
    v = ((np.arange(p.size) * 7919 + k * 131) % 97 - 48) / 48 * 0.05
    names.append(name)
    new.append((name, mx.array(v.astype(np.float32).reshape(p.shape))))
model.update(tree_unflatten(new))
batch = mx.array(np.array(a["batch"], dtype=np.int32))
lengths = mx.array(np.array(a["lengths"], dtype=np.int32))
(loss, ntoks), grads = nn.value_and_grad(model, default_loss)(model, batch, lengths)
mx.eval(loss, ntoks, grads)
g = dict(tree_flatten(grads))
print(json.dumps({"loss": float(loss), "ntoks": int(ntoks), "names": names,
                  "shapes": {n: list(g[n].shape) for n in names},
                  "grads": {n: np.array(g[n]).ravel().tolist() for n in names}}))
`

// TestLoRAGradientsMatchMLXLM differentiates mlx_lm's LoRA training loss
// through a whole model: the tiny optiq-f32 checkpoint (mixed 4/8-bit
// weights, float32 activations, a quantized head), the q, k, v, o, gate,
// up and down projections of its last two blocks wrapped in nn.LoRALinear
// as mlx_lm's linear_to_lora_layers wraps them, the loss of
// default_loss (next-token cross-entropy through mlx.nn.losses, masked by
// the rows' (offset, length)), and the gradient w.r.t. every adapter. An
// oracle-exact backend (MLX on its CPU device) must give mlx_lm's bits;
// the others are held to 1e-4 of each gradient's largest element (float32
// through three layers: summation order, as the model_logits row).
func TestLoRAGradientsMatchMLXLM(t *testing.T) {
	py := testenv.Python(t)
	dir := filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "models", "optiq-f32")
	batch := [][]int32{{5, 17, 900, 3, 44, 44, 8, 120, 7}, {1, 2, 3, 4, 5, 600, 0, 0, 0}}
	lengths := [][2]int32{{0, 8}, {2, 5}}
	const numLayers, rank, scale = 2, 4, 20.0
	args, _ := json.Marshal(map[string]any{"path": dir, "num_layers": numLayers, "rank": rank, "scale": scale, "batch": batch, "lengths": lengths})
	out, err := exec.Command(py, "-c", loraOracle, string(args)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("oracle: %v", err)
	}
	var want struct {
		Loss   float64              `json:"loss"`
		NTok   int                  `json:"ntoks"`
		Names  []string             `json:"names"`
		Shapes map[string][]int     `json:"shapes"`
		Grads  map[string][]float64 `json:"grads"`
	}
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.Names) != 2*7*numLayers {
		t.Fatalf("mlx_lm made %d adapter arrays (%v), want %d", len(want.Names), want.Names, 2*7*numLayers)
	}
	for _, name := range backend.Names() {
		t.Run(name, func(t *testing.T) {
			b, err := backend.Open(name, backend.Options{Device: "cpu"})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, ok := b.(backend.Differentiator); !ok {
				t.Fatalf("backend %s has no gradients", name)
			}
			var loss float64
			var grads map[string][]float64
			err = b.Do(func() (err error) {
				defer backend.Recover(&err)
				m, err := minicpm5.Load(b, dir)
				if err != nil {
					return err
				}
				defer m.Close()
				s := b.Scope()
				defer s.Close()
				loss, grads, err = loraLoss(b, m, want.Names, want.Shapes, batch, lengths, scale)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			exact := b.OracleExact()
			if exact && float64(float32(loss)) != want.Loss || !exact && math.Abs(loss-want.Loss) > 1e-5*math.Abs(want.Loss) {
				t.Errorf("loss %v, mlx_lm %v", loss, want.Loss)
			}
			worst := 0.0
			for _, n := range want.Names {
				g, w := grads[n], want.Grads[n]
				top := 0.0
				for _, v := range w {
					top = math.Max(top, math.Abs(v))
				}
				if top == 0 {
					t.Errorf("%s: mlx_lm's gradient is all zeros: the case checks nothing", n)
				}
				for i := range w {
					d := math.Abs(g[i] - w[i])
					worst = math.Max(worst, d/top)
					if exact && g[i] != w[i] || !exact && d > 1e-4*top {
						t.Errorf("%s[%d]: %v, mlx_lm %v (largest %v)", n, i, g[i], w[i], top)
						break
					}
				}
			}
			t.Logf("%s: loss %v (mlx_lm %v), worst gradient error %.3g of its largest element over %d adapters", name, loss, want.Loss, worst, len(want.Names))
		})
	}
}

// loraLoss wraps the layers the oracle named in nn.LoRALinear with the
// oracle's adapter values and returns default_loss on batch and its
// gradients w.r.t. every adapter, by name (train.Loss: the trainer's
// own loss).
func loraLoss(b backend.Backend, m *minicpm5.Model, names []string, shapes map[string][]int, batch [][]int32, lengths [][2]int32, scale float32) (float64, map[string][]float64, error) {
	d := b.(backend.Differentiator)
	layers := map[string]*nn.LoRALinear{}
	adapters := make([]backend.Array, len(names))
	for k, n := range names {
		shape := shapes[n]
		v := make([]float32, tensor.Shape(shape).Size())
		for i := range v {
			v[i] = float32(float64((i*7919+k*131)%97-48) / 48 * 0.05)
		}
		adapters[k] = b.FromHost(tensor.FromFloat32(shape, v))
		path, leaf, _ := strings.Cut(strings.TrimPrefix(n, "model.layers."), ".")
		var i int
		if _, err := fmt.Sscan(path, &i); err != nil || i >= len(m.Layers) {
			return 0, nil, fmt.Errorf("adapter %s: no such layer", n)
		}
		proj := strings.TrimSuffix(strings.TrimSuffix(leaf, ".lora_a"), ".lora_b")
		slot := lora.Projection(m.Layers[i], proj)
		if slot == nil {
			return 0, nil, fmt.Errorf("adapter %s: no projection %s", n, proj)
		}
		key := path + "." + proj
		l := layers[key]
		if l == nil {
			l = &nn.LoRALinear{B: b, Base: *slot, Scale: scale}
			layers[key] = l
			*slot = l
		}
	}
	tb := train.Batch{B: len(batch), L: len(batch[0]), Lengths: lengths}
	for _, row := range batch {
		tb.Tokens = append(tb.Tokens, row...)
	}
	loss := func(x []backend.Array) ([]backend.Array, error) {
		for k, n := range names {
			path, leaf, _ := strings.Cut(strings.TrimPrefix(n, "model.layers."), ".")
			l := layers[path+"."+strings.TrimSuffix(strings.TrimSuffix(leaf, ".lora_a"), ".lora_b")]
			if strings.HasSuffix(n, ".lora_a") {
				l.LoraA = x[k]
			} else {
				l.LoraB = x[k]
			}
		}
		loss, ntoks, err := train.Loss(b, m, tb)
		return []backend.Array{loss, ntoks}, err
	}
	all := make([]int, len(names))
	for i := range all {
		all[i] = i
	}
	outs, grads, err := d.ValueAndGrad(loss, adapters, all)
	if err != nil {
		return 0, nil, err
	}
	lv, err := b.ToHost(outs[0])
	if err != nil {
		return 0, nil, err
	}
	res := map[string][]float64{}
	for k, n := range names {
		g, err := b.ToHost(grads[k])
		if err != nil {
			return 0, nil, err
		}
		res[n] = g.ToFloat64()
	}
	return lv.ToFloat64()[0], res, nil
}
