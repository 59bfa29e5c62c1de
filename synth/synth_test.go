package synth

import (
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	_ "github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
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

// The real presets' parameter counts equal the models' published totals
// (the safetensors parameter count on each Hugging Face model page; for
// SmolLM2-360M by hand: 49152·960 embedding + 32 layers × (2·960·960 q, o
// + 2·960·320 k, v + 3·960·2560 MLP + 2·960 norms) + 960 = 361,821,120).
// Qwen2.5-0.5B's published 494,032,768 includes its q/k/v biases, which
// the Llama shape leaves out: 24 × (896 + 128 + 128) = 27,648 fewer.
func TestPresetParameters(t *testing.T) {
	for name, want := range map[string]int64{
		"smollm2-135m": 134_515_008, "smollm2-360m": 361_821_120, "smollm2-1.7b": 1_711_376_384,
		"llama3.2-1b": 1_235_814_400, "llama3.2-3b": 3_212_749_824, "qwen2.5-0.5b": 494_032_768 - 27_648,
	} {
		if got := Presets[name].Parameters(); got != want {
			t.Errorf("%s: %d parameters, want %d", name, got, want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		name   string
		preset string
		edit   func(*Spec)
		want   string
	}{
		{"zero layers", "tiny", func(s *Spec) { s.Layers = 0 }, "layers is 0"},
		{"gqa", "tiny", func(s *Spec) { s.KVHeads = 3 }, "not a multiple of kv-heads"},
		{"odd head dim", "tiny", func(s *Spec) { s.HeadDim = 33 }, "odd"},
		{"quant name", "tiny", func(s *Spec) { s.Quant = "int4" }, `quant "int4"`},
		{"quant group not a number", "tiny", func(s *Spec) { s.Quant = "q4gx" }, `quant "q4gx"`},
		{"bits", "tiny", func(s *Spec) { s.Quant = "q7" }, "7 bits, want one of [2 3 4 5 6 8]"},
		{"group", "tiny", func(s *Spec) { s.GroupSize = 48 }, "group size 48"},
		{"group in quant", "tiny", func(s *Spec) { s.Quant = "q4g16" }, "group size 16"},
		{"hidden not whole groups", "tiny", func(s *Spec) { s.Hidden = 96 }, "hidden 96 is not a multiple"},
		// SmolLM2-135M's width 576 is 4.5 groups of 128.
		{"smollm2-135m g128", "smollm2-135m", func(s *Spec) { s.Quant = "q4g128" }, "hidden 576 is not a multiple of the group size 128"},
		{"dense dtype mismatch", "tiny", func(s *Spec) { s.Quant, s.DType = "f16", tensor.F32 }, "quant f16 stores F16 weights but the dtype is F32"},
		{"dtype", "tiny", func(s *Spec) { s.DType = tensor.I32 }, "dtype I32, want"},
		{"embed bits", "tiny", func(s *Spec) { s.EmbedBits = 7 }, "embed bits 7 with quant optiq"},
		{"embed bits dense", "tiny", func(s *Spec) { s.Quant, s.EmbedBits = "bf16", 8 }, "embed bits 8 with quant bf16"},
		{"gguf q4 type", "tiny", func(s *Spec) { s.Q4Type = "q5_0" }, `gguf 4-bit type "q5_0"`},
		// A huge dimension ran out of memory (layers) or ran for minutes
		// (hidden) before anything was refused (issue 19).
		{"layers huge", "tiny", func(s *Spec) { s.Layers = 1000000000 }, "layers is 1000000000, more than the limit of 65536"},
		{"hidden huge", "tiny", func(s *Spec) { s.Hidden = 1000000000 }, "hidden is 1000000000, more than the limit of 1048576"},
		{"params", "tiny", func(s *Spec) { s.Hidden, s.Intermediate, s.Layers = 1<<20, 1<<20, 1<<10 }, "parameters, more than the limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Presets[c.preset]
			c.edit(&s)
			err := s.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// Bit widths GGUF has no same-arithmetic type for are refused by name, and
// nothing is written.
func TestNoGGUFTwin(t *testing.T) {
	for _, q := range []string{"q2g32", "q3g64", "q6g128", "q4g32-e6"} {
		s := Presets["tiny"]
		s.Quant = q
		if b, e, ok := strings.Cut(q, "-e"); ok {
			s.Quant, s.EmbedBits = b, int(e[0]-'0')
		}
		path := filepath.Join(t.TempDir(), "x.gguf")
		err := WriteGGUF(path, s, nil)
		if !errors.Is(err, ErrNoTwin) || !strings.Contains(err.Error(), "quant "+s.Quant) {
			t.Errorf("%s: got %v, want ErrNoTwin naming the quant", q, err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("%s: %s exists (stat error %v); want nothing written", q, path, err)
		}
	}
	s := Presets["tiny"]
	s.Vocab = 258
	if err := s.GGUFTwin(); err == nil || !strings.Contains(err.Error(), "at least 259 tokens") {
		t.Errorf("vocab 258: got %v, want the vocabulary error", err)
	}
}

// The written checkpoint opens with our loader; every group's scale is
// exact in float16 and its bias is exactly -2^(bits-1)·scale.
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
		half := float32(int(1) << (l.Params.Bits - 1))
		for i := range sc {
			if sc[i] <= 0 || tensor.RoundF16(sc[i]) != sc[i] || bi[i] != -half*sc[i] {
				t.Fatalf("%s group %d: scale %v bias %v, want scale > 0 exact in f16 and bias %v", l.Path, i, sc[i], bi[i], -half*sc[i])
			}
		}
	}
	if ck.Layers[0].O.Params.Bits != 8 || ck.Layers[0].Q.Params.Bits != 4 || ck.Layers[2].Q.Params.Bits != 8 {
		t.Errorf("bits: o_proj %d, q_proj %d, last q_proj %d; want 8, 4, 8", ck.Layers[0].O.Params.Bits, ck.Layers[0].Q.Params.Bits, ck.Layers[2].Q.Params.Bits)
	}
}

// mlx_lm.load accepts the directory as it is and runs it to finite logits
// in the spec's dtype: the optiq tiny preset, and tied, mixed-width, f16,
// f32 and dense forms (q3 has the packing that straddles words).
func TestMLXLMLoads(t *testing.T) {
	py := testenv.Python(t)
	tied := Presets["smollm2-135m"]
	tied.Layers, tied.Vocab, tied.EmbedBits, tied.DType = 2, 1000, 8, tensor.F16
	specs := map[string]Spec{"optiq": Presets["tiny"], "smollm2-135m-e8-f16": tied}
	for name, edit := range map[string]func(*Spec){
		"q3g64-f32": func(s *Spec) { s.Quant, s.DType = "q3g64", tensor.F32 },
		"f16":       func(s *Spec) { s.Quant, s.DType, s.Tied = "f16", tensor.F16, true },
	} {
		s := Presets["tiny"]
		edit(&s)
		specs[name] = s
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
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteMLX(dir, s, nil); err != nil {
				t.Fatal(err)
			}
			want := "ok mlx.core." + map[tensor.DType]string{tensor.BF16: "bfloat16", tensor.F16: "float16", tensor.F32: "float32"}[s.dtype()]
			out, err := exec.Command(py, "-c", script, dir).CombinedOutput()
			if err != nil || !strings.Contains(string(out), want) {
				t.Fatalf("mlx_lm.load(%s): %v\n%s\nwant %q", dir, err, out, want)
			}
		})
	}
}

// The tiny optiq twin has llama.cpp's tensor names, GGUF dims {in, out},
// Q8_0 exactly where the MLX checkpoint is 8-bit, Q4_0 where it is 4-bit,
// and the llama metadata and vocabulary. (Values: TestPresets and
// TestQuants compare every tensor.)
func TestGGUFTwin(t *testing.T) {
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
		"llama.attention.head_count_kv": 2, "llama.attention.key_length": 32, "llama.feed_forward_length": 384, "general.file_type": 2} {
		if v, ok, err := f.Int(key); !ok || err != nil || v != want {
			t.Errorf("%s: got %d (present %v, error %v), want %d", key, v, ok, err, want)
		}
	}
	if v, _, err := f.Strings("tokenizer.ggml.tokens"); err != nil || len(v) != 1000 || v[3+10] != "<0x0A>" {
		t.Fatalf("tokens: %d of them (error %v); want 1000 with token 13 <0x0A>", len(v), err)
	}
	mlxDir, err := tinyDir()
	if err != nil {
		t.Fatal(err)
	}
	compareTwin(t, s, mlxDir, path)
}

// Every real preset's full spec validates; a 1-layer, 300-token variant of
// it (the widths kept) loads with the Llama graph and runs a forward to
// finite logits, and its GGUF twin holds the same tensors.
func TestPresets(t *testing.T) {
	for _, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			s := Presets[name]
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			s.Layers, s.Vocab = 1, 300
			checkSpec(t, s)
		})
	}
}

