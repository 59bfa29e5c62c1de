package nn

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// KVStep is the growth step of FullKVCache, mlx_lm's KVCache.step.
const KVStep = 256

// FullKVCache keeps every key and value, mlx_lm's KVCache: buffers of a
// capacity that grows in steps of KVStep slots, written in place.
type FullKVCache struct {
	b            backend.Backend
	keys, values backend.Array // [B, Hk, capacity, D]; nil when empty
	offset       int
	store        tensor.DType // CacheOptions.KVDType
}

// NewFullKVCache returns an empty cache on b.
func NewFullKVCache(b backend.Backend) *FullKVCache {
	return &FullKVCache{b: b}
}

// NewFullKVCacheStoring returns an empty cache on b that stores float32
// keys and values in store (tensor.BF16 or tensor.F16; 0 keeps them float32,
// NewFullKVCache): CacheOptions.KVDType.
func NewFullKVCacheStoring(b backend.Backend, store tensor.DType) *FullKVCache {
	return &FullKVCache{b: b, store: store}
}

// Offset returns the number of tokens stored.
func (c *FullKVCache) Offset() int { return c.offset }

// Capacity returns the number of slots allocated.
func (c *FullKVCache) Capacity() int {
	if c.keys == nil {
		return 0
	}
	return c.keys.Shape()[2]
}

// Update is update_and_fetch. When the new tokens do not fit, it allocates
// zeros of ceil(L/KVStep)·KVStep slots and concatenates them to the old
// buffer, cut to Offset first when Offset is not a multiple of KVStep; then
// it writes k and v at [Offset, Offset+L) with SliceUpdate. Replaced buffers
// are released. It returns the buffers sliced to [..., :Offset, :] (mlx_lm
// returns the buffers themselves when full; a full-range slice has the same
// values and keeps the returned arrays the caller's).
func (c *FullKVCache) Update(k, v backend.Array) (backend.Array, backend.Array) {
	var keys, values backend.Array
	c.keys, c.values, keys, values = appendKV(c.b, c.keys, c.values, k, v, c.offset, c.store)
	c.offset += k.Shape()[2]
	return keys, values
}

// appendKV is the buffer arithmetic of mlx_lm's KVCache.update_and_fetch,
// shared by the full and the batch cache: when k and v ([B, H, L, D]) do not
// fit after index prev of the buffers keys and values (nil when empty), it
// grows them by ceil(L/KVStep)·KVStep zero slots (cutting them to prev first
// when prev is not a multiple of KVStep), then writes k and v at prev. It
// releases the buffers it replaces and returns the new buffers and the
// caller's views of them up to prev+L. The zero slots take the dtype of k
// and v, or store for float32 ones when store is set (storedAs); SliceUpdate
// rounds k and v to the buffers' dtype.
func appendKV(b backend.Backend, keys, values, k, v backend.Array, prev int, store tensor.DType) (newKeys, newValues, outK, outV backend.Array) {
	L := k.Shape()[2]
	keys, values = growKV(b, keys, values, k.Shape(), v.Shape(), storedAs(store, k.DType()), storedAs(store, v.DType()), prev, L)
	at := []int{0, 0, prev, 0}
	keys = replaced(b, keys, b.SliceUpdate(keys, k, at))
	values = replaced(b, values, b.SliceUpdate(values, v, at))
	return keys, values, b.Slice(keys, zeros4, upTo(keys.Shape(), prev+L)), b.Slice(values, zeros4, upTo(values.Shape(), prev+L))
}

// growKV returns buffers keys and values (nil when empty) with room for L
// more slots after index prev: themselves when they have it, else grown by
// ceil(L/KVStep)·KVStep zero slots of the shapes and dtypes of the new
// keys (ks, kt) and values (vs, vt), cut to prev first when prev is not a
// multiple of KVStep; the buffers replaced are released.
func growKV(b backend.Backend, keys, values backend.Array, ks, vs tensor.Shape, kt, vt tensor.DType, prev, L int) (backend.Array, backend.Array) {
	if keys != nil && prev+L <= keys.Shape()[2] {
		return keys, values
	}
	n := (KVStep + L - 1) / KVStep * KVStep
	zk := b.Zeros(slots(ks, n), kt)
	zv := b.Zeros(slots(vs, n), vt)
	if keys == nil {
		return zk, zv
	}
	if prev%KVStep != 0 {
		keys = replaced(b, keys, b.Slice(keys, zeros4, upTo(keys.Shape(), prev)))
		values = replaced(b, values, b.Slice(values, zeros4, upTo(values.Shape(), prev)))
	}
	keys = replaced(b, keys, b.Concatenate(2, keys, zk))
	values = replaced(b, values, b.Concatenate(2, values, zv))
	b.Release(zk, zv)
	return keys, values
}

