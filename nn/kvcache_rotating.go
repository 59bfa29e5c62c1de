package nn

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// RotatingKeep is the number of first tokens a rotating cache never evicts
// when mlx_lm's make_prompt_cache makes it (keep=4, the attention sink).
const RotatingKeep = 4

// RotatingKVCache keeps the last tokens of a sequence in a window of
// MaxSize slots, mlx_lm's RotatingKVCache (pinned 0.32.2): the first Keep
// tokens stay, the others are evicted oldest first.
//
// It has mlx_lm's two update paths, each reproduced slot for slot so that
// attention sees the keys in the same order (the order of a sum):
//
//   - several tokens (a prefill chunk): the buffer is put back in temporal
//     order, cut to its Keep first and its MaxSize−1−Keep last tokens, and
//     the new ones are concatenated after them; the buffer may then hold up
//     to MaxSize−1+L slots, so every new token sees at least MaxSize−1
//     earlier ones (the mask limits each to its window);
//   - one token (decode): written in place at the write index, which wraps
//     from MaxSize back to Keep; the buffer grows in steps of KVStep slots
//     up to MaxSize first, and a longer buffer left by a prefill chunk is cut
//     to MaxSize first.
type RotatingKVCache struct {
	b            backend.Backend
	keys, values backend.Array // [B, Hk, slots, D]; nil when empty
	offset       int           // tokens seen (mlx_lm's offset)
	idx          int           // the write index (mlx_lm's _idx)
	keep, max    int
}

// NewRotatingKVCache returns an empty rotating cache of maxSize slots that
// never evicts its first keep tokens. It needs 0 <= keep < maxSize (mlx_lm
// does not check; a window no larger than keep would write past it).
func NewRotatingKVCache(b backend.Backend, maxSize, keep int) (*RotatingKVCache, error) {
	if keep < 0 || maxSize <= keep {
		return nil, fmt.Errorf("nn: rotating KV cache of %d slots keeping %d tokens: want 0 <= keep < max size", maxSize, keep)
	}
	return &RotatingKVCache{b: b, keep: keep, max: maxSize}, nil
}

// Offset returns the number of tokens seen (not all of them are stored).
func (c *RotatingKVCache) Offset() int { return c.offset }

// MaxSize returns the window size (mlx_lm's max_size).
func (c *RotatingKVCache) MaxSize() int { return c.max }

// Keep returns the number of first tokens never evicted.
func (c *RotatingKVCache) Keep() int { return c.keep }

// Index returns the write index (mlx_lm's _idx): the slot the next single
// token goes to, before wrapping.
func (c *RotatingKVCache) Index() int { return c.idx }

// Size is the number of tokens attention sees, min(Offset, MaxSize).
func (c *RotatingKVCache) Size() int { return min(c.offset, c.max) }

// slotsOf is the buffer length (0 when empty).
func (c *RotatingKVCache) slotsOf() int {
	if c.keys == nil {
		return 0
	}
	return c.keys.Shape()[2]
}

// Update is update_and_fetch: the in-place path for one token, the
// concatenating path otherwise. Replaced buffers are released; the returned
// arrays are the caller's.
func (c *RotatingKVCache) Update(k, v backend.Array) (backend.Array, backend.Array) {
	if k.Shape()[2] == 1 {
		return c.updateInPlace(k, v)
	}
	return c.updateConcat(k, v)
}

func (c *RotatingKVCache) updateConcat(k, v backend.Array) (backend.Array, backend.Array) {
	b := c.b
	if c.keys == nil {
		c.keys = b.Slice(k, zeros4, k.Shape())
		c.values = b.Slice(v, zeros4, v.Shape())
	} else {
		c.keys = c.replace(c.keys, c.temporalOrder(c.keys))
		c.values = c.replace(c.values, c.temporalOrder(c.values))
		c.idx = c.slotsOf()
		cut := c.idx - c.max + 1
		c.keys = c.replace(c.keys, c.trim(cut, c.keys, k))
		c.values = c.replace(c.values, c.trim(cut, c.values, v))
	}
	c.offset += k.Shape()[2]
	c.idx = c.slotsOf()
	return b.Slice(c.keys, zeros4, c.keys.Shape()), b.Slice(c.values, zeros4, c.values.Shape())
}

