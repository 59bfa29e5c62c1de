package nn

import (
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// BatchKVCache keeps every key and value of several sequences at once,
// mlx_lm's BatchKVCache (models/cache.py): the rows share one buffer
// [B, Hk, capacity, D] and one write index, and each row is left-padded so
// that its tokens end at that index. Row r's slots [0, LeftPadding[r]) hold
// padding that its queries never see (the mask hides them), and its next
// token takes position Offsets()[r] = Offset() − LeftPadding[r].
//
// It implements KVCache with these meanings: Offset is the write index (the
// slots used, padding included; RoPE positions come from RoPEOffset), Mask
// is always an explicit Bool ArrayMask, and Update appends the same number
// of tokens to every row. Like Update, the methods that reshape the batch
// (Finalize, Filter, Extend) make their new arrays in the scope open at the
// time and release the buffers they replace: keep State() out of that scope.
//
// Prompts of different lengths are prefilled right-padded, as mlx_lm's
// BatchGenerator does: PrepareRightPadding before the chunk, Finalize after
// it, which rolls each row right by its padding so that the row is
// left-padded again.
//
// NewBatchCache makes the other kinds behind the same methods: mlx_lm's
// BatchRotatingKVCache (a window shared by the left-padded rows), and
// batches of quantized or TurboQuant caches, one per row, each holding only
// its row's tokens (kvcache_batch_rows.go).
type BatchKVCache struct {
	b            backend.Backend
	keys, values backend.Array // [B, Hk, capacity, D]; nil when empty
	leftPadding  []int
	idx          int
	rightPadding []int // pending until Finalize; nil when none

	// A batch of another kind (NewBatchCache) holds one cache per row
	// instead of the shared buffers; its rows have no padding.
	kind CacheOptions
	rows []KVCache
	// A rotating batch (NewBatchRotatingKVCache) has this too.
	rot *batchRotating
}

// NewBatchKVCache returns an empty cache of len(leftPadding) rows with the
// given left padding (mlx_lm's BatchKVCache(left_padding)): row r's first
// leftPadding[r] tokens are padding.
func NewBatchKVCache(b backend.Backend, leftPadding []int) *BatchKVCache {
	return &BatchKVCache{b: b, leftPadding: append([]int{}, leftPadding...)}
}

// Rows returns the batch size B.
func (c *BatchKVCache) Rows() int { return len(c.leftPadding) }

// Offset returns the write index: the slots every row has used, left
// padding included (mlx_lm's _idx). For a batch of row caches it is the
// largest row offset.
func (c *BatchKVCache) Offset() int {
	if c.rows != nil {
		return slices.Max(append(c.rowOffsets(), 0))
	}
	if c.rot != nil {
		return c.rot.total
	}
	return c.idx
}

// LeftPadding returns a copy of each row's left padding.
func (c *BatchKVCache) LeftPadding() []int { return append([]int{}, c.leftPadding...) }

// Offsets returns each row's position of its next token (mlx_lm's offset
// array): Offset() − LeftPadding()[r].
func (c *BatchKVCache) Offsets() []int {
	if c.rows != nil {
		return c.rowOffsets()
	}
	if c.rot != nil {
		return slices.Clone(c.rot.offsets)
	}
	out := make([]int, len(c.leftPadding))
	for r, p := range c.leftPadding {
		out[r] = c.idx - p
	}
	return out
}

// RoPEOffset returns Offsets as a backend.Offset with one int32 per row,
// the array offset mlx_lm hands mx.fast.rope. The array is made in the
// scope open at the time.
func (c *BatchKVCache) RoPEOffset() backend.Offset {
	off := make([]int32, len(c.leftPadding))
	for r, o := range c.Offsets() {
		off[r] = int32(o)
	}
	return backend.Offset{Rows: c.b.FromHost(tensor.FromInt32(tensor.Shape{len(off)}, off))}
}

// Capacity returns the number of slots allocated per row.
func (c *BatchKVCache) Capacity() int {
	if c.keys == nil {
		return 0
	}
	return c.keys.Shape()[2]
}

// Update is update_and_fetch: it grows the buffers as FullKVCache does (in
// steps of KVStep slots, cut to the write index first when it is not a
// multiple of KVStep), writes k and v ([B, Hk, L, D], B = Rows) at the
// write index and returns every row's slots up to the new index. A batch
// size other than Rows panics with a *backend.OpError. A batch of row
// caches (NewBatchCache) updates its one row's cache when it has one row;
// with more its rows' lengths differ and only Attend can read it: Update
// panics with a *backend.OpError.
func (c *BatchKVCache) Update(k, v backend.Array) (backend.Array, backend.Array) {
	if c.rows != nil {
		if len(c.rows) != 1 || k.Shape()[0] != 1 {
			panic(backend.Errorf("BatchKVCache.Update", []backend.Array{k, v}, "a %s batch of %d rows holds rows of different lengths: read it through Attend", c.kind.kindName(), len(c.rows)))
		}
		return c.rows[0].Update(k, v)
	}
	if B := k.Shape()[0]; B != len(c.leftPadding) || v.Shape()[0] != B {
		panic(backend.Errorf("BatchKVCache.Update", []backend.Array{k, v}, "keys and values have %d and %d rows, the cache %d", B, v.Shape()[0], len(c.leftPadding)))
	}
	if c.rot != nil {
		return c.rotUpdate(k, v)
	}
	var keys, values backend.Array
	c.keys, c.values, keys, values = appendKV(c.b, c.keys, c.values, k, v, c.idx, c.kind.KVDType)
	c.idx += k.Shape()[2]
	return keys, values
}

func (c *BatchKVCache) replace(old, next backend.Array) backend.Array {
	return replaced(c.b, old, next)
}

// Attend appends k and v ([B, Hk, L, D]) and attends q ([B, H, L, D]) to
// every stored key: Update then the fused SDPA under mask for the shared
// buffer; for a batch of row caches each row through its own cache, its
// right padding left out (the padded positions' outputs are zeros) and mask
// ignored (each row's cache gives its own, as alone).
func (c *BatchKVCache) Attend(q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	return attendCache(c.b, c, q, k, v, scale, mask)
}

// Mask is make_mask (create_causal_mask with the write index as offset and
// the left padding): a Bool [B, 1, L, Offset()+L] array, true where query i
// of row r may see key j: j <= Offset()+i and j >= LeftPadding[r]. Unlike
// FullKVCache it is an array for L == 1 too, as in mlx_lm. Right padding is
// not masked: right-padded tokens come after a row's real ones, which the
// causal rule already hides from them. The array is made in the scope open
// at the time. A batch of row caches returns NoMask: Attend masks each row.
func (c *BatchKVCache) Mask(L int) backend.Mask {
	if c.rows != nil {
		return backend.NoMask{}
	}
	if c.rot != nil {
		return c.rotMask(L)
	}
	B, S := len(c.leftPadding), c.idx+L
	m := tensor.New(tensor.Bool, tensor.Shape{B, 1, L, S})
	for r, p := range c.leftPadding {
		for i := range L {
			row := m.Data[(r*L+i)*S:]
			for j := max(p, 0); j <= c.idx+i && j < S; j++ {
				row[j] = 1
			}
		}
	}
	return backend.ArrayMask{A: c.b.FromHost(m)}
}

// State returns the key and value buffers (full capacity), or nil when
// empty. The padding and offsets live on the host. A batch of row caches
// returns its rows' states, in row order (converting those due, as each
// row's State does).
func (c *BatchKVCache) State() []backend.Array {
	if c.rows != nil {
		// One slice for all the rows (the batch generator asks every step).
		out := make([]backend.Array, 0, 2*len(c.rows))
		for _, rc := range c.rows {
			if f, ok := rc.(*FullKVCache); ok {
				out = f.appendState(out) // no slice of its own per row
				continue
			}
			out = append(out, rc.State()...)
		}
		return out
	}
	if c.keys == nil {
		return nil
	}
	return []backend.Array{c.keys, c.values}
}

// Trim moves the write index (and so every row's offset) back by up to n
// slots and returns how many; a batch of row caches trims every row by up
// to n and returns the least any row forgot.
func (c *BatchKVCache) Trim(n int) int {
	if c.rows != nil {
		least := -1
		for _, rc := range c.rows {
			if m := rc.Trim(n); least < 0 || m < least {
				least = m
			}
		}
		return max(least, 0)
	}
	if c.rot != nil {
		return c.rotTrim(n)
	}
	n = max(0, min(n, c.idx))
	c.idx -= n
	return n
}

// Release frees the buffers and empties the cache; the rows and their
// padding stay.
func (c *BatchKVCache) Release() {
	for _, rc := range c.rows {
		rc.Release()
	}
	c.b.Release(c.keys, c.values)
	c.keys, c.values, c.idx, c.rightPadding = nil, nil, 0, nil
	if r := c.rot; r != nil {
		for i, p := range c.leftPadding {
			r.offsets[i] = -p
		}
		r.total, r.rotated, r.pad, r.lengths = 0, false, nil, nil
	}
}

// PrepareRightPadding announces that the next Update(s), until Finalize,
// carry rows right-padded by pad[r] tokens (mlx_lm's prepare(right_padding)):
// prompts of different lengths in one chunk. All zeros is a no-op.
func (c *BatchKVCache) PrepareRightPadding(pad []int) error {
	if len(pad) != len(c.leftPadding) {
		return fmt.Errorf("batch cache: %d right paddings for %d rows", len(pad), len(c.leftPadding))
	}
	any := false
	for r, p := range pad {
		if p < 0 {
			return fmt.Errorf("batch cache: right padding %d of row %d, want >= 0", p, r)
		}
		any = any || p > 0
	}
	if any && c.rot != nil {
		c.rot.pad, c.rot.lengths = slices.Clone(pad), nil
	} else if any {
		c.rightPadding = append([]int{}, pad...)
	}
	return nil
}

// Finalize turns the right padding announced by PrepareRightPadding into
// left padding (mlx_lm's finalize): each row's slots are rolled right by its
// padding over the whole capacity, so the padded tokens wrap to slots the
// mask hides, and the row's left padding grows by as much.
func (c *BatchKVCache) Finalize() {
	if c.rot != nil {
		c.rotFinalize()
		return
	}
	pad := c.rightPadding
	c.rightPadding = nil
	if pad == nil || c.rows != nil {
		return
	}
	if c.keys != nil {
		c.keys = c.replace(c.keys, c.roll(c.keys, pad))
		c.values = c.replace(c.values, c.roll(c.values, pad))
	}
	for r, p := range pad {
		c.leftPadding[r] += p
	}
}

// roll is dynamic_roll(x, pad[:, None], axis=2): row r's slot j moves to
// (j + pad[r]) mod capacity.
func (c *BatchKVCache) roll(x backend.Array, pad []int) backend.Array {
	s := x.Shape()
	n := s[2]
	rows := make([]backend.Array, len(pad))
	for r, p := range pad {
		row := c.b.Slice(x, []int{r, 0, 0, 0}, []int{r + 1, s[1], n, s[3]})
		if p %= n; p != 0 {
			tail := c.b.Slice(row, []int{0, 0, n - p, 0}, []int{1, s[1], n, s[3]})
			head := c.b.Slice(row, []int{0, 0, 0, 0}, []int{1, s[1], n - p, s[3]})
			rolled := c.b.Concatenate(2, tail, head)
			c.b.Release(row, tail, head)
			row = rolled
		}
		rows[r] = row
	}
	if len(rows) == 1 {
		return rows[0]
	}
	out := c.b.Concatenate(0, rows...)
	c.b.Release(rows...)
	return out
}

// Filter keeps the rows keep, in that order (mlx_lm's filter), then drops
// the slots that every remaining row has as padding. keep must be
// non-empty, without repeats, each in [0, Rows).
func (c *BatchKVCache) Filter(keep []int) error { return c.filter(keep, true) }

// filter is Filter; with owned false the buffers are shared with another
// cache and not released when replaced.
func (c *BatchKVCache) filter(keep []int, owned bool) error {
	if err := c.checkKeep(keep, "filter"); err != nil {
		return err
	}
	if c.rows != nil {
		c.filterRows(keep)
		return nil
	}
	if c.rot != nil {
		c.rotFilter(keep, owned)
		return nil
	}
	c.takeRows(keep, owned)
	lp := make([]int, len(keep))
	for i, r := range keep {
		lp[i] = c.leftPadding[r]
	}
	if c.rightPadding != nil {
		rp := make([]int, len(keep))
		for i, r := range keep {
			rp[i] = c.rightPadding[r]
		}
		c.rightPadding = rp
	}
	c.leftPadding = lp
	m := lp[0]
	for _, p := range lp {
		m = min(m, p)
	}
	if m > 0 {
		if c.keys != nil {
			s := c.keys.Shape()
			c.keys = c.replace(c.keys, c.b.Slice(c.keys, []int{0, 0, m, 0}, []int(s)))
			c.values = c.replace(c.values, c.b.Slice(c.values, []int{0, 0, m, 0}, []int(c.values.Shape())))
		}
		c.idx -= m
		for i := range c.leftPadding {
			c.leftPadding[i] -= m
		}
	}
	return nil
}

// Extend appends other's rows after this cache's (mlx_lm's extend): both
// are padded on the left so that their write indexes line up at the larger
// one, and on the right to the larger capacity. other is emptied (its
// buffers released or moved here); its rows now belong to c.
func (c *BatchKVCache) Extend(other *BatchKVCache) error {
	if c.rightPadding != nil || other.rightPadding != nil {
		return fmt.Errorf("batch cache: extend between PrepareRightPadding and Finalize")
	}
	if err := c.sameKind(other); err != nil {
		return err
	}
	if c.rot != nil {
		return c.rotExtend(other)
	}
	if c.rows != nil {
		c.rows = append(c.rows, other.rows...)
		c.leftPadding = append(c.leftPadding, other.leftPadding...)
		other.rows, other.leftPadding = []KVCache{}, nil // its rows now belong to c
		return nil
	}
	defer func() {
		other.keys, other.values, other.idx, other.leftPadding = nil, nil, 0, nil
	}()
	if c.keys == nil && other.keys == nil {
		c.leftPadding = append(c.leftPadding, other.leftPadding...)
		return nil
	}
	maxIdx := max(c.idx, other.idx)
	var ref backend.Array
	L1, L2 := 0, 0
	if c.keys != nil {
		ref, L1 = c.keys, c.keys.Shape()[2]
	}
	if other.keys != nil {
		ref, L2 = other.keys, other.keys.Shape()[2]
	}
	if c.keys != nil && other.keys != nil {
		a, o := c.keys.Shape(), other.keys.Shape()
		if a[1] != o[1] || a[3] != o[3] || c.keys.DType() != other.keys.DType() || c.values.Shape()[3] != other.values.Shape()[3] {
			return fmt.Errorf("batch cache: extend %v %v with %v %v keys", c.keys.DType(), a, other.keys.DType(), o)
		}
	}
	maxSize := max(L1, L2)
	H, D, M := ref.Shape()[1], ref.Shape()[3], 0
	if c.values != nil {
		M = c.values.Shape()[3]
	} else {
		M = other.values.Shape()[3]
	}
	dt := ref.DType()
	pad := func(x *BatchKVCache) (k, v backend.Array, lp []int) {
		B := len(x.leftPadding)
		k, v = x.keys, x.values
		if k == nil {
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
		lp = make([]int, B)
		for i, p := range x.leftPadding {
			lp[i] = p + left
		}
		return k, v, lp
	}
	k1, v1, lp1 := pad(c)
	k2, v2, lp2 := pad(other)
	keys, values := c.b.Concatenate(0, k1, k2), c.b.Concatenate(0, v1, v2)
	c.b.Release(k1, v1, k2, v2, c.keys, c.values, other.keys, other.values)
	c.keys, c.values = keys, values
	c.leftPadding = append(lp1, lp2...)
	c.idx = maxIdx
	return nil
}

// padSlots returns x [B, H, n, D] with left zero slots before and right
// after (x itself when both are 0).
func (c *BatchKVCache) padSlots(x backend.Array, left, right int) backend.Array {
	if left == 0 && right == 0 {
		return x
	}
	s := x.Shape()
	parts := []backend.Array{}
	if left > 0 {
		parts = append(parts, c.b.Zeros(tensor.Shape{s[0], s[1], left, s[3]}, x.DType()))
	}
	parts = append(parts, x)
	if right > 0 {
		parts = append(parts, c.b.Zeros(tensor.Shape{s[0], s[1], right, s[3]}, x.DType()))
	}
	out := c.b.Concatenate(2, parts...)
	for _, p := range parts {
		if p != x {
			c.b.Release(p)
		}
	}
	return out
}

// Extract returns row r as a one-sequence cache holding its tokens: a
// FullKVCache of the slots from its left padding to the write index
// (mlx_lm's extract), or for a batch of row caches a fork of row r's cache.
// The cache itself is unchanged.
func (c *BatchKVCache) Extract(r int) (KVCache, error) {
	if r < 0 || r >= len(c.leftPadding) {
		return nil, fmt.Errorf("batch cache: extract row %d of %d", r, len(c.leftPadding))
	}
	if c.rows != nil {
		return forkCache(c.rows[r]), nil
	}
	if c.rot != nil {
		return c.rotExtract(r)
	}
	out := NewFullKVCache(c.b)
	p := c.leftPadding[r]
	if c.keys == nil || p >= c.idx {
		return out, nil
	}
	s, vs := c.keys.Shape(), c.values.Shape()
	out.keys = c.b.Slice(c.keys, []int{r, 0, p, 0}, []int{r + 1, s[1], c.idx, s[3]})
	out.values = c.b.Slice(c.values, []int{r, 0, p, 0}, []int{r + 1, vs[1], c.idx, vs[3]})
	out.offset = c.idx - p
	return out, nil
}

// Split moves the rows idx (distinct, in that order) into a new cache and
// keeps the others here, in their order (mlx_lm's split of a prompt batch:
// a copy filtered both ways). Both are shifted as Filter shifts. When no row
// is left here, c is released and has no rows.
func (c *BatchKVCache) Split(idx []int) (*BatchKVCache, error) {
	if c.rightPadding != nil {
		return nil, fmt.Errorf("batch cache: split between PrepareRightPadding and Finalize")
	}
	if c.rows != nil {
		return c.splitRows(idx)
	}
	if c.rot != nil {
		return c.rotSplit(idx)
	}
	out := &BatchKVCache{b: c.b, keys: c.keys, values: c.values, leftPadding: slices.Clone(c.leftPadding), idx: c.idx}
	var keep []int
	for r := range c.leftPadding {
		if !slices.Contains(idx, r) {
			keep = append(keep, r)
		}
	}
	// out starts on c's buffers; its filter gathers copies of its rows
	// (Take) without releasing the shared ones.
	if err := out.filter(idx, false); err != nil {
		return nil, err
	}
	if len(keep) == 0 {
		c.Release()
		c.leftPadding = nil
		return out, nil
	}
	if err := c.Filter(keep); err != nil {
		out.Release()
		return nil, err
	}
	return out, nil
}

// takeRows keeps the rows keep of the keys and values (a Take along the
// batch axis), releasing the old arrays when the cache owns them.
func (c *BatchKVCache) takeRows(keep []int, owned bool) {
	if c.keys == nil {
		return
	}
	idx := make([]int32, len(keep))
	for i, r := range keep {
		idx[i] = int32(r)
	}
	ia := c.b.FromHost(tensor.FromInt32(tensor.Shape{len(idx)}, idx))
	k, v := c.b.Take(c.keys, ia, 0), c.b.Take(c.values, ia, 0)
	if owned {
		c.b.Release(c.keys, c.values)
	}
	c.keys, c.values = k, v
	c.b.Release(ia)
}
