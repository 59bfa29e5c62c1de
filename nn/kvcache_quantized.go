package nn

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// QuantizedKVCache is mlx_lm's KVCache that becomes a QuantizedKVCache
// once it holds enough tokens (generate_step's kv_bits, kv_group_size and
// quantized_kv_start, maybe_quantize_kv_cache): it starts as a full cache;
// after a forward pass leaves it holding at least Start tokens, its whole
// buffer is quantized (KVCache.to_quantized: mx.quantize of keys and values
// along head_dim, the unused capacity included), and from then on new keys
// and values are quantized on arrival (QuantizedKVCache.update_and_fetch)
// and attention reads them through quantized matmuls (QuantizedSDPA).
//
// mlx_lm converts right after the forward pass (before evaluating the
// caches' state). This cache converts when it is next asked for its State
// (which models/minicpm5's Forward does at its end), Trimmed or Updated,
// whichever comes first: the same arrays, at the same point. An empty
// cache never converts, so the first forward always runs on the full cache,
// as in mlx_lm.
type QuantizedKVCache struct {
	b               backend.Backend
	full            *FullKVCache // until converted
	keys, values    backend.QuantizedArray
	quantized       bool
	offset          int
	groupSize, bits int
	start           int
}

// KVBits are the bit widths QuantizedKVCache offers (mlx_lm's kv_bits).
var KVBits = []int{4, 8}

// KVGroupSizes are the group sizes QuantizedKVCache offers (kv_group_size).
var KVGroupSizes = []int{32, 64}

// NewQuantizedKVCache returns an empty cache that quantizes to bits (4 or
// 8) in groups of groupSize (32 or 64) once it holds start tokens (start >=
// 0; mlx_lm's default quantized_kv_start is 5000).
func NewQuantizedKVCache(b backend.Backend, bits, groupSize, start int) (*QuantizedKVCache, error) {
	if err := checkKVQuant(bits, groupSize, start); err != nil {
		return nil, err
	}
	return &QuantizedKVCache{b: b, full: NewFullKVCache(b), groupSize: groupSize, bits: bits, start: start}, nil
}

func checkKVQuant(bits, groupSize, start int) error {
	okBits, okGroup := false, false
	for _, v := range KVBits {
		okBits = okBits || v == bits
	}
	for _, v := range KVGroupSizes {
		okGroup = okGroup || v == groupSize
	}
	switch {
	case !okBits:
		return fmt.Errorf("KV bits %d: want one of %v", bits, KVBits)
	case !okGroup:
		return fmt.Errorf("KV group size %d: want one of %v", groupSize, KVGroupSizes)
	case start < 0:
		return fmt.Errorf("quantized KV start %d: want >= 0", start)
	}
	return nil
}

// Offset returns the number of tokens stored.
func (c *QuantizedKVCache) Offset() int {
	if !c.quantized {
		return c.full.Offset()
	}
	return c.offset
}

// Quantized reports whether the cache holds quantized keys and values.
func (c *QuantizedKVCache) Quantized() bool { return c.quantized }

// Bits is the quantization's bit width.
func (c *QuantizedKVCache) Bits() int { return c.bits }

// GroupSize is the quantization's group size.
func (c *QuantizedKVCache) GroupSize() int { return c.groupSize }

// convert is maybe_quantize_kv_cache for this cache: once it holds Start
// tokens, quantize the full cache's whole buffer.
func (c *QuantizedKVCache) convert() {
	if c.quantized || c.full.State() == nil || c.full.Offset() < c.start {
		return
	}
	c.offset = c.full.Offset()
	st := c.full.State()
	c.keys = c.b.Quantize(st[0], c.groupSize, c.bits)
	c.values = c.b.Quantize(st[1], c.groupSize, c.bits)
	c.full.Release()
	c.full, c.quantized = nil, true
}

