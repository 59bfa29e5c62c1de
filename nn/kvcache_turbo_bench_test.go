package nn

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// hostOnly hides the CPU backend's TurboAttention (the TurboQuant cache
// then decodes its window on the host before the SDPA, the path before the
// in-place read).
type hostOnly struct{ backend.Backend }

// BenchmarkDecodeAttention is one decode step's attention (append a token,
// attend to the window, trim it back) of one layer of the synthetic
// MiniCPM5-1B (16 query heads, 2 KV heads, head_dim 128, bfloat16) at 1k,
// 4k and 16k cached tokens, per precision of the CPU backend (reference and
// fast) and cache kind: the full bf16 cache, the 8-bit g64 quantized cache
// (read in place by QuantizedScaledDotProductAttention), TurboQuant k8v3
// deferred read in place (TurboScaledDotProductAttention) and, for
// comparison, the same cache decoding its window on the host first.
// Each step runs in a scope of its own, as in generate. cpu-ns/op is the
// process's CPU time (all threads) per step, steadier than wall time on a
// shared machine.
func BenchmarkDecodeAttention(b *testing.B) {
	const H, Hk, D = 16, 2, 128
	for _, prec := range []string{"reference", "fast"} {
		be, err := cpu.New(backend.Options{Precision: prec})
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, 2))
		rnd := func(heads, L int) backend.Array {
			v := make([]float32, heads*L*D)
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
			return be.FromHost(tensor.FromFloat32(tensor.Shape{1, heads, L, D}, v).Convert(tensor.BF16))
		}
		for _, S := range []int{1024, 4096, 16384} {
			k, v := rnd(Hk, S-1), rnd(Hk, S-1)
			for _, kind := range []string{"full", "quantized8", "turbo", "turbo-host"} {
				b.Run(fmt.Sprintf("prec=%s/kind=%s/S=%d", prec, kind, S), func(b *testing.B) {
					var cache KVCache
					switch kind {
					case "full":
						c := NewFullKVCache(be)
						ks, vs := c.Update(k, v)
						be.Release(ks, vs)
						cache = c
					case "quantized8":
						c, err := NewQuantizedKVCache(be, 8, 64, 0)
						if err != nil {
							b.Fatal(err)
						}
						c.UpdateQuantized(rnd(Hk, 1), rnd(Hk, 1)) // offset 1 > start 0: the next update quantizes
						c.Trim(1)
						_, _, qk, qv, _ := c.UpdateQuantized(k, v)
						be.Release(qk.W, qk.Scales, qk.Biases, qv.W, qv.Scales, qv.Biases)
						if !c.Quantized() {
							b.Fatal("the quantized cache did not quantize")
						}
						cache = c
					default:
						var tb backend.Backend = be
						if kind == "turbo-host" {
							tb = hostOnly{be}
						}
						c, err := NewTurboKVCache(tb, turboquant.Default, true, true)
						if err != nil {
							b.Fatal(err)
						}
						c.append(k, v)
						cache = c
					}
					defer cache.Release()
					q, k1, v1 := rnd(H, 1), rnd(Hk, 1), rnd(Hk, 1)
					b.ResetTimer()
					t0 := processCPU()
					for b.Loop() {
						// One scope per step, as generate's: the views the
						// cache hands out are released before the next
						// step's in-place update.
						sc := be.Scope()
						o := attendCache(be, cache, q, k1, v1, 1/float32(11.3137), backend.NoMask{})
						be.Release(o)
						cache.Trim(1)
						sc.Keep(cache.State()...)
						sc.Close()
					}
					b.ReportMetric(float64(processCPU()-t0)/float64(b.N), "cpu-ns/op")
				})
			}
			be.Release(k, v)
		}
		be.Close()
	}
}

// processCPU is the process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
