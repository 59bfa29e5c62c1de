package lora

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// interopOracle writes an adapter directory as mlx_lm.lora does (mode
// "write": seed, linear_to_lora_layers, lora_b set to a formula so that
// the adapters change the logits, mx.save_safetensors of the trainable
// parameters, save_config of the run's arguments) or reads one with
// load_adapters (mode "read"); either way it prints the adapters and the
// logits of the adapted model on ids in eval mode (as mlx_lm.load leaves
// it).
const interopOracle = `
import json, sys
from pathlib import Path
import numpy as np
import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import load_model, save_config
from mlx_lm.tuner.utils import linear_to_lora_layers, load_adapters
a = json.loads(sys.argv[1])
model, _ = load_model(Path(a["path"]))
if a["mode"] == "write":
    mx.random.seed(3)
    model.freeze()
    lp = {"rank": 4, "scale": 10.0, "dropout": 0.05}
    linear_to_lora_layers(model, 2, lp, use_dora=a["ft"] == "dora")
    new = []
    for k, (n, p) in enumerate(tree_flatten(model.trainable_parameters())):
        if n.endswith("lora_b"):
            v = ((np.arange(p.size) * 31 + k) % 17 - 8) / 8 * 0.02
            p = mx.array(v.astype(np.float32).reshape(p.shape))
        new.append((n, p))
    model.update(tree_unflatten(new))
    mx.save_safetensors(str(Path(a["dir"]) / "adapters.safetensors"), dict(tree_flatten(model.trainable_parameters())))
    save_config({"model": a["path"], "fine_tune_type": a["ft"], "num_layers": 2, "lora_parameters": lp,
                 "iters": 100, "learning_rate": 1e-5, "seed": 3}, Path(a["dir"]) / "adapter_config.json")
else:
    load_adapters(model, a["dir"])
model.eval()  # as mlx_lm.load does after load_adapters: dropout off
logits = model(mx.array(np.array([a["ids"]], dtype=np.int32)))
ad = {n: np.array(p).ravel().tolist() for n, p in tree_flatten(model.parameters()) if n.rsplit(".", 1)[-1] in ("lora_a", "lora_b", "m")}
print(json.dumps({"adapters": ad, "logits": np.array(logits).ravel().tolist()}))
`

type interop struct {
	Adapters map[string][]float64 `json:"adapters"`
	Logits   []float64            `json:"logits"`
}

