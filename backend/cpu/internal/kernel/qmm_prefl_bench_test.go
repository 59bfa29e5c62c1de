//go:build amd64

package kernel

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkRefPackedStream runs the reference precision's one-row matmuls
// of a model's layers on two threads, more bytes than the last-level
// caches measured hold, on the original layout ("rows") and on packed
// panels ("packed"), alternating, three rounds: Qwen2.5-0.5B's 24 layers
// (8-bit group 32, bfloat16 scales and biases, 460 MB: qpreflB) and
// twelve of Llama-3.2-1B's (4-bit group 32, symmetric bfloat16 scales, 411
// MB: qprefB4).
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench RefPackedStream -benchtime 10x
func BenchmarkRefPackedStream(b *testing.B) {
	if !refPacks(896, 32, 8) {
		b.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; the reference precision does not pack")
	}
	type mat struct {
		n, k   int
		wq     []uint32
		sc, bi Vec
		slot   *PackSlot
	}
	for _, md := range []struct {
		name             string
		layers, gs, bits int
		vec              string
		shapes           [][2]int // [n, k] of q, k, v, o, gate, up, down
	}{
		{"qwen-0.5b", 24, 32, 8, "bf16", [][2]int{{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}}},
		{"llama-1b", 12, 32, 4, "symmetric bf16", [][2]int{{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048}, {8192, 2048}, {8192, 2048}, {2048, 8192}}},
	} {
		var mats []mat
		kmax := 0
		for l := range md.layers {
			for i, sh := range md.shapes {
				_, wq, sc, bi := qmmTInputs(uint64(100*l+i), 1, sh[0], sh[1], md.gs, md.bits)
				scv, biv := packedTestVecs(md.vec, sc, bi, md.bits)
				mats = append(mats, mat{sh[0], sh[1], wq, scv, biv, NewPackSlot(nil, nil)})
				kmax = max(kmax, sh[0], sh[1])
			}
		}
		x := randVec(newRand(3), kmax, 1, tensor.RoundBF16)
		dst := make([]float32, kmax)
		step := func(packed bool) {
			for _, m := range mats {
				var s *PackSlot
				if packed {
					s = m.slot
				}
				QuantizedMatmulTPacked(dst[:m.n], x[:m.k], m.wq, m.sc, m.bi, s, 1, m.n, m.k, md.gs, md.bits, tensor.RoundBF16, AccF32)
			}
		}
		step(true) // packs
		for range 3 {
			for _, impl := range []string{"rows", "packed"} {
				b.Run(md.name+"/"+impl, func(b *testing.B) {
					withThreads(2, func() {
						for b.Loop() {
							step(impl == "packed")
						}
					})
				})
			}
		}
		for _, m := range mats {
			m.slot.Free()
		}
	}
}
