package kernel

//go:generate go run qmm_pref_gen.go -o qmm_pref_amd64.s

// qprefB4F32 computes, for the sixteen weight rows of each of prefNP packed
// 4-bit panels with float32 scales and biases, dotF32 + dotBias against
// one row of x: the portable loop's bits, one lane per row
// (qmm_pref_gen.go, AVX-512F).
//
//go:noescape
func qprefB4F32(a *prefArgs)

// qprefB4BF16 is qprefB4F32 with bfloat16 scales and biases.
//
//go:noescape
func qprefB4BF16(a *prefArgs)

// qprefB4F16 is qprefB4F32 with float16 scales and biases.
//
//go:noescape
func qprefB4F16(a *prefArgs)

// qprefB4F32X is qprefB4F32 with each pair's second product added by
// VFMADD231PS: the same bits where every code·x product is exact
// (avxExactX).
//
//go:noescape
func qprefB4F32X(a *prefArgs)

// qprefB4BF16X is qprefB4F32X with bfloat16 scales and biases.
//
//go:noescape
func qprefB4BF16X(a *prefArgs)

// qprefB4F16X is qprefB4F32X with float16 scales and biases.
//
//go:noescape
func qprefB4F16X(a *prefArgs)

// prefScanX is prefScaleX and avxExactX in one pass over n values (a
// multiple of 16, at least 16; qmm_pref_gen.go): it writes xh as
// prefScaleX does (and x itself to the lanes s = 0..3 of each word, which
// qprefB4 does not read) and reports whether every scaling was exact and
// whether avxExactX holds.
//
//go:noescape
func prefScanX(xh, x *float32, n int) (scaled, exact bool)

// prefScanOn lets tests compare prefScanX with the Go loops.
var prefScanOn = true

// prefScan writes xh (prefScaleX) and reports whether its scalings were
// exact and, if so, whether the fused kernels take x (avxExactX, with
// avxFused on): by prefScanX on AVX-512 where x fills whole steps of 16.
func prefScan(xh, x []float32) (scaled, fused bool) {
	if asmF32 && prefScanOn && len(x) >= 16 && len(x)%16 == 0 {
		scaled, exact := prefScanX(&xh[0], &x[0], len(x))
		return scaled, scaled && exact && avxFused
	}
	if !prefScaleX(xh, x) {
		return false, false
	}
	return true, avxFused && avxExactX(x)
}

// prefKernel returns the kernel for p's scale dtype, in its fused form
// where fused (counted in avxFusedCalls).
func prefKernel(p *packedW, fused bool) func(*prefArgs) {
	if fused {
		avxFusedCalls.Add(1)
	}
	switch {
	case p.sb16 == nil && fused:
		return qprefB4F32X
	case p.sb16 == nil:
		return qprefB4F32
	case p.sdt == 1 && fused:
		return qprefB4F16X
	case p.sdt == 1:
		return qprefB4F16
	case fused:
		return qprefB4BF16X
	}
	return qprefB4BF16
}

// prefGemmRows is the fewest rows of x prefGemm takes; fewer go a row at a
// time through qprefB4.
func prefGemmRows() int { return avxGemmMinRows }

// prefGemm runs the AVX-512 float32 m-blocked kernels on p's panels
// (avxRunPacked), reporting false where they do not take the call.
func prefGemm(dst, x []float32, p *packedW, m int, round Rounder) bool {
	return avxRunPacked(dst, x, p, m, round)
}
