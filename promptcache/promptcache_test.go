package promptcache_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/promptcache"
	"github.com/mlxgo/mlxgo/tensor"
)

func checkpointDir(t *testing.T, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "conformance", "testdata", "models", name))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Need(t, filepath.Join(dir, "config.json"), "the oracle's tiny checkpoints; run `make oracle`")
	return dir
}

func load(t *testing.T, name string) *minicpm5.Model {
	t.Helper()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := minicpm5.Load(b, checkpointDir(t, name))
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); b.Close() })
	return m
}

var (
	prompt = []int32{5, 17, 250, 3, 999, 42, 7, 7, 100}
	suffix = []int32{11, 12, 13}
)

// save prefills prompt into a session and writes it to a file.
func save(t *testing.T, m *minicpm5.Model, path string, meta map[string]string) {
	t.Helper()
	s, err := generate.NewSession[nn.KVCache](m)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	if err := s.Append(prompt, 4); err != nil {
		t.Fatal(err)
	}
	var f *promptcache.File
	err = m.Backend().Do(func() (err error) {
		f, err = promptcache.FromCaches(m.Backend(), s.Caches(), meta)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Write(path); err != nil {
		t.Fatal(err)
	}
}

// resume reads path into a session of m and generates greedily from suffix.
func resume(t *testing.T, m *minicpm5.Model, path string, n int) []int32 {
	t.Helper()
	f, err := promptcache.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(promptcache.ModelShape(m.Config(), cacheDTypes(t, m))); err != nil {
		t.Fatal(err)
	}
	var caches []nn.KVCache
	if err := m.Backend().Do(func() (err error) { caches, err = f.Caches(m.Backend()); return err }); err != nil {
		t.Fatal(err)
	}
	s, err := generate.ResumeSession(m, caches, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	res, err := s.Generate(suffix, generate.Options{MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Tokens
}

func greedy(t *testing.T, m *minicpm5.Model, ids []int32, n int) []int32 {
	t.Helper()
	res, err := generate.Generate(m, ids, generate.Options{MaxTokens: n}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Tokens
}

// TestRoundTrip writes a session's caches and reads them back: the
// continuation equals a generation of the whole sequence from scratch, and
// the metadata survives.
func TestRoundTrip(t *testing.T) {
	for _, ckpt := range []string{"optiq-f32", "fp-bf16"} {
		t.Run(ckpt, func(t *testing.T) {
			m := load(t, ckpt)
			path := filepath.Join(t.TempDir(), "c.safetensors")
			save(t, m, path, map[string]string{"model": "x", "note": "a.b"})
			f, err := promptcache.Read(path)
			if err != nil {
				t.Fatal(err)
			}
			if f.Tokens() != len(prompt) || f.Metadata["model"] != "x" || f.Metadata["note"] != "a.b" || len(f.Metadata) != 2 {
				t.Errorf("got %d tokens and metadata %v, want %d and model=x note=a.b", f.Tokens(), f.Metadata, len(prompt))
			}
			got := resume(t, m, path, 6)
			if want := greedy(t, m, append(slices.Clone(prompt), suffix...), 6); !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

// mlxScript makes, with mlx_lm, the prompt cache of PROMPT on a checkpoint
// as mlx_lm.cache_prompt does (generate_step with max_tokens=0), saves it
// to MINE, loads THEIRS (ours) with load_prompt_cache, and prints JSON: the
// sha256 of each array of both, the classes and metadata of ours, and the
// greedy tokens mlx_lm generates after SUFFIX from each cache.
const mlxScript = `
import hashlib, json, sys
import mlx.core as mx, numpy as np
from pathlib import Path
from mlx_lm.utils import load_model
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache, save_prompt_cache, load_prompt_cache
ckpt, mine, theirs, prompt, suffix, n = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), json.loads(sys.argv[5]), int(sys.argv[6])
model, _ = load_model(Path(ckpt))
cache = make_prompt_cache(model)
for _ in generate_step(mx.array(prompt), model, max_tokens=0, prompt_cache=cache, prefill_step_size=4):
    pass
save_prompt_cache(mine, cache, {"model": ckpt, "tokenizer_config": json.dumps({"trust_remote_code": False})})
def digest(c):
    out = []
    for k, v, off in [x.state for x in c]:
        out.append([hashlib.sha256(np.array(k).tobytes()).hexdigest(), hashlib.sha256(np.array(v).tobytes()).hexdigest(), int(off), list(k.shape)])
    return out
def cont(c):
    return [int(t) for t, _ in generate_step(mx.array(suffix), model, max_tokens=n, prompt_cache=c)]
res = {"mine": digest(cache)}
res["mine_tokens"] = cont(cache)
ours, meta = load_prompt_cache(theirs, return_metadata=True)
res["theirs"] = digest(ours)
res["classes"] = [type(c).__name__ for c in ours]
res["meta"] = meta
res["theirs_tokens"] = cont(ours)
print(json.dumps(res))
`

type digest struct {
	Keys, Values string
	Offset       int
	Shape        []int
}

func (d *digest) UnmarshalJSON(b []byte) error {
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || len(v) != 4 {
		return fmt.Errorf("digest %s: want [keys, values, offset, shape]", b)
	}
	for i, p := range []any{&d.Keys, &d.Values, &d.Offset, &d.Shape} {
		if err := json.Unmarshal(v[i], p); err != nil {
			return err
		}
	}
	return nil
}

func sum(t *tensor.Dense) string {
	h := sha256.Sum256(t.Data)
	return hex.EncodeToString(h[:])
}

// TestMLXInterop: mlx_lm reads the files we write and we read the files
// mlx_lm writes, array for array (sha256 of the bytes), with the classes,
// offsets and metadata; and each side continues the other's cache with the
// tokens the other side generates (f32 checkpoint, greedy: our CPU backend
// gives mlx_lm's tokens there).
func TestMLXInterop(t *testing.T) {
	py := testenv.Python(t)
	const ckpt = "optiq-f32"
	m := load(t, ckpt)
	dir := t.TempDir()
	theirs := filepath.Join(dir, "mlxgo.safetensors")
	mine := filepath.Join(dir, "mlx_lm.safetensors")
	save(t, m, theirs, map[string]string{"model": "m", "tokenizer_config": `{"trust_remote_code": false}`})
	pj, _ := json.Marshal(prompt)
	sj, _ := json.Marshal(suffix)
	cmd := exec.Command(py, "-c", mlxScript, checkpointDir(t, ckpt), mine, theirs, string(pj), string(sj), "6")
	cmd.Env = append(os.Environ(), "PYTHONHASHSEED=0")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("mlx_lm script: %v\n%s", err, ee.Stderr)
		}
		t.Fatal(err)
	}
	var res struct {
		Mine, Theirs []digest
		MineTok      []int32 `json:"mine_tokens"`
		TheirsTok    []int32 `json:"theirs_tokens"`
		Classes      []string
		Meta         map[string]string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// mlx_lm reads ours.
	f, err := promptcache.Read(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Theirs) != len(f.Layers) || !slices.Equal(res.Classes, []string{"KVCache", "KVCache", "KVCache"}) {
		t.Fatalf("mlx_lm read %d layers of classes %v, want %d KVCache", len(res.Theirs), res.Classes, len(f.Layers))
	}
	for i, l := range f.Layers {
		d := res.Theirs[i]
		if d.Keys != sum(l.Keys) || d.Values != sum(l.Values) || d.Offset != l.Offset || !slices.Equal(d.Shape, []int(l.Keys.Shape)) {
			t.Errorf("layer %d: mlx_lm read %+v, we wrote keys %s values %s offset %d shape %v", i, d, sum(l.Keys), sum(l.Values), l.Offset, l.Keys.Shape)
		}
	}
	if res.Meta["model"] != "m" || res.Meta["tokenizer_config"] != `{"trust_remote_code": false}` {
		t.Errorf("mlx_lm read metadata %v", res.Meta)
	}

	// We read mlx_lm's.
	g, err := promptcache.Read(mine)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Layers) != len(res.Mine) || g.Metadata["model"] != checkpointDir(t, ckpt) {
		t.Fatalf("read %d layers, metadata %v; want %d, model %s", len(g.Layers), g.Metadata, len(res.Mine), checkpointDir(t, ckpt))
	}
	for i, l := range g.Layers {
		d := res.Mine[i]
		if d.Keys != sum(l.Keys) || d.Values != sum(l.Values) || d.Offset != l.Offset || d.Offset != len(prompt) {
			t.Errorf("layer %d: mlx_lm wrote %+v, we read keys %s values %s offset %d", i, d, sum(l.Keys), sum(l.Values), l.Offset)
		}
	}

	// A backend that runs MLX's own kernels (OracleExact) computes
	// mlx_lm's arrays bit for bit.
	for _, name := range backend.Names() {
		t.Run("exact/"+name, func(t *testing.T) {
			b, err := backend.Open(name, backend.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if !b.OracleExact() {
				t.Skipf("the %s backend is held to tolerances, not to MLX's bits (its continuation is checked below)", name)
			}
			var bm *minicpm5.Model
			if err := b.Do(func() (err error) { bm, err = minicpm5.Load(b, checkpointDir(t, ckpt)); return err }); err != nil {
				t.Fatal(err)
			}
			defer b.Do(func() error { return bm.Close() })
			p := filepath.Join(t.TempDir(), "exact.safetensors")
			save(t, bm, p, nil)
			e, err := promptcache.Read(p)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range e.Layers {
				if d := res.Mine[i]; d.Keys != sum(l.Keys) || d.Values != sum(l.Values) || d.Offset != l.Offset {
					t.Errorf("layer %d: mlx_lm computed %+v, the %s backend keys %s values %s offset %d", i, d, name, sum(l.Keys), sum(l.Values), l.Offset)
				}
			}
		})
	}

	// Each continues the other's cache with mlx_lm's tokens.
	if got := resume(t, m, mine, 6); !slices.Equal(got, res.MineTok) {
		t.Errorf("continuing mlx_lm's cache: got %v, mlx_lm gets %v", got, res.MineTok)
	}
	if !slices.Equal(res.TheirsTok, res.MineTok) {
		t.Errorf("mlx_lm continuing our cache gets %v, from its own %v", res.TheirsTok, res.MineTok)
	}
}

// TestErrors: files that are not prompt caches, of another cache kind or
// of another model are errors naming what does not match.
func TestErrors(t *testing.T) {
	m := load(t, "optiq-f32")
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	save(t, m, good, nil)
	f, err := promptcache.Read(good)
	if err != nil {
		t.Fatal(err)
	}
	shape := promptcache.ModelShape(m.Config(), cacheDTypes(t, m))
	if err := f.Check(shape); err != nil {
		t.Fatalf("own file: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(s *promptcache.Shape)
		want string
	}{
		{"layers", func(s *promptcache.Shape) { s.Layers = 4 }, "3 layers, the model 4"},
		{"kv-heads", func(s *promptcache.Shape) { s.KVHeads = 4 }, "2 kv heads, the model has 4"},
		{"head-dim", func(s *promptcache.Shape) { s.HeadDim = 64 }, "head_dim 32, the model's is 64"},
		{"dtype", func(s *promptcache.Shape) { s.DTypes = slices.Repeat([]tensor.DType{tensor.BF16}, s.Layers) }, "dtype F32, the model computes them in BF16"},
	} {
		t.Run("check/"+tc.name, func(t *testing.T) {
			s := shape
			tc.edit(&s)
			if err := f.Check(s); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	st, err := tensor.OpenSafetensors(good)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var ts []*tensor.Dense
	for _, n := range st.Names() {
		d, err := st.TensorCopy(n)
		if err != nil {
			t.Fatal(err)
		}
		names, ts = append(names, n), append(ts, d)
	}
	meta := st.Metadata()
	st.Close()
	for _, tc := range []struct {
		name string
		edit func(meta map[string]string) map[string]string
		want string
	}{
		{"no-metadata", func(map[string]string) map[string]string { return nil }, "not a prompt cache file"},
		{"rotating", func(m map[string]string) map[string]string { m["1.1"] = "RotatingKVCache"; return m }, `layer 1: array "1.3" missing`},
		{"quantized", func(m map[string]string) map[string]string { m["1.0"] = "QuantizedKVCache"; return m }, `array "0.0" is not part of a cache state`},
		{"string-scalar", func(m map[string]string) map[string]string { m["2.1.1"] = "string"; return m }, `is a "string"`},
		{"missing-layer", func(m map[string]string) map[string]string { delete(m, "1.1"); m["1.3"] = "KVCache"; return m }, "not of layer 1"},
	} {
		t.Run("read/"+tc.name, func(t *testing.T) {
			mm := map[string]string{}
			for k, v := range meta {
				mm[k] = v
			}
			p := filepath.Join(dir, tc.name+".safetensors")
			if err := tensor.WriteSafetensors(p, names, ts, tc.edit(mm)); err != nil {
				t.Fatal(err)
			}
			if _, err := promptcache.Read(p); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	t.Run("read/offset-past-capacity", func(t *testing.T) {
		ts2 := slices.Clone(ts)
		for i, n := range names {
			if n == "0.2" {
				ts2[i] = tensor.FromInt32(tensor.Shape{}, []int32{257})
			}
		}
		p := filepath.Join(dir, "offset.safetensors")
		if err := tensor.WriteSafetensors(p, names, ts2, meta); err != nil {
			t.Fatal(err)
		}
		if _, err := promptcache.Read(p); err == nil || !strings.Contains(err.Error(), "offset 257, want 0 <= offset <= capacity 256") {
			t.Errorf("got %v, want the offset error", err)
		}
	})
}

func cacheDTypes(t *testing.T, m *minicpm5.Model) []tensor.DType {
	t.Helper()
	dts, err := m.CacheDTypes()
	if err != nil {
		t.Fatal(err)
	}
	return dts
}
