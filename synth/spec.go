// Package synth writes seeded synthetic checkpoints with a real model's
// shapes and random weights, for benchmarks: weights' values do not change
// speed, so a checkpoint of MiniCPM5-1B's exact shapes measures what the real
// one would. It writes the MLX format mlx_lm loads (config.json with the
// quantization block and per-layer overrides as mlx_lm's save_config writes
// them, model.safetensors, model.safetensors.index.json, and a word-level
// tokenizer so mlx_lm.load accepts the directory as it is), and its GGUF
// twin for llama.cpp: the same shapes and the same weights (Q4_0 or Q4_1
// where the MLX checkpoint is 4-bit, Q5_0 where it is 5-bit, Q8_0 where it
// is 8-bit, F16, BF16 or F32 where it is unquantized; 2-, 3- and 6-bit have
// no twin, see Spec.GGUFTwin).
//
// Quantized weights are generated directly as packed codes (uniform random
// words) with plausible per-group scales (exact in float16) and biases
// -2^(bits-1)·scale; the float model is never materialised. Files are written tensor by tensor through a buffer,
// so memory stays small whatever the checkpoint size.
package synth

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// Spec is the architecture and quantization of a synthetic llama checkpoint.
type Spec struct {
	Hidden, Layers, Heads, KVHeads, HeadDim, Intermediate, Vocab int
	MaxPositions                                                 int
	RopeTheta, RMSNormEps                                        float64
	// Tied shares the embedding as the output head (tie_word_embeddings):
	// no lm_head tensor in either format.
	Tied bool
	// Quant is one of:
	//   - "optiq": 8-bit every o_proj and gate_proj, the whole last block and
	//     lm_head, 4-bit elsewhere (the embedding included), group GroupSize;
	//   - "qB" (B = 2, 3, 4, 5, 6 or 8): every linear and the embedding B-bit,
	//     group GroupSize; "qBgG" the same with group G (GroupSize ignored);
	//   - "f16", "bf16", "f32": unquantized weights of that dtype (DType must
	//     be the same); "none": unquantized weights of DType.
	Quant     string
	GroupSize int // quantization group size (32, 64 or 128)
	// EmbedBits, when not 0, is the embedding's bit width in a quantized
	// form (listed in the quantization block, as mlx_lm writes a mixed
	// recipe): 8 with q4g32 is the layout of the GGUF Q4_1 SmolLM2
	// checkpoints as mlxgo convert writes them.
	EmbedBits int
	// DType is the dtype of the scales, biases, norms and unquantized
	// weights, and so of the activations (mlxgo and mlx_lm compute in the
	// embedding's dtype): BF16, F16 or F32. The zero value means BF16.
	DType tensor.DType
	// Q4Type is the GGUF type of the twin's 4-bit group-32 weights: "q4_0"
	// (the default when empty) or "q4_1". Both hold the MLX weights exactly.
	Q4Type string
	Seed   uint64 // seeds every tensor's values
}

