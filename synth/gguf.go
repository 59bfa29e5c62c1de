package synth

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/tensor"
)

// ggufTensor is one tensor of the GGUF twin and how its values are made.
type ggufTensor struct {
	info gguf.WriteTensor
	mod  *Module // quantized or float weight; nil for norms
	norm string  // the MLX name of the norm whose values it copies
}

// ggufTensors lists the GGUF twin's tensors in llama.cpp's order: token_embd,
// then per block attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_down, ffn_up, then output_norm and output. A weight
// [out, in] has GGUF dims {in, out}; 8-bit modules are Q8_0, 4-bit Q4_0,
// unquantized ones F16; norms are F32.
func (s Spec) ggufTensors() []ggufTensor {
	mods := s.Modules()
	byPath := map[string]*Module{}
	for i := range mods {
		byPath[mods[i].Path] = &mods[i]
	}
	lin := func(path string) ggufTensor {
		m := byPath[path]
		t := gguf.F16
		switch m.Bits {
		case 4:
			t = gguf.Q4_0
		case 8:
			t = gguf.Q8_0
		}
		return ggufTensor{info: gguf.WriteTensor{Name: m.GGUF + ".weight", Dims: []uint64{uint64(m.In), uint64(m.Out)}, Type: t}, mod: m}
	}
	norm := func(name, mlxName string) ggufTensor {
		return ggufTensor{info: gguf.WriteTensor{Name: name, Dims: []uint64{uint64(s.Hidden)}, Type: gguf.F32}, norm: mlxName}
	}
	ts := []ggufTensor{lin("model.embed_tokens")}
	for i := range s.Layers {
		p, g := "model.layers."+strconv.Itoa(i)+".", "blk."+strconv.Itoa(i)+"."
		ts = append(ts,
			norm(g+"attn_norm.weight", p+"input_layernorm.weight"),
			lin(p+"self_attn.q_proj"), lin(p+"self_attn.k_proj"), lin(p+"self_attn.v_proj"), lin(p+"self_attn.o_proj"),
			norm(g+"ffn_norm.weight", p+"post_attention_layernorm.weight"),
			lin(p+"mlp.gate_proj"), lin(p+"mlp.down_proj"), lin(p+"mlp.up_proj"),
		)
	}
	return append(ts, norm("output_norm.weight", "model.norm.weight"), lin("lm_head"))
}

// GGUFMetadata returns the twin's metadata: llama architecture
// hyperparameters and a minimal SentencePiece-style ("llama") vocabulary
// llama.cpp accepts: <unk> 0, <s> 1, </s> 2, the 256 byte tokens <0x00> ...
// <0xFF> (llama.cpp looks up the newline byte), then "t259" ... as normal
// tokens, Vocab in all.
func (s Spec) GGUFMetadata() []gguf.KV {
	fileType := uint32(2) // LLAMA_FTYPE_MOSTLY_Q4_0
	switch s.Quant {
	case "q8":
		fileType = 7 // MOSTLY_Q8_0
	case "none":
		fileType = 1 // MOSTLY_F16
	}
	tokens := make([]string, s.Vocab)
	scores := make([]float32, s.Vocab)
	types := make([]int32, s.Vocab)
	for i := range tokens {
		switch {
		case i == 0:
			tokens[i], types[i] = "<unk>", 2 // UNKNOWN
		case i == 1:
			tokens[i], types[i] = "<s>", 3 // CONTROL
		case i == 2:
			tokens[i], types[i] = "</s>", 3
		case i < 3+256:
			tokens[i], types[i] = fmt.Sprintf("<0x%02X>", i-3), 6 // BYTE
		default:
			tokens[i], types[i] = "t"+strconv.Itoa(i), 1 // NORMAL
			scores[i] = -float32(i)
		}
	}
	u := func(v int) gguf.Value { return gguf.U32(uint32(v)) }
	return []gguf.KV{
		{Key: "general.architecture", Value: gguf.Str("llama")},
		{Key: "general.name", Value: gguf.Str("mlxgo synth " + s.Quant)},
		{Key: "general.file_type", Value: gguf.U32(fileType)},
		{Key: "general.quantization_version", Value: gguf.U32(2)},
		{Key: "general.alignment", Value: gguf.U32(gguf.DefaultAlignment)},
		{Key: "llama.context_length", Value: u(s.MaxPositions)},
		{Key: "llama.embedding_length", Value: u(s.Hidden)},
		{Key: "llama.block_count", Value: u(s.Layers)},
		{Key: "llama.feed_forward_length", Value: u(s.Intermediate)},
		{Key: "llama.attention.head_count", Value: u(s.Heads)},
		{Key: "llama.attention.head_count_kv", Value: u(s.KVHeads)},
		{Key: "llama.attention.key_length", Value: u(s.HeadDim)},
		{Key: "llama.attention.value_length", Value: u(s.HeadDim)},
		{Key: "llama.rope.dimension_count", Value: u(s.HeadDim)},
		{Key: "llama.rope.freq_base", Value: gguf.F32Value(float32(s.RopeTheta))},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: gguf.F32Value(float32(s.RMSNormEps))},
		{Key: "llama.vocab_size", Value: u(s.Vocab)},
		{Key: "tokenizer.ggml.model", Value: gguf.Str("llama")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strs(tokens)},
		{Key: "tokenizer.ggml.scores", Value: gguf.F32s(scores)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.I32s(types)},
		{Key: "tokenizer.ggml.unknown_token_id", Value: gguf.U32(0)},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.U32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.U32(2)},
		{Key: "tokenizer.ggml.add_bos_token", Value: gguf.BoolValue(true)},
	}
}

