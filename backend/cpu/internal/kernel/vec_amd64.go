//go:build amd64

package kernel

import "math"

// The AVX-512 forms of ExpSlice, SwiGLU and RMSNorm's scaling (sdpa_amd64.s,
// written by sdpa_gen.go) in float32, bfloat16 and float16 rounding,
// bit-identical to the scalar ones, installed when the CPU has AVX-512
// (vaKind, vec_avx2_amd64.go, maps the rounding kinds to the argument).

// vecSwiGLU writes SwiGLU of n values (a multiple of 16) to dst, every
// stored value rounded to the kind: 0 float32, 1 bfloat16, 2 float16
// (swiglu in swiglu.go).
//
//go:noescape
func vecSwiGLU(dst, gate, up *float32, n, kind int)

// vecNormScale writes dst = rnd(w·rnd(x·inv)) for n values (a multiple of
// 16), rnd rounding to the kind: 0 none, 1 bfloat16, 2 float16
// (rmsNormRow).
//
//go:noescape
func vecNormScale(dst, x, w *float32, inv float32, n, kind int)

// vecRoPE rotates n pairs (a multiple of 16) of a row whose halves are
// half values apart: dst[i] = x1·c − x2·s, dst[half+i] = x1·s + x2·c for
// (x1, x2) = (x[i], x[half+i]) and (c, s) = (cs[i], sn[i]), each product
// rounded to float32 before the sum (ropeRow); dst may be x.
//
//go:noescape
func vecRoPE(dst, x, cs, sn *float32, half, n int)

func init() {
	if avx512, _ := x86Features(); avx512 {
		simdSwiGLU, simdExp, simdNormScale = swigluAsm, expSliceAsm, normScaleAsm
		simdRoPE = ropeAsm
		simdMax, simdExpSum, simdExpSum4 = maxAsm, expSumAsm, expSum4Asm
	}
}

// vecMax returns the largest of n values (a multiple of 16), NaN if any is
// one (−Inf for none).
//
//go:noescape
func vecMax(x *float32, n int) float32

// vecExpSum returns Σ ExpMLX(x_i − m) over n values (a multiple of 16),
// summed one by one in order of i.
//
//go:noescape
func vecExpSum(x *float32, m float32, n int) float32

// vecExpSum4 is vecExpSum of four rows of n values at once (row r at xr,
// its maximum m[r], its sum to s[r]).
//
//go:noescape
func vecExpSum4(x0, x1, x2, x3, m *float32, n int, s *float32)

// maxAsm is simdMax through vecMax over the longest multiple of 16 values.
func maxAsm(v []float32) (float32, int) {
	n := len(v) &^ 15
	if n == 0 {
		return float32(math.Inf(-1)), 0
	}
	return vecMax(&v[0], n), n
}

// expSumAsm is simdExpSum through vecExpSum over the longest multiple of
// 16 values.
func expSumAsm(v []float32, m float32) (float32, int) {
	n := len(v) &^ 15
	if n == 0 {
		return 0, 0
	}
	return vecExpSum(&v[0], m, n), n
}

// ropeAsm is simdRoPE through vecRoPE over the longest multiple of 16
// pairs; it returns that count.
func ropeAsm(dst, x, cs, sn []float32, half int) int {
	n := half &^ 15
	if n == 0 {
		return 0
	}
	_, _, _, _ = dst[half+n-1], x[half+n-1], cs[n-1], sn[n-1]
	vecRoPE(&dst[0], &x[0], &cs[0], &sn[0], half, n)
	return n
}

// swigluAsm is simdSwiGLU through vecSwiGLU over the longest multiple of
// 16 values; it returns that count (the caller does the rest).
func swigluAsm(dst, gate, up []float32, kind byte) int {
	k, ok := vaKind(kind)
	n := len(gate) &^ 15
	if n == 0 || !ok {
		return 0
	}
	_, _ = dst[n-1], up[n-1]
	vecSwiGLU(&dst[0], &gate[0], &up[0], n, k)
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
// multiple of 16 values; it returns that count.
func normScaleAsm(dst, x, w []float32, inv float32, kind byte) int {
	k, ok := vaKind(kind)
	n := len(x) &^ 15
	if n == 0 || !ok {
		return 0
	}
	_, _ = dst[n-1], w[n-1]
	vecNormScale(&dst[0], &x[0], &w[0], inv, n, k)
	return n
}

// expSum4Asm is simdExpSum4 through vecExpSum4 over the longest multiple
// of 16 values of the rows (all of one length).
func expSum4Asm(rows *[4][]float32, m, s *[4]float32) int {
	k := len(rows[0]) &^ 15
	if k == 0 {
		*s = [4]float32{}
		return 0
	}
	for _, r := range rows {
		need("vecExpSum4", "row", len(r), k)
	}
	vecExpSum4(&rows[0][0], &rows[1][0], &rows[2][0], &rows[3][0], &m[0], k, &s[0])
	return k
}
