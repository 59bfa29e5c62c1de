package nn_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestTurboKVCacheBF16First follows the bf16-first composition: the first
// update is stored and returned as it came (a full cache); State converts
// the window; later updates are encoded, so the returned window equals
// encoding every token on its own (the codec is per token-head row). Then
// growth past KVStep from an offset that is not a multiple of it, Trim
// (only the offset moves), and Release (bf16-first again).
func TestTurboKVCacheBF16First(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	c, err := nn.NewTurboKVCache(b, turboquant.Scheme{KBits: 4, VBits: 3}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	k0, v0 := randArray(b, r, 1, 2, 5, 64), randArray(b, r, 1, 2, 5, 64)
	keys, values := c.Update(k0, v0)
	if c.Converted() || !equalHost(t, b, keys, k0) || !equalHost(t, b, values, v0) {
		t.Fatalf("first update: converted %v, or the window is not the input as it came", c.Converted())
	}
	st := c.State()
	if !c.Converted() || len(st) != 5 || !st[0].Shape().Equal(tensor.Shape{1, 2, 256, 32}) || st[1].DType() != tensor.F16 {
		t.Fatalf("after State: converted %v, %d parts, key codes %v", c.Converted(), len(st), st[0].Shape())
	}
	ref, err := nn.NewTurboKVCache(b, c.Scheme(), false, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Release()
	ref.Update(k0, v0)
	for i, L := range []int{1, 300, 2} {
		k, v := randArray(b, r, 1, 2, L, 64), randArray(b, r, 1, 2, L, 64)
		keys, values := c.Update(k, v)
		rk, rv := ref.Update(k, v)
		if !equalHost(t, b, keys, rk) || !equalHost(t, b, values, rv) {
			t.Fatalf("update %d: the window differs from the one encoded token by token", i)
		}
		if got := keys.Shape()[2]; got != c.Offset() {
			t.Fatalf("update %d: window of %d tokens, offset %d", i, got, c.Offset())
		}
	}
	if got := c.State()[0].Shape()[2]; c.Offset() != 308 || got != 6+512 {
		t.Errorf("offset %d (want 308), capacity %d (want 518: cut to 6, then 512 slots)", c.Offset(), got)
	}
	if n := c.Trim(10); n != 10 || c.Offset() != 298 || !c.Converted() {
		t.Errorf("Trim(10) = %d, offset %d, converted %v", n, c.Offset(), c.Converted())
	}
	c.Release()
	if c.Converted() || c.Offset() != 0 || c.State() != nil {
		t.Errorf("after Release: converted %v, offset %d", c.Converted(), c.Offset())
	}
}

func equalHost(t *testing.T, b backend.Backend, x, y backend.Array) bool {
	t.Helper()
	hx, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	hy, err := b.ToHost(y)
	if err != nil {
		t.Fatal(err)
	}
	return hx.Shape.Equal(hy.Shape) && string(hx.Data) == string(hy.Data)
}

// TestTurboKVCacheBadInput: bits not offered, an unsupported head_dim (a
// panic inside the forward, which models turn into an error), and restore
// states of the wrong kind are errors naming what is wrong.
func TestTurboKVCacheBadInput(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nn.NewTurboKVCache(b, turboquant.Scheme{KBits: 3, VBits: 3}, true, false); err == nil || !strings.Contains(err.Error(), "key bits 3") {
		t.Errorf("k3v3: got %v", err)
	}
	c, err := nn.NewTurboKVCache(b, turboquant.Default, true, true)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 10))
	err = func() (err error) {
		defer backend.Recover(&err)
		c.Update(randArray(b, r, 1, 1, 2, 96), randArray(b, r, 1, 1, 2, 96))
		return nil
	}()
	if err == nil || !strings.Contains(err.Error(), "head_dim 96") {
		t.Errorf("head_dim 96: got %v", err)
	}
	parts := func(w0 int, dt tensor.DType) []backend.Array {
		return []backend.Array{
			b.Zeros(tensor.Shape{1, 2, 256, w0}, dt), b.Zeros(tensor.Shape{1, 2, 256, 2}, tensor.F16), b.Zeros(tensor.Shape{1, 2, 256, 2}, tensor.F16),
			b.Zeros(tensor.Shape{1, 2, 256, 24}, tensor.U8), b.Zeros(tensor.Shape{1, 2, 256, 2}, tensor.F16),
		}
	}
	for _, tc := range []struct {
		name  string
		parts []backend.Array
		off   int
		want  string
	}{
		{"ok", parts(64, tensor.I8), 10, ""},
		{"offset", parts(64, tensor.I8), 300, "offset 300"},
		{"key dtype", parts(64, tensor.U8), 10, "array 0 is U8"},
		{"head_dim", parts(48, tensor.I8), 10, "head_dim"},
		{"count", parts(64, tensor.I8)[:4], 10, "4 arrays, want 5"},
	} {
		_, err := nn.RestoreTurboKVCache(b, turboquant.Default, true, tc.parts, tc.off, tensor.BF16)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestTurboKVCacheFork: a fork holds the same tokens; updating the fork
// and the original with different tokens leaves each with its own window,
// equal to a cache that saw only its own tokens.
func TestTurboKVCacheFork(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	k0, v0 := randArray(b, r, 1, 2, 4, 64), randArray(b, r, 1, 2, 4, 64)
	k1, v1 := randArray(b, r, 1, 2, 1, 64), randArray(b, r, 1, 2, 1, 64)
	k2, v2 := randArray(b, r, 1, 2, 1, 64), randArray(b, r, 1, 2, 1, 64)
	window := func(c *nn.TurboKVCache, k, v backend.Array) (backend.Array, backend.Array) { return c.Update(k, v) }
	newCache := func() *nn.TurboKVCache {
		c, err := nn.NewTurboKVCache(b, turboquant.Default, true, false)
		if err != nil {
			t.Fatal(err)
		}
		c.Update(k0, v0)
		c.State()
		return c
	}
	c := newCache()
	defer c.Release()
	f := c.Fork().(*nn.TurboKVCache)
	defer f.Release()
	ck, cv := window(c, k1, v1)
	fk, fv := window(f, k2, v2)
	for _, tc := range []struct {
		k, v         backend.Array
		wantK, wantV backend.Array
		name         string
	}{{ck, cv, k1, v1, "original"}, {fk, fv, k2, v2, "fork"}} {
		ref := newCache()
		rk, rv := ref.Update(tc.wantK, tc.wantV)
		if !equalHost(t, b, tc.k, rk) || !equalHost(t, b, tc.v, rv) {
			t.Errorf("%s: window differs from a cache that saw only its tokens", tc.name)
		}
		ref.Release()
	}
}
