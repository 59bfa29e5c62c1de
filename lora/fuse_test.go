package lora

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// fuseOracle is mlx_lm.fuse's model half: load the model with the
// adapters, fuse every adapted layer (dequantize or not), dequantize_model
// with --dequantize, and save the parameters; it prints the greedy tokens
// of that model and of the model mlxgo fused (loaded from its directory
// with load_model).
const fuseOracle = `
import json, sys
from pathlib import Path
import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import load_model, dequantize_model
from mlx_lm.tuner.utils import load_adapters
from mlx_lm.generate import generate_step
a = json.loads(sys.argv[1])
model, _ = load_model(Path(a["path"]))
load_adapters(model, a["adapters"])
model.eval()
fused = [(n, m.fuse(dequantize=a["dequantize"])) for n, m in model.named_modules() if hasattr(m, "fuse")]
model.update_modules(tree_unflatten(fused))
if a["dequantize"]:
    model = dequantize_model(model)
mx.save_safetensors(a["out"], dict(tree_flatten(model.parameters())))
def greedy(model):
    return [int(t) for (t, _), _ in zip(generate_step(mx.array(a["ids"]), model, sampler=lambda x: mx.argmax(x, axis=-1)), range(10))]
ours, _ = load_model(Path(a["ours"]))
print(json.dumps({"theirs": greedy(model), "ours": greedy(ours)}))
`

// TestFuseMatchesMLXLM: Fuse of an adapter directory mlx_lm.lora wrote
// gives mlx_lm.fuse's tensors (every tensor of the model, bit for bit, on
// every backend: the CPU backend's fused sums and re-quantization happen to
// round as MLX's do on this checkpoint),
// with and without --dequantize; mlxgo loads the fused directory, and
// mlx_lm loads it and generates its own fused model's greedy tokens.
func TestFuseMatchesMLXLM(t *testing.T) {
	py := testenv.Python(t)
	model := checkpointDir(t)
	ids := []int32{3, 14, 15, 92, 65, 35}
	adapters := t.TempDir()
	runInterop(t, "write", "lora", adapters, ids)
	for _, name := range backend.Names() {
		for _, dq := range []bool{false, true} {
			testFuse(t, py, name, model, adapters, ids, dq)
		}
	}
}

func testFuse(t *testing.T, py, name, model, adapters string, ids []int32, dq bool) {
	t.Run(fmt.Sprintf("%s/dequantize=%v", name, dq), func(t *testing.T) {
		b, err := backend.Open(name, backend.Options{Device: "cpu"})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		out := filepath.Join(t.TempDir(), "fused")
		res, err := Fuse(b, model, adapters, out, dq)
		if err != nil {
			t.Fatal(err)
		}
		if res.Fused != 14 {
			t.Errorf("fused %d layers, want 14", res.Fused)
		}
		m, err := minicpm5.Load(b, out) // mlxgo loads it too
		if err != nil {
			t.Fatalf("loading the fused model: %v", err)
		}
		m.Close()
		theirs := filepath.Join(t.TempDir(), "theirs.safetensors")
		args, _ := json.Marshal(map[string]any{"path": model, "adapters": adapters, "dequantize": dq, "out": theirs, "ours": out, "ids": ids})
		o, err := exec.Command(py, "-c", fuseOracle, string(args)).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
			}
			t.Fatal(err)
		}
		var tok struct{ Theirs, Ours []int32 }
		if err := json.Unmarshal(o, &tok); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(tok.Ours) != fmt.Sprint(tok.Theirs) {
			t.Errorf("mlx_lm on our fused model: %v, on its own: %v", tok.Ours, tok.Theirs)
		}
		want, err := tensor.OpenSafetensors(theirs)
		if err != nil {
			t.Fatal(err)
		}
		defer want.Close()
		got, err := tensor.OpenSafetensorsDir(out)
		if err != nil {
			t.Fatal(err)
		}
		defer got.Close()
		if len(got.Names()) != len(want.Names()) {
			t.Errorf("%d tensors, mlx_lm.fuse %d", len(got.Names()), len(want.Names()))
		}
		differ := 0
		for _, n := range want.Names() {
			w, err := want.Tensor(n)
			if err != nil {
				t.Fatal(err)
			}
			g, err := got.Tensor(n)
			if err != nil {
				t.Errorf("%s: %v", n, err)
				continue
			}
			if g.DType != w.DType || !g.Shape.Equal(w.Shape) || string(g.Data) != string(w.Data) {
				differ++
				if differ <= 3 {
					t.Errorf("%s: %v %v differs from mlx_lm.fuse's %v %v", n, g.DType, g.Shape, w.DType, w.Shape)
				}
			}
		}
	})
}

// TestFuseCopiesLinkedFiles: the tokenizer files of a model whose files are
// symbolic links (the Hugging Face cache's snapshots link to blobs) were
// skipped, so the fused model had no tokenizer (found by the issue 19
// sweep); a link to a directory or a device is still not copied.
func TestFuseCopiesLinkedFiles(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	src, blobs := t.TempDir(), t.TempDir()
	ckpt := checkpointDir(t)
	for _, n := range []string{"config.json", "model.safetensors", "model.safetensors.index.json"} {
		if err := os.Symlink(filepath.Join(ckpt, n), filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(blobs, "tok"), []byte(`{"x": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for n, target := range map[string]string{"tokenizer.json": filepath.Join(blobs, "tok"), "zero": "/dev/zero", "dir": blobs} {
		if err := os.Symlink(target, filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := minicpm5.Load(b, src)
	if err != nil {
		t.Fatal(err)
	}
	p := Params{Rank: 2, Scale: 5}
	ads, err := Apply(b, m, 1, p, generate.NewRNG(1))
	if err != nil {
		t.Fatal(err)
	}
	adapters := t.TempDir()
	if err := Save(b, adapters, ads, Config{NumLayers: 1, LoRA: p}, nil); err != nil {
		t.Fatal(err)
	}
	m.Close()
	out := filepath.Join(t.TempDir(), "fused")
	if _, err := Fuse(b, src, adapters, out, false); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(out, "tokenizer.json")); err != nil || string(got) != `{"x": 1}` {
		t.Errorf("fused tokenizer.json: %q, %v", got, err)
	}
	for _, n := range []string{"zero", "dir"} {
		if _, err := os.Lstat(filepath.Join(out, n)); err == nil {
			t.Errorf("%s (a link to a directory or a device) was copied", n)
		}
	}
}
