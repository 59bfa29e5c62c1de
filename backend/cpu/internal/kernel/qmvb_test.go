//go:build amd64

package kernel

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestQMVBatchEqualsOneRow holds the batched int8 kernels (qmvb_amd64.s)
// to the one-row kernel run on each row of x alone, bit for bit (rounded
// and unrounded), for every vector shape, float32, bf16 and f16 scales, 2 to 4
// rows of x (padded to 4), more rows in passes of 4, and row
// counts that do not fill a worker's share; and checks that the batched
// kernels ran (with them off the int8 GEMM gives other bits).
func TestQMVBatchEqualsOneRow(t *testing.T) {
	if !asmQ8 {
		t.Skip("SKIPPED: this CPU lacks AVX512-VNNI; the int8 kernels are not installed")
	}
	type tc struct{ bits, gs, k int }
	var shapes []tc
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, k := range []int{256, 1536} {
				if vecKernel(k, gs, bits, true) == 'a' {
					shapes = append(shapes, tc{bits, gs, k})
				}
			}
		}
	}
	if len(shapes) != 10 {
		t.Fatalf("got %d vector shapes, want 10", len(shapes))
	}
	old := qmvBatchMax
	qmvBatchMax = 16
	defer func() { qmvBatchMax = old }()
	differs := 0
	for _, sh := range shapes {
		for _, m := range []int{2, 3, 4, 5, 8, 11} {
			for _, n := range []int{1, 5, 131} {
				for _, dt := range []string{"f32", "bf16", "f16"} {
					name := fmt.Sprintf("b%dg%d/%s/%s", sh.bits, sh.gs, dims(m, n, sh.k), dt)
					t.Run(name, func(t *testing.T) {
						_, wq, sc, bi, sb, bb := qmvInputs(uint64(m*131+n*31+sh.k+sh.bits*7+sh.gs), n, sh.k, sh.gs, sh.bits)
						r := newRand(uint64(m + n))
						x, xwhole := guarded(m * sh.k)
						copy(x, randVec(r, m*sh.k, 1, tensor.RoundBF16))
						scv, biv := avxVecs(dt, sc, bi, sb, bb)
						for _, round := range []Rounder{tensor.RoundBF16, Identity} {
							want := make([]float32, m*n)
							for i := range m {
								QuantizedMatmulTVec(want[i*n:(i+1)*n], x[i*sh.k:(i+1)*sh.k], wq, scv, biv, 1, n, sh.k, sh.gs, sh.bits, round, AccQ8)
							}
							for _, th := range []int{1, 2, 5} {
								got, whole := guarded(m * n)
								withThreads(th, func() {
									QuantizedMatmulTVec(got, x, wq, scv, biv, m, n, sh.k, sh.gs, sh.bits, round, AccQ8)
								})
								checkGuards(t, whole, name)
								expectSame(t, got, want, fmt.Sprintf("%s threads %d", name, th))
							}
							qmvbOn = false
							gemm := make([]float32, m*n)
							QuantizedMatmulTVec(gemm, x, wq, scv, biv, m, n, sh.k, sh.gs, sh.bits, round, AccQ8)
							qmvbOn = true
							if firstDiff(gemm, want) >= 0 {
								differs++
							}
						}
						checkGuards(t, xwhole, name+" x")
					})
				}
			}
		}
	}
	if differs == 0 {
		t.Error("the int8 GEMM gave the one-row bits in every case: the test cannot tell the batched kernels ran")
	}
}

// BenchmarkQMVBatch compares, on one thread, the batched one-row int8
// kernels with the int8 GEMM for a few rows of x (a decode batch) on a
// MiniCPM5-1B-sized projection (4-bit, group 64, bf16 scales), and the
// one-row kernel once per row: metric "ns/row" is the time per row of x.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench QMVBatch
func BenchmarkQMVBatch(b *testing.B) {
	if !asmQ8 {
		b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
	}
	const n, k, gs, bits = 4096, 1536, 64, 4
	_, wq, _, _, sb, bb := qmvInputs(1, n, k, gs, bits)
	scv, biv := BF16Vec(sb), BF16Vec(bb)
	for _, m := range []int{2, 4, 6, 8} {
		x := randVec(newRand(2), m*k, 1, tensor.RoundBF16)
		dst := make([]float32, m*n)
		for _, path := range []string{"batched", "gemm", "rows"} {
			b.Run(fmt.Sprintf("m%d/%s", m, path), func(b *testing.B) {
				old := qmvBatchMax
				qmvbOn, qmvBatchMax = path == "batched", 8 // m = 6 and 8: two passes of four
				defer func() { qmvbOn, qmvBatchMax = true, old }()
				withThreads(1, func() {
					for b.Loop() {
						if path == "rows" {
							for r := range m {
								QuantizedMatmulTVec(dst[r*n:(r+1)*n], x[r*k:(r+1)*k], wq, scv, biv, 1, n, k, gs, bits, tensor.RoundBF16, AccQ8)
							}
							continue
						}
						QuantizedMatmulTVec(dst, x, wq, scv, biv, m, n, k, gs, bits, tensor.RoundBF16, AccQ8)
					}
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*m), "ns/row")
			})
		}
	}
}
