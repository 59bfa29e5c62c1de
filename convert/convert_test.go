package convert

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// A tiny llama in GGUF form, one tensor type per weight so that every
// supported type goes through Convert and checkpoint.Open.
const (
	tD, tH, tKV, tHD, tFF, tL = 256, 4, 2, 64, 256, 1
)

// byteTokens returns the 256 byte-level BPE symbols (GPT-2's bytes_to_unicode).
func byteTokens() []string {
	var out []string
	var rest []int
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			out = append(out, string(rune(b)))
		} else {
			rest = append(rest, b)
		}
	}
	for i := range rest {
		out = append(out, string(rune(256+i)))
	}
	return out
}

func tinyTokens() ([]string, []int32, []string) {
	toks := append(byteTokens(), "he", "<|end|>", "<|user|>")
	types := make([]int32, len(toks))
	for i := range types {
		types[i] = tokenNormal
	}
	types[257], types[258] = tokenControl, tokenUserDefined
	return toks, types, []string{"h e"}
}

// blocks returns n random blocks of typ with small finite F16 scales.
func blocks(rng *rand.Rand, typ gguf.Type, n int) []byte {
	bb := typ.BlockBytes()
	b := make([]byte, n*bb)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	scaleAt := map[gguf.Type][]int{gguf.Q4_0: {0}, gguf.Q4_1: {0, 2}, gguf.Q8_0: {0}, gguf.Q4_K: {0, 2}, gguf.Q6_K: {208}, gguf.Q5_0: {0}}[typ]
	for k := range n {
		for _, off := range scaleAt {
			binary.LittleEndian.PutUint16(b[k*bb+off:], tensor.Float32ToF16(float32(rng.NormFloat64()*0.005)))
		}
	}
	return b
}

func floats(rng *rand.Rand, typ gguf.Type, n int, one bool) []byte {
	b := make([]byte, 0, n*4)
	for range n {
		v := float32(rng.NormFloat64() * 0.05)
		if one {
			v = 1
		}
		switch typ {
		case gguf.F32:
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		case gguf.F16:
			b = binary.LittleEndian.AppendUint16(b, tensor.Float32ToF16(v))
		case gguf.BF16:
			b = binary.LittleEndian.AppendUint16(b, tensor.Float32ToBF16(v))
		}
	}
	return b
}

