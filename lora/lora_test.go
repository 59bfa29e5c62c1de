package lora

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
)

// initOracle is mlx_lm.lora's train_model up to its adapters:
// mx.random.seed, freeze, linear_to_lora_layers; it prints every
// trainable array (name, shape, float32 values) in tree_flatten order.
const initOracle = `
import json, sys
from pathlib import Path
import numpy as np
import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.utils import load_model
from mlx_lm.tuner.utils import linear_to_lora_layers
a = json.loads(sys.argv[1])
model, _ = load_model(Path(a["path"]))
mx.random.seed(a["seed"])
model.freeze()
linear_to_lora_layers(model, a["num_layers"], {"rank": a["rank"], "scale": a["scale"], "dropout": 0.0}, use_dora=a["dora"])
print(json.dumps([[n, list(p.shape), np.array(p).ravel().tolist()] for n, p in tree_flatten(model.trainable_parameters())]))
`

func checkpointDir(t testing.TB) string {
	return filepath.Join(testenv.RepoRoot(t), "conformance", "testdata", "models", "optiq-f32")
}

// TestApplyMatchesMLXLM: the adapted layers, their names and their initial
// values (lora_a drawn from the seeded key sequence, lora_b zeros, DoRA's m
// the base's row norms) are mlx_lm's, bit for bit, for the last two blocks
// and for all of them.
func TestApplyMatchesMLXLM(t *testing.T) {
	py := testenv.Python(t)
	dir := checkpointDir(t)
	for _, c := range []struct {
		numLayers, rank int
		dora            bool
	}{{2, 4, false}, {0, 8, false}, {2, 4, true}} {
		t.Run("layers"+strconv.Itoa(c.numLayers)+map[bool]string{true: "/dora"}[c.dora], func(t *testing.T) {
			args, _ := json.Marshal(map[string]any{"path": dir, "seed": 7, "num_layers": c.numLayers, "rank": c.rank, "scale": 20.0, "dora": c.dora})
			out, err := exec.Command(py, "-c", initOracle, string(args)).Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
				}
				t.Fatal(err)
			}
			var want [][3]json.RawMessage
			if err := json.Unmarshal(out, &want); err != nil {
				t.Fatal(err)
			}
			b, err := cpu.New(backend.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			m, err := minicpm5.Load(b, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			apply := Apply
			if c.dora {
				apply = ApplyDoRA
			}
			ads, err := apply(b, m, c.numLayers, Params{Rank: c.rank, Scale: 20}, generate.NewRNG(7))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]backend.Array{}
			for _, a := range ads {
				for _, p := range a.Params() {
					got[a.Path+"."+p.Leaf] = *p.Array
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d adapter arrays, mlx_lm has %d", len(got), len(want))
			}
			for _, w := range want {
				var name string
				var shape []int
				var vals []float64
				json.Unmarshal(w[0], &name)
				json.Unmarshal(w[1], &shape)
				json.Unmarshal(w[2], &vals)
				g, ok := got[name]
				if !ok {
					t.Errorf("mlx_lm adapts %s, Apply does not", name)
					continue
				}
				d, err := b.ToHost(g)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Shape.Equal(shape) {
					t.Errorf("%s: shape %v, mlx_lm %v", name, d.Shape, shape)
					continue
				}
				for i, v := range d.ToFloat64() {
					if v != vals[i] {
						t.Errorf("%s[%d] = %v, mlx_lm %v", name, i, v, vals[i])
						break
					}
				}
			}
		})
	}
}

// TestApplyErrors: bad parameters and a second Apply are errors naming
// what is wrong.
func TestApplyErrors(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := minicpm5.Load(b, checkpointDir(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		numLayers int
		p         Params
		want      string
	}{
		{1, Params{Rank: 0, Scale: 20}, "rank 0"},
		{4, Params{Rank: 4, Scale: 20}, "4 layers requested but the model has 3"},
		// A rank beyond the projections' dimensions was allocated as asked
		// (1e9 × 128 float32s: a crash); it is refused before any layer is
		// wrapped (issue 19).
		{-1, Params{Rank: 1000000000, Scale: 20}, "lora: rank 1000000000 exceeds model.layers.0.mlp.up_proj's dimensions 128×384 (want a rank of at most 128)"},
		{1, Params{Rank: 65, Scale: 20}, "rank 65 exceeds model.layers.2.self_attn.v_proj's dimensions 128×64"},
	} {
		if _, err := Apply(b, m, c.numLayers, c.p, generate.NewRNG(0)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Apply(%d, %+v): got %v, want an error containing %q", c.numLayers, c.p, err, c.want)
		}
	}
	for i, blk := range m.Layers {
		for _, k := range Keys {
			if l, ok := (*Projection(blk, k)).(*nn.LoRALinear); ok {
				t.Fatalf("model.layers.%d.%s is %T after failed Applies", i, k, l)
			}
		}
	}
	if _, err := Apply(b, m, 1, Params{Rank: 4, Scale: 20}, generate.NewRNG(0)); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Layers[2].SelfAttn.QProj.(*nn.LoRALinear); !ok {
		t.Errorf("layer 2's q_proj is %T after Apply, want *nn.LoRALinear", m.Layers[2].SelfAttn.QProj)
	}
	if _, err := Apply(b, m, 1, Params{Rank: 4, Scale: 20}, generate.NewRNG(0)); err == nil || !strings.Contains(err.Error(), "already has an adapter") {
		t.Errorf("a second Apply: got %v, want an error", err)
	}
}
