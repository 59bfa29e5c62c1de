package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

func randArray(b backend.Backend, r *rand.Rand, shape ...int) backend.Array {
	v := make([]float32, tensor.Shape(shape).Size())
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return b.FromHost(tensor.FromFloat32(tensor.Shape(shape), v))
}

// TestQuantizedKVCacheConversion follows maybe_quantize_kv_cache with
// start 3 (8 bits, group 32): updates of 2 and 2 tokens stay full (the
// offset is 0, then 2, when they arrive); the third update finds offset 4 >=
// 3 and quantizes the whole buffer (256 slots, as KVCache.to_quantized
// does) before appending. The stored rows are what Quantize gives for each
// token (quantization is per row and group), checked bit for bit. Then:
// State converts (after a forward, as mlx_lm does), and an empty cache with
// start 0 does not (mlx_lm's first forward runs on the full cache).
func TestQuantizedKVCacheConversion(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	c, err := nn.NewQuantizedKVCache(b, 8, 32, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	var ks []backend.Array
	for i, L := range []int{2, 2, 1} {
		k, v := randArray(b, r, 1, 2, L, 32), randArray(b, r, 1, 2, L, 32)
		ks = append(ks, k)
		keys, values, qk, qv, quant := c.UpdateQuantized(k, v)
		if want := i == 2; quant != want || c.Quantized() != want {
			t.Fatalf("update %d: quantized %v (cache %v), want %v", i, quant, c.Quantized(), want)
		}
		if !quant {
			if got := keys.Shape(); !got.Equal(tensor.Shape{1, 2, c.Offset(), 32}) {
				t.Fatalf("update %d: keys %v", i, got)
			}
			b.Release(keys, values)
			continue
		}
		if got := c.State()[0].Shape(); !got.Equal(tensor.Shape{1, 2, 256, 8}) {
			t.Errorf("quantized keys buffer: got %v, want [1 2 256 8]", got)
		}
		if got := qk.W.Shape(); !got.Equal(tensor.Shape{1, 2, 5, 8}) || !qv.Scales.Shape().Equal(tensor.Shape{1, 2, 5, 1}) {
			t.Fatalf("returned keys %v, value scales %v, want [1 2 5 8] and [1 2 5 1]", got, qv.Scales.Shape())
		}
		want := b.Dequantize(b.Quantize(b.Concatenate(2, ks...), 32, 8))
		got := b.Dequantize(qk)
		wh, _ := b.ToHost(want)
		gh, _ := b.ToHost(got)
		for j, x := range wh.Float32s() {
			if gh.Float32s()[j] != x {
				t.Fatalf("stored key %d: got %v, want %v (Quantize of the same rows)", j, gh.Float32s()[j], x)
			}
		}
	}
	for _, n := range []int{0, 4} {
		d, err := nn.NewQuantizedKVCache(b, 4, 32, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			k, v := randArray(b, r, 1, 2, n, 32), randArray(b, r, 1, 2, n, 32)
			keys, values := d.Update(k, v)
			b.Release(k, v, keys, values)
		}
		st := d.State()
		if want := n > 0; d.Quantized() != want || (want && len(st) != 6) {
			t.Errorf("start 0, %d tokens, State: quantized %v with %d arrays, want %v", n, d.Quantized(), len(st), want)
		}
		d.Release()
	}
	if c.Offset() != 5 {
		t.Errorf("offset: got %d, want 5", c.Offset())
	}
	if got := c.Trim(2); got != 2 || c.Offset() != 3 {
		t.Errorf("Trim(2): got %d, offset %d, want 2, 3", got, c.Offset())
	}
}

// TestQuantizedSDPA: the quantized attention equals the fused SDPA on the
// dequantized keys and values up to float32 summation order (both compute
// softmax(q·kᵀ·scale)·v), with GQA (4 query heads on 2 KV heads), for no
// mask, the causal mask and a Bool array mask.
func TestQuantizedSDPA(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	const L, S, D = 3, 7, 64
	q := randArray(b, r, 1, 4, L, D)
	qk := b.Quantize(randArray(b, r, 1, 2, S, D), 32, 4)
	qv := b.Quantize(randArray(b, r, 1, 2, S, D), 32, 4)
	dk, dv := b.Dequantize(qk), b.Dequantize(qv)
	arr := make([]int32, L*S)
	for i := range arr {
		arr[i] = int32(i % 3 % 2)
	}
	arr[0] = 1
	for _, m := range []struct {
		name string
		mask backend.Mask
	}{
		{"none", backend.NoMask{}},
		{"causal", backend.CausalMask{}},
		{"array", backend.ArrayMask{A: b.FromHost(tensor.FromInt32(tensor.Shape{L, S}, arr).Convert(tensor.Bool))}},
	} {
		t.Run(m.name, func(t *testing.T) {
			got, _ := b.ToHost(nn.QuantizedSDPA(b, q, qk, qv, m.mask))
			want, _ := b.ToHost(b.ScaledDotProductAttention(q, dk, dv, nn.AttentionScale(D), m.mask))
			if !got.Shape.Equal(want.Shape) {
				t.Fatalf("shape: got %v, want %v", got.Shape, want.Shape)
			}
			for i, w := range want.Float32s() {
				if g := got.Float32s()[i]; math.Abs(float64(g-w)) > 1e-5*(1+math.Abs(float64(w))) {
					t.Fatalf("out[%d]: got %v, want %v", i, g, w)
				}
			}
		})
	}
}

// TestQuantizedKVCacheOptions: bits, group sizes and starts not offered,
// and a quantized rotating cache, are errors.
func TestQuantizedKVCacheOptions(t *testing.T) {
	for _, o := range []nn.CacheOptions{
		{KVBits: 3, KVGroupSize: 64},
		{KVBits: 4, KVGroupSize: 128},
		{KVBits: 8, KVGroupSize: 64, QuantizedKVStart: -1},
		{KVBits: 8, KVGroupSize: 64, MaxKVSize: 16},
	} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			if err := o.Check(); err == nil {
				t.Error("got no error")
			}
		})
	}
	if err := (nn.CacheOptions{KVBits: 4, KVGroupSize: 32}).Check(); err != nil {
		t.Errorf("4 bits, group 32: %v", err)
	}
}

// TestRestoreQuantizedKVCacheErrors: states that do not fit are named
// errors; a valid one restores quantized with its offset.
func TestRestoreQuantizedKVCacheErrors(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	q := func(bits, group int) backend.QuantizedArray {
		return b.Quantize(randArray(b, r, 1, 2, 8, 64), group, bits)
	}
	for _, tc := range []struct {
		name   string
		k, v   backend.QuantizedArray
		offset int
	}{
		{"bits differ", q(4, 32), q(8, 32), 3},
		{"bits not offered", q(2, 32), q(2, 32), 3},
		{"offset past capacity", q(4, 32), q(4, 32), 9},
	} {
		if _, err := nn.RestoreQuantizedKVCache(b, tc.k, tc.v, tc.offset); err == nil {
			t.Errorf("%s: got no error", tc.name)
		}
	}
	c, err := nn.RestoreQuantizedKVCache(b, q(8, 64), q(8, 64), 5)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Quantized() || c.Offset() != 5 || c.Bits() != 8 || c.GroupSize() != 64 || len(c.State()) != 6 {
		t.Errorf("restored: quantized %v offset %d bits %d group %d state %d arrays, want true 5 8 64 6", c.Quantized(), c.Offset(), c.Bits(), c.GroupSize(), len(c.State()))
	}
	c.Release()
}