// WriteGGUF writes the spec's GGUF twin to path: the same shapes, Q8_0
// where the MLX checkpoint is 8-bit and Q4_0 where it is 4-bit (F16 for
// "none"), F32 norms with the MLX checkpoint's norm values, and block
// deltas with the same per-group ranges as the MLX scales (codes are
// random, so the two files hold different weights of the same magnitude).
// Progress goes to progress when not nil.
func WriteGGUF(path string, s Spec, progress io.Writer) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Vocab < 3+256 {
		return fmt.Errorf("synth: vocab %d: the GGUF twin's vocabulary needs at least 259 tokens (3 special, 256 bytes)", s.Vocab)
	}
	ts := s.ggufTensors()
	infos := make([]gguf.WriteTensor, len(ts))
	sizes := make([]int64, len(ts))
	var total int64
	for i, t := range ts {
		infos[i] = t.info
		n, err := t.info.Type.Bytes(t.info.Dims)
		if err != nil {
			return fmt.Errorf("synth: gguf tensor %s: %w", t.info.Name, err)
		}
		sizes[i] = int64(n)
		total += sizes[i]
	}
	p := newProgress(progress, "gguf", total)
	buf := make([]byte, 1<<20)
	return gguf.Write(path, s.GGUFMetadata(), infos, func(i int, w io.Writer) error {
		t := ts[i]
		if err := s.writeGGUFTensor(w, t, buf); err != nil {
			return err
		}
		p.add(sizes[i], t.info.Name)
		return nil
	})
}

func (s Spec) writeGGUFTensor(w io.Writer, t ggufTensor, buf []byte) error {
	switch t.info.Type {
	case gguf.F32:
		r := rngFor(s.Seed, t.norm)
		b := make([]byte, 4*s.Hidden)
		for i := range s.Hidden {
			v := tensor.RoundBF16(float32(1 + 0.05*r.NormFloat64())) // the MLX norm's bf16 value
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		_, err := w.Write(b)
		return err
	case gguf.F16:
		r := rngFor(s.Seed, t.mod.Path+".weight")
		n := int64(t.mod.Out) * int64(t.mod.In) * 2
		for n > 0 {
			k := min(int64(len(buf)), n)
			for i := int64(0); i < k; i += 2 {
				binary.LittleEndian.PutUint16(buf[i:], tensor.Float32ToF16(float32(t.mod.Std*r.NormFloat64())))
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
	return s.writeBlocks(w, t, buf)
}

// writeBlocks writes a Q4_0 or Q8_0 weight row by row: each block of 32 is
// an f16 delta d and 32 random codes, d = a/8 (Q4_0 codes 0..15 mean
// (q-8)·d) or a/127 (Q8_0 codes -127..127 mean q·d), a the half range of the
// MLX group the block lies in.
func (s Spec) writeBlocks(w io.Writer, t ggufTensor, buf []byte) error {
	m := t.mod
	q8 := t.info.Type == gguf.Q8_0
	codeBytes, denom := 16, 8.0
	if q8 {
		codeBytes, denom = 32, 127.0
	}
	blockBytes := 2 + codeBytes
	blocksPerGroup := s.GroupSize / 32
	groups := rngFor(s.Seed, groupStream(m))
	codes := rngFor(s.Seed, m.GGUF+".weight")
	rowBytes := m.In / 32 * blockBytes
	if len(buf) < rowBytes {
		buf = make([]byte, rowBytes)
	}
	rowsPerChunk := len(buf) / rowBytes
	for r0 := 0; r0 < m.Out; r0 += rowsPerChunk {
		nr := min(rowsPerChunk, m.Out-r0)
		b := buf[:nr*rowBytes]
		off := 0
		for range nr * m.In / 32 / blocksPerGroup {
			d := tensor.Float32ToF16(float32(groupHalfRange(groups, m.Std) / denom))
			for range blocksPerGroup {
				binary.LittleEndian.PutUint16(b[off:], d)
				fillCodes(b[off+2:off+blockBytes], codes, q8)
				off += blockBytes
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// fillCodes fills b with random bytes; for Q8_0 the int8 -128 (which
// llama.cpp's quantizer never writes) becomes -127.
func fillCodes(b []byte, r *rand.Rand, q8 bool) {
	for i := 0; i < len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			c := byte(v >> (8 * j))
			if q8 && c == 0x80 {
				c = 0x81
			}
			b[i+j] = c
		}
	}
}
