package synth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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

// ErrNoTwin is wrapped by WriteGGUF's error for a spec GGUF cannot hold
// with the same arithmetic (bit widths other than 4, 5 and 8).
var ErrNoTwin = errors.New("no GGUF twin")

// GGUFTwin reports whether the spec has a GGUF twin holding the same
// weights, and an error wrapping ErrNoTwin naming the reason when not.
// 4-bit weights become Q4_0 (or Q4_1, Spec.Q4Type), 5-bit ones Q5_0 and
// 8-bit ones Q8_0, blocks of 32 whose delta is the MLX group's scale: with
// the biases synth writes (-8·scale, -16·scale, -128·scale) the affine
// value scale·q + bias is the block's d·(q-8), d·(q-16) or d·(q-128)
// exactly, at any group size (a group of 64 or 128 is 2 or 4 blocks with
// the same delta; at group 32 the layouts match block for block).
// Unquantized weights become F16, BF16 or F32 with the same bits. GGUF has
// no block type with MLX's 2-, 3- or 6-bit affine arithmetic (the K-quants
// Q2_K, Q3_K and Q6_K quantize their sub-block scales in 256-element
// super-blocks), so those have no twin.
func (s Spec) GGUFTwin() error {
	if err := s.Validate(); err != nil {
		return err
	}
	for _, m := range s.Modules() {
		if m.Bits != 0 && m.Bits != 4 && m.Bits != 5 && m.Bits != 8 {
			return fmt.Errorf("synth: %w for quant %s: GGUF has no block type with MLX's %d-bit affine arithmetic at group %d (%s)", ErrNoTwin, s.Quant, m.Bits, s.Group(), m.Path)
		}
	}
	if s.Vocab < 3+256 {
		return fmt.Errorf("synth: vocab %d: the GGUF twin's vocabulary needs at least 259 tokens (3 special, 256 bytes)", s.Vocab)
	}
	return nil
}

// ggufType returns the GGUF type of a module's weight.
func (s Spec) ggufType(m *Module) gguf.Type {
	switch m.Bits {
	case 4:
		if s.Q4Type == "q4_1" {
			return gguf.Q4_1
		}
		return gguf.Q4_0
	case 5:
		return gguf.Q5_0
	case 8:
		return gguf.Q8_0
	}
	return map[tensor.DType]gguf.Type{tensor.F16: gguf.F16, tensor.BF16: gguf.BF16, tensor.F32: gguf.F32}[s.dtype()]
}

