package nn_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestRotatingKVCache follows mlx_lm's RotatingKVCache (max_size 6, keep 2)
// through both update paths. Token t's key is t and its value −t, one head
// of dimension 1, so a buffer reads as the tokens in its slots. Worked out
// by hand from cache.py:
//
//	concat [0 1 2]        empty: store them            → [0 1 2]           off 3  idx 3
//	token 3               grow by min(256, 6−3) zeros  → [0 1 2 3 _ _]     off 4  idx 4, returns 4 slots
//	token 4, token 5      in place                     → [0 1 2 3 4 5]     off 6  idx 6
//	token 6               idx = max → keep = 2         → [0 1 6 3 4 5]     off 7  idx 3
//	token 7               in place at 3                → [0 1 6 7 4 5]     off 8  idx 4
//	concat [8 9]          temporal order [0 1 4 5 6 7], cut 6−6+1 = 1 after
//	                      keep: [0 1 5 6 7] + [8 9]    → [0 1 5 6 7 8 9]   off 10 idx 7
//	token 10              7 slots > 6: cut 1 after keep [0 1 6 7 8 9],
//	                      idx = 6 → 2                  → [0 1 10 7 8 9]    off 11 idx 3
//	trim 1                                                                 off 10 idx 2
//	token 11              in place at 2                → [0 1 11 7 8 9]    off 11 idx 3
func TestRotatingKVCache(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := b.Stats()
	c, err := nn.NewRotatingKVCache(b, 6, 2)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		tokens      []float32
		trim        int
		want        []float32
		offset, idx int
	}{
		{tokens: []float32{0, 1, 2}, want: []float32{0, 1, 2}, offset: 3, idx: 3},
		{tokens: []float32{3}, want: []float32{0, 1, 2, 3}, offset: 4, idx: 4},
		{tokens: []float32{4}, want: []float32{0, 1, 2, 3, 4}, offset: 5, idx: 5},
		{tokens: []float32{5}, want: []float32{0, 1, 2, 3, 4, 5}, offset: 6, idx: 6},
		{tokens: []float32{6}, want: []float32{0, 1, 6, 3, 4, 5}, offset: 7, idx: 3},
		{tokens: []float32{7}, want: []float32{0, 1, 6, 7, 4, 5}, offset: 8, idx: 4},
		{tokens: []float32{8, 9}, want: []float32{0, 1, 5, 6, 7, 8, 9}, offset: 10, idx: 7},
		{tokens: []float32{10}, want: []float32{0, 1, 10, 7, 8, 9}, offset: 11, idx: 3},
		{tokens: []float32{11}, trim: 1, want: []float32{0, 1, 11, 7, 8, 9}, offset: 11, idx: 3},
	}
	for i, s := range steps {
		name := fmt.Sprintf("step%d/tokens%v", i, s.tokens)
		if s.trim > 0 {
			if got := c.Trim(s.trim); got != s.trim {
				t.Fatalf("Trim(%d): got %d (%s)", s.trim, got, name)
			}
		}
		gk, gv := update(t, b, c, s.tokens)
		if got := hostValues(t, b, gk); !slices.Equal(got, s.want) {
			t.Fatalf("keys: got %v, want %v (%s)", got, s.want, name)
		}
		neg := make([]float32, len(s.want))
		for j, x := range s.want {
			neg[j] = -x
		}
		if got := hostValues(t, b, gv); !slices.Equal(got, neg) {
			t.Fatalf("values: got %v, want %v (%s)", got, neg, name)
		}
		b.Release(gk, gv)
		if c.Offset() != s.offset || c.Index() != s.idx {
			t.Fatalf("offset, index: got %d, %d, want %d, %d (%s)", c.Offset(), c.Index(), s.offset, s.idx, name)
		}
		if got := b.Stats().LiveArrays - base.LiveArrays; got != 2 {
			t.Errorf("live arrays: got %d more than before, want 2 (the buffers) (%s)", got, name)
		}
	}
	if c.Trimmable() {
		t.Errorf("Trimmable: got true at offset %d >= max size 6, want false", c.Offset())
	}
	c.Release()
	if st := b.Stats(); st.LiveArrays != base.LiveArrays || st.LiveBytes != base.LiveBytes {
		t.Errorf("after Release: %d arrays, %d bytes live, want %d, %d", st.LiveArrays, st.LiveBytes, base.LiveArrays, base.LiveBytes)
	}
}

