package nn

import (
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// NewBatchCache returns an empty batch cache of len(leftPadding) rows of
// the kind o selects (o must pass Check):
//
//   - the full cache (the zero value): NewBatchKVCache, mlx_lm's
//     BatchKVCache;
//   - a rotating window (MaxKVSize): NewBatchRotatingKVCache, mlx_lm's
//     BatchRotatingKVCache (which keeps no first tokens: keep 0);
//   - quantized (KVBits) and TurboQuant (Turbo): one cache of that kind per
//     row, each holding only its row's tokens, so that every row computes
//     what it computes alone. mlx_lm has no batch form of its quantized
//     cache (BatchGenerator takes no kv_bits, QuantizedKVCache no merge);
//     TurboQuant is ours. Such a batch has no padding: leftPadding must be
//     all zeros;
//   - the full cache with PerRow: one FullKVCache per row, likewise.
func NewBatchCache(b backend.Backend, leftPadding []int, o CacheOptions) (*BatchKVCache, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	switch {
	case o.Encoded() || o.PerRow:
		for r, p := range leftPadding {
			if p != 0 {
				return nil, fmt.Errorf("batch cache: left padding %d of row %d: a %s batch holds each row's tokens alone, unpadded", p, r, o.kindName())
			}
		}
		c := &BatchKVCache{b: b, leftPadding: make([]int, len(leftPadding)), kind: o}
		c.rows = make([]KVCache, len(leftPadding))
		for r := range c.rows {
			c.rows[r] = o.New(b)
		}
		return c, nil
	case o.MaxKVSize > 0:
		return NewBatchRotatingKVCache(b, o.MaxKVSize, leftPadding)
	}
	c := NewBatchKVCache(b, leftPadding)
	c.kind.KVDType = o.KVDType
	return c, nil
}

// kindName names the cache kind o selects, for messages.
func (o CacheOptions) kindName() string {
	switch {
	case o.Turbo != (turboquant.Scheme{}):
		return o.Turbo.String() + " TurboQuant"
	case o.KVBits > 0:
		return fmt.Sprintf("%d-bit quantized", o.KVBits)
	case o.MaxKVSize > 0:
		return fmt.Sprintf("rotating (max %d)", o.MaxKVSize)
	case o.PerRow && o.KVDType != 0:
		return "per-row full (" + o.KVDType.MLXName() + ")"
	case o.PerRow:
		return "per-row full"
	case o.KVDType != 0:
		return "full (" + o.KVDType.MLXName() + ")"
	}
	return "full"
}

// Kind returns the options the cache was made with (the zero value for
// NewBatchKVCache's full cache).
func (c *BatchKVCache) Kind() CacheOptions { return c.kind }

// rowOffsets are the row caches' offsets.
func (c *BatchKVCache) rowOffsets() []int {
	out := make([]int, len(c.rows))
	for r, rc := range c.rows {
		out[r] = rc.Offset()
	}
	return out
}

// attendRows is Attend for a cache of row caches: row r's queries, keys and
// values (its first L − right padding positions) go through its own cache
// as they would alone (with the mask its cache gives, what the model gives
// a one-sequence forward); the outputs of padded positions are zeros.
func (c *BatchKVCache) attendRows(q, k, v backend.Array, scale float32) backend.Array {
	b := c.b
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	if qs[0] != len(c.rows) || ks[0] != qs[0] || vs[0] != qs[0] {
		panic(backend.Errorf("BatchKVCache.Attend", []backend.Array{q, k, v}, "queries, keys and values have %d, %d and %d rows, the cache %d", qs[0], ks[0], vs[0], len(c.rows)))
	}
	L := qs[2]
	if out, ok := c.attendFullRows(q, k, v, scale); ok {
		return out
	}
	outs := make([]backend.Array, len(c.rows))
	for r, rc := range c.rows {
		n := L
		if c.rightPadding != nil {
			n = L - c.rightPadding[r]
		}
		var parts []backend.Array
		if n > 0 {
			qr := b.Slice(q, []int{r, 0, 0, 0}, []int{r + 1, qs[1], n, qs[3]})
			kr := b.Slice(k, []int{r, 0, 0, 0}, []int{r + 1, ks[1], n, ks[3]})
			vr := b.Slice(v, []int{r, 0, 0, 0}, []int{r + 1, vs[1], n, vs[3]})
			parts = append(parts, attendCache(b, rc, qr, kr, vr, scale, rc.Mask(n)))
			b.Release(qr, kr, vr)
		}
		if n < L {
			parts = append(parts, b.Zeros(tensor.Shape{1, qs[1], L - n, vs[3]}, q.DType()))
		}
		outs[r] = parts[0]
		if len(parts) > 1 {
			outs[r] = b.Concatenate(2, parts...)
			b.Release(parts...)
		}
	}
	if len(outs) == 1 {
		return outs[0]
	}
	out := b.Concatenate(0, outs...)
	b.Release(outs...)
	return out
}

// attendFullRows is attendRows when every row is a FullKVCache and none is
// right-padded (a decode step, or a prefill of equal lengths): each row's
// keys and values are appended to its cache (appendKVRows: one
// backend.SliceUpdateRows for all the rows' keys, one for their values),
// then backend.AttendRows
// attends all rows at once (one fused pass on backends with
// RowAttention). ok is false, and nothing is done, otherwise.
func (c *BatchKVCache) attendFullRows(q, k, v backend.Array, scale float32) (out backend.Array, ok bool) {
	if len(c.rows) < 2 || slices.ContainsFunc(c.rightPadding, func(p int) bool { return p != 0 }) {
		return nil, false
	}
	fcs := make([]*FullKVCache, len(c.rows))
	for r, rc := range c.rows {
		fc, full := rc.(*FullKVCache)
		if !full {
			return nil, false
		}
		fcs[r] = fc
	}
	b := c.b
	keys, values := appendKVRows(b, fcs, k, v)
	out = backend.AttendRows(b, q, keys, values, scale, c.rows[0].Mask(q.Shape()[2]))
	b.Release(keys...)
	b.Release(values...)
	return out, true
}

// attendCache appends k and v to cache and attends q to every key it holds
// with mask: through the cache's own read where it has one (quantized,
// TurboQuant, a batch of row caches), else the fused SDPA on what Update
// returns.
func attendCache(b backend.Backend, cache KVCache, q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	switch c := cache.(type) {
	case *QuantizedKVCache:
		return c.attend(q, k, v, scale, mask)
	case *TurboKVCache:
		return c.Attend(q, k, v, scale, mask)
	case *BatchKVCache:
		if c.rows != nil {
			return c.attendRows(q, k, v, scale)
		}
	}
	if cache != nil {
		k, v = cache.Update(k, v)
	}
	return b.ScaledDotProductAttention(q, k, v, scale, mask)
}

// forkCache forks a row cache (each kind has Fork).
func forkCache(c KVCache) KVCache {
	f, ok := c.(interface{ Fork() KVCache })
	if !ok {
		panic(fmt.Sprintf("nn: a %T row cache cannot be forked", c))
	}
	return f.Fork()
}

// filterRows keeps the row caches keep (validated), in that order, and
// releases the others.
func (c *BatchKVCache) filterRows(keep []int) {
	rows := make([]KVCache, len(keep))
	for i, r := range keep {
		rows[i] = c.rows[r]
	}
	for r, rc := range c.rows {
		if !slices.Contains(keep, r) {
			rc.Release()
		}
	}
	c.rows = rows
	c.leftPadding = make([]int, len(keep))
	if c.rightPadding != nil {
		rp := make([]int, len(keep))
		for i, r := range keep {
			rp[i] = c.rightPadding[r]
		}
		c.rightPadding = rp
	}
}

// checkKeep validates Filter's and Split's rows.
func (c *BatchKVCache) checkKeep(keep []int, what string) error {
	if len(keep) == 0 && what == "filter" {
		return fmt.Errorf("batch cache: filter keeps no rows (release the cache instead)")
	}
	seen := make(map[int]bool, len(keep))
	for _, r := range keep {
		if r < 0 || r >= len(c.leftPadding) || seen[r] {
			return fmt.Errorf("batch cache: %s row %d, want distinct rows in [0, %d)", what, r, len(c.leftPadding))
		}
		seen[r] = true
	}
	return nil
}

// sameKind reports an error unless c and other hold caches of one kind.
func (c *BatchKVCache) sameKind(other *BatchKVCache) error {
	if c.kind != other.kind {
		return fmt.Errorf("batch cache: extend a %s batch with a %s one", c.kind.kindName(), other.kind.kindName())
	}
	return nil
}

// RowCaches reports whether the batch holds one cache per row
// (NewBatchCache with an encoded kind or PerRow) rather than shared
// buffers.
func (c *BatchKVCache) RowCaches() bool { return c.rows != nil }

// RowView returns a batch of row caches over rows idx of c (distinct, in
// range), in that order, sharing their caches: what a forward through the
// view appends lands in those rows of c. The view owns nothing; c keeps
// its rows (a prefill of some rows, BatchOptions.PrefillPadLimit). A batch
// of shared buffers has no such view: that is an error.
func (c *BatchKVCache) RowView(idx []int) (*BatchKVCache, error) {
	if c.rows == nil {
		return nil, fmt.Errorf("batch cache: a view of rows %v of a batch of shared buffers (only a batch of row caches has one)", idx)
	}
	if err := c.checkKeep(idx, "view"); err != nil {
		return nil, err
	}
	out := &BatchKVCache{b: c.b, kind: c.kind, leftPadding: make([]int, len(idx)), rows: make([]KVCache, len(idx))}
	for i, r := range idx {
		out.rows[i] = c.rows[r]
	}
	return out, nil
}

// splitRows is Split for a batch of row caches: the row caches move.
func (c *BatchKVCache) splitRows(idx []int) (*BatchKVCache, error) {
	if err := c.checkKeep(idx, "split"); err != nil {
		return nil, err
	}
	out := &BatchKVCache{b: c.b, kind: c.kind, leftPadding: make([]int, len(idx)), rows: make([]KVCache, len(idx))}
	keep := make([]KVCache, 0, len(c.rows)) // never nil: c stays a batch of row caches
	for r, rc := range c.rows {
		if i := slices.Index(idx, r); i >= 0 {
			out.rows[i] = rc
		} else {
			keep = append(keep, rc)
		}
	}
	c.rows, c.leftPadding = keep, make([]int, len(keep))
	return out, nil
}

// SeedRow fills an empty one-row batch cache with the first n tokens of
// prefix, a one-sequence cache (the generator's SequenceOptions.Prefix):
// for the full and the rotating batch a *FullKVCache whose slots are copied
// in (one update of n tokens); for a batch of row caches a cache of the
// batch's own kind (the same bits and group size, or TurboQuant scheme and
// read), forked and trimmed to n, so that the row continues exactly as that
// cache would alone. Another cache type, another kind, n outside [1,
// prefix.Offset()] or a cache not empty and of one row is an error naming
// it; the new arrays are made in the scope open at the time.
func (c *BatchKVCache) SeedRow(prefix KVCache, n int) error {
	if len(c.leftPadding) != 1 || c.Offset() != 0 || (c.rows == nil && c.keys != nil) {
		return fmt.Errorf("batch cache: seed a row into a cache of %d rows holding %d tokens, want an empty one-row cache", len(c.leftPadding), c.Offset())
	}
	if n < 1 || n > prefix.Offset() {
		return fmt.Errorf("batch cache: seed %d tokens from a cache holding %d", n, prefix.Offset())
	}
	if c.rows == nil {
		fc, ok := prefix.(*FullKVCache)
		if !ok || fc.keys == nil {
			return fmt.Errorf("batch cache: a %s batch is seeded from a *nn.FullKVCache, not a %T", c.kind.kindName(), prefix)
		}
		k := c.b.Slice(fc.keys, zeros4, upTo(fc.keys.Shape(), n))
		v := c.b.Slice(fc.values, zeros4, upTo(fc.values.Shape(), n))
		c.Update(k, v)
		c.b.Release(k, v)
		return nil
	}
	ok := false
	switch p := prefix.(type) {
	case *QuantizedKVCache:
		ok = c.kind.KVBits == p.bits && c.kind.KVGroupSize == p.groupSize
	case *TurboKVCache:
		ok = c.kind.Turbo == p.scheme && c.kind.TurboEager == !p.deferred
	case *FullKVCache:
		// A batch of row caches without bits or a scheme is the per-row
		// full kind, whatever its (unused) group size and start say.
		ok = !c.kind.Encoded()
	}
	if !ok {
		return fmt.Errorf("batch cache: a %s batch is seeded from a cache of its kind, not a %T", c.kind.kindName(), prefix)
	}
	f := forkCache(prefix)
	f.Trim(f.Offset() - n)
	c.rows[0].Release()
	c.rows[0] = f
	return nil
}
