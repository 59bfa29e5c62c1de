//go:build amd64

package kernel

import (
	"fmt"
	"testing"
)

// TestAVX2RowsAllocs: a matvec of the AVX2 path allocates the same few
// objects whatever the number of weight rows (the parallel job, not one per
// chunk or tile run: decode makes some 200 calls a token).
func TestAVX2RowsAllocs(t *testing.T) {
	needAVX2(t)
	for _, acc := range []Acc{AccF32, AccQ8} {
		t.Run(fmt.Sprintf("acc%d", acc), func(t *testing.T) {
			if vecKernel(576, 32, 4, acc == AccQ8) != 0 {
				t.Skip("the AVX-512 kernels take 4-bit group 32 on this CPU: this test is of the AVX2 path")
			}
			var counts []float64
			for _, n := range []int{576, 1536, 4096} {
				x, wq, sc, bi, sb, bb := qmvInputs(1, n, 576, 32, 4)
				scv, biv := avxVecs("f16", sc, bi, sb, bb)
				dst := make([]float32, n)
				withThreads(2, func() {
					counts = append(counts, testing.AllocsPerRun(20, func() {
						QuantizedMatmulTVec(dst, x, wq, scv, biv, 1, n, 576, 32, 4, Identity, acc)
					}))
				})
			}
			for i, c := range counts {
				if c != counts[0] {
					t.Errorf("got %v allocations per call for n = 576, 1536, 4096 (index %d differs): want the same for every n", counts, i)
				}
			}
		})
	}
}