// Every bits × group size, each dtype, the dense forms and the OptiQ mix on
// the tiny shapes: the checkpoint loads and runs; where there is a twin it
// holds the same tensors.
func TestQuants(t *testing.T) {
	cases := []struct {
		quant string
		dt    tensor.DType
		q4    string
	}{
		{"q4g32", tensor.F16, "q4_1"}, {"q4g32", tensor.F32, ""}, {"q8g32", tensor.F16, ""},
		{"optiq", tensor.F16, ""}, {"optiq", tensor.F32, "q4_1"},
		{"f16", tensor.F16, ""},
		{"q4g32-e8", tensor.F16, "q4_1"}, {"q8g64-e3", tensor.BF16, ""}, {"q4g64-e5", tensor.F32, ""}, {"bf16", tensor.BF16, ""}, {"f32", tensor.F32, ""}, {"none", tensor.F16, ""},
	}
	for _, b := range Bits {
		for _, g := range GroupSizes {
			cases = append(cases, struct {
				quant string
				dt    tensor.DType
				q4    string
			}{"q" + strconv.Itoa(b) + "g" + strconv.Itoa(g), tensor.BF16, ""})
		}
	}
	for _, c := range cases {
		t.Run(c.quant+"-"+c.dt.String()+c.q4, func(t *testing.T) {
			s := Presets["tiny"]
			q, e, _ := strings.Cut(c.quant, "-e")
			s.Quant, s.DType, s.Q4Type, s.Layers, s.Vocab = q, c.dt, c.q4, 2, 300
			if e != "" {
				s.EmbedBits, _ = strconv.Atoi(e)
			}
			checkSpec(t, s)
		})
	}
}