func (c *RotatingKVCache) updateInPlace(k, v backend.Array) (backend.Array, backend.Array) {
	b := c.b
	prev := c.offset
	if c.keys == nil || (prev >= c.slotsOf() && c.slotsOf() < c.max) {
		n := min(KVStep, c.max-prev)
		newK := b.Zeros(slots(k.Shape(), n), k.DType())
		newV := b.Zeros(slots(v.Shape(), n), v.DType())
		if c.keys != nil {
			c.keys = c.replace(c.keys, b.Concatenate(2, c.keys, newK))
			c.values = c.replace(c.values, b.Concatenate(2, c.values, newV))
			b.Release(newK, newV)
		} else {
			c.keys, c.values = newK, newV
		}
		c.idx = prev
	}
	if cut := c.slotsOf() - c.max; cut > 0 {
		c.keys = c.replace(c.keys, c.trim(cut, c.keys, nil))
		c.values = c.replace(c.values, c.trim(cut, c.values, nil))
		c.idx = c.max
	}
	if c.idx == c.max {
		c.idx = c.keep
	}
	at := []int{0, 0, c.idx, 0}
	c.keys = c.replace(c.keys, b.SliceUpdate(c.keys, k, at))
	c.values = c.replace(c.values, b.SliceUpdate(c.values, v, at))
	c.offset++
	c.idx++
	n := c.slotsOf()
	if c.offset < n {
		n = c.offset
	}
	return b.Slice(c.keys, zeros4, upTo(c.keys.Shape(), n)), b.Slice(c.values, zeros4, upTo(c.values.Shape(), n))
}

// trim is mlx_lm's _trim: x without the cut slots after the first keep
// (nothing cut when cut <= 0), then add (when not nil), as one new array.
func (c *RotatingKVCache) trim(cut int, x, add backend.Array) backend.Array {
	b := c.b
	s := x.Shape()
	var parts []backend.Array
	if cut > 0 {
		parts = append(parts,
			b.Slice(x, zeros4, upTo(s, c.keep)),
			b.Slice(x, []int{0, 0, cut + c.keep, 0}, s))
	} else {
		parts = append(parts, x)
	}
	if add != nil {
		parts = append(parts, add)
	}
	if len(parts) == 1 {
		return b.Slice(x, zeros4, s)
	}
	out := b.Concatenate(2, parts...)
	if cut > 0 {
		b.Release(parts[0], parts[1])
	}
	return out
}

// temporalOrder is mlx_lm's _temporal_order: the buffer with its slots in
// the order the tokens came, cut to the write index when not full.
func (c *RotatingKVCache) temporalOrder(x backend.Array) backend.Array {
	b := c.b
	s := x.Shape()
	switch {
	case c.idx == s[2]:
		return b.Slice(x, zeros4, s)
	case c.idx < c.offset:
		head := b.Slice(x, zeros4, upTo(s, c.keep))
		newest := b.Slice(x, []int{0, 0, c.idx, 0}, s)
		oldest := b.Slice(x, []int{0, 0, c.keep, 0}, upTo(s, c.idx))
		out := b.Concatenate(2, head, newest, oldest)
		b.Release(head, newest, oldest)
		return out
	default:
		return b.Slice(x, zeros4, upTo(s, c.idx))
	}
}

// replace releases old and returns next.
func (c *RotatingKVCache) replace(old, next backend.Array) backend.Array {
	return replaced(c.b, old, next)
}

// Mask is make_mask(L) with no window_size (what mlx_lm's models ask for):
// for L > 1, a causal mask limited to a window of MaxSize keys: an array
// mask [L, min(MaxSize−1, Offset)+L] when a query's window does not reach
// back to the first key (create_causal_mask with window_size), otherwise
// CausalMask; for one query NoMask (the in-place path returns at most
// MaxSize keys, all of them in the window).
func (c *RotatingKVCache) Mask(L int) backend.Mask {
	if L <= 1 {
		return backend.NoMask{}
	}
	off := min(c.max-1, c.offset)
	if off+L <= c.max {
		return backend.CausalMask{}
	}
	return backend.ArrayMask{A: c.b.FromHost(WindowMask(L, off, c.max))}
}

