package kernel

import "math"

// LogSumExpRow is log(Σ exp(v_i − m)) + m for m the largest value of v,
// one lane of MLX's CPU logsumexp (mlx/backend/cpu/logsumexp.cpp with one
// SIMD lane, as MLX builds on x86): m itself when it is ±Inf, NaN when v
// holds a NaN; each exp(v_i − m) is ExpMLX's, summed in float32 in order of
// i, and the log is float64's, rounded to float32 before m is added. The
// maximum and the sum run in vector code where the CPU has AVX-512
// (simdMax, simdExpSum), the same bits.
func LogSumExpRow(v []float32) float32 {
	m := maxOf(v)
	if math.IsInf(float64(m), 0) {
		return m
	}
	return float32(math.Log(float64(expSum(v, m)))) + m
}

// LogSumExpRows writes LogSumExpRow of each of the len(dst) rows of n
// consecutive values of v to dst, the same bits. Where the CPU has
// AVX-512, rows take their sums four at a time (simdExpSum4; a group of
// two or three repeats its last row, for about the time of one): one row's
// additions in order wait on each other, four rows' run side by side (a
// batch's rows of logits took 0.23 ms of SmolLM2's eight-row decode step,
// on Zen 4, summed a row at a time).
func LogSumExpRows(dst, v []float32, n int) {
	need("LogSumExpRows", "v", len(v), len(dst)*n)
	if simdExpSum4 == nil || len(dst) < 2 {
		for r := range dst {
			dst[r] = LogSumExpRow(v[r*n : (r+1)*n])
		}
		return
	}
	var m, s [4]float32
	var rows [4][]float32
	for r0 := 0; r0 < len(dst); r0 += 4 {
		k := min(4, len(dst)-r0)
		for i := range rows {
			if i >= k { // a group of two or three repeats its last row
				rows[i], m[i] = rows[k-1], m[k-1]
				continue
			}
			rows[i] = v[(r0+i)*n:][:n]
			m[i] = maxOf(rows[i])
		}
		j := simdExpSum4(&rows, &m, &s)
		for i := range k {
			if math.IsInf(float64(m[i]), 0) {
				dst[r0+i] = m[i]
				continue
			}
			dst[r0+i] = float32(math.Log(float64(expSumFrom(rows[i], m[i], s[i], j)))) + m[i]
		}
	}
}

// ArgmaxRow is the index of the largest value of v (not empty), the first
// on ties, or of its first NaN when it holds one (mx.argmax's rule): the
// maximum as LogSumExpRow takes it, then a scan for its first index.
func ArgmaxRow(v []float32) int {
	m := maxOf(v)
	for i, x := range v {
		if x == m || (m != m && x != x) {
			return i
		}
	}
	return 0
}

// maxOf is the largest value of v (−Inf when empty), NaN when v holds one:
// simdMax over a prefix, then four running maxima (Go's max propagates
// NaN). max is exact, so every split gives the same maximum, but for the
// sign of a zero, which LogSumExpRow's result does not depend on.
func maxOf(v []float32) float32 {
	inf := float32(math.Inf(-1))
	m0, m1, m2, m3 := inf, inf, inf, inf
	i := 0
	if simdMax != nil {
		m0, i = simdMax(v)
	}
	for ; i+4 <= len(v); i += 4 {
		w := v[i : i+4 : i+4]
		m0, m1, m2, m3 = max(m0, w[0]), max(m1, w[1]), max(m2, w[2]), max(m3, w[3])
	}
	for ; i < len(v); i++ {
		m0 = max(m0, v[i])
	}
	return max(m0, m1, m2, m3)
}

// expSum is Σ ExpMLX(v_i − m) in float32, in order of i: simdExpSum over a
// prefix, then the rest in batches through ExpSlice.
func expSum(v []float32, m float32) float32 {
	var s float32
	i := 0
	if simdExpSum != nil {
		s, i = simdExpSum(v, m)
	}
	return expSumFrom(v, m, s, i)
}

// expSumFrom is expSum of v given the sum s of its first i terms.
func expSumFrom(v []float32, m, s float32, i int) float32 {
	var buf [512]float32
	for ; i < len(v); i += len(buf) {
		src := v[i:min(len(v), i+len(buf))]
		c := buf[:len(src)]
		for j, x := range src {
			c[j] = x - m
		}
		ExpSlice(c, c)
		for _, e := range c {
			s += e
		}
	}
	return s
}

// Vector hooks of LogSumExpRow (vec_amd64.go, with AVX-512), each over the
// longest prefix of whole vectors, returning its length; nil otherwise.
var (
	// simdMax returns the largest value of the prefix, NaN if it holds one.
	simdMax func(v []float32) (float32, int)
	// simdExpSum returns Σ ExpMLX(v_i − m) over the prefix, in order of i.
	simdExpSum func(v []float32, m float32) (float32, int)
	// simdExpSum4 is simdExpSum of four rows of one length (row r with
	// its maximum m[r], its sum to s[r]) over the same prefix of each.
	simdExpSum4 func(rows *[4][]float32, m, s *[4]float32) int
)