// checkSpec writes s in both formats (the GGUF where it has a twin), runs a
// forward of the MLX checkpoint on the CPU backend, and compares the twin.
func checkSpec(t *testing.T, s Spec) {
	t.Helper()
	dir := t.TempDir()
	mlxDir := filepath.Join(dir, "mlx")
	if err := WriteMLX(mlxDir, s, nil); err != nil {
		t.Fatal(err)
	}
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m, err := minicpm5.Load(b, mlxDir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.DType() != s.dtype() {
		t.Errorf("model dtype %v, want %v", m.DType(), s.dtype())
	}
	logits, err := m.PrefillLast([]int32{1, 2, 3}, m.NewCache(), 4)
	if err != nil {
		t.Fatal(err)
	}
	host, err := b.ToHost(logits)
	if err != nil {
		t.Fatal(err)
	}
	v := host.ToFloat32()
	if len(v) != s.Vocab {
		t.Fatalf("logits: %d values, want vocab %d", len(v), s.Vocab)
	}
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("logit %d is %v", i, x)
		}
	}
	if err := s.GGUFTwin(); err != nil {
		if !errors.Is(err, ErrNoTwin) {
			t.Fatal(err)
		}
		return
	}
	path := filepath.Join(dir, "twin.gguf")
	if err := WriteGGUF(path, s, nil); err != nil {
		t.Fatal(err)
	}
	compareTwin(t, s, mlxDir, path)
}

// compareTwin checks that the GGUF file at path holds the MLX checkpoint's
// tensors: every GGUF tensor, dequantized by gguf.Dequantize, equals the
// MLX tensor of the same role, dequantized as MLX does (scale·code + bias,
// exact in float32), value for value; and there is a GGUF tensor for each
// MLX weight and norm.
func compareTwin(t *testing.T, s Spec, mlxDir, path string) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := tensor.OpenSafetensors(filepath.Join(mlxDir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mlxName := map[string]string{"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
	for i := range s.Layers {
		p, g := "model.layers."+strconv.Itoa(i)+".", "blk."+strconv.Itoa(i)+"."
		for gn, mn := range map[string]string{"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
			"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
			"ffn_gate": "mlp.gate_proj", "ffn_down": "mlp.down_proj", "ffn_up": "mlp.up_proj"} {
			mlxName[g+gn] = p + mn
		}
	}
	want := 0
	for _, n := range st.Names() {
		if strings.HasSuffix(n, ".weight") {
			want++
		}
	}
	if len(f.Tensors) != want {
		t.Errorf("gguf has %d tensors, the MLX checkpoint %d weights and norms", len(f.Tensors), want)
	}
	for _, ti := range f.Tensors {
		base := strings.TrimSuffix(ti.Name, ".weight")
		mn, ok := mlxName[base]
		if !ok {
			t.Errorf("gguf tensor %s: no MLX counterpart", ti.Name)
			continue
		}
		got := make([]float32, ti.Elements())
		if err := gguf.Dequantize(ti.Type, f.Data(ti), got); err != nil {
			t.Fatalf("%s: %v", ti.Name, err)
		}
		w, err := st.Tensor(mn + ".weight")
		if err != nil {
			t.Fatal(err)
		}
		var ref []float32
		if w.DType == tensor.U32 {
			sc, err1 := st.Tensor(mn + ".scales")
			bi, err2 := st.Tensor(mn + ".biases")
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			ref = dequantMLX(w.Data, sc.ToFloat32(), bi.ToFloat32(), len(got))
		} else {
			ref = w.ToFloat32()
		}
		if len(ref) != len(got) {
			t.Fatalf("%s: %d values, MLX %s has %d", ti.Name, len(got), mn, len(ref))
		}
		for i := range got {
			if got[i] != ref[i] {
				t.Fatalf("%s (%v) element %d: %v, MLX %s has %v", ti.Name, ti.Type, i, got[i], mn, ref[i])
			}
		}
	}
}

// dequantMLX dequantizes n elements of MLX affine codes (LSB-first bit
// stream of bits = 8·len(codes)/n bits each, groups of n/len(scales)).
func dequantMLX(codes []byte, scales, biases []float32, n int) []float32 {
	bits := 8 * len(codes) / n
	group := n / len(scales)
	out := make([]float32, n)
	for e := range n {
		var q uint32
		for k := range bits {
			bit := e*bits + k
			q |= uint32(codes[bit/8]>>(bit%8)&1) << k
		}
		out[e] = scales[e/group]*float32(q) + biases[e/group]
	}
	return out
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
