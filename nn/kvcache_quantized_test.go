package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
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

// composedOnly hides the CPU backend's fused quantized attention, so that
// nn.QuantizedSDPA composes mlx_lm's ops (quantized matmuls, a materialised
// score matrix, a precise softmax) on it.
type composedOnly struct{ backend.Backend }

// TestQuantizedSDPAFused holds the CPU backend's fused quantized attention
// (blocked online softmax over keys and values expanded a block at a time)
// to the composition of mlx_lm's quantized_scaled_dot_product_attention on
// the same backend, both measured against a float64 attention over the
// same values (q·scale rounded to the dtype, as both paths take it; keys
// and values as float32(s·c)+b). The fused path must be no less accurate
// than the composition, plus one ulp of the output dtype at the output's
// scale; in float32, where both are at summation-order noise, it may
// instead reach the kernel's written bound (kernel checkSDPABound's
// V·u·(8(d+4)A + 4(s + s/32 + 8)), u = 2^-24, A the largest Σ_t|q_t·k_jt|,
// V the largest |v|). Decode across the 256-key chunks, prefill with the
// causal mask, and a Bool array mask; GQA 4 query heads on 2 KV heads;
// 4 and 8 bits.
func TestQuantizedSDPAFused(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, bits := range []int{4, 8} {
			for _, sh := range []struct {
				name string
				L, S int
				mask string
			}{{"decode", 1, 600, "none"}, {"prefill", 40, 300, "causal"}, {"array", 5, 70, "array"}} {
				t.Run(fmt.Sprintf("%v/b%d/%s", dt, bits, sh.name), func(t *testing.T) {
					const H, Hk, D = 4, 2, 64
					r := rand.New(rand.NewPCG(uint64(bits), uint64(sh.S)))
					q := b.AsType(randArray(b, r, 1, H, sh.L, D), dt)
					qk := b.Quantize(b.AsType(randArray(b, r, 1, Hk, sh.S, D), dt), 64, bits)
					qv := b.Quantize(b.AsType(randArray(b, r, 1, Hk, sh.S, D), dt), 32, bits)
					var mask backend.Mask = backend.NoMask{}
					var vis []bool // [L, S]
					switch sh.mask {
					case "causal":
						mask = backend.CausalMask{}
					case "array":
						vis = make([]bool, sh.L*sh.S)
						arr := make([]int32, len(vis))
						for i := range arr {
							if i%sh.S == 0 || r.IntN(3) > 0 {
								arr[i], vis[i] = 1, true
							}
						}
						mask = backend.ArrayMask{A: b.FromHost(tensor.FromInt32(tensor.Shape{sh.L, sh.S}, arr).Convert(tensor.Bool))}
					}
					f32 := func(a backend.Array) []float32 {
						h, err := b.ToHost(b.AsType(a, tensor.F32))
						if err != nil {
							t.Fatal(err)
						}
						return h.Float32s()
					}
					fused := f32(nn.QuantizedSDPA(b, q, qk, qv, mask))
					comp := f32(nn.QuantizedSDPA(composedOnly{b}, q, qk, qv, mask))
					// The reference's inputs: q·scale rounded to dt, and the
					// values of the codes in float32.
					deq := func(x backend.QuantizedArray) []float32 {
						x.Scales, x.Biases = b.AsType(x.Scales, tensor.F32), b.AsType(x.Biases, tensor.F32)
						return f32(b.Dequantize(x))
					}
					qs := f32(b.Binary(backend.Multiply, q, b.Full(tensor.Shape{}, math.Pow(D, -0.5), dt)))
					ks, vs := deq(qk), deq(qv)
					var errF, errC, maxRef, bound float64
					for h := range H {
						kh := h / (H / Hk)
						for i := range sh.L {
							sc := make([]float64, sh.S)
							m, a, vmax := math.Inf(-1), 0.0, 0.0
							for j := range sh.S {
								if (sh.mask == "causal" && j > i+sh.S-sh.L) || (vis != nil && !vis[i*sh.S+j]) {
									sc[j] = math.Inf(-1)
									continue
								}
								var dot, abs float64
								for t := range D {
									x := float64(qs[(h*sh.L+i)*D+t]) * float64(ks[(kh*sh.S+j)*D+t])
									dot, abs = dot+x, abs+math.Abs(x)
								}
								sc[j], m, a = dot, max(m, dot), max(a, abs)
								for t := range D {
									vmax = max(vmax, math.Abs(float64(vs[(kh*sh.S+j)*D+t])))
								}
							}
							var sum float64
							out := make([]float64, D)
							for j, s := range sc {
								if math.IsInf(s, -1) {
									continue
								}
								e := math.Exp(s - m)
								sum += e
								for t := range D {
									out[t] += e * float64(vs[(kh*sh.S+j)*D+t])
								}
							}
							u := math.Ldexp(1, -24)
							bound = max(bound, vmax*u*(8*float64(D+4)*a+4*float64(sh.S+sh.S/32+8)))
							for t := range D {
								ref, o := out[t]/sum, (h*sh.L+i)*D+t
								maxRef = max(maxRef, math.Abs(ref))
								errF = max(errF, math.Abs(float64(fused[o])-ref))
								errC = max(errC, math.Abs(float64(comp[o])-ref))
							}
						}
					}
					ulp := maxRef * math.Ldexp(1, -23)
					allowed := errC + ulp
					if dt == tensor.BF16 {
						allowed = errC + maxRef*math.Ldexp(1, -7)
					} else {
						allowed = max(allowed, bound+ulp)
					}
					if !(errF <= allowed) {
						t.Errorf("fused error %.3g against float64, want <= %.3g (composition's %.3g)", errF, allowed, errC)
					}
					t.Logf("error against float64: fused %.3g, composed %.3g (output scale %.3g)", errF, errC, maxRef)
				})
			}
		}
	}
}