// WindowMask is mlx_lm's create_causal_mask(L, offset, window_size): a Bool
// [L, offset+L] whose row i (the query at position offset+i) is true at
// key j iff j <= offset+i < j+window.
func WindowMask(L, offset, window int) *tensor.Dense {
	S := offset + L
	v := make([]int32, L*S)
	for i := range L {
		q := offset + i
		for j := range S {
			if q >= j && q < j+window {
				v[i*S+j] = 1
			}
		}
	}
	return tensor.FromInt32(tensor.Shape{L, S}, v).Convert(tensor.Bool)
}

// State returns the key and value buffers, or nil when empty. mlx_lm's
// state is (keys, values, offset, keep, max_size, _idx): the integers are
// Offset, Keep, MaxSize and Index.
func (c *RotatingKVCache) State() []backend.Array {
	if c.keys == nil {
		return nil
	}
	return []backend.Array{c.keys, c.values}
}

// Trim moves the offset and the write index back by up to n tokens (no
// more than Offset) and returns how many. As in mlx_lm it is only sound
// while nothing was evicted (Trimmable); data is not moved.
func (c *RotatingKVCache) Trim(n int) int {
	n = max(0, min(n, c.offset))
	c.offset -= n
	c.idx -= n
	return n
}

// Trimmable is mlx_lm's is_trimmable: Offset < MaxSize, nothing evicted yet.
func (c *RotatingKVCache) Trimmable() bool { return c.offset < c.max }

// Release frees the buffers and empties the cache.
func (c *RotatingKVCache) Release() {
	c.b.Release(c.keys, c.values)
	c.keys, c.values, c.offset, c.idx = nil, nil, 0, 0
}

// RestoreRotatingKVCache returns a rotating cache from mlx_lm's state
// (keys, values, offset, keep, max_size, _idx): RotatingKVCache.from_state.
// keys and values are [B, Hk, slots, D]; the cache takes them over. A state
// that does not fit is an error naming it; nothing is released then.
func RestoreRotatingKVCache(b backend.Backend, keys, values backend.Array, offset, keep, maxSize, idx int) (*RotatingKVCache, error) {
	c, err := NewRotatingKVCache(b, maxSize, keep)
	if err != nil {
		return nil, err
	}
	if keys == nil || values == nil {
		return nil, fmt.Errorf("nn: restoring a rotating KV cache: keys or values missing")
	}
	ks, vs := keys.Shape(), values.Shape()
	if len(ks) != 4 || len(vs) != 4 || ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] {
		return nil, fmt.Errorf("nn: restoring a rotating KV cache: keys %v and values %v, want [B, Hk, slots, D] with the same B, Hk and slots", ks, vs)
	}
	if keys.DType() != values.DType() {
		return nil, fmt.Errorf("nn: restoring a rotating KV cache: keys are %v, values %v", keys.DType(), values.DType())
	}
	if err := CheckRotatingState(ks[2], offset, keep, maxSize, idx); err != nil {
		return nil, fmt.Errorf("nn: restoring a rotating KV cache: %w", err)
	}
	c.keys, c.values, c.offset, c.idx = keys, values, offset, idx
	return c, nil
}

// CheckRotatingState returns an error unless a rotating cache of slots
// slots may hold offset, keep, maxSize and write index idx: 0 <= keep <
// maxSize, 0 <= idx <= min(offset, slots), and offset <= slots while slots
// < maxSize (the states mlx_lm's RotatingKVCache reaches; others would
// write outside the buffer).
func CheckRotatingState(slots, offset, keep, maxSize, idx int) error {
	switch {
	case keep < 0 || maxSize <= keep:
		return fmt.Errorf("max size %d, keep %d: want 0 <= keep < max size", maxSize, keep)
	case offset < 0 || idx < 0 || idx > slots || idx > offset || (slots < maxSize && offset > slots):
		return fmt.Errorf("offset %d, write index %d, %d slots, max size %d: want 0 <= index <= min(offset, slots), and offset <= slots while slots < max size", offset, idx, slots, maxSize)
	}
	return nil
}

