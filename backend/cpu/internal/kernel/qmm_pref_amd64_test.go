//go:build amd64

package kernel

import (
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkRefPackedQMV measures the reference precision's one-row matmul
// on Llama-3.2-1B's 4-bit group-32 shapes (bfloat16 scales, symmetric as
// Q4_0 conversions are) on the original layout ("rows": qzmmF32B4X and the
// staged scales) and on packed panels ("packed": qprefB4), one thread.
// GB/s-cpu is the bytes each reads (the packed form holds no biases) per
// second of the thread's CPU time; "small" fits in L2.
func BenchmarkRefPackedQMV(b *testing.B) {
	if !refPacks(2048, 32, 4) {
		b.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; the reference precision does not pack")
	}
	for _, sz := range []struct {
		name string
		n, k int
	}{{"small", 512, 1024}, {"llama1b_up", 8192, 2048}, {"llama1b_down", 2048, 8192}} {
		_, wq, sc, bi := qmmTInputs(1, 1, sz.n, sz.k, 32, 4)
		scv, biv := packedTestVecs("symmetric bf16", sc, bi, 4)
		x := randVec(newRand(2), sz.k, 1, tensor.RoundBF16)
		y := make([]float32, sz.n)
		for _, impl := range []string{"rows", "packed"} {
			b.Run(sz.name+"/"+impl, func(b *testing.B) {
				var slot *PackSlot
				bytes := float64(sz.n*sz.k/2 + 2*2*sz.n*sz.k/32)
				if impl == "packed" {
					slot = NewPackSlot(nil, nil)
					bytes = float64(sz.n*sz.k/2 + 2*sz.n*sz.k/32)
				}
				withThreads(1, func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					QuantizedMatmulTPacked(y, x, wq, scv, biv, slot, 1, sz.n, sz.k, 32, 4, tensor.RoundBF16, AccF32)
					t0 := threadCPU()
					for b.Loop() {
						QuantizedMatmulTPacked(y, x, wq, scv, biv, slot, 1, sz.n, sz.k, 32, 4, tensor.RoundBF16, AccF32)
					}
					if sec := (threadCPU() - t0).Seconds(); sec > 0 {
						b.ReportMetric(bytes*float64(b.N)/sec/1e9, "GB/s-cpu")
						b.ReportMetric(float64(sz.n*sz.k)*float64(b.N)/sec/1e9, "Gcodes/s-cpu")
					}
				})
				slot.Free()
			})
		}
	}
}