// Presets are the named specs. Each real preset has the shapes of the
// model's published config.json (Hugging Face repository named in the
// comment; hidden_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim (hidden/heads where the file has none),
// intermediate_size, vocab_size, tie_word_embeddings, rope_theta,
// rms_norm_eps, max_position_embeddings) and the real vocabulary size;
// bf16 as their torch_dtype. Every preset is a plain Llama graph (RMSNorm,
// GQA attention without biases, RoPE, SwiGLU MLP); what a real model has
// beyond it is listed per preset. "tiny" has the shapes of the conformance
// fixtures (conformance/oracle/models.py BASE_CONFIG), for tests.
var Presets = map[string]Spec{
	// openbmb/MiniCPM5-1B shapes (the benchmark's first checkpoint).
	"minicpm5-1b": {Hidden: 1536, Layers: 24, Heads: 16, KVHeads: 2, HeadDim: 128, Intermediate: 4608, Vocab: 130560,
		MaxPositions: 32768, RopeTheta: 10000, RMSNormEps: 1e-5, Quant: "optiq", GroupSize: 64, Seed: 1},
	// HuggingFaceTB/SmolLM2-135M config.json (LlamaForCausalLM).
	"smollm2-135m": {Hidden: 576, Layers: 30, Heads: 9, KVHeads: 3, HeadDim: 64, Intermediate: 1536, Vocab: 49152,
		MaxPositions: 8192, RopeTheta: 100000, RMSNormEps: 1e-5, Tied: true, Quant: "q4g32", GroupSize: 32, Seed: 1},
	// HuggingFaceTB/SmolLM2-360M config.json (LlamaForCausalLM).
	"smollm2-360m": {Hidden: 960, Layers: 32, Heads: 15, KVHeads: 5, HeadDim: 64, Intermediate: 2560, Vocab: 49152,
		MaxPositions: 8192, RopeTheta: 100000, RMSNormEps: 1e-5, Tied: true, Quant: "q4g32", GroupSize: 32, Seed: 1},
	// HuggingFaceTB/SmolLM2-1.7B config.json (LlamaForCausalLM).
	"smollm2-1.7b": {Hidden: 2048, Layers: 24, Heads: 32, KVHeads: 32, HeadDim: 64, Intermediate: 8192, Vocab: 49152,
		MaxPositions: 8192, RopeTheta: 130000, RMSNormEps: 1e-5, Tied: true, Quant: "q4g32", GroupSize: 32, Seed: 1},
	// meta-llama/Llama-3.2-1B config.json. Left out: rope_scaling
	// (rope_type llama3, factor 32), which changes RoPE's frequencies, not
	// the work per token.
	"llama3.2-1b": {Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, Intermediate: 8192, Vocab: 128256,
		MaxPositions: 131072, RopeTheta: 500000, RMSNormEps: 1e-5, Tied: true, Quant: "q4g32", GroupSize: 32, Seed: 1},
	// meta-llama/Llama-3.2-3B config.json; rope_scaling left out as for 1B.
	"llama3.2-3b": {Hidden: 3072, Layers: 28, Heads: 24, KVHeads: 8, HeadDim: 128, Intermediate: 8192, Vocab: 128256,
		MaxPositions: 131072, RopeTheta: 500000, RMSNormEps: 1e-5, Tied: true, Quant: "q4g32", GroupSize: 32, Seed: 1},
	// Qwen/Qwen2.5-0.5B config.json shapes as a Llama: Qwen2's q, k and v
	// projections have biases, which this Llama shape does not (2 · 896 +
	// 2 · 128 values per layer, no change to the matmuls' work).
	"qwen2.5-0.5b": {Hidden: 896, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64, Intermediate: 4864, Vocab: 151936,
		MaxPositions: 32768, RopeTheta: 1000000, RMSNormEps: 1e-6, Tied: true, Quant: "q4g32", GroupSize: 32, Seed: 1},
	"tiny": {Hidden: 128, Layers: 3, Heads: 16, KVHeads: 2, HeadDim: 32, Intermediate: 384, Vocab: 1000,
		MaxPositions: 256, RopeTheta: 10000, RMSNormEps: 1e-5, Quant: "optiq", GroupSize: 64, Seed: 1},
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Quants lists the forms Spec.Quant accepts (B a bit width, G a group size).
var Quants = []string{"optiq", "qB", "qBgG", "f16", "bf16", "f32", "none"}

// Bits lists the accepted bit widths and GroupSizes the group sizes.
var (
	Bits       = []int{2, 3, 4, 5, 6, 8}
	GroupSizes = []int{32, 64, 128}
)

// dtype returns the spec's float dtype (BF16 for the zero value).
func (s Spec) dtype() tensor.DType {
	if s.DType == 0 {
		return tensor.BF16
	}
	return s.DType
}

// denseDTypes maps the dense quant names to their dtype.
var denseDTypes = map[string]tensor.DType{"f16": tensor.F16, "bf16": tensor.BF16, "f32": tensor.F32}

// quant parses Quant: the bit width of the non-"optiq" quantized forms (0
// for optiq and the dense forms), the group size in effect, whether the
// weights are unquantized, and an error for a name of no form.
func (s Spec) quant() (bits, group int, dense bool, err error) {
	switch q := s.Quant; {
	case q == "optiq":
		return 0, s.GroupSize, false, nil
	case q == "none" || denseDTypes[q] != 0:
		return 0, s.GroupSize, true, nil
	case strings.HasPrefix(q, "q"):
		b, g, hasG := strings.Cut(q[1:], "g")
		bits, err1 := strconv.Atoi(b)
		group = s.GroupSize
		var err2 error
		if hasG {
			group, err2 = strconv.Atoi(g)
		}
		if err1 == nil && err2 == nil && bits > 0 && group > 0 {
			return bits, group, false, nil
		}
	}
	return 0, 0, false, fmt.Errorf("synth: quant %q, want one of %s (B in %v, G in %v)", s.Quant, strings.Join(Quants, ", "), Bits, GroupSizes)
}

// Group returns the quantization group size in effect (the "qBgG" form's
// G, else GroupSize).
func (s Spec) Group() int {
	_, g, _, _ := s.quant()
	return g
}

// MaxParams bounds the parameters of a synthetic checkpoint (2^37, about
// 137 billion; the largest preset, llama3.2-3b, has about 3.2 billion), so that a
// mistyped dimension is refused instead of filling the disk or memory.
const MaxParams = 1 << 37

// maxDims bound each dimension: the layer count and head_dim as the
// checkpoint loader bounds them (2^16), the others at 2^20.
var maxDims = map[string]int{"hidden": 1 << 20, "layers": 1 << 16, "heads": 1 << 16, "kv-heads": 1 << 16,
	"head-dim": 1 << 16, "intermediate": 1 << 20, "vocab": 1 << 22, "max-positions": 1 << 24}

// params is the spec's parameter count (float64: the product of
// unchecked dimensions can overflow an int).
func (s Spec) params() float64 {
	h, q, kv := float64(s.Hidden), float64(s.Heads*s.HeadDim), float64(s.KVHeads*s.HeadDim)
	embed := float64(s.Vocab) * h
	if !s.Tied {
		embed *= 2
	}
	return embed + float64(s.Layers)*(2*h*q+2*h*kv+3*h*float64(s.Intermediate)+2*h)
}

// Validate checks that the spec describes a model both formats can hold.
func (s Spec) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden", s.Hidden}, {"layers", s.Layers}, {"heads", s.Heads}, {"kv-heads", s.KVHeads},
		{"head-dim", s.HeadDim}, {"intermediate", s.Intermediate}, {"vocab", s.Vocab}, {"max-positions", s.MaxPositions}} {
		if f.v <= 0 {
			return fmt.Errorf("synth: %s is %d, want > 0", f.name, f.v)
		}
		if limit := maxDims[f.name]; f.v > limit {
			return fmt.Errorf("synth: %s is %d, more than the limit of %d", f.name, f.v, limit)
		}
	}
	if n := s.params(); n > MaxParams {
		return fmt.Errorf("synth: %.3g parameters, more than the limit of %.3g (%d layers, hidden %d, intermediate %d, vocab %d)", n, float64(MaxParams), s.Layers, s.Hidden, s.Intermediate, s.Vocab)
	}
	if s.Heads%s.KVHeads != 0 {
		return fmt.Errorf("synth: heads %d is not a multiple of kv-heads %d", s.Heads, s.KVHeads)
	}
	if s.HeadDim%2 != 0 {
		return fmt.Errorf("synth: head-dim %d is odd; RoPE needs an even head dim", s.HeadDim)
	}
	if !(s.RopeTheta > 0) || !(s.RMSNormEps > 0) {
		return fmt.Errorf("synth: rope theta %v and rms norm eps %v must be > 0", s.RopeTheta, s.RMSNormEps)
	}
	switch s.dtype() {
	case tensor.BF16, tensor.F16, tensor.F32:
	default:
		return fmt.Errorf("synth: dtype %v, want BF16, F16 or F32", s.DType)
	}
	bits, group, dense, err := s.quant()
	if err != nil {
		return err
	}
	if dt := denseDTypes[s.Quant]; dt != 0 && dt != s.dtype() {
		return fmt.Errorf("synth: quant %s stores %v weights but the dtype is %v; use the same (or quant none)", s.Quant, dt, s.dtype())
	}
	if bits != 0 && !slices.Contains(Bits, bits) {
		return fmt.Errorf("synth: quant %q: %d bits, want one of %v", s.Quant, bits, Bits)
	}
	if !dense && !slices.Contains(GroupSizes, group) {
		return fmt.Errorf("synth: group size %d, want 32, 64 or 128", group)
	}
	if s.EmbedBits != 0 && (dense || !slices.Contains(Bits, s.EmbedBits)) {
		return fmt.Errorf("synth: embed bits %d with quant %s, want one of %v with a quantized form", s.EmbedBits, s.Quant, Bits)
	}
	switch s.Q4Type {
	case "", "q4_0", "q4_1":
	default:
		return fmt.Errorf("synth: gguf 4-bit type %q, want q4_0 or q4_1", s.Q4Type)
	}
	// Every input width must hold whole quantization groups, and whole
	// 32-element blocks for GGUF's block types (and so whole packed 32-bit
	// words at any bit width).
	for _, in := range []struct {
		name string
		v    int
	}{{"hidden", s.Hidden}, {"heads*head-dim", s.Heads * s.HeadDim}, {"intermediate", s.Intermediate}} {
		if !dense && (in.v%group != 0 || in.v%32 != 0) {
			return fmt.Errorf("synth: %s %d is not a multiple of the group size %d and of 32", in.name, in.v, group)
		}
	}
	return nil
}

