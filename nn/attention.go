package nn

import (
	"math"

	"github.com/mlxgo/mlxgo/backend"
)

// Attention is the grouped-query self-attention of mlx_lm's llama.py.
type Attention struct {
	B                          backend.Backend
	NHeads, NKVHeads           int
	Scale                      float32 // head_dim^-0.5, see AttentionScale
	QProj, KProj, VProj, OProj Linear
	RoPE                       *RoPE
}

// AttentionScale is llama.py's self.scale = head_dim**-0.5, computed in
// float64 and handed to the kernel as float32.
func AttentionScale(headDim int) float32 {
	return float32(math.Pow(float64(headDim), -0.5))
}

// RowOffsetter is a cache whose rows are at different positions (a
// BatchKVCache): the attention layer rotates queries and keys by
// RoPEOffset (one offset per row) instead of Offset.
type RowOffsetter interface {
	RoPEOffset() backend.Offset
}

// RoPEBlock is a run of Len consecutive tokens, starting at token Start
// of the sequence, whose positions are Offset, Offset+1, ...
type RoPEBlock struct{ Start, Len, Offset int }

// BlockPositioner is a cache whose sequence is made of blocks at their own
// positions (a prefix-shared training sequence [prompt | chosen |
// rejected] at 0, P and P again): the attention layer rotates each block
// of queries and keys at its offset and joins them. The blocks cover the
// sequence in order.
type BlockPositioner interface {
	RoPEBlocks() []RoPEBlock
}

// ropeBlocks rotates each block of x [B, H, L, D] at its offset.
func (a *Attention) ropeBlocks(x backend.Array, blocks []RoPEBlock) backend.Array {
	s := x.Shape()
	parts := make([]backend.Array, len(blocks))
	for i, bl := range blocks {
		part := a.B.Slice(x, []int{0, 0, bl.Start, 0}, []int{s[0], s[1], bl.Start + bl.Len, s[3]})
		parts[i] = a.RoPE.Forward(part, bl.Offset)
	}
	return a.B.Concatenate(2, parts...)
}

// Forward attends x [B, L, dim] to itself and to what cache holds. mask comes
// from the model (the first cache's Mask, once per forward). With a nil cache
// positions start at 0 and nothing is stored.
func (a *Attention) Forward(x backend.Array, mask backend.Mask, cache KVCache) backend.Array {
	return a.ForwardTap(x, mask, cache, nil)
}

// ForwardTap is Forward that also hands tap (when not nil) its intermediates
// in graph order: "q" and "k" after RoPE and "v" ([B, heads, L, head_dim],
// before the cache update), "attn" (the SDPA output, [B, H, L, head_dim]) and
// "o_proj" ([B, L, dim], the layer's output).
func (a *Attention) ForwardTap(x backend.Array, mask backend.Mask, cache KVCache, tap Tap) backend.Array {
	b := a.B
	B, L := x.Shape()[0], x.Shape()[1]

	qkv := forwardShared(b, x, a.QProj, a.KProj, a.VProj)
	q, k, v := qkv[0], qkv[1], qkv[2]

	q = b.Transpose(b.Reshape(q, B, L, a.NHeads, -1), 0, 2, 1, 3)
	k = b.Transpose(b.Reshape(k, B, L, a.NKVHeads, -1), 0, 2, 1, 3)
	v = b.Transpose(b.Reshape(v, B, L, a.NKVHeads, -1), 0, 2, 1, 3)

	off := backend.Offset{}
	if r, ok := cache.(RowOffsetter); ok {
		off = r.RoPEOffset()
	} else if cache != nil {
		off.Scalar = cache.Offset()
	}
	if bp, ok := cache.(BlockPositioner); ok {
		q, k = a.ropeBlocks(q, bp.RoPEBlocks()), a.ropeBlocks(k, bp.RoPEBlocks())
	} else {
		q = a.RoPE.ForwardOffset(q, off)
		k = a.RoPE.ForwardOffset(k, off)
	}
	if tap != nil {
		tap("q", q)
		tap("k", k)
		tap("v", v)
	}
	o := attendCache(b, cache, q, k, v, a.Scale, mask)
	if tap != nil {
		tap("attn", o)
	}

	o = a.OProj.Forward(b.Reshape(b.Transpose(o, 0, 2, 1, 3), B, L, -1))
	if tap != nil {
		tap("o_proj", o)
	}
	return o
}
