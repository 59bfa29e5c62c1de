package nn_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// dtH and dtD are the KV heads and head dim of the KV dtype tests.
const dtH, dtD = 2, 8

// randKV returns float32 keys and values [B, dtH, L, dtD] of random values
// with full mantissas, and the same rounded by round, all on b.
func randKV(b backend.Backend, r *rand.Rand, B, L int, round func(float32) float32) (k, v, rk, rv backend.Array) {
	s := tensor.Shape{B, dtH, L, dtD}
	kh, vh := make([]float32, s.Size()), make([]float32, s.Size())
	for i := range kh {
		kh[i], vh[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	rkh, rvh := make([]float32, len(kh)), make([]float32, len(vh))
	for i := range kh {
		rkh[i], rvh[i] = round(kh[i]), round(vh[i])
	}
	return b.FromHost(tensor.FromFloat32(s, kh)), b.FromHost(tensor.FromFloat32(s, vh)),
		b.FromHost(tensor.FromFloat32(s, rkh)), b.FromHost(tensor.FromFloat32(s, rvh))
}

// TestKVDType: a full cache of CacheOptions.KVDType bfloat16 or float16
// keeps float32 keys and values in that dtype, each rounded to nearest even
// (tensor.RoundBF16, RoundF16), through growth past KVStep, a fork and a
// cache restored from its state; the
// attention over it equals the attention over a float32 cache holding the
// rounded values (the reference precision reads both exactly); keys of
// another dtype are stored as they come; a batch of row caches and one of
// shared buffers store the same way.
func TestKVDType(t *testing.T) {
	b := newBatchCPU(t)
	const scale = 0.35
	for _, store := range []tensor.DType{tensor.BF16, tensor.F16} {
		round := tensor.RoundBF16
		if store == tensor.F16 {
			round = tensor.RoundF16
		}
		t.Run(store.MLXName(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(store)))
			o := nn.CacheOptions{KVDType: store}
			c := o.New(b)
			ref := nn.NewFullKVCache(b)
			defer c.Release()
			defer ref.Release()
			check := func(name string, c, ref nn.KVCache, L int) {
				t.Helper()
				k, v, rk, rv := randKV(b, r, 1, L, round)
				keys, values := c.Update(k, v)
				rkeys, rvalues := ref.Update(rk, rv)
				if keys.DType() != store || values.DType() != store {
					t.Fatalf("%s: keys %v, values %v, want %v", name, keys.DType(), values.DType(), store)
				}
				if got, want := hostValues(t, b, keys), hostValues(t, b, rkeys); !slices.Equal(got, want) {
					t.Fatalf("%s: stored keys are not the rounded inputs", name)
				}
				if got, want := hostValues(t, b, values), hostValues(t, b, rvalues); !slices.Equal(got, want) {
					t.Fatalf("%s: stored values are not the rounded inputs", name)
				}
				q := b.FromHost(tensor.FromFloat32(tensor.Shape{1, 2 * dtH, 1, dtD}, randFloats(r, 2*dtH*dtD)))
				got := b.ScaledDotProductAttention(q, keys, values, scale, backend.NoMask{})
				want := b.ScaledDotProductAttention(q, rkeys, rvalues, scale, backend.NoMask{})
				if g, w := hostValues(t, b, got), hostValues(t, b, want); !slices.Equal(g, w) {
					t.Fatalf("%s: attention over the %v cache differs from attention over the rounded float32 one", name, store)
				}
				b.Release(k, v, rk, rv, keys, values, rkeys, rvalues, q, got, want)
			}
			for i, L := range []int{3, 253, 1, 2} { // the third grows the buffers to 512 slots
				check("update "+string(rune('0'+i)), c, ref, L)
			}
			if cp := c.(*nn.FullKVCache).Capacity(); cp != 512 {
				t.Fatalf("capacity %d after 259 tokens, want 512", cp)
			}
			f, fref := c.(*nn.FullKVCache).Fork(), ref.Fork()
			defer f.Release()
			defer fref.Release()
			check("fork", f, fref, 300) // the fork grows too

			// A cache restored from its state (a prompt cache file, the
			// server's prefix cache on disk) goes on storing in its dtype.
			st := c.State()
			kc, vc := b.Slice(st[0], []int{0, 0, 0, 0}, st[0].Shape()), b.Slice(st[1], []int{0, 0, 0, 0}, st[1].Shape())
			rc, err := nn.RestoreFullKVCache(b, kc, vc, c.Offset())
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Release()
			rref := ref.Fork()
			defer rref.Release()
			check("restored", rc, rref, 300) // grows past 512

			// Keys of another dtype than float32 are stored as they come.
			other := o.New(b)
			defer other.Release()
			k, v, _, _ := randKV(b, r, 1, 2, round)
			kb, vb := b.AsType(k, tensor.BF16), b.AsType(v, tensor.BF16)
			if store == tensor.BF16 {
				kb, vb = b.AsType(k, tensor.F16), b.AsType(v, tensor.F16)
			}
			keys, _ := other.Update(kb, vb)
			if keys.DType() != kb.DType() {
				t.Errorf("%v keys into a cache storing float32 as %v: stored as %v, want %v", kb.DType(), store, keys.DType(), kb.DType())
			}
			b.Release(k, v, kb, vb, keys)

			// Batches: the rows' caches and the shared buffers.
			for _, perRow := range []bool{true, false} {
				bc, err := nn.NewBatchCache(b, []int{0, 0}, nn.CacheOptions{KVDType: store, PerRow: perRow})
				if err != nil {
					t.Fatal(err)
				}
				k, v, _, _ := randKV(b, r, 2, 3, round)
				if perRow { // a batch of row caches is written through Attend
					q := b.FromHost(tensor.FromFloat32(tensor.Shape{2, 2 * dtH, 3, dtD}, randFloats(r, 2*2*dtH*3*dtD)))
					b.Release(bc.Attend(q, k, v, scale, backend.CausalMask{}), q)
				} else {
					keys, values := bc.Update(k, v)
					b.Release(keys, values)
				}
				if n, want := len(bc.State()), map[bool]int{true: 4, false: 2}[perRow]; n != want {
					t.Fatalf("batch (per row %v): %d state arrays, want %d", perRow, n, want)
				}
				for i, a := range bc.State() {
					if a.DType() != store {
						t.Errorf("batch (per row %v): state array %d is %v, want %v", perRow, i, a.DType(), store)
					}
				}
				b.Release(k, v)
				bc.Release()
			}
		})
	}
}

// randFloats returns n normal floats.
func randFloats(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
	}
	return out
}

// TestKVDTypeErrors: CacheOptions.Check refuses a KV dtype other than
// bfloat16 and float16, and one with a kind of cache other than the full one.
func TestKVDTypeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    nn.CacheOptions
		want string
	}{
		{"float32", nn.CacheOptions{KVDType: tensor.F32}, "KV dtype float32: want bfloat16 or float16"},
		{"int8", nn.CacheOptions{KVDType: tensor.I8}, "want bfloat16 or float16"},
		{"quantized", nn.CacheOptions{KVDType: tensor.BF16, KVBits: 8, KVGroupSize: 64}, "KV dtype bfloat16 with a 8-bit quantized cache: the dtype applies to the full cache only"},
		{"rotating", nn.CacheOptions{KVDType: tensor.F16, MaxKVSize: 64}, "KV dtype float16 with a rotating (max 64) cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		if err := (nn.CacheOptions{KVDType: dt, PerRow: true}).Check(); err != nil {
			t.Errorf("per-row full cache of %v: %v", dt, err)
		}
	}
}