// Module is one linear (or the embedding) of the model: its mlx_lm module
// path, logical [Out, In], how it is stored, and the value scale of its
// weights.
type Module struct {
	Path    string // e.g. "model.layers.3.mlp.down_proj", "lm_head", "model.embed_tokens"
	Out, In int
	Bits    int  // 2, 3, 4, 5, 6 or 8; 0 when unquantized
	Listed  bool // has its own entry in the quantization block
	Mode    bool // that entry spells "mode": "affine"
	Std     float64
	GGUF    string // llama.cpp tensor name without ".weight"
}

// Modules returns the embedding, every block's linears and lm_head (none
// when tied), in the
// order mlx_lm walks the model (and writes the quantization block's
// per-layer entries): per block q, k, v, o_proj then gate, down, up_proj.
//
// Value scales (standard deviations of the dequantized weights) follow the
// fixtures' choice (conformance/oracle/models.py): embedding 1; q, k, v,
// gate, up 1/sqrt(in); o_proj, down_proj 2/sqrt(in); lm_head 4/sqrt(in).
func (s Spec) Modules() []Module {
	qOut, kvOut := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	isq := func(v float64) float64 { return 1 / math.Sqrt(v) }
	mods := []Module{{Path: "model.embed_tokens", Out: s.Vocab, In: s.Hidden, Std: 1, GGUF: "token_embd"}}
	for i := range s.Layers {
		p := "model.layers." + strconv.Itoa(i) + "."
		g := "blk." + strconv.Itoa(i) + "."
		mods = append(mods,
			Module{Path: p + "self_attn.q_proj", Out: qOut, In: s.Hidden, Std: isq(float64(s.Hidden)), GGUF: g + "attn_q"},
			Module{Path: p + "self_attn.k_proj", Out: kvOut, In: s.Hidden, Std: isq(float64(s.Hidden)), GGUF: g + "attn_k"},
			Module{Path: p + "self_attn.v_proj", Out: kvOut, In: s.Hidden, Std: isq(float64(s.Hidden)), GGUF: g + "attn_v"},
			Module{Path: p + "self_attn.o_proj", Out: s.Hidden, In: qOut, Std: 2 * isq(float64(qOut)), GGUF: g + "attn_output"},
			Module{Path: p + "mlp.gate_proj", Out: s.Intermediate, In: s.Hidden, Std: isq(float64(s.Hidden)), GGUF: g + "ffn_gate"},
			Module{Path: p + "mlp.down_proj", Out: s.Hidden, In: s.Intermediate, Std: 2 * isq(float64(s.Intermediate)), GGUF: g + "ffn_down"},
			Module{Path: p + "mlp.up_proj", Out: s.Intermediate, In: s.Hidden, Std: isq(float64(s.Hidden)), GGUF: g + "ffn_up"},
		)
	}
	if !s.Tied {
		mods = append(mods, Module{Path: "lm_head", Out: s.Vocab, In: s.Hidden, Std: 4 * isq(float64(s.Hidden)), GGUF: "output"})
	}
	last := "model.layers." + strconv.Itoa(s.Layers-1) + "."
	bits, _, dense, _ := s.quant()
	for i := range mods {
		m := &mods[i]
		switch {
		case dense:
		case i == 0 && s.EmbedBits != 0:
			m.Bits, m.Listed, m.Mode = s.EmbedBits, true, true
		case bits != 0:
			m.Bits = bits
		default: // optiq
			// The fixtures' _optiq_predicate: the last block and lm_head are
			// listed without "mode" (mlx_lm.quant.dynamic_quant's spelling),
			// o_proj and gate_proj with it (mlx_lm.convert's mixed recipes).
			m.Bits = 4
			switch {
			case m.Path == "lm_head" || strings.HasPrefix(m.Path, last):
				m.Bits, m.Listed = 8, true
			case strings.HasSuffix(m.Path, ".o_proj") || strings.HasSuffix(m.Path, ".gate_proj"):
				m.Bits, m.Listed, m.Mode = 8, true, true
			}
		}
	}
	return mods
}