// ggufTensors lists the GGUF twin's tensors in llama.cpp's order: token_embd,
// then per block attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
// ffn_gate, ffn_down, ffn_up, then output_norm and output (none when tied).
// A weight [out, in] has GGUF dims {in, out} (the same row-major bytes);
// norms are F32.
func (s Spec) ggufTensors() []ggufTensor {
	mods := s.Modules()
	byPath := map[string]*Module{}
	for i := range mods {
		byPath[mods[i].Path] = &mods[i]
	}
	lin := func(path string) ggufTensor {
		m := byPath[path]
		return ggufTensor{info: gguf.WriteTensor{Name: m.GGUF + ".weight", Dims: []uint64{uint64(m.In), uint64(m.Out)}, Type: s.ggufType(m)}, mod: m}
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
	ts = append(ts, norm("output_norm.weight", "model.norm.weight"))
	if !s.Tied {
		ts = append(ts, lin("lm_head"))
	}
	return ts
}

// GGUFMetadata returns the twin's metadata: llama architecture
// hyperparameters and a minimal SentencePiece-style ("llama") vocabulary
// llama.cpp accepts: <unk> 0, <s> 1, </s> 2, the 256 byte tokens <0x00> ...
// <0xFF> (llama.cpp looks up the newline byte), then "t259" ... as normal
// tokens, Vocab in all.
func (s Spec) GGUFMetadata() []gguf.KV {
	// llama_ftype: the type of most weights (the embedding's type; for
	// optiq, 4-bit).
	fileType := map[gguf.Type]uint32{gguf.F32: 0, gguf.F16: 1, gguf.Q4_0: 2, gguf.Q4_1: 3, gguf.Q5_0: 8, gguf.Q8_0: 7, gguf.BF16: 32}[s.ggufType(&s.Modules()[0])]
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
		{Key: "general.name", Value: gguf.Str("mlxgo synth " + s.Quant + " " + s.dtype().String())},
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

// WriteGGUF writes the spec's GGUF twin to path: the same shapes and the
// same weights (see GGUFTwin for the types), F32 norms with the MLX
// checkpoint's norm values. A spec with no twin is an error wrapping
// ErrNoTwin, and nothing is written. Progress goes to progress when not nil.
func WriteGGUF(path string, s Spec, progress io.Writer) error {
	if err := s.GGUFTwin(); err != nil {
		return err
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
	case gguf.F32, gguf.F16, gguf.BF16:
		if t.mod == nil { // a norm: the MLX norm's dtype value, as F32
			r := rngFor(s.Seed, t.norm)
			dt := s.dtype()
			b := make([]byte, 4*s.Hidden)
			putFloats(b, tensor.F32, func() float32 { return roundTo(normValue(r), dt) })
			_, err := w.Write(b)
			return err
		}
		r := rngFor(s.Seed, t.mod.Path+".weight") // the MLX weight's stream
		return chunkedFloat(w, buf, int64(t.mod.Out)*int64(t.mod.In)*int64(s.dtype().Size()), s.dtype(),
			func() float32 { return float32(t.mod.Std * r.NormFloat64()) })
	}
	return s.writeBlocks(w, t, buf)
}

// writeBlocks writes a Q4_0, Q4_1, Q5_0 or Q8_0 weight row by row from the MLX
// weight's own streams: each row's packed codes (fillMLXCodes on the
// weight's stream, consumed exactly as the MLX writer consumes it) are
// repacked into blocks of 32, and each block's delta d is the scale of the
// MLX group it lies in (exact in f16, see groupScale); Q4_1's m is the MLX
// bias -8·d.
func (s Spec) writeBlocks(w io.Writer, t ggufTensor, buf []byte) error {
	m := t.mod
	typ := t.info.Type
	blockBytes := typ.BlockBytes()
	blocksPerGroup := s.Group() / 32
	groups := rngFor(s.Seed, groupStream(m))
	codes := rngFor(s.Seed, m.Path+".weight")
	row := make([]byte, m.In*m.Bits/8+8) // In·Bits/8 is a multiple of 8 (In is a multiple of 32); 8 spare bytes for code5's reads
	rowBytes := m.In / 32 * blockBytes
	if len(buf) < rowBytes {
		buf = make([]byte, rowBytes)
	}
	rowsPerChunk := len(buf) / rowBytes
	le := binary.LittleEndian
	var d float32
	for r0 := 0; r0 < m.Out; r0 += rowsPerChunk {
		nr := min(rowsPerChunk, m.Out-r0)
		b := buf[:nr*rowBytes]
		off := 0
		for range nr {
			fillMLXCodes(row[:m.In*m.Bits/8], codes, m.Bits)
			for blk := range m.In / 32 {
				if blk%blocksPerGroup == 0 {
					d = groupScale(groups, m, s.dtype())
				}
				o := b[off : off+blockBytes]
				le.PutUint16(o, tensor.Float32ToF16(d))
				switch typ {
				case gguf.Q8_0:
					for k, c := range row[32*blk : 32*blk+32] {
						o[2+k] = c ^ 0x80 // unsigned code c means c-128
					}
				case gguf.Q5_0: // d, qh (fifth bits), qs as Q4_0's
					var qh uint32
					qs := o[6:]
					for j := range 16 {
						lo, hi := code5(row, 32*blk+j), code5(row, 32*blk+j+16)
						qs[j] = lo&0xF | (hi&0xF)<<4
						qh |= uint32(lo>>4)<<j | uint32(hi>>4)<<(j+16)
					}
					le.PutUint32(o[2:], qh)
				default: // Q4_0, Q4_1
					qs := o[2:]
					if typ == gguf.Q4_1 {
						le.PutUint16(o[2:], tensor.Float32ToF16(groupBias(d, 4)))
						qs = o[4:]
					}
					src := row[16*blk : 16*blk+16] // MLX: element e in nibble e, LSB first
					nib := func(e int) byte { return src[e/2] >> (4 * (e % 2)) & 0xF }
					for j := range 16 { // ggml: element j low, j+16 high
						qs[j] = nib(j) | nib(j+16)<<4
					}
				}
				off += blockBytes
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// code5 returns element e of a row of MLX 5-bit codes (an LSB-first bit
// stream: element e at bits 5e ... 5e+4); row must extend a byte past it.
func code5(row []byte, e int) byte {
	bit := 5 * e
	return byte(binary.LittleEndian.Uint16(row[bit/8:]) >> (bit % 8) & 0x1F)
}
