package kernel

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// qmmTInputs returns random codes, bf16 scales and biases and bf16 x for
// an m×k by n×k quantized matmul.
func qmmTInputs(seed uint64, m, n, k, gs, bits int) (x []float32, wq []uint32, sc, bi []float32) {
	r := newRand(seed)
	wq = make([]uint32, n*WordsPerRow(k, bits))
	for i := range wq {
		wq[i] = r.Uint32()
	}
	sc, bi = make([]float32, n*k/gs), make([]float32, n*k/gs)
	for i := range sc {
		sc[i] = tensor.RoundBF16(float32(r.Float64()*0.02 + 0.001))
		bi[i] = tensor.RoundBF16(float32(-r.Float64() * 0.1))
	}
	return randVec(r, m*k, 1, tensor.RoundBF16), wq, sc, bi
}

// TestQuantizedMatmulTRowsIndependent checks that each output row depends
// on its own row of x only, bit for bit: m rows in one call (the vector
// kernels take x rows four at a time, with a tail of 1 to 3) give the same
// bits as one call per row, for every precision.
func TestQuantizedMatmulTRowsIndependent(t *testing.T) {
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, k := range []int{256, 768} {
				for _, m := range []int{1, 2, 3, 4, 5, 7, 9} {
					for _, acc := range []Acc{AccF32, AccQ8} {
						const n = 70 // more than one tile of weight rows on one worker
						name := fmt.Sprintf("b%dg%d/%s/acc%d", bits, gs, dims(m, n, k), acc)
						t.Run(name, func(t *testing.T) {
							x, wq, sc, bi := qmmTInputs(uint64(m*131+k+bits+gs), m, n, k, gs, bits)
							got := make([]float32, m*n)
							withThreads(2, func() {
								QuantizedMatmulT(got, x, wq, sc, bi, m, n, k, gs, bits, tensor.RoundBF16, acc)
							})
							want := make([]float32, m*n)
							for r := range m {
								QuantizedMatmulT(want[r*n:(r+1)*n], x[r*k:(r+1)*k], wq, sc, bi, 1, n, k, gs, bits, tensor.RoundBF16, acc)
							}
							expectSame(t, got, want, name)
						})
					}
				}
			}
		}
	}
}

// TestQuantizedMatmulTPortable runs the quantized matmul cases with every
// vector kernel switched off, so the portable loops (what runs without
// AVX-512, arm64 included) are held to the reference on this machine too.
func TestQuantizedMatmulTPortable(t *testing.T) {
	f, q, sf, sq := asmF32, asmQ8, simdDotF32, simdDotQ8
	asmF32, asmQ8, simdDotF32, simdDotQ8 = false, false, nil, nil
	defer func() { asmF32, asmQ8, simdDotF32, simdDotQ8 = f, q, sf, sq }()
	for _, bits := range []int{4, 8} {
		for _, m := range []int{1, 5} {
			const n, k, gs = 37, 384, 64
			t.Run(fmt.Sprintf("b%dg%d/%s", bits, gs, dims(m, n, k)), func(t *testing.T) {
				if vecKernel(k, gs, bits, false) != 0 || vecKernel(k, gs, bits, true) != 0 {
					t.Fatal("vector kernels still selected")
				}
				testQMMCase(t, true, QuantizedMatmulT, QuantizedMatmulTRef, m, n, k, gs, bits)
			})
		}
	}
}
