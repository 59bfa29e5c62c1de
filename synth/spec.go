// Package synth writes seeded synthetic checkpoints with a real model's
// shapes and random weights, for benchmarks: weights' values do not change
// speed, so a checkpoint of MiniCPM5-1B's exact shapes measures what the real
// one would. It writes the MLX format mlx_lm loads (config.json with the
// quantization block and per-layer overrides as mlx_lm's save_config writes
// them, model.safetensors, model.safetensors.index.json, and a word-level
// tokenizer so mlx_lm.load accepts the directory as it is), and the same
// shapes as a GGUF file for llama.cpp (Q8_0 where the MLX checkpoint is
// 8-bit, Q4_0 where it is 4-bit).
//
// Quantized weights are generated directly as packed codes (uniform random
// words) with plausible per-group scales and biases; the float model is
// never materialised. Files are written tensor by tensor through a buffer,
// so memory stays small whatever the checkpoint size.
package synth

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// Spec is the architecture and quantization of a synthetic llama checkpoint.
type Spec struct {
	Hidden, Layers, Heads, KVHeads, HeadDim, Intermediate, Vocab int
	MaxPositions                                                 int
	RopeTheta, RMSNormEps                                        float64
	// Quant is "q4" (every layer 4-bit), "q8" (every layer 8-bit), "optiq"
	// (8-bit every o_proj and gate_proj, the whole last block and lm_head,
	// 4-bit elsewhere, the embedding included) or "none" (bf16 weights).
	Quant     string
	GroupSize int    // quantization group size (32, 64 or 128)
	Seed      uint64 // seeds every tensor's values
}

// Presets are the named specs. "minicpm5-1b" has MiniCPM5-1B's exact shapes;
// "tiny" has the shapes of the conformance fixtures (conformance/oracle/
// models.py BASE_CONFIG), for tests.
var Presets = map[string]Spec{
	"minicpm5-1b": {Hidden: 1536, Layers: 24, Heads: 16, KVHeads: 2, HeadDim: 128, Intermediate: 4608, Vocab: 130560,
		MaxPositions: 32768, RopeTheta: 10000, RMSNormEps: 1e-5, Quant: "optiq", GroupSize: 64, Seed: 1},
	"tiny": {Hidden: 128, Layers: 3, Heads: 16, KVHeads: 2, HeadDim: 32, Intermediate: 384, Vocab: 1000,
		MaxPositions: 256, RopeTheta: 10000, RMSNormEps: 1e-5, Quant: "optiq", GroupSize: 64, Seed: 1},
}

// PresetNames returns the preset names, sorted.
func PresetNames() []string { return []string{"minicpm5-1b", "tiny"} }

// Quants lists the accepted values of Spec.Quant.
var Quants = []string{"q4", "q8", "optiq", "none"}

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
	switch s.Quant {
	case "q4", "q8", "optiq", "none":
	default:
		return fmt.Errorf("synth: quant %q, want one of %s", s.Quant, strings.Join(Quants, ", "))
	}
	if s.GroupSize != 32 && s.GroupSize != 64 && s.GroupSize != 128 {
		return fmt.Errorf("synth: group size %d, want 32, 64 or 128", s.GroupSize)
	}
	// Every input width must hold whole quantization groups, and whole
	// 32-element blocks for GGUF's Q4_0/Q8_0.
	for _, in := range []struct {
		name string
		v    int
	}{{"hidden", s.Hidden}, {"heads*head-dim", s.Heads * s.HeadDim}, {"intermediate", s.Intermediate}} {
		if in.v%s.GroupSize != 0 || in.v%32 != 0 {
			return fmt.Errorf("synth: %s %d is not a multiple of the group size %d and of 32", in.name, in.v, s.GroupSize)
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
	Bits    int  // 4 or 8; 0 when unquantized
	Listed  bool // has its own entry in the quantization block
	Mode    bool // that entry spells "mode": "affine"
	Std     float64
	GGUF    string // llama.cpp tensor name without ".weight"
}

// Modules returns the embedding, every block's linears and lm_head, in the
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
	mods = append(mods, Module{Path: "lm_head", Out: s.Vocab, In: s.Hidden, Std: 4 * isq(float64(s.Hidden)), GGUF: "output"})
	last := "model.layers." + strconv.Itoa(s.Layers-1) + "."
	for i := range mods {
		m := &mods[i]
		switch s.Quant {
		case "q4":
			m.Bits = 4
		case "q8":
			m.Bits = 8
		case "optiq":
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
	if s.Quant == "q8" {
		return 8
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
	var words, floats []Tensor
	norm := func(name string) {
		floats = append(floats, Tensor{Name: name, DType: tensor.BF16, Shape: tensor.Shape{s.Hidden}, Kind: Norm})
	}
	for i := range mods {
		m := &mods[i]
		if m.Bits == 0 {
			floats = append(floats, Tensor{Name: m.Path + ".weight", DType: tensor.BF16, Shape: tensor.Shape{m.Out, m.In}, Kind: Float, Mod: m})
			continue
		}
		groups := tensor.Shape{m.Out, m.In / s.GroupSize}
		words = append(words, Tensor{Name: m.Path + ".weight", DType: tensor.U32, Shape: tensor.Shape{m.Out, m.In * m.Bits / 32}, Kind: Codes, Mod: m})
		floats = append(floats,
			Tensor{Name: m.Path + ".scales", DType: tensor.BF16, Shape: groups, Kind: Scales, Mod: m},
			Tensor{Name: m.Path + ".biases", DType: tensor.BF16, Shape: groups, Kind: Biases, Mod: m})
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
