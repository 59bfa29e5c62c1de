package nn

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// RestoreFullKVCache returns a cache holding keys and values, [B, Hk,
// capacity, D] with capacity >= offset, whose first offset slots are the
// stored tokens: mlx_lm's KVCache.from_state((keys, values, offset)). The
// cache takes the arrays over (Release frees them). A shape that does not fit
// is an error naming it; nothing is released then. A cache of bfloat16 or
// float16 keys keeps float32 keys appended later in that dtype
// (CacheOptions.KVDType).
func RestoreFullKVCache(b backend.Backend, keys, values backend.Array, offset int) (*FullKVCache, error) {
	if keys == nil || values == nil {
		return nil, fmt.Errorf("nn: restoring a KV cache: keys or values missing")
	}
	ks, vs := keys.Shape(), values.Shape()
	if len(ks) != 4 || len(vs) != 4 {
		return nil, fmt.Errorf("nn: restoring a KV cache: keys %v and values %v, want [B, Hk, capacity, D]", ks, vs)
	}
	if ks[0] != vs[0] || ks[1] != vs[1] || ks[2] != vs[2] {
		return nil, fmt.Errorf("nn: restoring a KV cache: keys %v and values %v differ in B, Hk or capacity", ks, vs)
	}
	if keys.DType() != values.DType() {
		return nil, fmt.Errorf("nn: restoring a KV cache: keys are %v, values %v", keys.DType(), values.DType())
	}
	if offset < 0 || offset > ks[2] {
		return nil, fmt.Errorf("nn: restoring a KV cache: offset %d, want 0 <= offset <= capacity %d", offset, ks[2])
	}
	c := &FullKVCache{b: b, keys: keys, values: values, offset: offset}
	if dt := keys.DType(); dt == tensor.BF16 || dt == tensor.F16 {
		// Float32 keys appended later stay in the stored dtype
		// (CacheOptions.KVDType): mlx_lm would widen the buffers to
		// float32 at their next growth; keys of the stored dtype are
		// stored as they come either way.
		c.store = dt
	}
	return c, nil
}

// Fork returns a new cache holding the same tokens without copying them:
// its buffers are views of c's (full-range Slices), and SliceUpdate copies a
// buffer that another array still views, so the first Update of either cache
// copies that cache's buffers (copy-on-write: one copy of the capacity per
// cache written, none for a fork only read). Release each cache on its own.
// An empty cache forks to an empty cache.
func (c *FullKVCache) Fork() KVCache {
	f := &FullKVCache{b: c.b, offset: c.offset, store: c.store}
	if c.keys != nil {
		f.keys = c.b.Slice(c.keys, zeros4, c.keys.Shape())
		f.values = c.b.Slice(c.values, zeros4, c.values.Shape())
	}
	return f
}
