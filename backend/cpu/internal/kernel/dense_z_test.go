//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"runtime"
	"testing"
)

// TestDenseRefZ holds the reference dense matmul with the AVX-512 kernels
// (denseRefZ1..8) to DenseMatmulTRef (the in-order loop) bit for bit, for
// every dtype and every count of rows of x from 3 (below, 3..8: each
// kernel as the last call of a block; 9..17 past one call; 70 past a block
// of denseRB), with the kernels off too, inside NaN guards.
func TestDenseRefZ(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: the CPU has no AVX-512 F/BW/DQ/VL; the AVX-512 dense kernels are not run")
	}
	for _, dt := range []string{"f32", "bf16", "f16"} {
		w0, _ := denseWeights(t, dt, 1, 1, 1)
		if !denseCovers(w0) {
			t.Logf("%s: the vector kernels do not cover it on this CPU", dt)
			continue
		}
		for _, m := range []int{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 70} {
			n, k := 33, 300
			t.Run(fmt.Sprintf("%s/m%d", dt, m), func(t *testing.T) {
				w, _ := denseWeights(t, dt, uint64(m), n, k)
				x := randVec(newRand(uint64(200+m)), m*k, 1, Identity)
				want := make([]float32, m*n)
				DenseMatmulTRef(want, x, w, m, n, k)
				for _, z := range []bool{true, false} {
					denseZOn = z
					got := runDense(t, x, w, m, n, k, false, true)
					denseZOn = true
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("AVX-512 %v: output %d (row %d, col %d) = %v, want %v", z, i, i/n, i%n, got[i], want[i])
						}
					}
				}
			})
		}
	}
}

// BenchmarkDenseRefZ measures the reference dense matmul with the AVX-512
// kernels ("zmm") against the AVX2 ones ("ymm") on SmolLM2-360M's prefill
// shapes (float16 weights, 128 rows of x, one thread). GMAC/s-cpu is
// multiply-accumulates per second of the thread's own CPU time.
func BenchmarkDenseRefZ(b *testing.B) {
	if !asmF32 {
		b.Skip("SKIPPED: no AVX-512")
	}
	for _, sz := range []struct {
		name string
		n, k int
	}{{"smollm2_360m_up", 2560, 960}, {"smollm2_360m_down", 960, 2560}} {
		m := 128
		w, _ := denseWeights(b, "f16", 1, sz.n, sz.k)
		x := randVec(newRand(2), m*sz.k, 1, Identity)
		y := make([]float32, m*sz.n)
		for _, impl := range []string{"ymm", "zmm"} {
			b.Run(fmt.Sprintf("%s/%s/%s", sz.name, dims(m, sz.n, sz.k), impl), func(b *testing.B) {
				denseZOn = impl == "zmm"
				defer func() { denseZOn = true }()
				withThreads(1, func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					DenseMatmulT(y, x, w, m, sz.n, sz.k, false)
					t0 := threadCPU()
					for b.Loop() {
						DenseMatmulT(y, x, w, m, sz.n, sz.k, false)
					}
					if sec := (threadCPU() - t0).Seconds(); sec > 0 {
						b.ReportMetric(float64(m*sz.n*sz.k)*float64(b.N)/sec/1e9, "GMAC/s-cpu")
					}
				})
			})
		}
	}
}
