package kernel

import (
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkQMVStream runs the matvecs of one decode step of a
// SmolLM2-135M-shaped model (30 layers of q, k, v, o, gate, up and down at
// width 576, 4-bit group 32 with float16 scales: 66 MB of weights, more
// than the last-level cache) in graph order, on 1 and 2 threads, and
// reports the weight bytes read per second: what decode can reach when
// nothing but the matmuls runs.
func BenchmarkQMVStream(b *testing.B) {
	needAVX2(b)
	const layers, gs, bits = 30, 32, 4
	shapes := [][2]int{{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}}
	type mat struct {
		n, k   int
		wq     []uint32
		sc, bi Vec
	}
	var mats []mat
	var bytes int64
	for l := range layers {
		for i, sh := range shapes {
			n, k := sh[0], sh[1]
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(100*l+i), n, k, gs, bits)
			scv, biv := avxVecs("f16", sc, bi, sb, bb)
			mats = append(mats, mat{n, k, wq, scv, biv})
			bytes += int64(4*len(wq) + 4*len(sc))
		}
	}
	x := make([]float32, 1536)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	dst := make([]float32, 1536)
	for _, acc := range []Acc{AccF32, AccQ8} {
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("acc%d/threads%d", acc, th), func(b *testing.B) {
				b.SetBytes(bytes)
				withThreads(th, func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					t0 := threadCPU()
					for b.Loop() {
						for _, m := range mats {
							QuantizedMatmulTVec(dst, x[:m.k], m.wq, m.sc, m.bi, 1, m.n, m.k, gs, bits, Identity, acc)
						}
					}
					if sec := (threadCPU() - t0).Seconds(); th == 1 && sec > 0 {
						b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s-cpu")
					}
				})
			})
		}
	}
}