// TestAttentionNoScoreMatrix: a prefill chunk's attention over a long
// cache allocates far less than one head's [L, S] float32 score matrix on
// the CPU backend, for the full cache (ScaledDotProductAttention with the
// causal mask) and the quantized one (the fused QuantizedSDPA), where
// mlx_lm's composition (run on the same backend through composedOnly, as a
// check that the measure sees a materialised matrix) allocates at least
// the scores of every head.
func TestAttentionNoScoreMatrix(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const H, Hk, L, S, D = 4, 1, 64, 8192, 64
	r := rand.New(rand.NewPCG(5, 6))
	q := b.AsType(randArray(b, r, 1, H, L, D), tensor.BF16)
	k := b.AsType(randArray(b, r, 1, Hk, S, D), tensor.BF16)
	v := b.AsType(randArray(b, r, 1, Hk, S, D), tensor.BF16)
	qk, qv := b.Quantize(k, 64, 8), b.Quantize(v, 64, 8)
	// A collection empties the sync.Pools that hold the kernels' scratch, so
	// a run after one allocates that scratch again: no collection while the
	// test measures, and the least of three runs.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	allocated := func(fn func() backend.Array) uint64 {
		least := uint64(math.MaxUint64)
		for range 3 {
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			out := fn()
			runtime.ReadMemStats(&m1)
			b.Release(out)
			least = min(least, m1.TotalAlloc-m0.TotalAlloc)
		}
		return least
	}
	head := uint64(L * S * 4)
	for _, c := range []struct {
		name string
		fn   func() backend.Array
	}{
		{"full", func() backend.Array { return b.ScaledDotProductAttention(q, k, v, 0.125, backend.CausalMask{}) }},
		{"quantized", func() backend.Array { return nn.QuantizedSDPA(b, q, qk, qv, backend.CausalMask{}) }},
	} {
		c.fn() // warm the backend's pools
		if got := allocated(c.fn); got >= head/4 {
			t.Errorf("%s: allocated %d bytes, want below a quarter of one head's %d×%d float32 scores (%d)", c.name, got, L, S, head/4)
		} else {
			t.Logf("%s: allocated %d bytes (one head's scores: %d)", c.name, got, head)
		}
	}
	if got := allocated(func() backend.Array { return nn.QuantizedSDPA(composedOnly{b}, q, qk, qv, backend.CausalMask{}) }); got < H*head {
		t.Errorf("composition: allocated %d bytes, want at least the %d of its score matrix (the measure misses it)", got, H*head)
	}
}
