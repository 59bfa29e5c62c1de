package nn_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

const bH, bD = 2, 3 // KV heads and head dim of the batch cache tests

// batchKV returns keys [B, bH, L, bD] whose value at (r, h, l, d) is
// base + 1000·r + 100·h + 10·l + d, and values the negation.
func batchKV(b backend.Backend, B, L int, base float32) (k, v backend.Array) {
	kh := make([]float32, B*bH*L*bD)
	for r := range B {
		for h := range bH {
			for l := range L {
				for d := range bD {
					kh[((r*bH+h)*L+l)*bD+d] = base + float32(1000*r+100*h+10*l+d)
				}
			}
		}
	}
	vh := make([]float32, len(kh))
	for i, x := range kh {
		vh[i] = -x
	}
	s := tensor.Shape{B, bH, L, bD}
	return b.FromHost(tensor.FromFloat32(s, kh)), b.FromHost(tensor.FromFloat32(s, vh))
}

// batchTokens returns the keys a one-row cache holds, [bH][offset·bD].
func batchTokens(t *testing.T, b backend.Backend, c *nn.FullKVCache) []float32 {
	t.Helper()
	st := c.State()
	if st == nil {
		return nil
	}
	k := b.Slice(st[0], []int{0, 0, 0, 0}, []int{1, bH, c.Offset(), bD})
	d, err := b.ToHost(k)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToFloat32()
}

// batchRowKeys is what batchKV wrote for row r at positions from..to-1 of a chunk.
func batchRowKeys(r, from, to int, base float32) []float32 {
	var out []float32
	for h := range bH {
		for l := from; l < to; l++ {
			for d := range bD {
				out = append(out, base+float32(1000*r+100*h+10*l+d))
			}
		}
	}
	return out
}

func newBatchCPU(t *testing.T) backend.Backend {
	t.Helper()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func batchExtract(t *testing.T, b backend.Backend, c *nn.BatchKVCache, r int) []float32 {
	t.Helper()
	e, err := c.Extract(r)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release()
	return batchTokens(t, b, e.(*nn.FullKVCache))
}

// TestBatchKVCacheMask: create_causal_mask(N=2, offset=3, left_padding=[1, 0])
// written out: query i of row r sees key j iff j <= 3+i and j >= pad[r].
func TestBatchKVCacheMask(t *testing.T) {
	b := newBatchCPU(t)
	c := nn.NewBatchKVCache(b, []int{1, 0})
	k, v := batchKV(b, 2, 3, 0)
	c.Update(k, v)
	m, ok := c.Mask(2).(backend.ArrayMask)
	if !ok {
		t.Fatalf("Mask(2) is %T, want backend.ArrayMask", c.Mask(2))
	}
	if got, want := m.A.Shape(), (tensor.Shape{2, 1, 2, 5}); !got.Equal(want) || m.A.DType() != tensor.Bool {
		t.Fatalf("mask is %v %v, want Bool %v", m.A.DType(), got, want)
	}
	d, err := b.ToHost(m.A)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0, 1, 1, 1, 0, // row 0, query 0 (position 3): keys 1..3
		0, 1, 1, 1, 1, // row 0, query 1: keys 1..4
		1, 1, 1, 1, 0, // row 1, query 0: keys 0..3
		1, 1, 1, 1, 1,
	}
	if !slices.Equal(d.Data, want) {
		t.Errorf("mask: got %v, want %v", d.Data, want)
	}
	if got := c.Offsets(); !slices.Equal(got, []int{2, 3}) {
		t.Errorf("Offsets: got %v, want [2 3]", got)
	}
	c.Release()
}

