package promptcache_test

import (
	"crypto/sha256"
	"encoding/hex"
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

// quantizedScript makes, with mlx_lm, a quantized prompt cache of PROMPT
// (generate_step with max_tokens=0, kv_bits 8, kv_group_size 32,
// quantized_kv_start 0: maybe_quantize_kv_cache turns each KVCache into a
// QuantizedKVCache after the first prefill chunk), saves it to MINE, loads
// THEIRS (ours), and prints JSON: per layer of each the integers (offset,
// group_size, bits), the codes' shape and the sha256 of the six arrays, the
// classes of ours, and the greedy tokens after SUFFIX from each.
const quantizedScript = `
import hashlib, json, sys
import mlx.core as mx, numpy as np
from pathlib import Path
from mlx_lm.utils import load_model
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache, save_prompt_cache, load_prompt_cache
ckpt, mine, theirs, prompt, suffix, n = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5]), int(sys.argv[6])
kw = dict(kv_bits=8, kv_group_size=32, quantized_kv_start=0)
model, _ = load_model(Path(ckpt))
cache = make_prompt_cache(model)
for _ in generate_step(mx.array(prompt), model, max_tokens=0, prompt_cache=cache, prefill_step_size=4, **kw):
    pass
save_prompt_cache(mine, cache, {"model": ckpt})
def digest(c):
    out = []
    for x in c:
        k, v, off, g, b = x.state
        out.append({"ints": [int(off), int(g), int(b)], "shape": list(k[0].shape),
                    "sums": [hashlib.sha256(np.array(a).tobytes()).hexdigest() for a in list(k) + list(v)]})
    return out
def cont(c):
    return [int(t) for t, _ in generate_step(mx.array(suffix), model, max_tokens=n, prompt_cache=c, **kw)]
res = {"mine": digest(cache), "mine_tokens": cont(cache)}
ours = load_prompt_cache(theirs)
res["classes"] = [type(c).__name__ for c in ours]
res["theirs"] = digest(ours)
res["theirs_tokens"] = cont(ours)
print(json.dumps(res))
`

type quantDigest struct {
	Ints  []int
	Shape []int
	Sums  []string
}

// TestQuantizedInterop: a quantized KV cache (8 bits, groups of 32) travels
// both ways between mlx_lm and mlxgo: the integers and shapes agree, we read
// mlx_lm's arrays byte for byte, and each side continues the other's cache
// with the tokens mlx_lm gets from its own (f32 checkpoint, greedy).
func TestQuantizedInterop(t *testing.T) {
	py := testenv.Python(t)
	const ckpt = "optiq-f32"
	m := load(t, ckpt)
	view, err := m.WithCache(nn.CacheOptions{KVBits: 8, KVGroupSize: 32})
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
	if err := s.Append(prompt, 4); err != nil {
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
	pj, _ := json.Marshal(prompt)
	sj, _ := json.Marshal(suffix)
	cmd := exec.Command(py, "-c", quantizedScript, checkpointDir(t, ckpt), mine, theirs, string(pj), string(sj), "6")
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED=0")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("mlx_lm script: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct {
		Mine, Theirs []quantDigest
		MineTok      []int32 `json:"mine_tokens"`
		TheirsTok    []int32 `json:"theirs_tokens"`
		Classes      []string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !slices.Equal(res.Classes, []string{"QuantizedKVCache", "QuantizedKVCache", "QuantizedKVCache"}) {
		t.Fatalf("mlx_lm read classes %v, want 3 QuantizedKVCache", res.Classes)
	}
	for i, l := range f.Layers {
		want := []int{l.Offset, l.GroupSize, l.Bits}
		if d := res.Theirs[i]; !slices.Equal(d.Ints, want) || !slices.Equal(d.Shape, []int(l.Keys.Shape)) || d.Sums[0] != sum(l.Keys) {
			t.Errorf("layer %d: mlx_lm read %+v, we wrote ints %v shape %v codes %s", i, d, want, l.Keys.Shape, sum(l.Keys))
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
		got := []int{l.Offset, l.GroupSize, l.Bits}
		var sums []string
		for _, x := range [][]byte{l.Keys.Data, l.KeyScales.Data, l.KeyBiases.Data, l.Values.Data, l.ValueScales.Data, l.ValueBiases.Data} {
			sums = append(sums, sumBytes(x))
		}
		if l.Class != promptcache.QuantizedKVCacheClass || !slices.Equal(d.Ints, got) || !slices.Equal(d.Sums, sums) {
			t.Errorf("layer %d: mlx_lm wrote %+v, we read %s ints %v sums %v", i, d, l.Class, got, sums)
		}
	}
	if got := resume(t, m, mine, 6); !slices.Equal(got, res.MineTok) {
		t.Errorf("continuing mlx_lm's quantized cache: got %v, mlx_lm gets %v", got, res.MineTok)
	}
	if !slices.Equal(res.TheirsTok, res.MineTok) {
		t.Errorf("mlx_lm continuing our quantized cache gets %v, from its own %v", res.TheirsTok, res.MineTok)
	}
}

func sumBytes(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
