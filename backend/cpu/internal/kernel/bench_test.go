package kernel

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkQuantizedMatmulT sweeps MiniCPM5-1B projection sizes (4-bit, group 64).
func BenchmarkQuantizedMatmulT(b *testing.B) {
	for _, sz := range []struct{ m, n, k int }{{1, 1536, 1536}, {1, 4608, 1536}, {1, 1536, 4608}, {32, 4608, 1536}} {
		const gs, bits = 64, 4
		b.Run(fmt.Sprintf("b4g64/%s", dims(sz.m, sz.n, sz.k)), func(b *testing.B) {
			r := newRand(1)
			w := randVec(r, sz.n*sz.k, 0.05, tensor.RoundBF16)
			wq := make([]uint32, sz.n*WordsPerRow(sz.k, bits))
			sc, bi := make([]float32, sz.n*sz.k/gs), make([]float32, sz.n*sz.k/gs)
			Quantize(wq, sc, bi, w, sz.n, sz.k, gs, bits, tensor.RoundBF16)
			x := randVec(r, sz.m*sz.k, 1, tensor.RoundBF16)
			y := make([]float32, sz.m*sz.n)
			b.SetBytes(int64(len(wq) * 4))
			for b.Loop() {
				QuantizedMatmulT(y, x, wq, sc, bi, sz.m, sz.n, sz.k, gs, bits, tensor.RoundBF16, AccF32)
			}
		})
	}
}

// BenchmarkSDPA sweeps decode attention over cache lengths (16 query heads, 2 KV heads, head dim 128).
func BenchmarkSDPA(b *testing.B) {
	for _, s := range []int{256, 2048} {
		b.Run(fmt.Sprintf("decode/s%d", s), func(b *testing.B) {
			const h, hk, d = 16, 2, 128
			r := newRand(2)
			q, k, v := randVec(r, h*d, 1, Identity), randVec(r, hk*s*d, 1, Identity), randVec(r, hk*s*d, 1, Identity)
			out := make([]float32, h*d)
			for b.Loop() {
				SDPA(out, q, k, v, 1, h, hk, 1, s, d, d, 0.088, Mask{}, tensor.RoundBF16, AccF32)
			}
		})
	}
}
