package convert

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/gguf"
)

// dropTensor and resizeTensor edit tinyGGUF's tensors.
func dropTensor(name string) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
	return func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		var out []gguf.WriteTensor
		for _, t := range ts {
			if t.Name != name {
				out = append(out, t)
			}
		}
		return kvs, out
	}
}

// TestConvertChecksOutput: a GGUF missing a tensor, or with one of the wrong shape, was
// converted with exit 0 and failed only at generate; now Convert loads what it wrote as
// generate does, fails naming the tensor, and leaves nothing behind (issue 19 item 5).
func TestConvertChecksOutput(t *testing.T) {
	cases := []struct {
		name string
		edit func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)
		want []string
	}{
		{"missing tensor", dropTensor("blk.0.attn_q.weight"), []string{"does not load", "model.layers.0.self_attn.q_proj"}},
		{"missing norm", dropTensor("blk.0.ffn_norm.weight"), []string{"does not load", "model.layers.0.post_attention_layernorm.weight"}},
		{"wrong shape", func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == "blk.0.ffn_up.weight" {
					ts[i].Dims = []uint64{tD, tFF / 2}
					ts[i].Data = ts[i].Data[:len(ts[i].Data)/2]
				}
			}
			return kvs, ts
		}, []string{"does not load", "model.layers.0.mlp.up_proj.weight"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := tinyGGUF(t, c.edit)
			parent := t.TempDir()
			// A new output directory: it must not exist afterwards.
			out := filepath.Join(parent, "model-mlx")
			_, err := Convert(src, out, Options{})
			if err == nil {
				t.Fatal("got no error, want the load check to fail")
			}
			for _, w := range append(c.want, out) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), ".converting-") {
				t.Errorf("error %q names the temporary directory", err)
			}
			if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("output %s exists after a failed conversion (%v)", out, err)
			}
			left, _ := os.ReadDir(parent)
			for _, e := range left {
				t.Errorf("left behind in %s: %s", parent, e.Name())
			}
			// An existing output directory keeps its files.
			old := filepath.Join(parent, "old")
			if err := os.MkdirAll(old, 0o755); err != nil {
				t.Fatal(err)
			}
			keep := filepath.Join(old, "model.safetensors")
			if err := os.WriteFile(keep, []byte("previous model"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := Convert(src, old, Options{}); err == nil {
				t.Fatal("second conversion: got no error")
			}
			if data, err := os.ReadFile(keep); err != nil || string(data) != "previous model" {
				t.Errorf("existing %s: got (%q, %v) after a failed conversion, want it untouched", keep, data, err)
			}
		})
	}
}

// TestConvertReplacesOldShards: converting into a directory holding other shards removes
// them (they would mix with the new ones), and the result loads.
func TestConvertReplacesOldShards(t *testing.T) {
	out := t.TempDir()
	stale := filepath.Join(out, "model-00001-of-00002.safetensors")
	if err := os.WriteFile(stale, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(out, "README.md")
	if err := os.WriteFile(other, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Convert(tinyGGUF(t, nil), out, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale shard %s still there (%v)", stale, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("unrelated file %s removed: %v", other, err)
	}
	if _, err := checkOutput(out, nil); err != nil {
		t.Errorf("converted model does not load: %v", err)
	}
}

// TestRequantizeOptionsChecked: bits 7, group size 48 and a file without K-quants were
// accepted (nothing was requantized, exit 0); each is now an error naming the value.
func TestRequantizeOptionsChecked(t *testing.T) {
	noK := func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		tiny := tinyGGUFTensors(t)
		for i := range ts {
			if ts[i].Type == gguf.Q4_K || ts[i].Type == gguf.Q6_K {
				ts[i] = tiny[ts[i].Name]
			}
		}
		return kvs, ts
	}
	cases := []struct {
		name string
		edit func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)
		opts Options
		want string
	}{
		{"bits 7", nil, Options{Requantize: true, Bits: 7, GroupSize: 64}, "requantize bits 7"},
		{"bits 1", nil, Options{Requantize: true, Bits: 1}, "requantize bits 1"},
		{"group size 48", nil, Options{Requantize: true, Bits: 4, GroupSize: 48}, "requantize group size 48"},
		{"no K-quants", noK, Options{Requantize: true}, "no K-quant weight matrix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			_, err := Convert(tinyGGUF(t, c.edit), out, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
			if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("output %s exists after the error", out)
			}
		})
	}
}

// tinyGGUFTensors returns Q8_0 stand-ins (same names and dims) for the K-quant tensors of
// tinyGGUF.
func tinyGGUFTensors(t *testing.T) map[string]gguf.WriteTensor {
	t.Helper()
	f, err := gguf.Open(tinyGGUF(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]gguf.WriteTensor{}
	for _, ti := range f.Tensors {
		n := 1
		for _, d := range ti.Dims {
			n *= int(d)
		}
		out[ti.Name] = gguf.WriteTensor{Name: ti.Name, Dims: ti.Dims, Type: gguf.Q8_0, Data: blocks(rngFor(ti.Name), gguf.Q8_0, n/32)}
	}
	return out
}

// rngFor seeds a generator from a tensor name.
func rngFor(name string) *rand.Rand {
	var h uint64
	for _, c := range name {
		h = h*31 + uint64(c)
	}
	return rand.New(rand.NewPCG(h, 3))
}

// TestConvertCheckHook: Options.Check sees the written model and its error fails the
// conversion with nothing left behind (the mlxgo command loads the tokenizer with it).
func TestConvertCheckHook(t *testing.T) {
	parent := t.TempDir()
	out := filepath.Join(parent, "out")
	var saw []string
	_, err := Convert(tinyGGUF(t, nil), out, Options{Check: func(dir string) error {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			saw = append(saw, e.Name())
		}
		return errors.New("tokenizer.json: broken")
	}})
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json: broken") {
		t.Fatalf("got %v, want the check's error", err)
	}
	if strings.Join(saw, ",") != "config.json,model.safetensors,tokenizer.json,tokenizer_config.json" {
		t.Errorf("check saw %v, want the four model files", saw)
	}
	if left, _ := os.ReadDir(parent); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}