// TestRotatingKVCacheLongPrompt: a prompt longer than the window (8 tokens,
// max_size 6, keep 2) is stored whole, then the first decode token cuts the
// buffer to 6 slots keeping [0 1] and the newest [4 5 6 7], and wraps the
// write index to keep: [0 1 8 5 6 7].
func TestRotatingKVCacheLongPrompt(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := nn.NewRotatingKVCache(b, 6, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	gk, gv := update(t, b, c, []float32{0, 1, 2, 3, 4, 5, 6, 7})
	if got, want := hostValues(t, b, gk), []float32{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("prefill keys: got %v, want %v", got, want)
	}
	b.Release(gk, gv)
	gk, gv = update(t, b, c, []float32{8})
	if got, want := hostValues(t, b, gk), []float32{0, 1, 8, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("decode keys: got %v, want %v", got, want)
	}
	b.Release(gk, gv)
	if c.Offset() != 9 || c.Index() != 3 {
		t.Fatalf("offset, index: got %d, %d, want 9, 3", c.Offset(), c.Index())
	}
}

// TestRotatingKVCacheMask checks make_mask: NoMask for one query; for L > 1
// with o = min(max_size−1, offset), CausalMask when o+L <= max_size, else
// create_causal_mask(L, o, max_size), written out here for max_size 6:
//
//	offset 0, L 3: 0+3 <= 6                  → causal
//	offset 0, L 8: 8 > 6, rows q = 0..7 see keys j with j <= q < j+6
//	offset 8, L 2: o = 5, 7 > 6, rows q = 5, 6 over 7 keys:
//	  q 5: keys 0..5 → 1 1 1 1 1 1 0
//	  q 6: keys 1..6 → 0 1 1 1 1 1 1
func TestRotatingKVCacheMask(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := nn.NewRotatingKVCache(b, 6, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if _, ok := c.Mask(1).(backend.NoMask); !ok {
		t.Errorf("Mask(1): got %T, want NoMask", c.Mask(1))
	}
	if _, ok := c.Mask(3).(backend.CausalMask); !ok {
		t.Errorf("Mask(3) at offset 0: got %T, want CausalMask", c.Mask(3))
	}
	m8, ok := c.Mask(8).(backend.ArrayMask)
	if !ok {
		t.Fatalf("Mask(8) at offset 0: got %T, want ArrayMask", c.Mask(8))
	}
	var want8 []float32
	for q := range 8 {
		for j := range 8 {
			want8 = append(want8, map[bool]float32{true: 1, false: 0}[j <= q && q < j+6])
		}
	}
	checkMask(t, b, m8, tensor.Shape{8, 8}, want8, "offset 0, L 8")
	gk, gv := update(t, b, c, []float32{0, 1, 2, 3, 4, 5, 6, 7})
	b.Release(gk, gv)
	m2, ok := c.Mask(2).(backend.ArrayMask)
	if !ok {
		t.Fatalf("Mask(2) at offset 8: got %T, want ArrayMask", c.Mask(2))
	}
	checkMask(t, b, m2, tensor.Shape{2, 7}, []float32{1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1}, "offset 8, L 2")
}

func checkMask(t *testing.T, b backend.Backend, m backend.ArrayMask, shape tensor.Shape, want []float32, name string) {
	t.Helper()
	if m.A.DType() != tensor.Bool || !m.A.Shape().Equal(shape) {
		t.Fatalf("mask: got %v %v, want bool %v (%s)", m.A.DType(), m.A.Shape(), shape, name)
	}
	d, err := b.ToHost(m.A)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.ToFloat32(); !slices.Equal(got, want) {
		t.Errorf("mask: got %v, want %v (%s)", got, want, name)
	}
	b.Release(m.A)
}

// TestRotatingKVCacheErrors: bad sizes and restored states are named errors.
func TestRotatingKVCacheErrors(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ max, keep int }{{4, 4}, {3, 4}, {6, -1}} {
		if _, err := nn.NewRotatingKVCache(b, s.max, s.keep); err == nil {
			t.Errorf("NewRotatingKVCache(%d, %d): got no error", s.max, s.keep)
		}
	}
	for _, n := range []int{-1, 1, 4} {
		if err := (nn.CacheOptions{MaxKVSize: n}).Check(); err == nil {
			t.Errorf("CacheOptions{MaxKVSize: %d}.Check: got no error", n)
		}
	}
	for _, n := range []int{0, 5} {
		if err := (nn.CacheOptions{MaxKVSize: n}).Check(); err != nil {
			t.Errorf("CacheOptions{MaxKVSize: %d}.Check: %v", n, err)
		}
	}
	kv := func(n int) backend.Array { return b.Zeros(tensor.Shape{1, 1, n, 1}, tensor.F32) }
	for _, s := range []struct {
		name                 string
		slots, off, idx, max int
	}{
		{"index past slots", 4, 9, 5, 6},
		{"index past offset", 4, 2, 3, 6},
		{"offset past slots below max", 4, 5, 4, 6},
	} {
		k, v := kv(s.slots), kv(s.slots)
		if _, err := nn.RestoreRotatingKVCache(b, k, v, s.off, 2, s.max, s.idx); err == nil {
			t.Errorf("RestoreRotatingKVCache: got no error (%s)", s.name)
		}
		b.Release(k, v)
	}
	k, v := kv(6), kv(6)
	c, err := nn.RestoreRotatingKVCache(b, k, v, 11, 2, 6, 3)
	if err != nil {
		t.Fatalf("RestoreRotatingKVCache of a valid state: %v", err)
	}
	if c.Offset() != 11 || c.Index() != 3 || c.MaxSize() != 6 || c.Keep() != 2 {
		t.Errorf("restored: offset %d index %d max %d keep %d, want 11 3 6 2", c.Offset(), c.Index(), c.MaxSize(), c.Keep())
	}
	c.Release()
}

// update appends the tokens (key t, value −t) to c.
func update(t *testing.T, b backend.Backend, c nn.KVCache, tokens []float32) (backend.Array, backend.Array) {
	t.Helper()
	neg := make([]float32, len(tokens))
	for i, x := range tokens {
		neg[i] = -x
	}
	sh := tensor.Shape{1, 1, len(tokens), 1}
	k, v := b.FromHost(tensor.FromFloat32(sh, tokens)), b.FromHost(tensor.FromFloat32(sh, neg))
	gk, gv := c.Update(k, v)
	b.Release(k, v)
	return gk, gv
}

func hostValues(t *testing.T, b backend.Backend, a backend.Array) []float32 {
	t.Helper()
	d, err := b.ToHost(a)
	if err != nil {
		t.Fatal(err)
	}
	return d.ToFloat32()
}
