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
// on its own row of x only, bit for bit, with float32 outputs (no rounding
// to hide a difference), bf16 ones (rounded in the kernels) and f16 ones: m rows in one call (the float32
// GEMM takes x rows eight at a time, the one-row kernels four at a time
// with a tail of 1 to 3; the int8 GEMM eight at a time with zero padding)
// give the same bits as each row alone, in a one-row call (AccF32, whose
// one-row path must match: chunked prefill one token at a time) or in a
// two-row call beside another row (AccQ8 through the GEMM, whose one-row
// path differs by design, see qmm_gemm.go), or in a one-row call (AccQ8 of
// two to four rows, which take the batched one-row kernels, and of any
// number of rows with 4-bit weights in groups of 32, which take the GEMM in
// the one-row order).
func TestQuantizedMatmulTRowsIndependent(t *testing.T) {
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, k := range []int{256, 768, 1536} {
				for _, m := range []int{1, 2, 3, 4, 5, 7, 8, 9, 17} {
					if k == 1536 && m < 8 {
						continue
					}
					for _, acc := range []Acc{AccF32, AccQ8} {
						if acc == AccQ8 && m == 1 {
							continue // the one-row int8 path: TestQ8GemmVsRows
						}
						for _, dt := range testDTypes {
							const n = 70 // more than one tile of weight rows on one worker
							name := fmt.Sprintf("b%dg%d/%s/acc%d/%s", bits, gs, dims(m, n, k), acc, dt.name)
							t.Run(name, func(t *testing.T) {
								x, wq, sc, bi := qmmTInputs(uint64(m*131+k+bits+gs), m, n, k, gs, bits)
								got := make([]float32, m*n)
								withThreads(2, func() {
									QuantizedMatmulT(got, x, wq, sc, bi, m, n, k, gs, bits, dt.round, acc)
								})
								want := make([]float32, m*n)
								other := make([]float32, k)
								for i := range other {
									other[i] = float32(i%7) - 3
								}
								for r := range m {
									xr := x[r*k : (r+1)*k]
									if acc == AccF32 {
										QuantizedMatmulT(want[r*n:(r+1)*n], xr, wq, sc, bi, 1, n, k, gs, bits, dt.round, acc)
										continue
									}
									if m <= qmvBatchMax || gemmDot(k, gs, bits) {
										// the batched one-row kernels or the one-row kernels
										// row by row, or the GEMM in the one-row order
										// (4-bit group 32): each row's one-row bits
										QuantizedMatmulT(want[r*n:(r+1)*n], xr, wq, sc, bi, 1, n, k, gs, bits, dt.round, acc)
										continue
									}
									// the pair through the GEMM, as the m rows
									maxRows := qmvBatchMax
									qmvbOn, qmvBatchMax = false, 1
									pair, y := append(append([]float32(nil), other...), xr...), make([]float32, 2*n)
									QuantizedMatmulT(y, pair, wq, sc, bi, 2, n, k, gs, bits, dt.round, acc)
									qmvbOn, qmvBatchMax = true, maxRows
									copy(want[r*n:(r+1)*n], y[n:])
								}
								expectSame(t, got, want, name)
							})
						}
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
