package nn

import (
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// batchRotating is the state a BatchKVCache has when it is mlx_lm's
// BatchRotatingKVCache (pinned 0.32.2): a window of max slots shared by the
// rows, each row left-padded, with mlx_lm's two update paths (a chunk is
// concatenated after the buffer put back in temporal order and cut to
// max−1 slots; one token is written in place at the write index, which
// wraps to 0). Unlike RotatingKVCache it keeps no first tokens (keep 0).
//
// The BatchKVCache fields keys, values and leftPadding are shared; idx is
// mlx_lm's _idx. Left paddings may go negative, as in mlx_lm (evicted
// slots are counted off them).
type batchRotating struct {
	max     int
	offsets []int // each row's offset (mlx_lm's offset array)
	total   int   // mlx_lm's _offset: slots written, padding included
	rotated bool
	// pad is the right padding announced for the next chunk; lengths are
	// mlx_lm's _lengths (each row's offset once its real tokens are in),
	// set by the chunk's update, used by Finalize.
	pad, lengths []int
}

// NewBatchRotatingKVCache returns an empty rotating batch cache of
// len(leftPadding) rows keeping at most maxSize slots per row (mlx_lm's
// BatchRotatingKVCache(max_size, left_padding)); maxSize < 1 is an error.
func NewBatchRotatingKVCache(b backend.Backend, maxSize int, leftPadding []int) (*BatchKVCache, error) {
	if maxSize < 1 {
		return nil, fmt.Errorf("rotating batch cache: max size %d, want >= 1", maxSize)
	}
	r := &batchRotating{max: maxSize, offsets: make([]int, len(leftPadding))}
	for i, p := range leftPadding {
		r.offsets[i] = -p
	}
	return &BatchKVCache{b: b, leftPadding: slices.Clone(leftPadding), rot: r, kind: CacheOptions{MaxKVSize: maxSize}}, nil
}

// MaxSize returns the window of a rotating batch cache (0 for other kinds).
func (c *BatchKVCache) MaxSize() int {
	if c.rot == nil {
		return 0
	}
	return c.rot.max
}

// rotUpdate is update_and_fetch.
func (c *BatchKVCache) rotUpdate(k, v backend.Array) (backend.Array, backend.Array) {
	if k.Shape()[2] == 1 {
		return c.rotInPlace(k, v)
	}
	return c.rotConcat(k, v)
}

// temporalOrder is _temporal_order: a rotated buffer rolled back so that
// its oldest slot comes first.
func (c *BatchKVCache) temporalOrder() {
	r := c.rot
	if !r.rotated {
		return
	}
	c.keys = c.replace(c.keys, rollLeft(c.b, c.keys, c.idx))
	c.values = c.replace(c.values, rollLeft(c.b, c.values, c.idx))
	c.idx = c.keys.Shape()[2]
	r.rotated = false
}

// rollLeft is mx.roll(x, -n, axis=2): slot j takes slot (j+n) mod slots.
func rollLeft(b backend.Backend, x backend.Array, n int) backend.Array {
	s := x.Shape()
	if n %= s[2]; n == 0 {
		return b.Slice(x, zeros4, s)
	}
	head := b.Slice(x, zeros4, upTo(s, n))
	tail := b.Slice(x, []int{0, 0, n, 0}, s)
	out := b.Concatenate(2, tail, head)
	b.Release(head, tail)
	return out
}

// rotConcat is _update_concat.
func (c *BatchKVCache) rotConcat(k, v backend.Array) (backend.Array, backend.Array) {
	r := c.rot
	L := k.Shape()[2]
	if r.pad != nil && r.lengths == nil {
		r.lengths = make([]int, len(r.pad))
		for i, p := range r.pad {
			r.lengths[i] = r.offsets[i] + L - p
		}
	}
	if c.keys == nil {
		c.keys, c.values = c.b.Slice(k, zeros4, k.Shape()), c.b.Slice(v, zeros4, v.Shape())
	} else {
		c.temporalOrder()
		if c.keys.Shape()[2] > c.idx {
			c.keys = c.replace(c.keys, c.b.Slice(c.keys, zeros4, upTo(c.keys.Shape(), c.idx)))
			c.values = c.replace(c.values, c.b.Slice(c.values, zeros4, upTo(c.values.Shape(), c.idx)))
		}
		if r.lengths != nil {
			roll := make([]int, len(r.offsets))
			for i := range roll {
				roll[i] = max(0, r.offsets[i]-r.lengths[i])
				c.leftPadding[i] += roll[i]
				r.offsets[i] -= roll[i]
			}
			c.keys = c.replace(c.keys, c.roll(c.keys, roll))
			c.values = c.replace(c.values, c.roll(c.values, roll))
		}
		trim := c.idx - r.max + 1
		if trim > 0 {
			for i := range c.leftPadding {
				c.leftPadding[i] -= trim
			}
		}
		c.keys = c.replace(c.keys, c.cutAppend(c.keys, trim, k))
		c.values = c.replace(c.values, c.cutAppend(c.values, trim, v))
	}
	for i := range r.offsets {
		r.offsets[i] += L
	}
	r.total += L
	c.idx = c.keys.Shape()[2]
	return c.b.Slice(c.keys, zeros4, c.keys.Shape()), c.b.Slice(c.values, zeros4, c.values.Shape())
}

// cutAppend is _trim(cut, x, add): x without its first cut slots (when cut
// > 0), then add after it.
func (c *BatchKVCache) cutAppend(x backend.Array, cut int, add backend.Array) backend.Array {
	if cut > 0 {
		cx := c.b.Slice(x, []int{0, 0, cut, 0}, x.Shape())
		out := c.b.Concatenate(2, cx, add)
		c.b.Release(cx)
		return out
	}
	return c.b.Concatenate(2, x, add)
}

// rotInPlace is _update_in_place.
func (c *BatchKVCache) rotInPlace(k, v backend.Array) (backend.Array, backend.Array) {
	r := c.rot
	if r.lengths != nil || r.pad != nil {
		panic(backend.Errorf("BatchKVCache.Update", []backend.Array{k, v}, "a rotating batch cache decodes only after Finalize"))
	}
	s := k.Shape()
	B, H, S := s[0], s[1], s[2]
	prev := r.total
	if c.keys == nil || (prev >= c.keys.Shape()[2] && c.keys.Shape()[2] < r.max) {
		n := min(KVStep, r.max-prev)
		if n <= 0 {
			panic(backend.Errorf("BatchKVCache.Update", []backend.Array{k, v}, "rotating batch cache: %d slots written, %d held, window %d", prev, c.Capacity(), r.max))
		}
		zk := c.b.Zeros(tensor.Shape{B, H, n, s[3]}, k.DType())
		zv := c.b.Zeros(tensor.Shape{B, H, n, v.Shape()[3]}, v.DType())
		if c.keys != nil {
			c.keys = c.replace(c.keys, c.b.Concatenate(2, c.keys, zk))
			c.values = c.replace(c.values, c.b.Concatenate(2, c.values, zv))
			c.b.Release(zk, zv)
		} else {
			c.keys, c.values = zk, zv
		}
		c.idx = prev
	}
	if trim := c.keys.Shape()[2] - r.max; trim > 0 {
		c.keys = c.replace(c.keys, c.b.Slice(c.keys, []int{0, 0, trim, 0}, c.keys.Shape()))
		c.values = c.replace(c.values, c.b.Slice(c.values, []int{0, 0, trim, 0}, c.values.Shape()))
		c.idx = r.max
		for i := range c.leftPadding {
			c.leftPadding[i] -= trim
		}
	}
	if c.idx == r.max {
		r.rotated, c.idx = true, 0
	}
	if r.rotated {
		for i := range c.leftPadding {
			c.leftPadding[i] -= S
		}
	}
	at := []int{0, 0, c.idx, 0}
	c.keys = c.replace(c.keys, c.b.SliceUpdate(c.keys, k, at))
	c.values = c.replace(c.values, c.b.SliceUpdate(c.values, v, at))
	r.total += S
	for i := range r.offsets {
		r.offsets[i] += S
	}
	c.idx += S
	n := c.keys.Shape()[2]
	if r.total < n {
		n = r.total
	}
	return c.b.Slice(c.keys, zeros4, upTo(c.keys.Shape(), n)), c.b.Slice(c.values, zeros4, upTo(c.values.Shape(), n))
}

// rotMask is make_mask(N) with the window max: a Bool [B, 1, N, S] array.
func (c *BatchKVCache) rotMask(N int) backend.Mask {
	r := c.rot
	off := min(r.max-1, r.total)
	S := off + N
	lp := slices.Clone(c.leftPadding)
	grow := 0
	if N > 1 {
		grow = 1
	}
	if trim := c.idx - r.max + grow; trim > 0 {
		for i := range lp {
			lp[i] -= trim
		}
	}
	rotated := N == 1 && (r.rotated || c.idx >= r.max)
	shift := 0
	if rotated {
		for i := range lp {
			lp[i]--
		}
		idx := c.idx
		if idx >= r.max {
			idx = 0
		}
		shift = idx + 1
	}
	B := len(lp)
	m := tensor.New(tensor.Bool, tensor.Shape{B, 1, N, S})
	for row, p := range lp {
		for i := range N {
			l := i
			if off > 0 {
				l = off + i
			}
			out := m.Data[(row*N+i)*S:]
			for j := range S {
				if l >= j && l < j+r.max && j >= p {
					out[(j+shift)%S] = 1
				}
			}
		}
	}
	return backend.ArrayMask{A: c.b.FromHost(m)}
}

// rotTrim is trim(n).
func (c *BatchKVCache) rotTrim(n int) int {
	r := c.rot
	n = max(0, min(n, r.total))
	r.total -= n
	c.idx -= n
	for i := range r.offsets {
		r.offsets[i] -= n
	}
	return n
}

// rotFinalize is finalize: each row rolled right by its right padding.
func (c *BatchKVCache) rotFinalize() {
	r := c.rot
	r.pad = nil
	if r.lengths == nil {
		return
	}
	roll := make([]int, len(r.offsets))
	for i := range roll {
		roll[i] = max(0, r.offsets[i]-r.lengths[i])
		c.leftPadding[i] += roll[i]
		r.offsets[i] -= roll[i]
	}
	if c.keys != nil {
		c.keys = c.replace(c.keys, c.roll(c.keys, roll))
		c.values = c.replace(c.values, c.roll(c.values, roll))
	}
	r.lengths = nil
}

// rotFilter is filter(batch_indices): the rows keep, no slot dropped.
func (c *BatchKVCache) rotFilter(keep []int, owned bool) {
	r := c.rot
	c.takeRows(keep, owned)
	pick := func(x []int) []int {
		if x == nil {
			return nil
		}
		out := make([]int, len(keep))
		for i, k := range keep {
			out[i] = x[k]
		}
		return out
	}
	c.leftPadding, r.offsets, r.pad, r.lengths = pick(c.leftPadding), pick(r.offsets), pick(r.pad), pick(r.lengths)
}

// rotExtend is extend(other).
func (c *BatchKVCache) rotExtend(o *BatchKVCache) error {
	r, ro := c.rot, o.rot
	if r.max != ro.max {
		return fmt.Errorf("batch cache: extend a rotating batch of window %d with one of %d", r.max, ro.max)
	}
	if r.pad != nil || ro.pad != nil {
		return fmt.Errorf("batch cache: extend between PrepareRightPadding and Finalize")
	}
	defer func() {
		o.keys, o.values, o.idx, o.leftPadding = nil, nil, 0, nil
		ro.offsets, ro.total, ro.rotated = nil, 0, false
	}()
	if c.keys == nil && o.keys == nil {
		c.leftPadding = append(c.leftPadding, o.leftPadding...)
		r.offsets = append(r.offsets, ro.offsets...)
		return nil
	}
	if r.rotated != ro.rotated || c.idx != o.idx {
		if c.keys != nil {
			c.temporalOrder()
		}
		if o.keys != nil {
			o.temporalOrder()
		}
	}
	maxIdx := max(c.idx, o.idx)
	ref := c.keys
	if ref == nil {
		ref = o.keys
	}
	vref := c.values
	if vref == nil {
		vref = o.values
	}
	if c.keys != nil && o.keys != nil {
		a, b := c.keys.Shape(), o.keys.Shape()
		if a[1] != b[1] || a[3] != b[3] || c.keys.DType() != o.keys.DType() || c.values.Shape()[3] != o.values.Shape()[3] {
			return fmt.Errorf("batch cache: extend %v %v with %v %v keys", c.keys.DType(), a, o.keys.DType(), b)
		}
	}
	L1, L2 := 0, 0
	if c.keys != nil {
		L1 = c.keys.Shape()[2]
	}
	if o.keys != nil {
		L2 = o.keys.Shape()[2]
	}
	maxSize := max(L1, L2)
	H, D, M, dt := ref.Shape()[1], ref.Shape()[3], vref.Shape()[3], ref.DType()
	pad := func(x *BatchKVCache) (k, v backend.Array) {
		k, v = x.keys, x.values
		if k == nil {
			B := len(x.leftPadding)
			k = c.b.Zeros(tensor.Shape{B, H, 0, D}, dt)
			v = c.b.Zeros(tensor.Shape{B, H, 0, M}, dt)
		}
		left := maxIdx - x.idx
		right := maxSize - k.Shape()[2] - left
		if right < 0 {
			k = c.b.Slice(k, zeros4, upTo(k.Shape(), k.Shape()[2]+right))
			v = c.b.Slice(v, zeros4, upTo(v.Shape(), v.Shape()[2]+right))
			right = 0
		}
		k, v = c.padSlots(k, left, right), c.padSlots(v, left, right)
		for i := range x.leftPadding {
			x.leftPadding[i] += left
		}
		return k, v
	}
	k1, v1 := pad(c)
	k2, v2 := pad(o)
	keys, values := c.b.Concatenate(0, k1, k2), c.b.Concatenate(0, v1, v2)
	c.b.Release(k1, v1, k2, v2, c.keys, c.values, o.keys, o.values)
	c.keys, c.values = keys, values
	c.leftPadding = append(c.leftPadding, o.leftPadding...)
	r.offsets = append(r.offsets, ro.offsets...)
	c.idx = maxIdx
	r.total = max(r.total, ro.total)
	return nil
}

// rotExtract is extract(idx): row i as a RotatingKVCache of window max and
// keep 0, holding the row's slots in temporal order past its padding.
func (c *BatchKVCache) rotExtract(i int) (KVCache, error) {
	r := c.rot
	if c.keys == nil {
		return NewRotatingKVCache(c.b, r.max, 0)
	}
	p := max(0, c.leftPadding[i])
	s, vs := c.keys.Shape(), c.values.Shape()
	k := c.b.Slice(c.keys, []int{i, 0, 0, 0}, []int{i + 1, s[1], s[2], s[3]})
	v := c.b.Slice(c.values, []int{i, 0, 0, 0}, []int{i + 1, vs[1], vs[2], vs[3]})
	idx := c.idx
	if r.rotated {
		k2, v2 := rollLeft(c.b, k, c.idx), rollLeft(c.b, v, c.idx)
		c.b.Release(k, v)
		k, v, idx = k2, v2, r.max
	}
	p = min(p, idx)
	k2 := c.b.Slice(k, []int{0, 0, p, 0}, []int{1, s[1], idx, s[3]})
	v2 := c.b.Slice(v, []int{0, 0, p, 0}, []int{1, vs[1], idx, vs[3]})
	c.b.Release(k, v)
	out, err := RestoreRotatingKVCache(c.b, k2, v2, r.offsets[i], 0, r.max, idx-p)
	if err != nil {
		c.b.Release(k2, v2)
		return nil, fmt.Errorf("batch cache: extract row %d: %w", i, err)
	}
	return out, nil
}

// rotSplit is Split: a copy filtered to idx, this cache to the others.
func (c *BatchKVCache) rotSplit(idx []int) (*BatchKVCache, error) {
	if err := c.checkKeep(idx, "split"); err != nil {
		return nil, err
	}
	if c.rot.pad != nil {
		return nil, fmt.Errorf("batch cache: split between PrepareRightPadding and Finalize")
	}
	r := *c.rot
	r.offsets = slices.Clone(c.rot.offsets)
	out := &BatchKVCache{b: c.b, keys: c.keys, values: c.values, leftPadding: slices.Clone(c.leftPadding), idx: c.idx, rot: &r, kind: c.kind}
	out.rotFilter(idx, false)
	var keep []int
	for i := range c.leftPadding {
		if !slices.Contains(idx, i) {
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		c.Release()
		c.leftPadding, c.rot.offsets = nil, nil
		return out, nil
	}
	c.rotFilter(keep, true)
	return out, nil
}