// UpdateQuantized appends k and v ([B, Hk, L, D]). While the cache is not
// quantized it returns the stored keys and values as Update does (quantized
// false); once quantized it returns them quantized, [..., :Offset, ·]
// slices of W, scales and biases (new arrays, the caller's).
func (c *QuantizedKVCache) UpdateQuantized(k, v backend.Array) (keys, values backend.Array, qk, qv backend.QuantizedArray, quantized bool) {
	c.convert()
	if !c.quantized {
		keys, values = c.full.Update(k, v)
		return keys, values, qk, qv, false
	}
	b := c.b
	prev := c.offset
	L := k.Shape()[2]
	if c.keys.W == nil || prev+L > c.keys.W.Shape()[2] {
		n := (KVStep + L - 1) / KVStep * KVStep
		if c.keys.W != nil {
			if prev%KVStep != 0 {
				c.keys = c.sliceQ(c.keys, prev, true)
				c.values = c.sliceQ(c.values, prev, true)
			}
			c.keys = c.growQ(c.keys, n)
			c.values = c.growQ(c.values, n)
		} else {
			c.keys = c.zerosQ(k, n)
			c.values = c.zerosQ(v, n)
		}
	}
	c.offset += L
	nk := b.Quantize(k, c.groupSize, c.bits)
	nv := b.Quantize(v, c.groupSize, c.bits)
	at := []int{0, 0, prev, 0}
	c.keys = c.writeQ(c.keys, nk, at)
	c.values = c.writeQ(c.values, nv, at)
	b.Release(nk.W, nk.Scales, nk.Biases, nv.W, nv.Scales, nv.Biases)
	return nil, nil, c.sliceQ(c.keys, c.offset, false), c.sliceQ(c.values, c.offset, false), true
}

// attend appends k and v and attends q to every stored key: the fused SDPA
// while the cache is not quantized, QuantizedSDPA once it is (mlx_lm's
// scaled_dot_product_attention picks by the cache's bits).
func (c *QuantizedKVCache) attend(q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	keys, values, qk, qv, quant := c.UpdateQuantized(k, v)
	if !quant {
		return c.b.ScaledDotProductAttention(q, keys, values, scale, mask)
	}
	return QuantizedSDPA(c.b, q, qk, qv, mask)
}

// Update appends k and v and returns every stored key and value; once the
// cache is quantized they are dequantized (for callers that cannot read
// quantized keys; attention reads them quantized, see UpdateQuantized).
func (c *QuantizedKVCache) Update(k, v backend.Array) (backend.Array, backend.Array) {
	keys, values, qk, qv, q := c.UpdateQuantized(k, v)
	if !q {
		return keys, values
	}
	dk, dv := c.b.Dequantize(qk), c.b.Dequantize(qv)
	c.b.Release(qk.W, qk.Scales, qk.Biases, qv.W, qv.Scales, qv.Biases)
	return dk, dv
}

func (c *QuantizedKVCache) zerosQ(x backend.Array, n int) backendQ {
	s := x.Shape()
	el := 32 / c.bits
	return backendQ{
		W:         c.b.Zeros(tensor.Shape{s[0], s[1], n, s[3] / el}, tensor.U32),
		Scales:    c.b.Zeros(tensor.Shape{s[0], s[1], n, s[3] / c.groupSize}, x.DType()),
		Biases:    c.b.Zeros(tensor.Shape{s[0], s[1], n, s[3] / c.groupSize}, x.DType()),
		GroupSize: c.groupSize, Bits: c.bits,
	}
}

type backendQ = backend.QuantizedArray

// growQ concatenates n zero slots to each part, releasing the old parts.
func (c *QuantizedKVCache) growQ(q backendQ, n int) backendQ {
	out := q
	for i, p := range []*backend.Array{&out.W, &out.Scales, &out.Biases} {
		old := []backend.Array{q.W, q.Scales, q.Biases}[i]
		z := c.b.Zeros(slots(old.Shape(), n), old.DType())
		*p = c.b.Concatenate(2, old, z)
		c.b.Release(old, z)
	}
	return out
}

// sliceQ is [..., :n, :] of each part; release releases q's parts.
func (c *QuantizedKVCache) sliceQ(q backendQ, n int, release bool) backendQ {
	out := q
	for _, p := range []*backend.Array{&out.W, &out.Scales, &out.Biases} {
		*p = c.b.Slice(*p, zeros4, upTo((*p).Shape(), n))
	}
	if release {
		c.b.Release(q.W, q.Scales, q.Biases)
	}
	return out
}

