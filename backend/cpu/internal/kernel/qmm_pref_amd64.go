package kernel

//go:generate go run qmm_pref_gen.go -o qmm_pref_amd64.s

// qprefB4F32 computes, for the sixteen weight rows of each of two packed
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

// prefKernel returns the kernel for p's scale dtype.
func prefKernel(p *packedW) func(*prefArgs) {
	switch {
	case p.sb16 == nil:
		return qprefB4F32
	case p.sdt == 1:
		return qprefB4F16
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
