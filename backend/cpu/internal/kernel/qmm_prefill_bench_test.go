package kernel

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkQMMPrefill runs the prefill shapes of a MiniCPM5-1B block (group
// 64, bf16 scales and output) at several prompt lengths, in both
// precisions. GMAC/s is the multiply-accumulate rate per CPU-second
// (cpu-ns/op), the kernel's speed independent of the machine's load.
func BenchmarkQMMPrefill(b *testing.B) {
	shapes := []struct {
		name       string
		n, k, bits int
	}{
		{"up_b4", 4608, 1536, 4},
		{"gate_b8", 4608, 1536, 8},
		{"down_b4", 1536, 4608, 4},
		{"o_b8", 1536, 2048, 8},
		{"kv_b4", 256, 1536, 4},
	}
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
		for _, m := range []int{16, 128, 512} {
			x := randVec(r, m*sz.k, 1, tensor.RoundBF16)
			y := make([]float32, m*sz.n)
			for _, acc := range []Acc{AccF32, AccQ8} {
				b.Run(fmt.Sprintf("%s/%s/acc%d", sz.name, dims(m, sz.n, sz.k), acc), func(b *testing.B) {
					t0 := cpuTime()
					for b.Loop() {
						QuantizedMatmulTVec(y, x, wq, BF16Vec(sc), BF16Vec(bi), m, sz.n, sz.k, gs, sz.bits, tensor.RoundBF16, acc)
					}
					cpu := float64(cpuTime()-t0) / float64(b.N)
					b.ReportMetric(cpu, "cpu-ns/op")
					b.ReportMetric(float64(m*sz.n*sz.k)/cpu, "GMAC/cpu-s")
				})
			}
		}
	}
}
