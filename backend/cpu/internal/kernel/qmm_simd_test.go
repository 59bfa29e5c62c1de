//go:build goexperiment.simd && amd64

package kernel

import (
	"fmt"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestQMMAsmEqualsArchsimd holds the assembly kernels (qmm_amd64.s) to the
// archsimd ones (simd_amd64.go) bit for bit: they perform the same lane
// operations in the same order.
func TestQMMAsmEqualsArchsimd(t *testing.T) {
	if !asmF32 || simdDotF32 == nil {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the assembly and archsimd kernels are not installed")
	}
	// The int8 GEMM against its archsimd twin for every m >= 2 (the batched
	// one-row kernels, qmvb_amd64.s, have no archsimd twin: TestQMVBatchEqualsOneRow).
	qmvbOn = false
	defer func() { qmvbOn = true }()
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			if bits == 4 && gs == 32 {
				continue // no vector kernel: a group spans 4 lanes
			}
			for _, m := range []int{1, 3, 4, 6, 8, 9, 17} {
				for _, acc := range []Acc{AccF32, AccQ8} {
					const n, k = 37, 1536
					name := fmt.Sprintf("b%dg%d/%s/acc%d", bits, gs, dims(m, n, k), acc)
					t.Run(name, func(t *testing.T) {
						if acc == AccQ8 && !asmQ8 {
							t.Skip("SKIPPED: this CPU lacks AVX512-VNNI; the int8 assembly kernel is not installed")
						}
						x, wq, sc, bi := qmmTInputs(uint64(m*7+bits+gs), m, n, k, gs, bits)
						got, whole := guarded(m * n)
						QuantizedMatmulT(got, x, wq, sc, bi, m, n, k, gs, bits, tensor.RoundBF16, acc)
						checkGuards(t, whole, name)
						want := make([]float32, m*n)
						f, q := asmF32, asmQ8
						asmF32, asmQ8 = false, false
						QuantizedMatmulT(want, x, wq, sc, bi, m, n, k, gs, bits, tensor.RoundBF16, acc)
						asmF32, asmQ8 = f, q
						expectSame(t, got, want, name)
					})
				}
			}
		}
	}
}

// TestVecOpsAsmEqualsArchsimd holds the assembly dot and axpy (the vector
// helpers of builds without GOEXPERIMENT=simd) to the archsimd ones bit for
// bit, over lengths that exercise every loop and tail.
func TestVecOpsAsmEqualsArchsimd(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the assembly helpers are not installed")
	}
	r := newRand(9)
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 100, 1000} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			a, b := randVec(r, n, 1, Identity), randVec(r, n+3, 1, Identity)
			if got, want := dotAsm(a, b), dotAVX512(a, b); math.Float32bits(got) != math.Float32bits(want) {
				t.Errorf("dot: got %v, want %v (n %d)", got, want, n)
			}
			y1, y2 := randVec(r, n, 1, Identity), make([]float32, n)
			copy(y2, y1)
			axpyAsm(y1, 0.37, b)
			axpyAVX512(y2, 0.37, b)
			expectSame(t, y1, y2, fmt.Sprintf("axpy n%d", n))
		})
	}
}
