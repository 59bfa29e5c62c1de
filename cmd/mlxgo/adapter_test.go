package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// adapterOracle writes a LoRA adapter directory as mlx_lm.lora does (seed,
// linear_to_lora_layers on the last two blocks, lora_b set to a formula so
// that the adapters matter, mx.save_safetensors, save_config), then loads
// the model with it as mlx_lm.load(adapter_path=...) does and prints
// mlx_lm's greedy tokens after the prompt ids (generate_step), those of
// the model without adapters, and those of the adapted model after
// mlx_lm.fuse's fuse(dequantize=False) of every adapted layer.
const adapterOracle = `
import json, sys
from pathlib import Path
import numpy as np
import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import load_model, save_config
from mlx_lm.tuner.utils import linear_to_lora_layers, load_adapters
from mlx_lm.generate import generate_step
a = json.loads(sys.argv[1])
model, _ = load_model(Path(a["path"]))
mx.random.seed(5)
model.freeze()
lp = {"rank": 4, "scale": 10.0, "dropout": 0.0}
linear_to_lora_layers(model, 2, lp)
new = []
for k, (n, p) in enumerate(tree_flatten(model.trainable_parameters())):
    if n.endswith("lora_b"):
        p = mx.array((((np.arange(p.size) * 31 + k) % 17 - 8) / 8 * 0.05).astype(np.float32).reshape(p.shape))
    new.append((n, p))
model.update(tree_unflatten(new))
mx.save_safetensors(str(Path(a["dir"]) / "adapters.safetensors"), dict(tree_flatten(model.trainable_parameters())))
save_config({"fine_tune_type": "lora", "num_layers": 2, "lora_parameters": lp, "seed": 5}, Path(a["dir"]) / "adapter_config.json")
def greedy(model):
    out = []
    for (tok, _), _ in zip(generate_step(mx.array(a["ids"]), model, sampler=lambda x: mx.argmax(x, axis=-1)), range(a["n"])):
        out.append(int(tok))
    return out
plain, _ = load_model(Path(a["path"]))
adapted, _ = load_model(Path(a["path"]))
load_adapters(adapted, a["dir"])
adapted.eval()
adapted_tokens = greedy(adapted)
fused = [(n, m.fuse(dequantize=False)) for n, m in adapted.named_modules() if hasattr(m, "fuse")]
adapted.update_modules(tree_unflatten(fused))
print(json.dumps({"plain": greedy(plain), "adapted": adapted_tokens, "fused": greedy(adapted)}))
`

// TestGenerateAdapterPath: `mlxgo generate --adapter-path` with a
// directory mlx_lm.lora wrote gives mlx_lm's greedy tokens with those
// adapters (float32 checkpoint, cpu backend), which differ from the
// tokens without them; `mlxgo fuse --de-quantize` gives a model that
// generates those tokens alone, and `mlxgo fuse` (quantized again) one
// that generates what mlx_lm.fuse's model does; a bad adapter directory is
// an error naming it.
func TestGenerateAdapterPath(t *testing.T) {
	model := filepath.Join(fixtures, "models", "optiq-f32")
	dir := t.TempDir()
	ids := []int32{3, 14, 15, 92, 65, 35, 89, 79}
	args, _ := json.Marshal(map[string]any{"path": model, "dir": dir, "ids": ids, "n": 12})
	out, err := exec.Command(testenv.Python(t), "-c", adapterOracle, string(args)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var want struct{ Plain, Adapted, Fused []int32 }
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(want.Plain) == fmt.Sprint(want.Adapted) {
		t.Fatalf("the adapters do not change mlx_lm's tokens (%v): the test would check nothing", want.Plain)
	}
	for _, c := range []struct {
		extra []string
		want  []int32
	}{{nil, want.Plain}, {[]string{"--adapter-path", dir}, want.Adapted}} {
		rc, stdout, stderr := mlxgo(append([]string{"generate", "--model", model, "--prompt-ids", joinIDs(ids), "--max-tokens", "12", "--backend", "cpu"}, c.extra...)...)
		if rc != 0 {
			t.Fatalf("%v: exit %d, stderr:\n%s", c.extra, rc, stderr)
		}
		if got := generated(t, stdout); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%v: tokens %v\nwant (mlx_lm) %v", c.extra, got, c.want)
		}
		if c.extra != nil && !strings.Contains(stdout, "adapters: 14 lora layers (rank 4, scale 10)") {
			t.Errorf("no adapters line in the output:\n%s", stdout)
		}
	}
	// mlxgo fuse, then the fused model alone: the adapted model's tokens
	for _, dq := range []bool{false, true} {
		fused := filepath.Join(t.TempDir(), "fused")
		args := []string{"fuse", "--model", model, "--adapter-path", dir, "--save-path", fused, "--backend", "cpu"}
		if dq {
			args = append(args, "--de-quantize")
		}
		rc, stdout, stderr := mlxgo(args...)
		if rc != 0 || !strings.Contains(stdout, "fused 14 adapted layers") {
			t.Fatalf("fuse (dequantize %v): exit %d, stdout %q, stderr:\n%s", dq, rc, stdout, stderr)
		}
		rc, stdout, stderr = mlxgo("generate", "--model", fused, "--prompt-ids", joinIDs(ids), "--max-tokens", "12", "--backend", "cpu")
		if rc != 0 {
			t.Fatalf("generate on the fused model: exit %d, stderr:\n%s", rc, stderr)
		}
		// quantized again, the fused weights round differently from the
		// adapted layers: the tokens are those of mlx_lm.fuse's model
		// (whose tensors lora.TestFuseMatchesMLXLM finds equal to ours);
		// dequantized, those of the adapted model
		w, what := want.Fused, "mlx_lm's fused model"
		if dq {
			w, what = want.Adapted, "mlx_lm, adapters unfused"
		}
		if got := generated(t, stdout); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("fused (dequantize %v): tokens %v\nwant (%s) %v", dq, got, what, w)
		}
	}
	rc, _, stderr := mlxgo("fuse", "--model", model, "--save-path", t.TempDir())
	if rc != 2 || !strings.Contains(stderr, "--adapter-path") {
		t.Errorf("fuse without --adapter-path: exit %d, stderr %q", rc, stderr)
	}
	rc, _, stderr = mlxgo("generate", "--model", model, "--prompt-ids", "1,2", "--backend", "cpu", "--adapter-path", t.TempDir())
	if rc == 0 || !strings.Contains(stderr, "--adapter-path") || !strings.Contains(stderr, "adapter_config.json") {
		t.Errorf("an empty adapter directory: exit %d, stderr %q", rc, stderr)
	}
}
