//go:build amd64

package kernel

// The AVX-512 forms of ExpSlice, SwiGLU and RMSNorm's scaling (sdpa_amd64.s,
// written by sdpa_gen.go), bit-identical to the scalar ones, installed
// when the CPU has AVX-512.

// vecSwiGLU writes SwiGLU of n values (a multiple of 16) to dst, every
// stored value rounded to bfloat16 when bf16 is 1, else kept in float32
// (swiglu in swiglu.go).
//
//go:noescape
func vecSwiGLU(dst, gate, up *float32, n, bf16 int)

// vecNormScale writes dst = rnd(w·rnd(x·inv)) for n values (a multiple of
// 16), rnd rounding to bfloat16 when bf16 is 1, else none (rmsNormRow).
//
//go:noescape
func vecNormScale(dst, x, w *float32, inv float32, n, bf16 int)

func init() {
	if avx512, _ := x86Features(); avx512 {
		simdSwiGLU, simdExp, simdNormScale = swigluAsm, expSliceAsm, normScaleAsm
	}
}

// swigluAsm is simdSwiGLU through vecSwiGLU over the longest multiple of
// 16 values; it returns that count (the caller does the rest). The float16
// kind goes to the AVX2 kernel (vec_avx2_amd64.go).
func swigluAsm(dst, gate, up []float32, kind byte) int {
	if kind == 'h' && vaOK {
		return vaSwiGLUSlice(dst, gate, up, kind)
	}
	n := len(gate) &^ 15
	if n == 0 || (kind != 'i' && kind != 'b') {
		return 0
	}
	_, _ = dst[n-1], up[n-1]
	b := 0
	if kind == 'b' {
		b = 1
	}
	vecSwiGLU(&dst[0], &gate[0], &up[0], n, b)
	return n
}

// expSliceAsm is simdExp through sdpaExp over the longest multiple of 16
// values; it returns that count.
func expSliceAsm(dst, src []float32) int {
	n := len(src) &^ 15
	if n == 0 {
		return 0
	}
	_ = dst[n-1]
	sdpaExp(&dst[0], &src[0], n)
	return n
}

// normScaleAsm is simdNormScale through vecNormScale over the longest
// multiple of 16 values; it returns that count. The float16 kind goes to
// the AVX2 kernel (vec_avx2_amd64.go).
func normScaleAsm(dst, x, w []float32, inv float32, kind byte) int {
	if kind == 'h' && vaOK {
		return vaNormScaleSlice(dst, x, w, inv, kind)
	}
	n := len(x) &^ 15
	if n == 0 || (kind != 'i' && kind != 'b') {
		return 0
	}
	_, _ = dst[n-1], w[n-1]
	b := 0
	if kind == 'b' {
		b = 1
	}
	vecNormScale(&dst[0], &x[0], &w[0], inv, n, b)
	return n
}
