package promptcache_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/promptcache"
)

// rotatingScript makes, with mlx_lm, the rotating prompt cache
// (RotatingKVCache(W, keep=4) per layer: what make_prompt_cache(model,
// max_kv_size=W) makes for a model without make_cache; mlx_lm 0.32.2's
// llama has one and would ignore max_kv_size) of
// PROMPT with generate_step(max_tokens=0, prefill_step_size=4), saves it to
// MINE, loads THEIRS (ours), and prints JSON: per layer of each the state's
// integers (offset, keep, max_size, _idx), the buffers' shape and sha256,
// the classes of ours, and the greedy tokens after SUFFIX from each.
const rotatingScript = `
import hashlib, json, sys
import mlx.core as mx, numpy as np
from pathlib import Path
from mlx_lm.utils import load_model
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache, save_prompt_cache, load_prompt_cache
ckpt, mine, theirs, prompt, suffix, n, w = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
model, _ = load_model(Path(ckpt))
from mlx_lm.models.cache import RotatingKVCache
cache = [RotatingKVCache(max_size=w, keep=4) for _ in model.layers]  # make_prompt_cache(model, max_kv_size=w) for a model without make_cache (llama has one)
for _ in generate_step(mx.array(prompt), model, max_tokens=0, prompt_cache=cache, prefill_step_size=4):
    pass
save_prompt_cache(mine, cache, {"model": ckpt})
def digest(c):
    out = []
    for x in c:
        k, v, off, keep, mx_, idx = x.state
        out.append({"ints": [int(off), int(keep), int(mx_), int(idx)], "shape": list(k.shape),
                    "keys": hashlib.sha256(np.array(k).tobytes()).hexdigest(),
                    "values": hashlib.sha256(np.array(v).tobytes()).hexdigest()})
    return out
def cont(c):
    return [int(t) for t, _ in generate_step(mx.array(suffix), model, max_tokens=n, prompt_cache=c)]
res = {"mine": digest(cache), "mine_tokens": cont(cache)}
ours = load_prompt_cache(theirs)
res["classes"] = [type(c).__name__ for c in ours]
res["theirs"] = digest(ours)
res["theirs_tokens"] = cont(ours)
print(json.dumps(res))
`

type rotDigest struct {
	Ints         []int
	Shape        []int
	Keys, Values string
}

// TestRotatingInterop: a RotatingKVCache (window 8, keep 4) holding a
// 13-token prompt, longer than its window, travels both ways between mlx_lm
// and mlxgo: the state's integers, shapes and (mlx_lm's file, read by us)
// bytes agree, and each side continues the other's cache with the tokens
// mlx_lm gets from its own (f32 checkpoint, greedy).
func TestRotatingInterop(t *testing.T) {
	py := testenv.Python(t)
	const ckpt, window = "optiq-f32", 8
	long := []int32{5, 17, 250, 3, 999, 42, 7, 7, 100, 64, 1, 2, 300}
	m := load(t, ckpt)
	view, err := m.WithCache(nn.CacheOptions{MaxKVSize: window})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	theirs := filepath.Join(dir, "mlxgo.safetensors")
	mine := filepath.Join(dir, "mlx_lm.safetensors")

	s, err := generate.NewSession[nn.KVCache](view)
	if err != nil {
		t.Fatal(err)
	}
	// generate_step's prefill with max_tokens=0 (Append's too): every
	// token but the last in chunks of 4, then the last one alone.
	if err := s.Append(long, 4); err != nil {
		t.Fatal(err)
	}
	var f *promptcache.File
	err = m.Backend().Do(func() (err error) {
		f, err = promptcache.FromCaches(m.Backend(), s.Caches(), map[string]string{"model": "m"})
		return err
	})
	s.Release()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(theirs); err != nil {
		t.Fatal(err)
	}

	pj, _ := json.Marshal(long)
	sj, _ := json.Marshal(suffix)
	cmd := exec.Command(py, "-c", rotatingScript, checkpointDir(t, ckpt), mine, theirs, string(pj), string(sj), "6", "8")
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED=0")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("mlx_lm script: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct {
		Mine, Theirs []rotDigest
		MineTok      []int32 `json:"mine_tokens"`
		TheirsTok    []int32 `json:"theirs_tokens"`
		Classes      []string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !slices.Equal(res.Classes, []string{"RotatingKVCache", "RotatingKVCache", "RotatingKVCache"}) {
		t.Fatalf("mlx_lm read classes %v, want 3 RotatingKVCache", res.Classes)
	}
	for i, l := range f.Layers {
		want := []int{l.Offset, l.Keep, l.MaxSize, l.Index}
		if d := res.Theirs[i]; !slices.Equal(d.Ints, want) || !slices.Equal(d.Shape, []int(l.Keys.Shape)) || d.Keys != sum(l.Keys) {
			t.Errorf("layer %d: mlx_lm read %+v, we wrote ints %v shape %v keys %s", i, d, want, l.Keys.Shape, sum(l.Keys))
		}
		if d := res.Mine[i]; !slices.Equal(d.Ints, want) || !slices.Equal(d.Shape, []int(l.Keys.Shape)) {
			t.Errorf("layer %d: mlx_lm's own cache has %+v, ours ints %v shape %v", i, d, want, l.Keys.Shape)
		}
	}

	g, err := promptcache.Read(mine)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range g.Layers {
		d := res.Mine[i]
		got := []int{l.Offset, l.Keep, l.MaxSize, l.Index}
		if l.Class != promptcache.RotatingKVCacheClass || !slices.Equal(d.Ints, got) || d.Keys != sum(l.Keys) || d.Values != sum(l.Values) {
			t.Errorf("layer %d: mlx_lm wrote %+v, we read %s ints %v keys %s values %s", i, d, l.Class, got, sum(l.Keys), sum(l.Values))
		}
	}
	if got := resume(t, m, mine, 6); !slices.Equal(got, res.MineTok) {
		t.Errorf("continuing mlx_lm's rotating cache: got %v, mlx_lm gets %v", got, res.MineTok)
	}
	if !slices.Equal(res.TheirsTok, res.MineTok) {
		t.Errorf("mlx_lm continuing our rotating cache gets %v, from its own %v", res.TheirsTok, res.MineTok)
	}
}
