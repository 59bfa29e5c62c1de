package kernel

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// benchQMM is one quantized-matmul benchmark shape.
type benchQMM struct {
	name          string
	m, n, k, bits int
}

// BenchmarkQuantizedMatmulT runs MiniCPM5-1B's projection shapes (group 64,
// bf16 scales read in place as the backend passes them) in each mode;
// SetBytes is the packed weight plus scale and bias bytes, so MB/s is the
// effective weight bandwidth. The codes and scales are random (no
// quantization step, which would dominate the setup at lm_head size).
func BenchmarkQuantizedMatmulT(b *testing.B) {
	shapes := []benchQMM{
		{"qkv_up_b4", 1, 4608, 1536, 4},
		{"gate_b8", 1, 4608, 1536, 8},
		{"down_b4", 1, 1536, 4608, 4},
		{"lm_head_b8", 1, 130560, 1536, 8},
		{"prefill_up_b4", 512, 4608, 1536, 4},
		{"prefill_gate_b8", 512, 4608, 1536, 8},
	}
	modes := []struct {
		name  string
		acc   Acc
		noAsm bool // the archsimd or portable kernels instead of the assembly ones
	}{{"f32", AccF32, false}, {"q8", AccQ8, false}, {"f32-noasm", AccF32, true}, {"q8-noasm", AccQ8, true}}
	for _, sz := range shapes {
		const gs = 64
		r := newRand(1)
		wq := make([]uint32, sz.n*WordsPerRow(sz.k, sz.bits))
		for i := range wq {
			wq[i] = r.Uint32()
		}
		ng := sz.n * sz.k / gs
		sc, bi := make([]uint16, ng), make([]uint16, ng)
		for i := range sc {
			sc[i] = tensor.Float32ToBF16(float32(r.Float64()*0.01 + 0.001))
			bi[i] = tensor.Float32ToBF16(float32(-r.Float64() * 0.05))
		}
		x := randVec(r, sz.m*sz.k, 1, tensor.RoundBF16)
		y := make([]float32, sz.m*sz.n)
		for _, mode := range modes {
			b.Run(fmt.Sprintf("%s/%s/%s", sz.name, dims(sz.m, sz.n, sz.k), mode.name), func(b *testing.B) {
				b.SetBytes(int64(len(wq)*4 + 4*ng))
				if mode.noAsm {
					f, q := asmF32, asmQ8
					asmF32, asmQ8 = false, false
					defer func() { asmF32, asmQ8 = f, q }()
				}
				t0 := cpuTime()
				for b.Loop() {
					QuantizedMatmulTVec(y, x, wq, BF16Vec(sc), BF16Vec(bi), sz.m, sz.n, sz.k, gs, sz.bits, tensor.RoundBF16, mode.acc)
				}
				reportCPU(b, t0)
			})
		}
	}
}

// cpuTime is the process's user+system CPU time. On a shared machine it is
// a steadier measure than wall time: cpu-ns/op is the CPU time of all
// threads per op.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, t0 time.Duration) {
	b.ReportMetric(float64(cpuTime()-t0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkSDPA sweeps decode attention over cache lengths (16 query heads, 2 KV heads, head dim 128).
func BenchmarkSDPA(b *testing.B) {
	for _, s := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("decode/s%d", s), func(b *testing.B) {
			const h, hk, d = 16, 2, 128
			r := newRand(2)
			q, k, v := randVec(r, h*d, 1, Identity), randVec(r, hk*s*d, 1, Identity), randVec(r, hk*s*d, 1, Identity)
			out := make([]float32, h*d)
			t0 := cpuTime()
			for b.Loop() {
				SDPA(out, q, k, v, 1, h, hk, 1, s, d, d, 0.088, Mask{}, tensor.RoundBF16, AccF32)
			}
			reportCPU(b, t0)
		})
	}
}