func runInterop(t *testing.T, mode, ft, dir string, ids []int32) interop {
	t.Helper()
	args, _ := json.Marshal(map[string]any{"mode": mode, "ft": ft, "path": checkpointDir(t), "dir": dir, "ids": ids})
	out, err := exec.Command(testenv.Python(t), "-c", interopOracle, string(args)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle (%s): %v\n%s", mode, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var r interop
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// logits runs m on ids and returns its logits.
func logits(t *testing.T, b backend.Backend, m *minicpm5.Model, ids []int32) []float64 {
	t.Helper()
	o, err := m.Forward(b.FromHost(tensor.FromInt32(tensor.Shape{1, len(ids)}, ids)), nil, minicpm5.ForwardOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := b.ToHost(o.Logits)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToFloat64()
}

// checkInterop compares adapters (exactly) and logits (within float32
// noise of the model, as the model_logits row: 5e-4 on logits of scale
// 30-65).
func checkInterop(t *testing.T, b backend.Backend, ads []Adapter, gotLogits []float64, want interop) {
	t.Helper()
	n := 0
	for _, a := range ads {
		n += len(a.Params())
	}
	if len(want.Adapters) != n {
		t.Fatalf("%d adapter arrays, mlx_lm %d", n, len(want.Adapters))
	}
	for _, a := range ads {
		for _, p := range a.Params() {
			w, ok := want.Adapters[a.Path+"."+p.Leaf]
			if !ok {
				t.Fatalf("mlx_lm has no %s.%s", a.Path, p.Leaf)
			}
			d, err := b.ToHost(*p.Array)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range d.ToFloat64() {
				if v != w[i] {
					t.Fatalf("%s.%s[%d] = %v, mlx_lm %v", a.Path, p.Leaf, i, v, w[i])
				}
			}
		}
	}
	worst := 0.0
	for i := range want.Logits {
		worst = math.Max(worst, math.Abs(gotLogits[i]-want.Logits[i]))
	}
	if worst > 5e-4 {
		t.Errorf("logits differ from mlx_lm's by up to %g", worst)
	}
	t.Logf("adapted logits within %.3g of mlx_lm's", worst)
}

// TestInteropMLXLM: an adapter directory mlx_lm.lora wrote (LoRA or DoRA)
// loads in mlxgo (the same adapters, the same logits), and one mlxgo
// wrote loads in mlx_lm's load_adapters (likewise).
func TestInteropMLXLM(t *testing.T) {
	ids := []int32{3, 14, 15, 92, 65, 35}
	open := func() (*cpu.Backend, *minicpm5.Model) {
		b, err := cpu.New(backend.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := minicpm5.Load(b, checkpointDir(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close(); b.Close() })
		return b, m
	}
	for _, ft := range []string{"lora", "dora"} {
		t.Run("mlx_lm_to_mlxgo/"+ft, func(t *testing.T) {
			dir := t.TempDir()
			want := runInterop(t, "write", ft, dir, ids)
			b, m := open()
			base := logits(t, b, m, ids)
			ads, cfg, err := Load(b, m, dir)
			if err != nil {
				t.Fatal(err)
			}
			moved := 0.0
			for i, v := range logits(t, b, m, ids) {
				moved = math.Max(moved, math.Abs(v-base[i]))
			}
			if moved < 0.01 {
				t.Errorf("the adapters move the logits by %g only: the comparison below checks nothing", moved)
			}
			if cfg.FineTuneType != ft || cfg.NumLayers != 2 || cfg.LoRA.Rank != 4 || cfg.LoRA.Scale != 10 || cfg.LoRA.Dropout != 0.05 {
				t.Errorf("config %+v", cfg)
			}
			checkInterop(t, b, ads, logits(t, b, m, ids), want)
		})
	}
	t.Run("mlxgo_to_mlx_lm", func(t *testing.T) {
		dir := t.TempDir()
		b, m := open()
		p := Params{Rank: 4, Scale: 10}
		ads, err := Apply(b, m, 2, p, generate.NewRNG(3))
		if err != nil {
			t.Fatal(err)
		}
		for k, a := range ads { // a non-zero lora_b, so that the adapters matter
			lb := a.Params()[1].Array
			s := (*lb).Shape()
			v := make([]float32, s.Size())
			for i := range v {
				v[i] = float32(float64((i*31+k)%17-8) / 8 * 0.02)
			}
			*lb = b.FromHost(tensor.FromFloat32(s, v))
		}
		if err := Save(b, dir, ads, Config{NumLayers: 2, LoRA: p}, map[string]any{"iters": 100}); err != nil {
			t.Fatal(err)
		}
		want := runInterop(t, "read", "lora", dir, ids)
		checkInterop(t, b, ads, logits(t, b, m, ids), want)
	})
}

// TestLoadErrors: a wrong adapter directory is an error naming the file
// and what is wrong.
func TestLoadErrors(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	load := func(t *testing.T) *minicpm5.Model {
		m, err := minicpm5.Load(b, checkpointDir(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	good := t.TempDir()
	{
		m := load(t)
		ads, err := Apply(b, m, 1, Params{Rank: 2, Scale: 5}, generate.NewRNG(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := Save(b, good, ads, Config{NumLayers: 1, LoRA: Params{Rank: 2, Scale: 5}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	weights, _ := os.ReadFile(filepath.Join(good, WeightsFile))
	for _, c := range []struct {
		name, config, want string
	}{
		{"bad json", `{"num_layers": 1,`, "adapter_config.json"},
		{"no lora_parameters", `{"num_layers": 1}`, `no field "lora_parameters"`},
		{"full", `{"fine_tune_type": "full", "num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5}}`, `fine_tune_type "full"`},
		{"dora without m", `{"fine_tune_type": "dora", "num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5}}`, `lacks 7 adapter tensors, e.g. "model.layers.2.mlp.down_proj.m"`},
		{"other rank", `{"num_layers": 1, "lora_parameters": {"rank": 8, "scale": 5}}`, "want F32 [128 8]"},
		{"other layers", `{"num_layers": 2, "lora_parameters": {"rank": 2, "scale": 5}}`, "lacks 14 adapter tensors"},
		{"unknown key", `{"num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5, "keys": ["lm_head"]}}`, "lora_parameters"},
		{"fewer keys", `{"num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5, "keys": ["self_attn.q_proj"]}}`, "is not an adapter of this model"},
		{"too many layers", `{"num_layers": 9, "lora_parameters": {"rank": 2, "scale": 5}}`, "num_layers 9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, WeightsFile), weights, 0o644)
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte(c.config), 0o644)
			if _, _, err := Load(b, load(t), dir); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	if _, _, err := Load(b, load(t), t.TempDir()); err == nil || !strings.Contains(err.Error(), ConfigFile) {
		t.Errorf("empty directory: got %v", err)
	}
	// adapter_config.json as a symbolic link to /dev/zero was read without
	// end, and a directory gave a message naming no file (issue 19).
	for name, mk := range map[string]func(path string) error{
		"dev zero":  func(p string) error { return os.Symlink("/dev/zero", p) },
		"directory": func(p string) error { return os.Mkdir(p, 0o755) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, WeightsFile), weights, 0o644)
			if err := mk(filepath.Join(dir, ConfigFile)); err != nil {
				t.Fatal(err)
			}
			_, _, err := Load(b, load(t), dir)
			if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, ConfigFile)+": not a regular file") {
				t.Errorf("got %v, want a not-a-regular-file error naming %s", err, ConfigFile)
			}
		})
	}
}

// TestLoadWeights: --resume-adapter-file's weights replace the adapters'
// by name; a tensor of another layer set or rank is refused by name.
func TestLoadWeights(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	apply := func(t *testing.T, layers, rank int, seed uint64) []Adapter {
		m, err := minicpm5.Load(b, checkpointDir(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		ads, err := Apply(b, m, layers, Params{Rank: rank, Scale: 5}, generate.NewRNG(seed))
		if err != nil {
			t.Fatal(err)
		}
		return ads
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "resume.safetensors")
	src := apply(t, 2, 2, 1)
	if err := SaveWeights(b, file, src); err != nil {
		t.Fatal(err)
	}
	dst := apply(t, 2, 2, 9)
	n, err := LoadWeights(b, file, dst)
	if err != nil || n != 28 {
		t.Fatalf("LoadWeights: %d tensors, %v", n, err)
	}
	want, _ := b.ToHost(*src[3].Params()[0].Array)
	got, _ := b.ToHost(*dst[3].Params()[0].Array)
	for i, v := range want.ToFloat64() {
		if got.ToFloat64()[i] != v {
			t.Fatalf("%s.lora_a[%d]: %v, file %v", dst[3].Path, i, got.ToFloat64()[i], v)
		}
	}
	for _, c := range []struct {
		name         string
		layers, rank int
		want         string
	}{
		{"fewer layers", 1, 2, `tensor "model.layers.1.mlp.up_proj.lora_a" is not a parameter of the adapters being trained`},
		{"other rank", 2, 4, "is [128 2], the adapter's is [128 4]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := LoadWeights(b, file, apply(t, c.layers, c.rank, 1)); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), file) {
				t.Errorf("got %v, want an error naming %s and %q", err, file, c.want)
			}
		})
	}
}