// storedAs is the dtype a cache storing float32 keys and values in store
// (0: as they come) keeps keys or values of dtype dt in.
func storedAs(store, dt tensor.DType) tensor.DType {
	if store != 0 && dt == tensor.F32 {
		return store
	}
	return dt
}

// replaced releases old and returns next.
func replaced(b backend.Backend, old, next backend.Array) backend.Array {
	b.Release(old)
	return next
}

// appendKVRows is appendKV for the full caches of a batch's rows at once:
// row r of k and v ([B, H, L, D]) goes into caches[r] (grown as appendKV
// grows it), the buffers written by one backend.SliceUpdateRows each and
// the buffers they replace released; it returns each row's views up to its
// new offset.
func appendKVRows(b backend.Backend, caches []*FullKVCache, k, v backend.Array) (keys, values []backend.Array) {
	ks, vs := k.Shape().Clone(), v.Shape().Clone()
	ks[0], vs[0] = 1, 1
	L := ks[2]
	kb, vb, at := make([]backend.Array, len(caches)), make([]backend.Array, len(caches)), make([]int, len(caches))
	for r, c := range caches {
		c.keys, c.values = growKV(b, c.keys, c.values, ks, vs, storedAs(c.store, k.DType()), storedAs(c.store, v.DType()), c.offset, L)
		kb[r], vb[r], at[r] = c.keys, c.values, c.offset
	}
	kb = backend.SliceUpdateRows(b, kb, k, 2, at)
	vb = backend.SliceUpdateRows(b, vb, v, 2, at)
	keys, values = make([]backend.Array, len(caches)), make([]backend.Array, len(caches))
	for r, c := range caches {
		// A row written in place is its old buffer; any other replaces it
		// (its storage shared, or a backend without RowUpdater).
		if kb[r] != c.keys {
			b.Release(c.keys)
		}
		if vb[r] != c.values {
			b.Release(c.values)
		}
		c.keys, c.values = kb[r], vb[r]
		c.offset += L
		// The buffers are [1, H, capacity, D] with H and D those of ks, vs.
		keys[r] = b.Slice(c.keys, zeros4, upTo(ks, c.offset))
		values[r] = b.Slice(c.values, zeros4, upTo(vs, c.offset))
	}
	return keys, values
}

var zeros4 = []int{0, 0, 0, 0}

// slots returns shape [B, H, n, D] from a [B, H, L, D] shape.
func slots(s tensor.Shape, n int) tensor.Shape {
	return tensor.Shape{s[0], s[1], n, s[3]}
}

// upTo is the stop index of the slice [..., :n, :] of an array of shape s.
func upTo(s tensor.Shape, n int) []int {
	return []int{s[0], s[1], n, s[3]}
}

// Mask is make_mask: NoMask for one query, CausalMask otherwise.
func (c *FullKVCache) Mask(L int) backend.Mask {
	if L == 1 {
		return backend.NoMask{}
	}
	return backend.CausalMask{}
}

// State returns the key and value buffers (full capacity), or nil when empty.
func (c *FullKVCache) State() []backend.Array { return c.appendState(nil) }

// appendState appends State's arrays to out.
func (c *FullKVCache) appendState(out []backend.Array) []backend.Array {
	if c.keys == nil {
		return out
	}
	return append(out, c.keys, c.values)
}

// Trim moves the offset back by up to n tokens and returns how many.
func (c *FullKVCache) Trim(n int) int {
	n = max(0, min(n, c.offset))
	c.offset -= n
	return n
}

// Release frees the buffers and empties the cache.
func (c *FullKVCache) Release() {
	c.b.Release(c.keys, c.values)
	c.keys, c.values, c.offset = nil, nil, 0
}
