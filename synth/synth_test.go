package synth

import (
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/tensor"
)

const fixtures = "../conformance/testdata/models"

// tinyDir writes the tiny optiq preset once per test binary.
var tinyDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "synth-tiny-")
	if err != nil {
		return "", err
	}
	return dir, WriteMLX(dir, Presets["tiny"], nil)
})

func TestMain(m *testing.M) {
	code := m.Run()
	if dir, err := tinyDir(); err == nil {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// The oracle's fixtures were saved by mlx_lm itself (quantize_model,
// save_model, save_config): with the same shapes and recipe, our
// config.json and index must be the same bytes, and our safetensors header
// must list the same tensors with the same dtypes and shapes.
func TestMatchesMLXLMFiles(t *testing.T) {
	for _, c := range []struct {
		fixture string
		quant   string
		gs      int
		layers  int
	}{
		{"optiq-bf16", "optiq", 64, 3},
		{"q4g64-bf16", "q4", 64, 3},
		{"q8g32-bf16", "q8", 32, 3},
		{"fp-bf16", "none", 64, 2},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			s := Presets["tiny"]
			s.Quant, s.GroupSize, s.Layers = c.quant, c.gs, c.layers
			dir := filepath.Join(fixtures, c.fixture)
			for _, f := range []struct{ name, got string }{{"config.json", s.Config()}, {"model.safetensors.index.json", s.Index()}} {
				want, err := os.ReadFile(filepath.Join(dir, f.name))
				if err != nil {
					t.Fatal(err)
				}
				if f.got != string(want) {
					t.Errorf("%s differs from mlx_lm's:\ngot:\n%s\nwant:\n%s", f.name, f.got, want)
				}
			}
			st, err := tensor.OpenSafetensors(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ours := s.Tensors()
			if len(ours) != len(st.Names()) {
				t.Errorf("tensor count: got %d, want %d", len(ours), len(st.Names()))
			}
			for _, tt := range ours {
				info, ok := st.Info(tt.Name)
				if !ok {
					t.Errorf("tensor %s: not in mlx_lm's file", tt.Name)
					continue
				}
				if info.DType != tt.DType || !info.Shape.Equal(tt.Shape) {
					t.Errorf("tensor %s: got %v %v, want %v %v", tt.Name, tt.DType, tt.Shape, info.DType, info.Shape)
				}
			}
		})
	}
}

// The full-size preset's packed shapes, from MLX's affine format (group
// size 64, 32-bit words): 4-bit rows hold in/8 words and in/64 groups,
// 8-bit rows in/4 words.
func TestMiniCPM5Shapes(t *testing.T) {
	s := Presets["minicpm5-1b"]
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	byName := map[string]Tensor{}
	sawFloat := false
	for _, tt := range s.Tensors() {
		byName[tt.Name] = tt
		if tt.DType != tensor.U32 {
			sawFloat = true
		} else if sawFloat {
			t.Errorf("tensor %s: U32 after a float tensor; packed weights must come first", tt.Name)
		}
	}
	for _, c := range []struct {
		name  string
		shape tensor.Shape
	}{
		{"model.embed_tokens.weight", tensor.Shape{130560, 192}}, // 4-bit
		{"model.embed_tokens.scales", tensor.Shape{130560, 24}},
		{"model.layers.0.self_attn.q_proj.weight", tensor.Shape{2048, 192}},
		{"model.layers.0.self_attn.k_proj.weight", tensor.Shape{256, 192}},
		{"model.layers.0.self_attn.o_proj.weight", tensor.Shape{1536, 512}}, // 8-bit
		{"model.layers.0.self_attn.o_proj.scales", tensor.Shape{1536, 32}},
		{"model.layers.0.mlp.gate_proj.weight", tensor.Shape{4608, 384}}, // 8-bit
		{"model.layers.0.mlp.up_proj.weight", tensor.Shape{4608, 192}},
		{"model.layers.0.mlp.down_proj.weight", tensor.Shape{1536, 576}},
		{"model.layers.0.mlp.down_proj.biases", tensor.Shape{1536, 72}},
		{"model.layers.23.mlp.down_proj.weight", tensor.Shape{1536, 1152}}, // last block: 8-bit
		{"model.layers.23.self_attn.q_proj.weight", tensor.Shape{2048, 384}},
		{"lm_head.weight", tensor.Shape{130560, 384}},
		{"model.norm.weight", tensor.Shape{1536}},
	} {
		if got, ok := byName[c.name]; !ok || !got.Shape.Equal(c.shape) {
			t.Errorf("%s: got %v (present %v), want %v", c.name, got.Shape, ok, c.shape)
		}
	}
	// 170 linears (embedding, 24×7, lm_head) × 3 tensors + 49 norms.
	if got, want := len(byName), 170*3+2*24+1; got != want {
		t.Errorf("tensor count: got %d, want %d", got, want)
	}
	// 1 + 24*7 + 1 linears of [out, in], 49 norms of 1536.
	want := int64(130560*1536*2) + 24*int64(2048*1536+2*256*1536+1536*2048+3*4608*1536) + 49*1536
	if got := s.Parameters(); got != want {
		t.Errorf("parameters: got %d, want %d", got, want)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"zero layers", func(s *Spec) { s.Layers = 0 }, "layers is 0"},
		{"gqa", func(s *Spec) { s.KVHeads = 3 }, "not a multiple of kv-heads"},
		{"odd head dim", func(s *Spec) { s.HeadDim = 33 }, "odd"},
		{"quant", func(s *Spec) { s.Quant = "q3" }, `quant "q3"`},
		{"group", func(s *Spec) { s.GroupSize = 48 }, "group size 48"},
		{"hidden not whole groups", func(s *Spec) { s.Hidden = 96 }, "hidden 96 is not a multiple"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Presets["tiny"]
			c.edit(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// The written checkpoint opens with our loader, and its scales and biases
// describe groups centred on zero: bias = -scale·(2^bits-1)/2 up to bf16
// rounding (both come from the same half range a: scale 2a/levels, bias -a).
func TestWriteMLXOpens(t *testing.T) {
	dir, err := tinyDir()
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.DType != tensor.BF16 || ck.Head == nil || len(ck.Layers) != 3 {
		t.Fatalf("checkpoint: dtype %v, head %v, %d layers; want BF16, untied head, 3 layers", ck.DType, ck.Head != nil, len(ck.Layers))
	}
	for _, l := range []*checkpoint.Linear{ck.Layers[0].Q, ck.Layers[0].O, ck.Layers[2].Q, ck.Head} {
		sc, bi := l.Scales.ToFloat32(), l.Biases.ToFloat32()
		levels := float64(int(1)<<l.Params.Bits - 1)
		for i := range sc {
			want := -float64(sc[i]) * levels / 2
			if sc[i] <= 0 || math.Abs(float64(bi[i])-want) > 0.01*math.Abs(want) {
				t.Fatalf("%s group %d: scale %v bias %v, want scale > 0 and bias ≈ %v", l.Path, i, sc[i], bi[i], want)
			}
		}
	}
	if ck.Layers[0].O.Params.Bits != 8 || ck.Layers[0].Q.Params.Bits != 4 || ck.Layers[2].Q.Params.Bits != 8 {
		t.Errorf("bits: o_proj %d, q_proj %d, last q_proj %d; want 8, 4, 8", ck.Layers[0].O.Params.Bits, ck.Layers[0].Q.Params.Bits, ck.Layers[2].Q.Params.Bits)
	}
}

// mlx_lm.load accepts the directory as it is and runs it to finite logits.
func TestMLXLMLoads(t *testing.T) {
	py := testenv.Python(t)
	dir, err := tinyDir()
	if err != nil {
		t.Fatal(err)
	}
	script := `
import sys, mlx.core as mx, mlx_lm
mx.set_default_device(mx.cpu)
model, tok = mlx_lm.load(sys.argv[1])
y = model(mx.array([[1, 2, 3]]))
assert y.shape == (1, 3, 1000), y.shape
assert mx.isfinite(y.astype(mx.float32)).all().item()
print("ok", y.dtype)
`
	out, err := exec.Command(py, "-c", script, dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok mlx.core.bfloat16") {
		t.Fatalf("mlx_lm.load(%s): %v\n%s", dir, err, out)
	}
}

// The GGUF twin has llama.cpp's tensor names, GGUF dims {in, out}, Q8_0
// exactly where the MLX checkpoint is 8-bit, the MLX norms' values, and
// Q4_0 deltas matching the MLX scales of the same group: d = a/8 and
// scale = 2a/15, so d = scale·15/16 up to f16 and bf16 rounding.
func TestGGUFTwin(t *testing.T) {
	mlxDir, err := tinyDir()
	if err != nil {
		t.Fatal(err)
	}
	s := Presets["tiny"]
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := WriteGGUF(path, s, nil); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, want := len(f.Tensors), 2+9*3+1; got != want {
		t.Errorf("tensors: got %d, want %d", got, want)
	}
	for _, c := range []struct {
		name string
		dims []uint64
		typ  gguf.Type
	}{
		{"token_embd.weight", []uint64{128, 1000}, gguf.Q4_0},
		{"blk.0.attn_q.weight", []uint64{128, 512}, gguf.Q4_0},
		{"blk.0.attn_k.weight", []uint64{128, 64}, gguf.Q4_0},
		{"blk.0.attn_output.weight", []uint64{512, 128}, gguf.Q8_0},
		{"blk.0.ffn_gate.weight", []uint64{128, 384}, gguf.Q8_0},
		{"blk.0.ffn_down.weight", []uint64{384, 128}, gguf.Q4_0},
		{"blk.2.attn_q.weight", []uint64{128, 512}, gguf.Q8_0},
		{"blk.2.ffn_norm.weight", []uint64{128}, gguf.F32},
		{"output_norm.weight", []uint64{128}, gguf.F32},
		{"output.weight", []uint64{128, 1000}, gguf.Q8_0},
	} {
		ti, ok := f.Tensor(c.name)
		if !ok || ti.Type != c.typ || len(ti.Dims) != len(c.dims) || ti.Dims[0] != c.dims[0] || ti.Dims[len(ti.Dims)-1] != c.dims[len(c.dims)-1] {
			t.Errorf("%s: got %+v (present %v), want dims %v type %v", c.name, ti, ok, c.dims, c.typ)
		}
	}
	for key, want := range map[string]int64{"llama.embedding_length": 128, "llama.block_count": 3, "llama.attention.head_count": 16,
		"llama.attention.head_count_kv": 2, "llama.attention.key_length": 32, "llama.feed_forward_length": 384} {
		if v, ok, err := f.Int(key); !ok || err != nil || v != want {
			t.Errorf("%s: got %d (present %v, error %v), want %d", key, v, ok, err, want)
		}
	}
	if v, _, err := f.Strings("tokenizer.ggml.tokens"); err != nil || len(v) != 1000 || v[3+10] != "<0x0A>" {
		t.Fatalf("tokens: %d of them (error %v); want 1000 with token 13 <0x0A>", len(v), err)
	}
	data := func(name string) []byte {
		ti, _ := f.Tensor(name)
		return f.Data(ti)
	}
	ck, err := checkpoint.Open(mlxDir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	norm, want := data("blk.1.ffn_norm.weight"), ck.Layers[1].PostAttentionNorm.ToFloat32()
	for i, w := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(norm[4*i:])); got != w {
			t.Fatalf("blk.1.ffn_norm[%d]: got %v, want the MLX norm's %v", i, got, w)
		}
	}
	q, scales := data("blk.0.attn_q.weight"), ck.Layers[0].Q.Scales.ToFloat32()
	for blk := 0; blk < len(q)/18; blk++ {
		d := tensor.F16ToFloat32(binary.LittleEndian.Uint16(q[18*blk:]))
		want := scales[blk/2] * 15 / 16 // two 32-blocks per 64-group
		if math.Abs(float64(d-want)) > 0.01*float64(want) {
			t.Fatalf("blk.0.attn_q block %d: delta %v, want ≈ %v (MLX scale %v · 15/16)", blk, d, want, scales[blk/2])
		}
	}
}

func TestPyFloat(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{1e-5, "1e-05"}, {10000, "10000.0"}, {0.1, "0.1"}, {1e-4, "0.0001"}, {1.234e-5, "1.234e-05"},
		{1e16, "1e+16"}, {123456789012345.0, "123456789012345.0"}, {-2.5, "-2.5"}, {0, "0.0"},
	} {
		if got := pyFloat(c.f); got != c.want {
			t.Errorf("pyFloat(%v): got %q, want %q", c.f, got, c.want)
		}
	}
}
