//go:build amd64

package kernel

import "golang.org/x/sys/cpu"

// vec_avx2_amd64.s, the AVX2 forms of the elementwise kernels, is written by
// vec_avx2_gen.go (on any platform; TestGenerated checks it is current).
//
//go:generate go run vec_avx2_gen.go -o vec_avx2_amd64.s

// The AVX2 kernels (with FMA and F16C) of vec_avx2_amd64.s, each bit for bit
// its scalar loop except vaDot and vaAxpy, which sum in their own order (see
// vecops.go). n is a multiple of 8 in all of them; kind is a rounding kind:
// vaF32, vaBF16 or vaF16.

// Rounding kinds of the kernels' kind argument: none (float32),
// tensor.RoundBF16, tensor.RoundF16.
const (
	vaF32 = iota
	vaBF16
	vaF16
)

// vaExp writes mlxmath.Exp(src[i]) to dst[i] for i < n.
//
//go:noescape
func vaExp(dst, src *float32, n int)

// vaSwiGLU writes swiglu(gate[i], up[i]) to dst[i] for i < n, every stored
// value rounded to the kind (swiglu in swiglu.go).
//
//go:noescape
func vaSwiGLU(dst, gate, up *float32, n, kind int)

// vaNormScale writes rnd(w[i]·rnd(x[i]·inv)) to dst[i] for i < n, rnd
// rounding to the kind (rmsNormRow's last step).
//
//go:noescape
func vaNormScale(dst, x, w *float32, inv float32, n, kind int)

// vaDot returns Σ a_i·b_i for i < n: four accumulators of 8 lanes
// (fused multiply-adds), added in a fixed tree.
//
//go:noescape
func vaDot(a, b *float32, n int) float32

// vaAxpy sets y[i] = fma(a, x[i], y[i]) for i < n.
//
//go:noescape
func vaAxpy(y *float32, a float32, x *float32, n int)

// vaF16ToF32 widens float16 bits to float32 (VCVTPH2PS) for i < n.
//
//go:noescape
func vaF16ToF32(dst *float32, src *uint16, n int)

// vaF32ToF16 rounds float32 values to float16 bits, nearest even
// (VCVTPS2PH), for i < n.
//
//go:noescape
func vaF32ToF16(dst *uint16, src *float32, n int)

// vaRoundF16 rounds v[i] to the nearest float16 in place for i < n.
//
//go:noescape
func vaRoundF16(v *float32, n int)

// vaRoPE is vecRoPE (vec_amd64.go) for n a multiple of 8.
//
//go:noescape
func vaRoPE(dst, x, cs, sn *float32, half, n int)

// vaOK is set at start-up when the CPU has AVX2, FMA and F16C (and the OS
// saves the YMM state); GODEBUG=cpu.avx2=off clears it.
var vaOK bool

// This file's init runs after vec_amd64.go's and simd_amd64.go's and
// qmm_amd64.go's (the go command hands a package's files to the compiler
// sorted by name, and init functions run in that order), so the AVX2
// kernels fill only the hooks the AVX-512 ones left empty.
func init() {
	vaOK = cpu.X86.HasAVX && cpu.X86.HasAVX2 && cpu.X86.HasFMA && hasF16C()
	if !vaOK {
		return
	}
	if simdExp == nil {
		simdExp = vaExpSlice
	}
	if simdSwiGLU == nil {
		simdSwiGLU = vaSwiGLUSlice
	}
	if simdNormScale == nil {
		simdNormScale = vaNormScaleSlice
	}
	if simdRoPE == nil {
		simdRoPE = vaRoPESlice
	}
	if simdDot == nil {
		simdDot, simdAxpy = vaDotSlice, vaAxpySlice
	}
	simdF16 = true
}

// vaKind maps a roundKind to the kind argument of the kernels; ok is false
// for kinds they do not handle.
func vaKind(kind byte) (k int, ok bool) {
	switch kind {
	case 'i':
		return vaF32, true
	case 'b':
		return vaBF16, true
	case 'h':
		return vaF16, true
	}
	return 0, false
}

// vaExpSlice is simdExp through vaExp over the longest multiple of 8
// values; it returns that count.
func vaExpSlice(dst, src []float32) int {
	n := len(src) &^ 7
	if n == 0 {
		return 0
	}
	_ = dst[n-1]
	vaExp(&dst[0], &src[0], n)
	return n
}

// vaSwiGLUSlice is simdSwiGLU through vaSwiGLU over the longest multiple
// of 8 values; it returns that count.
func vaSwiGLUSlice(dst, gate, up []float32, kind byte) int {
	k, ok := vaKind(kind)
	n := len(gate) &^ 7
	if !ok || n == 0 {
		return 0
	}
	_, _ = dst[n-1], up[n-1]
	vaSwiGLU(&dst[0], &gate[0], &up[0], n, k)
	return n
}

// vaNormScaleSlice is simdNormScale through vaNormScale over the longest
// multiple of 8 values; it returns that count.
func vaNormScaleSlice(dst, x, w []float32, inv float32, kind byte) int {
	k, ok := vaKind(kind)
	n := len(x) &^ 7
	if !ok || n == 0 {
		return 0
	}
	_, _ = dst[n-1], w[n-1]
	vaNormScale(&dst[0], &x[0], &w[0], inv, n, k)
	return n
}

// vaRoPESlice is simdRoPE through vaRoPE over the longest multiple of 8
// pairs; it returns that count.
func vaRoPESlice(dst, x, cs, sn []float32, half int) int {
	n := half &^ 7
	if n == 0 {
		return 0
	}
	_, _, _, _ = dst[half+n-1], x[half+n-1], cs[n-1], sn[n-1]
	vaRoPE(&dst[0], &x[0], &cs[0], &sn[0], half, n)
	return n
}

// vaDotSlice is simdDot: vaDot over the longest multiple of 8 values, then
// the rest added one by one.
func vaDotSlice(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	m := n &^ 7
	var s float32
	if m > 0 {
		s = vaDot(&a[0], &b[0], m)
	}
	for i := m; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// vaAxpySlice is simdAxpy: vaAxpy over the longest multiple of 8 values,
// the rest as y += a·x.
func vaAxpySlice(y []float32, a float32, x []float32) {
	n := len(y)
	x = x[:n]
	m := n &^ 7
	if m > 0 {
		vaAxpy(&y[0], a, &x[0], m)
	}
	for i := m; i < n; i++ {
		y[i] += a * x[i]
	}
}

// f16ToFloat32sAsm, float32sToF16Asm and roundF16sAsm convert the longest
// multiple of 8 values with the F16C kernels and return that count.
func f16ToFloat32sAsm(dst []float32, src []uint16) int {
	n := len(dst) &^ 7
	if n > 0 {
		_ = src[n-1]
		vaF16ToF32(&dst[0], &src[0], n)
	}
	return n
}

func float32sToF16Asm(dst []uint16, src []float32) int {
	n := len(dst) &^ 7
	if n > 0 {
		_ = src[n-1]
		vaF32ToF16(&dst[0], &src[0], n)
	}
	return n
}

func roundF16sAsm(v []float32) int {
	n := len(v) &^ 7
	if n > 0 {
		vaRoundF16(&v[0], n)
	}
	return n
}