// tinyGGUF writes the tiny model; edit may change its metadata and tensors.
func tinyGGUF(t testing.TB, edit func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 8))
	toks, types, merges := tinyTokens()
	V := uint64(len(toks))
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.Str("llama")},
		{Key: "llama.block_count", Value: gguf.U32(tL)},
		{Key: "llama.context_length", Value: gguf.U32(512)},
		{Key: "llama.embedding_length", Value: gguf.U32(tD)},
		{Key: "llama.feed_forward_length", Value: gguf.U32(tFF)},
		{Key: "llama.attention.head_count", Value: gguf.U32(tH)},
		{Key: "llama.attention.head_count_kv", Value: gguf.U32(tKV)},
		{Key: "llama.rope.freq_base", Value: gguf.F32Value(10000)},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.F32Value(1e-5)},
		{Key: "llama.rope.dimension_count", Value: gguf.U32(tHD)},
		{Key: "tokenizer.ggml.model", Value: gguf.Str("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.Str("smollm")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strs(toks)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.I32s(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.Strs(merges)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.U32(257)},
		{Key: "tokenizer.chat_template", Value: gguf.Str("{% for m in messages %}{{ m['content'] }}<|end|>{% endfor %}")},
	}
	q := func(name string, typ gguf.Type, in, out uint64) gguf.WriteTensor {
		return gguf.WriteTensor{Name: name, Dims: []uint64{in, out}, Type: typ, Data: blocks(rng, typ, int(in*out)/typ.BlockSize())}
	}
	fl := func(name string, typ gguf.Type, dims []uint64, one bool) gguf.WriteTensor {
		n := 1
		for _, d := range dims {
			n *= int(d)
		}
		return gguf.WriteTensor{Name: name, Dims: dims, Type: typ, Data: floats(rng, typ, n, one)}
	}
	ts := []gguf.WriteTensor{
		q("token_embd.weight", gguf.Q8_0, tD, V),
		fl("output_norm.weight", gguf.F32, []uint64{tD}, true),
		fl("blk.0.attn_norm.weight", gguf.F32, []uint64{tD}, true),
		fl("blk.0.ffn_norm.weight", gguf.F32, []uint64{tD}, true),
		q("blk.0.attn_q.weight", gguf.Q4_0, tD, tH*tHD),
		q("blk.0.attn_k.weight", gguf.Q4_1, tD, tKV*tHD),
		fl("blk.0.attn_v.weight", gguf.F16, []uint64{tD, tKV * tHD}, false),
		q("blk.0.attn_output.weight", gguf.Q6_K, tH*tHD, tD),
		fl("blk.0.ffn_gate.weight", gguf.BF16, []uint64{tD, tFF}, false),
		fl("blk.0.ffn_up.weight", gguf.F32, []uint64{tD, tFF}, false),
		q("blk.0.ffn_down.weight", gguf.Q4_K, tFF, tD),
	}
	if edit != nil {
		kvs, ts = edit(kvs, ts)
	}
	p := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := gguf.WriteFile(p, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConvertTiny(t *testing.T) {
	out := t.TempDir()
	res, err := Convert(tinyGGUF(t, nil), out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "blk.0.ffn_down.weight (Q4_K)") || !strings.Contains(res.Notes[0], "blk.0.attn_output.weight (Q6_K)") {
		t.Errorf("notes %q: want the two dequantized K-quant tensors named", res.Notes)
	}
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	c, L := ck.Config, ck.Layers[0]
	if !c.TieWordEmbeddings || c.HeadDim != tHD || c.NumKeyValueHeads != tKV || len(c.EOSTokenIDs) != 1 || c.EOSTokenIDs[0] != 257 {
		t.Errorf("config %+v", c)
	}
	for _, r := range []struct {
		name  string
		q     bool
		bits  int
		dtype tensor.DType
	}{
		{"q_proj", L.Q.Quantized, 4, tensor.U32}, {"k_proj", L.K.Quantized, 4, tensor.U32},
		{"v_proj", L.V.Quantized, 0, tensor.F16}, {"o_proj", L.O.Quantized, 0, tensor.F32},
		{"gate_proj", L.Gate.Quantized, 0, tensor.BF16}, {"up_proj", L.Up.Quantized, 0, tensor.F32},
		{"down_proj", L.Down.Quantized, 0, tensor.F32},
	} {
		var w *tensor.Dense
		switch r.name {
		case "q_proj":
			w = L.Q.Weight
		case "k_proj":
			w = L.K.Weight
		case "v_proj":
			w = L.V.Weight
		case "o_proj":
			w = L.O.Weight
		case "gate_proj":
			w = L.Gate.Weight
		case "up_proj":
			w = L.Up.Weight
		case "down_proj":
			w = L.Down.Weight
		}
		if r.q != (r.bits > 0) || w.DType != r.dtype {
			t.Errorf("%s: quantized %v, weight %s; want quantized %v, %s", r.name, r.q, w.DType, r.bits > 0, r.dtype)
		}
	}
	if !ck.Embed.Quantized || ck.Embed.Params.Bits != 8 {
		t.Errorf("embedding: %+v, want 8-bit", ck.Embed.Params)
	}
}

// forwardPermute is llama.cpp's convert_hf_to_gguf permute on the rows:
// reshape (heads, 2, hd/2) and swap the last two, so Hugging Face row
// h·hd + j·hd/2 + i lands on row h·hd + 2i + j.
func forwardPermute(t *tensor.Dense, heads int) *tensor.Dense {
	rows := t.Shape[0]
	hd, rb := rows/heads, len(t.Data)/rows
	out := tensor.New(t.DType, t.Shape)
	for h := range heads {
		for j := range 2 {
			for i := range hd / 2 {
				src, dst := h*hd+j*hd/2+i, h*hd+2*i+j
				copy(out.Data[dst*rb:(dst+1)*rb], t.Data[src*rb:(src+1)*rb])
			}
		}
	}
	return out
}

// TestRoPEPermutation checks the q/k un-permutation on the model: the
// converted directory (Hugging Face rows, standard RoPE) gives the same
// logits as the same weights permuted back to llama.cpp's rows and run
// with traditional (adjacent-pair) RoPE, which is how llama.cpp runs the
// file; and without the permutation the logits differ, so the check bites.
func TestRoPEPermutation(t *testing.T) {
	out := t.TempDir()
	if _, err := Convert(tinyGGUF(t, nil), out, Options{}); err != nil {
		t.Fatal(err)
	}
	variant := func(name string, permute bool) string {
		dir := filepath.Join(t.TempDir(), name)
		os.MkdirAll(dir, 0o755)
		var cfg map[string]any
		readJSON(t, filepath.Join(out, "config.json"), &cfg)
		cfg["rope_traditional"] = true
		b, _ := json.Marshal(cfg)
		os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
		set, err := tensor.OpenSafetensorsDir(out)
		if err != nil {
			t.Fatal(err)
		}
		defer set.Close()
		var names []string
		var ts []*tensor.Dense
		for _, n := range set.Names() {
			d, err := set.Tensor(n)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case permute && strings.Contains(n, "q_proj"):
				d = forwardPermute(d, tH)
			case permute && strings.Contains(n, "k_proj"):
				d = forwardPermute(d, tKV)
			default:
				d = d.Clone()
			}
			names, ts = append(names, n), append(ts, d)
		}
		if err := tensor.WriteSafetensors(filepath.Join(dir, "model.safetensors"), names, ts, nil); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	logits := func(dir string) []float64 {
		b, err := cpu.New(backend.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := minicpm5.Load(b, dir)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ids := []int32{5, 77, 256, 3, 140, 9, 200, 31}
		x := b.FromHost(tensor.FromInt32(tensor.Shape{1, len(ids)}, ids))
		o, err := m.Forward(x, nil, minicpm5.ForwardOptions{})
		if err != nil {
			t.Fatal(err)
		}
		d, err := b.ToHost(o.Logits)
		if err != nil {
			t.Fatal(err)
		}
		return d.ToFloat64()
	}
	ref := logits(out)
	diff := func(a []float64) (worst float64) {
		for i := range a {
			worst = math.Max(worst, math.Abs(a[i]-ref[i]))
		}
		return worst
	}
	scale := 0.0
	for _, v := range ref {
		scale = math.Max(scale, math.Abs(v))
	}
	same, wrong := diff(logits(variant("llamacpp", true))), diff(logits(variant("unpermuted", false)))
	t.Logf("max |logit| %.3g; llama.cpp layout + traditional RoPE differs by %.3g; without the permutation by %.3g", scale, same, wrong)
	tol, err := conformance.BudgetFor("convert_rope_permutation", "float32")
	if err != nil || !(tol.NormErr > 0) {
		t.Fatalf("no NormErr row for convert_rope_permutation: %+v, %v", tol, err)
	}
	if same > tol.NormErr*scale {
		t.Errorf("llama.cpp rows with traditional RoPE differ from ours by %g (max |logit| %g), want float32 noise: at most %g of the scale (%s)", same, scale, tol.NormErr, tol.Reason)
	}
	if wrong < 100*same || wrong < 1e-3*scale {
		t.Errorf("without the permutation the logits differ by only %g: the check does not discriminate", wrong)
	}
}

func TestConvertErrors(t *testing.T) {
	replace := func(name string, w gguf.WriteTensor) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		return func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range ts {
				if ts[i].Name == name {
					ts[i] = w
				}
			}
			return kvs, ts
		}
	}
	setKV := func(key string, v gguf.Value) func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
		return func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			for i := range kvs {
				if kvs[i].Key == key {
					kvs[i].Value = v
				}
			}
			return kvs, ts
		}
	}
	rng := rand.New(rand.NewPCG(1, 1))
	cases := []struct {
		name string
		edit func([]gguf.KV, []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor)
		want []string
	}{
		{"unsupported-type", replace("blk.0.attn_v.weight", gguf.WriteTensor{Name: "blk.0.attn_v.weight", Dims: []uint64{tD, tKV * tHD}, Type: gguf.Q5_0, Data: blocks(rng, gguf.Q5_0, tD*tKV*tHD/32)}), []string{"blk.0.attn_v.weight", "Q5_0", "not supported"}},
		{"unexpected-tensor", func(kvs []gguf.KV, ts []gguf.WriteTensor) ([]gguf.KV, []gguf.WriteTensor) {
			return kvs, append(ts, gguf.WriteTensor{Name: "blk.0.attn_sinks.weight", Dims: []uint64{4}, Type: gguf.F32, Data: make([]byte, 16)})
		}, []string{"blk.0.attn_sinks.weight", "not a llama block tensor"}},
		{"arch", setKV("general.architecture", gguf.Str("qwen2")), []string{"general.architecture", `"qwen2"`}},
		{"tokenizer-model", setKV("tokenizer.ggml.model", gguf.Str("llama")), []string{"tokenizer.ggml.model", `"llama"`, "gpt2"}},
		{"pre", setKV("tokenizer.ggml.pre", gguf.Str("deepseek-llm")), []string{"tokenizer.ggml.pre", "deepseek-llm", "smollm"}},
		{"heads", setKV("llama.attention.head_count_kv", gguf.U32(3)), []string{"head_count_kv", "does not divide"}},
		{"eps-type", setKV("llama.attention.layer_norm_rms_epsilon", gguf.Str("small")), []string{"layer_norm_rms_epsilon", "want a number"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tinyGGUF(t, tc.edit)
			_, err := Convert(src, t.TempDir(), Options{})
			if err == nil {
				t.Fatalf("got no error, want one containing %q", tc.want)
			}
			for _, w := range append(tc.want, src) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestRequantize: with Requantize the K-quant matrices come out as MLX
// affine with the requested params, noted as lossy, and load.
func TestRequantize(t *testing.T) {
	out := t.TempDir()
	res, err := Convert(tinyGGUF(t, nil), out, Options{Requantize: true, Bits: 8, GroupSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "re-quantized") || !strings.Contains(res.Notes[0], "lossy") {
		t.Errorf("notes %q", res.Notes)
	}
	ck, err := checkpoint.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, l := range []*checkpoint.Linear{ck.Layers[0].O, ck.Layers[0].Down} {
		if !l.Quantized || l.Params.Bits != 8 || l.Params.GroupSize != 64 {
			t.Errorf("%s: %+v, want 8-bit group 64", l.Path, l.Params)
		}
	}
}

// TestTinyTokenizer: the tokenizer files of the tiny model have the added
// tokens with the right kinds and the merges as pairs.
func TestTinyTokenizer(t *testing.T) {
	out := t.TempDir()
	if _, err := Convert(tinyGGUF(t, nil), out, Options{}); err != nil {
		t.Fatal(err)
	}
	var tj struct {
		AddedTokens []addedToken `json:"added_tokens"`
		Model       struct {
			Vocab  map[string]int
			Merges [][2]string
		}
	}
	readJSON(t, filepath.Join(out, "tokenizer.json"), &tj)
	if len(tj.AddedTokens) != 2 || !tj.AddedTokens[0].Special || tj.AddedTokens[0].Content != "<|end|>" || tj.AddedTokens[1].Special || tj.AddedTokens[1].ID != 258 {
		t.Errorf("added tokens %+v: want <|end|> special (257) and <|user|> not special (258)", tj.AddedTokens)
	}
	if len(tj.Model.Vocab) != 259 || tj.Model.Vocab["he"] != 256 || len(tj.Model.Merges) != 1 || tj.Model.Merges[0] != [2]string{"h", "e"} {
		t.Errorf("vocab of %d (he=%d), merges %v", len(tj.Model.Vocab), tj.Model.Vocab["he"], tj.Model.Merges)
	}
	var cfg map[string]any
	readJSON(t, filepath.Join(out, "tokenizer_config.json"), &cfg)
	if cfg["eos_token"] != "<|end|>" || !strings.Contains(cfg["chat_template"].(string), "<|end|>") {
		t.Errorf("tokenizer_config: eos %v, template %v", cfg["eos_token"], cfg["chat_template"])
	}
}