// TestBatchKVCacheRightPadding: a chunk of 4 where row 0 has 2 real tokens
// (right-padded by 2) and row 1 has 4; Finalize leaves row 0 left-padded by
// 2 with its tokens just before the write index, as mlx_lm's finalize.
// Then Filter each row alone, Extend, and Trim, checking every row's tokens
// (Extract) against what was written.
func TestBatchKVCacheRightPadding(t *testing.T) {
	b := newBatchCPU(t)
	build := func() *nn.BatchKVCache {
		c := nn.NewBatchKVCache(b, []int{0, 0})
		if err := c.PrepareRightPadding([]int{2, 0}); err != nil {
			t.Fatal(err)
		}
		k, v := batchKV(b, 2, 4, 0)
		c.Update(k, v)
		c.Finalize()
		return c
	}
	row0, row1 := batchRowKeys(0, 0, 2, 0), batchRowKeys(1, 0, 4, 0)
	check := func(name string, c *nn.BatchKVCache, pad []int, idx int, rows ...[]float32) {
		t.Helper()
		if got := c.LeftPadding(); !slices.Equal(got, pad) {
			t.Errorf("%s: left padding %v, want %v", name, got, pad)
		}
		if c.Offset() != idx {
			t.Errorf("%s: write index %d, want %d", name, c.Offset(), idx)
		}
		for r, want := range rows {
			if got := batchExtract(t, b, c, r); !slices.Equal(got, want) {
				t.Errorf("%s: row %d holds %v, want %v", name, r, got, want)
			}
		}
	}
	c := build()
	check("finalize", c, []int{2, 0}, 4, row0, row1)

	f := build()
	if err := f.Filter([]int{0}); err != nil {
		t.Fatal(err)
	}
	check("filter [0]", f, []int{0}, 2, row0)
	f.Release()

	s := build()
	q, err := s.Split([]int{1})
	if err != nil {
		t.Fatal(err)
	}
	check("split off [1]", q, []int{0}, 4, row1)
	check("split rest [0]", s, []int{0}, 2, row0)
	q.Release()
	q, err = s.Split([]int{0})
	if err != nil {
		t.Fatal(err)
	}
	check("split off all", q, []int{0}, 2, row0)
	if s.Rows() != 0 || s.State() != nil {
		t.Errorf("split off every row: %d rows and %d arrays left, want none", s.Rows(), len(s.State()))
	}
	q.Release()

	f = build()
	if err := f.Filter([]int{1, 0}); err != nil {
		t.Fatal(err)
	}
	check("filter [1 0]", f, []int{0, 2}, 4, row1, row0)

	// Extend a 2-row cache (index 4) with a 1-row cache of 7 tokens and
	// with an empty 1-row cache.
	o := nn.NewBatchKVCache(b, []int{0})
	k, v := batchKV(b, 1, 7, 5000)
	o.Update(k, v)
	if err := f.Extend(o); err != nil {
		t.Fatal(err)
	}
	row2 := batchRowKeys(0, 0, 7, 5000)
	check("extend", f, []int{3, 5, 0}, 7, row1, row0, row2)
	if err := f.Extend(nn.NewBatchKVCache(b, []int{0})); err != nil {
		t.Fatal(err)
	}
	check("extend empty", f, []int{3, 5, 0, 7}, 7, row1, row0, row2, nil)

	// Append one token to every row, then trim it again.
	k, v = batchKV(b, 4, 1, 9000)
	f.Update(k, v)
	if got, want := f.Offsets(), []int{5, 3, 8, 1}; !slices.Equal(got, want) {
		t.Errorf("offsets after a step: got %v, want %v", got, want)
	}
	if got := batchExtract(t, b, f, 3); !slices.Equal(got, batchRowKeys(3, 0, 1, 9000)) {
		t.Errorf("step: row 3 holds %v, want %v", got, batchRowKeys(3, 0, 1, 9000))
	}
	if n := f.Trim(1); n != 1 {
		t.Errorf("Trim(1): got %d", n)
	}
	check("trim", f, []int{3, 5, 0, 7}, 7, row1, row0, row2, nil)
	f.Release()
	c.Release()

	if err := c.Filter(nil); err == nil {
		t.Error("Filter(nil): no error")
	}
	if err := build().Filter([]int{0, 0}); err == nil {
		t.Error("Filter with a repeated row: no error")
	}
}

