//go:build amd64

package kernel

// The AVX-512 forms of ExpSlice and SwiGLU (sdpa_amd64.s,
// written by sdpa_gen.go), bit-identical to the scalar ones, installed
// when the CPU has AVX-512.

// vecSwiGLU writes SwiGLU of n values (a multiple of 16) to dst, every
// stored value rounded to bfloat16 when bf16 is 1, else kept in float32
// (swiglu in swiglu.go).
//
//go:noescape
func vecSwiGLU(dst, gate, up *float32, n, bf16 int)

func init() {
	if avx512, _ := x86Features(); avx512 {
		simdSwiGLU, simdExp = swigluAsm, expSliceAsm
	}
}

func swigluAsm(dst, gate, up []float32, bf16 bool) int {
	n := len(gate) &^ 15
	if n == 0 {
		return 0
	}
	_, _ = dst[n-1], up[n-1]
	b := 0
	if bf16 {
		b = 1
	}
	vecSwiGLU(&dst[0], &gate[0], &up[0], n, b)
	return n
}

func expSliceAsm(dst, src []float32) int {
	n := len(src) &^ 15
	if n == 0 {
		return 0
	}
	_ = dst[n-1]
	sdpaExp(&dst[0], &src[0], n)
	return n
}