// writeQ writes src's parts into dst's at start, releasing dst's old parts.
func (c *QuantizedKVCache) writeQ(dst, src backendQ, at []int) backendQ {
	out := dst
	srcs := []backend.Array{src.W, src.Scales, src.Biases}
	for i, p := range []*backend.Array{&out.W, &out.Scales, &out.Biases} {
		old := *p
		*p = c.b.SliceUpdate(old, srcs[i], at)
		c.b.Release(old)
	}
	return out
}

// Mask is the full cache's: NoMask for one query, CausalMask otherwise
// (QuantizedSDPA turns the causal mask into its array).
func (c *QuantizedKVCache) Mask(L int) backend.Mask {
	if L == 1 {
		return backend.NoMask{}
	}
	return backend.CausalMask{}
}

// State returns the arrays held: the full cache's buffers, or the quantized
// keys' and values' W, scales and biases; nil when empty. It first converts
// the cache when due (see the type's doc).
func (c *QuantizedKVCache) State() []backend.Array {
	c.convert()
	if !c.quantized {
		return c.full.State()
	}
	if c.keys.W == nil {
		return nil
	}
	return []backend.Array{c.keys.W, c.keys.Scales, c.keys.Biases, c.values.W, c.values.Scales, c.values.Biases}
}

// Trim moves the offset back by up to n tokens and returns how many.
func (c *QuantizedKVCache) Trim(n int) int {
	c.convert()
	if !c.quantized {
		return c.full.Trim(n)
	}
	n = max(0, min(n, c.offset))
	c.offset -= n
	return n
}

// Release frees the buffers and empties the cache (not quantized again
// until it holds Start tokens).
func (c *QuantizedKVCache) Release() {
	if c.full != nil {
		c.full.Release()
	}
	c.b.Release(c.keys.W, c.keys.Scales, c.keys.Biases, c.values.W, c.values.Scales, c.values.Biases)
	c.keys, c.values = backendQ{}, backendQ{}
	c.full, c.quantized, c.offset = NewFullKVCache(c.b), false, 0
}

// QuantizedSDPA is mlx_lm's quantized_scaled_dot_product_attention: q [B,
// H, L, D] times head_dim^-0.5 (rounded to q's dtype), scores through a
// quantized matmul with the keys (transposed), the mask applied (a causal
// mask as the Bool array q_i >= k_j lower-right aligned, false → the
// dtype's lowest value; an ArrayMask the same way when Bool, added when
// float; a PrefixMask as its Bool array), a precise softmax, and a
// quantized matmul with the values. GQA without repeating heads: q is viewed as [B, Hk, H/Hk, L, D] and the keys
// as [B, Hk, 1, S, ·].
//
// A backend with a fused quantized attention (backend.QuantizedAttention:
// the CPU backend) runs the scaled q through it instead, which reads the
// keys and values in place a block at a time and keeps scores and weights
// in float32 without an [L, S] matrix; the composition above materialises
// the scores and, for a causal mask, an [L, S] mask, and stays the path of
// backends without it (MLX, where it is mlx_lm's own ops).
func QuantizedSDPA(b backend.Backend, q backend.Array, keys, values backend.QuantizedArray, mask backend.Mask) backend.Array {
	s := q.Shape()
	B, H, L, D := s[0], s[1], s[2], s[3]
	Hk := keys.W.Shape()[1]
	rep := H / Hk
	dt := q.DType()
	scale := b.Full(tensor.Shape{}, math.Pow(float64(D), -0.5), dt)
	q = b.Binary(backend.Multiply, q, scale)
	if qa, ok := b.(backend.QuantizedAttention); ok {
		return qa.QuantizedScaledDotProductAttention(q, keys, values, 1, mask)
	}
	if rep > 1 {
		q = b.Reshape(q, B, Hk, rep, L, D)
		keys, values = expandQ(b, keys), expandQ(b, values)
	}
	scores := b.QuantizedMatmul(q, keys, true)
	S := scores.Shape()[len(scores.Shape())-1]
	var cond backend.Array
	switch m := mask.(type) {
	case backend.CausalMask:
		v := make([]int32, L*S)
		for i := range L {
			for j := range S {
				if S-L+i >= j {
					v[i*S+j] = 1
				}
			}
		}
		cond = b.FromHost(tensor.FromInt32(tensor.Shape{L, S}, v).Convert(tensor.Bool))
	case backend.ArrayMask:
		if m.A.DType() == tensor.Bool {
			cond = m.A
		} else {
			scores = b.Binary(backend.Add, scores, m.A)
		}
	case backend.PrefixMask: // its Bool array
		if cond = m.A; cond == nil {
			cond = b.FromHost(m.Dense())
		}
	}
	if cond != nil {
		lowest := -math.MaxFloat32
		if dt == tensor.BF16 {
			lowest = -3.3895313892515355e38
		} else if dt == tensor.F16 {
			lowest = -65504
		}
		scores = b.Where(cond, scores, b.Full(tensor.Shape{}, lowest, dt))
	}
	scores = b.Softmax(scores, -1, true)
	out := b.QuantizedMatmul(scores, values, false)
	if rep > 1 {
		out = b.Reshape(out, B, H, L, -1)
	}
	return out
}

