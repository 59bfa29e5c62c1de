package kernel

import (
	"fmt"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestQuantizedMatmulTPackedShared holds the shared pass over several
// matrices (one quantization of x, the matrices' panels in one parallel
// pass) to QuantizedMatmulTPacked of each matrix alone, bit for bit: row
// counts from one to past four tiles, matrices whose rows are not a
// multiple of a panel, packed and unpacked weights, both precisions (the
// reference one's shared pass on packed panels, refSharedRun, counted, and
// every reference result held to the unpacked matmul too).
func TestQuantizedMatmulTPackedShared(t *testing.T) {
	const k = 576
	for _, c := range []struct{ gs, bits int }{{32, 4}, {64, 4}, {32, 8}} {
		for _, acc := range []Acc{AccQ8, AccF32} {
			for _, packed := range []bool{true, false} {
				t.Run(fmt.Sprintf("g%d-b%d-acc%d-packed%v", c.gs, c.bits, acc, packed), func(t *testing.T) {
					ns := []int{576, 200, 24}
					mats := make([]SharedMat, len(ns))
					for i, n := range ns {
						_, wq, sc, bi, sb, bb := qmvInputs(uint64(10+i), n, k, c.gs, c.bits)
						scv, biv := avxVecs("bf16", sc, bi, sb, bb)
						mats[i] = SharedMat{WQ: wq, Scales: scv, Biases: biv, N: n}
						if packed {
							mats[i].Slot = NewPackSlot(nil, nil)
						}
					}
					for _, m := range []int{1, 2, 5, 8, 9, 33} {
						x := randVec(newRand(uint64(m)), m*k, 1, tensor.RoundBF16)
						want := make([][]float32, len(mats))
						for i := range mats {
							mats[i].Dst = make([]float32, m*mats[i].N)
							want[i] = make([]float32, m*mats[i].N)
							QuantizedMatmulTPacked(want[i], x, mats[i].WQ, mats[i].Scales, mats[i].Biases, mats[i].Slot, m, mats[i].N, k, c.gs, c.bits, tensor.RoundBF16, acc)
						}
						before := prefCalls.Load()
						QuantizedMatmulTPackedShared(x, mats, m, k, c.gs, c.bits, tensor.RoundBF16, acc)
						// The reference precision's shared pass on packed
						// panels (refSharedRun) runs every matrix once.
						wantRef := acc == AccF32 && packed && refPacks(k, c.gs, c.bits) && m < prefGemmRows()
						if ran := prefCalls.Load() - before; wantRef && ran != int64(len(mats)) || !wantRef && ran != 0 {
							t.Fatalf("%d rows: qprefB4 ran %d matrices, want the shared pass: %v", m, ran, wantRef)
						}
						if acc == AccF32 { // every reference path gives the unpacked bits
							for i := range mats {
								plain := make([]float32, m*mats[i].N)
								QuantizedMatmulTVec(plain, x, mats[i].WQ, mats[i].Scales, mats[i].Biases, m, mats[i].N, k, c.gs, c.bits, tensor.RoundBF16, acc)
								expectSame(t, want[i], plain, fmt.Sprintf("%d rows, matrix %d alone against unpacked", m, i))
							}
						}
						for i := range mats {
							for j, w := range want[i] {
								if g := mats[i].Dst[j]; math.Float32bits(g) != math.Float32bits(w) {
									t.Fatalf("%d rows, matrix %d, output %d: %v, alone %v", m, i, j, g, w)
								}
							}
						}
					}
				})
			}
		}
	}
}
