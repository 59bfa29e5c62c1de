package nn_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// kv is a [1, 1, L, 1] array of the values v.
func kv(b backend.Backend, v ...float32) backend.Array {
	return b.FromHost(tensor.FromFloat32(tensor.Shape{1, 1, len(v), 1}, v))
}

// stored reads a cache's keys up to its offset.
func stored(t *testing.T, b backend.Backend, c nn.KVCache) []float32 {
	t.Helper()
	st := c.State()
	k := b.Slice(st[0], []int{0, 0, 0, 0}, []int{1, 1, c.Offset(), 1})
	defer b.Release(k)
	h, err := b.ToHost(k)
	if err != nil {
		t.Fatal(err)
	}
	return h.ToFloat32()
}

// TestFork: a fork holds the same tokens; writes to either after a trim do
// not reach the other (copy on write), and releasing both frees everything.
func TestFork(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	base := b.Stats().LiveArrays
	c := nn.NewFullKVCache(b)
	update := func(c nn.KVCache, v ...float32) {
		k, v2 := kv(b, v...), kv(b, v...)
		ok, ov := c.Update(k, v2)
		b.Release(k, v2, ok, ov)
	}
	update(c, 1, 2, 3)
	f := c.Fork()
	if f.Offset() != 3 || !slices.Equal(stored(t, b, f), []float32{1, 2, 3}) {
		t.Fatalf("fork holds %v (offset %d), want [1 2 3]", stored(t, b, f), f.Offset())
	}
	c.Trim(2)
	update(c, 9)
	f.Trim(1)
	update(f, 7, 8)
	if got := stored(t, b, c); !slices.Equal(got, []float32{1, 9}) {
		t.Errorf("original holds %v, want [1 9]", got)
	}
	if got := stored(t, b, f); !slices.Equal(got, []float32{1, 2, 7, 8}) {
		t.Errorf("fork holds %v, want [1 2 7 8]", got)
	}
	c.Release()
	f.Release()
	if got := b.Stats().LiveArrays; got != base {
		t.Errorf("live arrays after releasing both: %d, want %d", got, base)
	}
	if e := (&nn.FullKVCache{}).Fork(); e.Offset() != 0 || e.State() != nil {
		t.Errorf("fork of an empty cache: offset %d, state %v; want empty", e.Offset(), e.State())
	}
}

func TestRestoreFullKVCache(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	z := func(dt tensor.DType, s ...int) backend.Array { return b.Zeros(tensor.Shape(s), dt) }
	c, err := nn.RestoreFullKVCache(b, kv(b, 4, 5, 6, 0), kv(b, 4, 5, 6, 0), 3)
	if err != nil {
		t.Fatal(err)
	}
	if c.Offset() != 3 || c.Capacity() != 4 || !slices.Equal(stored(t, b, c), []float32{4, 5, 6}) {
		t.Errorf("got offset %d capacity %d keys %v, want 3, 4, [4 5 6]", c.Offset(), c.Capacity(), stored(t, b, c))
	}
	c.Release()
	for _, tc := range []struct {
		name string
		k, v backend.Array
		off  int
		want string
	}{
		{"rank", z(tensor.F32, 1, 2, 3), z(tensor.F32, 1, 2, 3), 0, "want [B, Hk, capacity, D]"},
		{"capacity", z(tensor.F32, 1, 2, 4, 8), z(tensor.F32, 1, 2, 5, 8), 0, "differ in B, Hk or capacity"},
		{"dtype", z(tensor.F32, 1, 2, 4, 8), z(tensor.BF16, 1, 2, 4, 8), 0, "keys are F32, values BF16"},
		{"offset", z(tensor.F32, 1, 2, 4, 8), z(tensor.F32, 1, 2, 4, 8), 5, "offset 5, want 0 <= offset <= capacity 4"},
		{"negative", z(tensor.F32, 1, 2, 4, 8), z(tensor.F32, 1, 2, 4, 8), -1, "offset -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer b.Release(tc.k, tc.v)
			if _, err := nn.RestoreFullKVCache(b, tc.k, tc.v, tc.off); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