// expandQ views each part [B, Hk, S, c] as [B, Hk, 1, S, c].
func expandQ(b backend.Backend, q backend.QuantizedArray) backend.QuantizedArray {
	out := q
	for _, p := range []*backend.Array{&out.W, &out.Scales, &out.Biases} {
		s := (*p).Shape()
		*p = b.Reshape(*p, s[0], s[1], 1, s[2], s[3])
	}
	return out
}

// RestoreQuantizedKVCache returns a quantized cache holding keys and values
// (W [B, Hk, capacity, D·bits/32] uint32, scales and biases [B, Hk,
// capacity, D/groupSize]) whose first offset slots are the stored tokens:
// mlx_lm's QuantizedKVCache.from_state. The cache takes the arrays over. A
// state that does not fit is an error naming it; nothing is released then.
func RestoreQuantizedKVCache(b backend.Backend, keys, values backend.QuantizedArray, offset int) (*QuantizedKVCache, error) {
	if keys.Bits != values.Bits || keys.GroupSize != values.GroupSize {
		return nil, fmt.Errorf("nn: restoring a quantized KV cache: keys are %d-bit groups of %d, values %d-bit groups of %d", keys.Bits, keys.GroupSize, values.Bits, values.GroupSize)
	}
	if err := checkKVQuant(keys.Bits, keys.GroupSize, 0); err != nil {
		return nil, fmt.Errorf("nn: restoring a quantized KV cache: %w", err)
	}
	var capacity int
	for i, a := range []backend.Array{keys.W, keys.Scales, keys.Biases, values.W, values.Scales, values.Biases} {
		if a == nil || len(a.Shape()) != 4 {
			return nil, fmt.Errorf("nn: restoring a quantized KV cache: array %d of (keys W, scales, biases, values W, scales, biases) is missing or not 4-D", i)
		}
		if i == 0 {
			capacity = a.Shape()[2]
		}
		if a.Shape()[2] != capacity {
			return nil, fmt.Errorf("nn: restoring a quantized KV cache: array %d has %d slots, keys W %d", i, a.Shape()[2], capacity)
		}
	}
	if offset < 0 || offset > capacity {
		return nil, fmt.Errorf("nn: restoring a quantized KV cache: offset %d, want 0 <= offset <= capacity %d", offset, capacity)
	}
	return &QuantizedKVCache{b: b, keys: keys, values: values, quantized: true, offset: offset, groupSize: keys.GroupSize, bits: keys.Bits}, nil
}

// Fork returns a new cache holding the same tokens without copying them
// (the quantized parts, or the full cache before conversion, as views:
// SliceUpdate copies a buffer another array still views, so the first
// write to either cache copies it). Release each cache on its own.
func (c *QuantizedKVCache) Fork() KVCache {
	f := *c
	f.keys, f.values = backendQ{}, backendQ{}
	if c.full != nil {
		f.full = c.full.Fork().(*FullKVCache)
	}
	if c.keys.W != nil {
		f.keys = c.sliceQ(c.keys, c.keys.W.Shape()[2], false)
		f.values = c.sliceQ(c.values, c.values.W.Shape()[2], false)
	}
	return &f
}