// TestBatchKVCacheUpdateRows: a batch of the wrong size panics with an
// OpError (which Forward turns into an error), not an index panic.
func TestBatchKVCacheUpdateRows(t *testing.T) {
	b := newBatchCPU(t)
	c := nn.NewBatchKVCache(b, []int{0, 0})
	k, v := batchKV(b, 3, 1, 0)
	err := func() (err error) {
		defer backend.Recover(&err)
		c.Update(k, v)
		return nil
	}()
	if err == nil {
		t.Fatal("Update with 3 rows into a 2-row cache: no error")
	}
	if !strings.Contains(err.Error(), "3 and 3 rows, the cache 2") {
		t.Errorf("error %q does not name the row counts", err)
	}
}

// TestRoPERowOffsets: ForwardOffset with one offset per row rotates each
// row as Forward does with that row's offset alone (bit for bit on the CPU
// backend), and dynamic NTK scaling, whose base depends on the offset,
// refuses per-row offsets with an error.
func TestRoPERowOffsets(t *testing.T) {
	b := newBatchCPU(t)
	r, err := nn.NewRoPE(b, bD+1, 10000, false, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	const B, H, L, D = 3, 2, 2, bD + 1
	xs := make([]float32, B*H*L*D)
	for i := range xs {
		xs[i] = float32(i%7) - 2.5
	}
	x := b.FromHost(tensor.FromFloat32(tensor.Shape{B, H, L, D}, xs))
	offs := []int32{5, 0, 17}
	rows := b.FromHost(tensor.FromInt32(tensor.Shape{B}, offs))
	got, err := b.ToHost(r.ForwardOffset(x, backend.Offset{Rows: rows}))
	if err != nil {
		t.Fatal(err)
	}
	for i, off := range offs {
		xi := b.Slice(x, []int{i, 0, 0, 0}, []int{i + 1, H, L, D})
		want, err := b.ToHost(r.Forward(xi, int(off)))
		if err != nil {
			t.Fatal(err)
		}
		if g := got.ToFloat32()[i*H*L*D : (i+1)*H*L*D]; !slices.Equal(g, want.ToFloat32()) {
			t.Errorf("row %d (offset %d): got %v, want %v", i, off, g, want.ToFloat32())
		}
	}
	dyn, err := nn.NewRoPE(b, D, 10000, false, &checkpoint.RopeScaling{Type: "dynamic", Factor: 2}, 64)
	if err != nil {
		t.Fatal(err)
	}
	err = func() (err error) {
		defer backend.Recover(&err)
		dyn.ForwardOffset(x, backend.Offset{Rows: rows})
		return nil
	}()
	if err == nil || !strings.Contains(err.Error(), "dynamic needs a scalar offset") {
		t.Errorf("dynamic RoPE with per-row offsets: got %v, want the scalar-offset error", err)
	}
}

// TestBatchRotatingExtract: a rotating batch of window 4 (rows left-padded
// by 1 and 0) takes a 3-token chunk and 3 single tokens, wrapping its write
// index; as mlx_lm's BatchRotatingKVCache, the offsets and left paddings
// move (the paddings past 0 as evicted slots are counted off), and each
// row extracts to a RotatingKVCache of keep 0 holding its last 4 tokens in
// temporal order: the offsets [5 6], paddings [-1 -2] and extracted keys
// mlx_lm 0.32.2's BatchRotatingKVCache gives for the same calls.
func TestBatchRotatingExtract(t *testing.T) {
	b := newBatchCPU(t)
	c, err := nn.NewBatchRotatingKVCache(b, 4, []int{1, 0})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	k, v := batchKV(b, 2, 3, 0)
	c.Update(k, v)
	for s := range 3 {
		k, v := batchKV(b, 2, 1, float32(50000+10000*s))
		c.Update(k, v)
	}
	if got, want := c.Offsets(), []int{5, 6}; !slices.Equal(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
	if got, want := c.LeftPadding(), []int{-1, -2}; !slices.Equal(got, want) {
		t.Errorf("left padding %v, want %v", got, want)
	}
	for r := range 2 {
		e, err := c.Extract(r)
		if err != nil {
			t.Fatal(err)
		}
		rc, ok := e.(*nn.RotatingKVCache)
		if !ok || rc.Keep() != 0 || rc.MaxSize() != 4 || rc.Offset() != 5+r {
			t.Fatalf("row %d: extracted %T (keep %d, max %d, offset %d), want a RotatingKVCache of keep 0, max 4, offset %d", r, e, rc.Keep(), rc.MaxSize(), rc.Offset(), 5+r)
		}
		d, err := b.ToHost(rc.State()[0])
		if err != nil {
			t.Fatal(err)
		}
		got := d.ToFloat32()
		for h := range bH {
			// The chunk's last token (l = 2), then the three single tokens.
			for j, base := range []float32{20, 50000, 60000, 70000} {
				for dd := range bD {
					want := base + float32(1000*r+100*h+dd)
					if g := got[(h*4+j)*bD+dd]; g != want {
						t.Fatalf("row %d head %d slot %d dim %d: %v, want %v", r, h, j, dd, g, want)
					}
				}
			}
		}
		e.Release()
	}
}

// TestNewBatchCacheErrors: what a batch cache of each kind refuses is an
// error naming it (a panic with a *backend.OpError inside a forward).
func TestNewBatchCacheErrors(t *testing.T) {
	b := newBatchCPU(t)
	turbo := nn.CacheOptions{Turbo: turboquant.Scheme{KBits: 8, VBits: 3}}
	quant := nn.CacheOptions{KVBits: 8, KVGroupSize: 32}
	for _, tc := range []struct {
		name string
		pad  []int
		o    nn.CacheOptions
		want string
	}{
		{"padded-turbo", []int{0, 2}, turbo, "left padding 2 of row 1: a turbo:k8v3 TurboQuant batch holds each row's tokens alone"},
		{"padded-quantized", []int{1}, quant, "left padding 1 of row 0: a 8-bit quantized batch"},
		{"bits", nil, nn.CacheOptions{KVBits: 3, KVGroupSize: 32}, "KV bits 3"},
		{"window", nil, nn.CacheOptions{MaxKVSize: 3}, "max KV size 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := nn.NewBatchCache(b, tc.pad, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := nn.NewBatchRotatingKVCache(b, 0, []int{0}); err == nil || !strings.Contains(err.Error(), "max size 0") {
		t.Errorf("window 0: got %v", err)
	}
	a, _ := nn.NewBatchCache(b, []int{0}, turbo)
	q, _ := nn.NewBatchCache(b, []int{0}, quant)
	r, _ := nn.NewBatchCache(b, []int{0}, nn.CacheOptions{MaxKVSize: 8})
	r2, _ := nn.NewBatchCache(b, []int{0}, nn.CacheOptions{MaxKVSize: 16})
	full := nn.NewBatchKVCache(b, []int{0})
	for _, tc := range []struct {
		c, o *nn.BatchKVCache
		want string
	}{
		{a, q, "extend a turbo:k8v3 TurboQuant batch with a 8-bit quantized one"},
		{full, r, "extend a full batch with a rotating (max 8) one"},
		{r, r2, "extend a rotating (max 8) batch with a rotating (max 16) one"},
	} {
		if err := tc.c.Extend(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
	two, _ := nn.NewBatchCache(b, []int{0, 0}, quant)
	k, v := batchKV(b, 2, 1, 0)
	err := func() (err error) {
		defer backend.Recover(&err)
		two.Update(k, v)
		return nil
	}()
	if err == nil || !strings.Contains(err.Error(), "a 8-bit quantized batch of 2 rows holds rows of different lengths: read it through Attend") {
		t.Errorf("Update of a 2-row quantized batch: got %v", err)
	}
}

// TestSeedRowErrors: SeedRow takes an empty one-row cache, 1 <= n <=
// the prefix's tokens, and a prefix of the batch's kind; anything else is
// an error naming it.
func TestSeedRowErrors(t *testing.T) {
	b := newBatchCPU(t)
	full := nn.NewFullKVCache(b)
	k, v := batchKV(b, 1, 4, 0)
	full.Update(k, v)
	two := nn.NewBatchKVCache(b, []int{0, 0})
	one := nn.NewBatchKVCache(b, []int{0})
	quant, _ := nn.NewBatchCache(b, []int{0}, nn.CacheOptions{KVBits: 8, KVGroupSize: 32})
	for _, tc := range []struct {
		name string
		c    *nn.BatchKVCache
		n    int
		want string
	}{
		{"two-rows", two, 2, "cache of 2 rows holding 0 tokens, want an empty one-row cache"},
		{"too-many", one, 5, "seed 5 tokens from a cache holding 4"},
		{"none", one, 0, "seed 0 tokens"},
		{"kind", quant, 2, "a 8-bit quantized batch is seeded from a cache of its kind, not a *nn.FullKVCache"},
	} {
		if err := tc.c.SeedRow(full, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := one.SeedRow(full, 3); err != nil || one.Offset() != 3 {
		t.Fatalf("seed 3 of 4: %v, offset %d", err, one.Offset())
	}
	// A per-row full batch with the options the CLI passes (a group size
	// and a start, unused without bits) takes a full prefix too: the server
	// fell back to no prefix when it did not.
	perRow, err := nn.NewBatchCache(b, []int{0}, nn.CacheOptions{PerRow: true, KVGroupSize: 64, QuantizedKVStart: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if err := perRow.SeedRow(full, 3); err != nil || perRow.Offset() != 3 {
		t.Errorf("seed 3 of 4 into a per-row batch: %v, offset %d", err, perRow.Offset())
	}
	if err := one.SeedRow(full, 2); err == nil || !strings.Contains(err.Error(), "holding 3 tokens") {
		t.Errorf("seeding a seeded cache: got %v", err)
	}
}

// TestRowView: a view of rows of a batch of row caches holds those rows'
// own caches in the order asked for (what goes through it lands in them);
// shared buffers, repeated rows and rows out of range are errors.
func TestRowView(t *testing.T) {
	b := newBatchCPU(t)
	rows, err := nn.NewBatchCache(b, []int{0, 0, 0}, nn.CacheOptions{PerRow: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rows.RowCaches() {
		t.Fatal("a PerRow batch reports no row caches")
	}
	v, err := rows.RowView([]int{2, 0})
	if err != nil {
		t.Fatal(err)
	}
	k, val := batchKV(b, 2, 3, 0)
	v.Attend(k, k, val, 1, backend.CausalMask{})
	if got, want := rows.Offsets(), []int{3, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("offsets after 3 tokens through a view of rows 2 and 0: %v, want %v", got, want)
	}
	shared := nn.NewBatchKVCache(b, []int{0, 0})
	if shared.RowCaches() {
		t.Error("a shared batch reports row caches")
	}
	for _, tc := range []struct {
		name string
		c    *nn.BatchKVCache
		idx  []int
		want string
	}{
		{"shared", shared, []int{0}, "batch of shared buffers"},
		{"repeated", rows, []int{1, 1}, "view row 1, want distinct rows in [0, 3)"},
		{"range", rows, []int{3}, "view row 3"},
	} {
		if _, err := tc.c.RowView(tc.idx); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: RowView(%v) error %v, want one containing %q", tc.name, tc.idx, err, tc.want)
		}
	}
}

// noRowUpdater hides the CPU backend's RowUpdater, so that
// backend.SliceUpdateRows composes SliceUpdate row by row (as on MLX).
type noRowUpdater struct{ backend.Backend }

// TestBatchRowsFreeReplacedBuffers: a decode step through a batch of full
// row caches frees every buffer it replaces, whether a row is written in
// place, copied (its buffer shared with the prefix it was seeded from,
// with room left, so nothing grows), or written row by row through
// SliceUpdate (a backend without RowUpdater: the CPU backend with it
// hidden, and MLX under -tags mlx). Each step runs in a scope that keeps
// the caches' arrays, as the batch generator's do, so a replaced buffer
// nobody released outlives it: once the caches and the prefix are
// released the backend must hold what it held before. The row seeded
// from the prefix holds the prefix's first tokens, then the new one.
func TestBatchRowsFreeReplacedBuffers(t *testing.T) {
	for _, name := range backend.Names() {
		for _, composed := range []bool{false, true} {
			if composed && name != "cpu" {
				continue
			}
			for _, seeded := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/composed=%v/seeded=%v", name, composed, seeded), func(t *testing.T) {
					b, err := backend.Open(name, backend.Options{})
					if err != nil {
						t.Fatal(err)
					}
					defer b.Close()
					if composed {
						b = noRowUpdater{b}
					}
					held := 4 // the tokens row 0 holds before the decode step
					if seeded {
						held = 2
					}
					var got []float32
					var before, after backend.Stats
					err = b.Do(func() (err error) {
						defer backend.Recover(&err)
						before = b.Stats()
						got, err = rowsDecodeStep(b, seeded, held)
						after = b.Stats()
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					// Per head: the held keys, then the step's key.
					old, dec := batchRowKeys(0, 0, held, 0), batchRowKeys(0, 0, 1, 9000)
					var want []float32
					for h := range bH {
						want = slices.Concat(want, old[h*held*bD:(h+1)*held*bD], dec[h*bD:(h+1)*bD])
					}
					if !slices.Equal(got, want) {
						t.Errorf("row 0 after the step: %v, want %v", got, want)
					}
					if after.LiveArrays != before.LiveArrays || after.LiveBytes != before.LiveBytes {
						t.Errorf("after releasing everything: %d arrays, %d bytes live; before: %d, %d", after.LiveArrays, after.LiveBytes, before.LiveArrays, before.LiveBytes)
					}
				})
			}
		}
	}
}

// rowsDecodeStep is TestBatchRowsFreeReplacedBuffers's work on b's thread:
// a batch of two full row caches, row 0 seeded with the first held tokens
// of a live prefix (or given held tokens itself), row 1 given three, one
// decode step of both in a scope of its own, then every cache released.
// It returns row 0's keys after the step.
func rowsDecodeStep(b backend.Backend, seeded bool, held int) (row0 []float32, err error) {
	prefix := nn.NewFullKVCache(b)
	var first, second *nn.BatchKVCache
	defer func() {
		for _, c := range []*nn.BatchKVCache{first, second} {
			if c != nil {
				c.Release()
			}
		}
		prefix.Release()
	}()
	step := func(fn func() error) error {
		sc := b.Scope()
		defer sc.Close()
		err := fn()
		sc.Keep(prefix.State()...)
		for _, c := range []*nn.BatchKVCache{first, second} {
			if c != nil {
				sc.Keep(c.State()...)
			}
		}
		return err
	}
	rows := nn.CacheOptions{PerRow: true}
	if err := step(func() (err error) {
		k, v := batchKV(b, 1, 4, 0)
		prefix.Update(k, v)
		if first, err = nn.NewBatchCache(b, []int{0}, rows); err != nil {
			return err
		}
		if seeded {
			return first.SeedRow(prefix, held)
		}
		first.Attend(k, k, v, 1, backend.CausalMask{})
		return nil
	}); err != nil {
		return nil, err
	}
	if err := step(func() (err error) {
		if second, err = nn.NewBatchCache(b, []int{0}, rows); err != nil {
			return err
		}
		k, v := batchKV(b, 1, 3, 5000)
		second.Attend(k, k, v, 1, backend.CausalMask{})
		return first.Extend(second)
	}); err != nil {
		return nil, err
	}
	if err := step(func() error {
		k, v := batchKV(b, 2, 1, 9000)
		first.Attend(k, k, v, 1, backend.NoMask{})
		return nil
	}); err != nil {
		return nil, err
	}
	err = step(func() error {
		e, err := first.Extract(0)
		if err != nil {
			return err
		}
		defer e.Release()
		st := e.State()
		d, err := b.ToHost(b.Slice(st[0], []int{0, 0, 0, 0}, []int{1, bH, e.Offset(), bD}))
		if err != nil {
			return err
		}
		row0 = d.ToFloat32()
		return nil
	})
	return row0, err
}
