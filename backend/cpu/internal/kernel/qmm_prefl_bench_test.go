//go:build amd64

package kernel

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkRefLaneStream runs the reference precision's one-row matmuls
// of Qwen2.5-0.5B's 24 layers (8-bit group 32, bfloat16 scales and
// biases: 460 MB, more than the last-level caches measured) on two
// threads: on the original layout ("rows": the vector kernels of
// qmv_amd64.s) and on packed panels at several prefetch distances of the
// qpreflB kernels ("pf<bytes>", preflPF), alternating, three rounds.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench RefLaneStream -benchtime 10x
func BenchmarkRefLaneStream(b *testing.B) {
	if !refPacks(896, 32, 8) {
		b.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; the reference precision does not pack")
	}
	type mat struct {
		n, k   int
		wq     []uint32
		sc, bi Vec
		slot   *PackSlot
	}
	var mats []mat
	for l := range 24 {
		for i, sh := range [][2]int{{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}} {
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(100*l+i), sh[0], sh[1], 32, 8)
			scv, biv := avxVecs("bf16", sc, bi, sb, bb)
			mats = append(mats, mat{sh[0], sh[1], wq, scv, biv, NewPackSlot(nil, nil)})
		}
	}
	defer func() {
		for _, m := range mats {
			m.slot.Free()
		}
	}()
	x := randVec(newRand(3), 4864, 1, tensor.RoundBF16)
	dst := make([]float32, 4864)
	step := func(packed bool) {
		for _, m := range mats {
			var s *PackSlot
			if packed {
				s = m.slot
			}
			QuantizedMatmulTPacked(dst[:m.n], x[:m.k], m.wq, m.sc, m.bi, s, 1, m.n, m.k, 32, 8, tensor.RoundBF16, AccF32)
		}
	}
	step(true) // packs
	defer func(v uintptr) { preflPF = v }(preflPF)
	for range 3 {
		for _, pf := range []int{0, 1024, 4096, 32768} {
			name := fmt.Sprintf("pf%d", pf)
			if pf == 0 {
				name = "rows"
			}
			b.Run(name, func(b *testing.B) {
				preflPF = uintptr(pf)
				withThreads(2, func() {
					for b.Loop() {
						step(pf > 0)
					}
				})
			})
		}
	}
}