// CacheOptions select the kind of KV cache a model's cache factory makes.
// The zero value is the full cache (mlx_lm's KVCache).
type CacheOptions struct {
	// MaxKVSize > 0 selects a RotatingKVCache of that many slots keeping
	// RotatingKeep tokens (mlx_lm's max_kv_size, make_prompt_cache).
	MaxKVSize int
	// KVBits > 0 selects a QuantizedKVCache of that many bits (4 or 8,
	// mlx_lm's kv_bits) in groups of KVGroupSize (32 or 64), quantizing
	// once it holds QuantizedKVStart tokens (mlx_lm's default is 5000).
	KVBits, KVGroupSize, QuantizedKVStart int
	// Turbo, when its bit widths are set, selects a TurboKVCache of that
	// scheme (bf16-first), read deferred unless TurboEager.
	Turbo      turboquant.Scheme
	TurboEager bool
	// PerRow makes a batch of the full cache (NewBatchCache) one
	// FullKVCache per row, as the quantized and TurboQuant kinds always
	// are, instead of mlx_lm's shared left-padded buffer: rows finishing
	// and joining move caches instead of copying the batch's buffers, and
	// each row computes what it computes alone. A single sequence's cache
	// is the same either way.
	PerRow bool
	// KVDType, when set (tensor.BF16 or tensor.F16), is the dtype a full
	// cache (one sequence's, a batch's shared buffers or its row caches)
	// stores float32 keys and values in, rounded to nearest even as
	// SliceUpdate rounds, as llama.cpp's cache types do: half the cache's
	// bytes and the attention's reads for a model that computes in float32
	// (such as a GGUF conversion with float32 norms). Keys and values of
	// another dtype are stored as they come, and the zero value stores
	// every dtype as it comes (mlx_lm). Not with the other kinds.
	KVDType tensor.DType
}

// Encoded reports whether o's cache stores its keys and values encoded
// (quantized or TurboQuant): a batch of such caches always holds one per
// row, and only a per-row batch of the full cache is seeded from a
// FullKVCache.
func (o CacheOptions) Encoded() bool {
	return o.KVBits > 0 || o.Turbo != (turboquant.Scheme{})
}

// Check returns an error naming the option that is out of range.
func (o CacheOptions) Check() error {
	switch {
	case o.KVDType != 0 && o.KVDType != tensor.BF16 && o.KVDType != tensor.F16:
		return fmt.Errorf("KV dtype %s: want bfloat16 or float16 (or none: stored as computed)", o.KVDType.MLXName())
	case o.KVDType != 0 && (o.Encoded() || o.MaxKVSize > 0):
		return fmt.Errorf("KV dtype %s with a %s cache: the dtype applies to the full cache only", o.KVDType.MLXName(), o.kindName())
	}
	if o.PerRow && o.MaxKVSize > 0 {
		return fmt.Errorf("per-row batch caches with max KV size %d: a rotating batch shares one window (mlx_lm's BatchRotatingKVCache)", o.MaxKVSize)
	}
	if o.MaxKVSize < 0 || (o.MaxKVSize > 0 && o.MaxKVSize <= RotatingKeep) {
		return fmt.Errorf("max KV size %d: want 0 (keep every token) or more than %d (the rotating cache keeps the first %d tokens)", o.MaxKVSize, RotatingKeep, RotatingKeep)
	}
	if o.Turbo != (turboquant.Scheme{}) {
		if o.KVBits != 0 || o.MaxKVSize != 0 {
			return fmt.Errorf("TurboQuant KV cache %s with KV bits %d or max KV size %d: choose one kind of cache", o.Turbo, o.KVBits, o.MaxKVSize)
		}
		return o.Turbo.CheckBits()
	}
	if o.KVBits == 0 {
		return nil
	}
	if o.MaxKVSize > 0 {
		return fmt.Errorf("KV bits %d with max KV size %d: a rotating cache cannot be quantized (mlx_lm: RotatingKVCache Quantization NYI)", o.KVBits, o.MaxKVSize)
	}
	return checkKVQuant(o.KVBits, o.KVGroupSize, o.QuantizedKVStart)
}

// New returns an empty cache of the kind o selects; o must pass Check.
func (o CacheOptions) New(b backend.Backend) KVCache {
	if o.Turbo != (turboquant.Scheme{}) {
		c, err := NewTurboKVCache(b, o.Turbo, !o.TurboEager, false)
		if err != nil {
			panic(err)
		}
		return c
	}
	if o.KVBits > 0 {
		c, err := NewQuantizedKVCache(b, o.KVBits, o.KVGroupSize, o.QuantizedKVStart)
		if err != nil {
			panic(err)
		}
		return c
	}
	if o.MaxKVSize > 0 {
		c, err := NewRotatingKVCache(b, o.MaxKVSize, RotatingKeep)
		if err != nil {
			panic(err)
		}
		return c
	}
	return NewFullKVCacheStoring(b, o.KVDType)
}
