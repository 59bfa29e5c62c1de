package kernel

// Float32 vector helpers of the fast kernels: a portable loop, replaced by a
// vector one when the CPU allows (AVX-512: simd_amd64.go, qmm_amd64.go;
// AVX2 with FMA: vec_avx2_amd64.go, in every build). They sum in their own
// order (fused multiply-adds in the vector forms), which the callers'
// contracts allow: the float32 SDPA is held to its reference within the
// rounding bound of any summation order (sdpa_fast.go).
var (
	simdDot  func(a, b []float32) float32              // Σ a_i·b_i
	simdAxpy func(y []float32, a float32, x []float32) // y += a·x
	// simdSubScalar writes dst[i] = a[i] − c over the longest multiple of
	// 16 values and returns how many (each one float32 subtraction: the
	// same bits as the loop).
	simdSubScalar func(dst, a []float32, c float32) int
)

// SubScalar sets dst[i] = a[i] − c, one float32 subtraction each, for i <
// len(dst) (a row of logits minus its logsumexp); a needs len(dst) values
// and may be dst. 16 values at a time with AVX-512.
func SubScalar(dst, a []float32, c float32) {
	a = a[:len(dst)]
	i := 0
	if simdSubScalar != nil {
		i = simdSubScalar(dst, a, c)
	}
	for ; i < len(dst); i++ {
		dst[i] = a[i] - c
	}
}

// dot32 is Σ a_i·b_i over len(a) values, four partial sums in the portable form.
func dot32(a, b []float32) float32 {
	if simdDot != nil {
		return simdDot(a, b)
	}
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// axpy32 is y += a·x.
func axpy32(y []float32, a float32, x []float32) {
	if simdAxpy != nil {
		simdAxpy(y, a, x)
		return
	}
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}