// globalBits is the quantization block's global "bits".
func (s Spec) globalBits() int {
	if bits, _, _, _ := s.quant(); bits != 0 {
		return bits
	}
	return 4
}

// Tensor is one tensor of the MLX checkpoint.
type Tensor struct {
	Name  string
	DType tensor.DType
	Shape tensor.Shape
	Kind  Kind
	Mod   *Module // the module it belongs to; nil for norms
}

// Kind says how a tensor's values are made.
type Kind int

// The tensor kinds.
const (
	Codes  Kind = iota // packed uint32 codes, uniform random words
	Scales             // per-group scales
	Biases             // per-group biases
	Float              // unquantized weights, normal with the module's Std
	Norm               // RMSNorm weights, 1 + 0.05·N(0, 1)
)

// Tensors returns every tensor of the MLX checkpoint. The packed uint32
// weights come first, so that each starts at a multiple of 4 bytes in the
// safetensors data section (the bf16 tensors after them may have odd
// element counts) and a reader can map them without copying.
func (s Spec) Tensors() []Tensor {
	mods := s.Modules()
	dt, group := s.dtype(), s.Group()
	var words, floats []Tensor
	norm := func(name string) {
		floats = append(floats, Tensor{Name: name, DType: dt, Shape: tensor.Shape{s.Hidden}, Kind: Norm})
	}
	for i := range mods {
		m := &mods[i]
		if m.Bits == 0 {
			floats = append(floats, Tensor{Name: m.Path + ".weight", DType: dt, Shape: tensor.Shape{m.Out, m.In}, Kind: Float, Mod: m})
			continue
		}
		groups := tensor.Shape{m.Out, m.In / group}
		words = append(words, Tensor{Name: m.Path + ".weight", DType: tensor.U32, Shape: tensor.Shape{m.Out, m.In * m.Bits / 32}, Kind: Codes, Mod: m})
		floats = append(floats,
			Tensor{Name: m.Path + ".scales", DType: dt, Shape: groups, Kind: Scales, Mod: m},
			Tensor{Name: m.Path + ".biases", DType: dt, Shape: groups, Kind: Biases, Mod: m})
	}
	for i := range s.Layers {
		p := "model.layers." + strconv.Itoa(i) + "."
		norm(p + "input_layernorm.weight")
		norm(p + "post_attention_layernorm.weight")
	}
	norm("model.norm.weight")
	return append(words, floats...)
}

// Bytes returns the size of t's data.
func (t Tensor) Bytes() int64 { return int64(t.Shape.Size()) * int64(t.DType.Size()) }

// Parameters is mlx_lm's get_total_parameters: logical weights of every
// linear and embedding (packed words × 32 / bits) plus every norm weight.
func (s Spec) Parameters() int64 {
	var n int64
	for _, m := range s.Modules() {
		n += int64(m.Out) * int64(m.In)
	}
	return n + int64(2*s.Layers+1)*int64(s.Hidden)
}
