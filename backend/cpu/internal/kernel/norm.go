package kernel

import "math"

// rmsNormRow normalises one row of n elements (see RMSNorm for the formula).
// kind is roundKind(round) for the vector form of the last step (0: none,
// as the reference uses).
func rmsNormRow(dst, x, w []float32, n int, eps float32, round Rounder, kind byte, acc Acc) {
	x, dst, w = x[:n], dst[:n], w[:n]
	if acc == AccF64 {
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(n)+float64(eps))
		for i, v := range x {
			dst[i] = round(w[i] * round(float32(float64(v)*inv)))
		}
		return
	}
	var ss float32
	for _, v := range x {
		ss += float32(v * v)
	}
	rmsNormScale(dst, x, w, n, ss, eps, round, kind)
}

// rmsNormScale writes row x's normalised values to dst given its sum of
// squares ss (float32 steps).
func rmsNormScale(dst, x, w []float32, n int, ss, eps float32, round Rounder, kind byte) {
	x, dst, w = x[:n], dst[:n], w[:n]
	mean := float32(ss * float32(1/float64(n)))
	inv := 1 / float32(math.Sqrt(float64(mean+eps)))
	i := 0
	if simdNormScale != nil && kind != 0 {
		i = simdNormScale(dst, x, w, inv, kind)
	}
	for ; i < n; i++ {
		dst[i] = round(float32(w[i] * round(float32(x[i]*inv))))
	}
}

// simdNormScale, when the CPU has AVX-512 (vec_amd64.go) or AVX2
// (vec_avx2_amd64.go), writes dst[i] = rnd(w[i]·rnd(x[i]·inv)) for a
// prefix of whole vectors and returns its length; rnd rounds as roundKind
// kind says ('i', 'b' or 'h'; 0 returned for a kind it lacks).
var simdNormScale func(dst, x, w []float32, inv float32, kind byte) int

func checkRMSNorm(dst, x, w []float32, rows, n int) {
	check(rows >= 0 && n > 0, "RMSNorm", "sizes rows=%d n=%d", rows, n)
	need("RMSNorm", "x", len(x), rows*n)
	need("RMSNorm", "dst", len(dst), rows*n)
	need("RMSNorm", "w", len(w), n)
}

// RMSNormRef is the reference of [RMSNorm]: one goroutine, row by row.
func RMSNormRef(dst, x, w []float32, rows, n int, eps float32, round Rounder, acc Acc) {
	checkRMSNorm(dst, x, w, rows, n)
	round = roundOr(round)
	for r := range rows {
		rmsNormRow(dst[r*n:], x[r*n:], w, n, eps, round, 0, acc)
	}
}

// RMSNorm is mx.fast.rms_norm(x, w, eps) over rows of n elements, following
// the graph MLX's CPU runs (mlx/fast.cpp rms_norm fallback):
//
//	ss   = Σ_i x[r,i]²                     (float32, sequential)
//	mean = ss · float32(1/n)               (MLX's mean multiplies by the inverted count)
//	inv  = 1 / sqrt(mean + eps)            (float32, as CPU rsqrt)
//	dst[r,i] = round(w[i] · round(x[r,i]·inv))
//
// the two roundings being MLX's cast of the normalised value to the dtype and
// the weight multiply in the dtype. AccF64 does the sum, mean and rsqrt in
// float64 (dividing by n). Rows are split across workers; no scratch.
func RMSNorm(dst, x, w []float32, rows, n int, eps float32, round Rounder, acc Acc) {
	checkRMSNorm(dst, x, w, rows, n)
	round = roundOr(round)
	kind := roundKind(round)
	parallelFor(rows, max(1, 2048/n), func(lo, hi int) {
		r := lo
		if acc != AccF64 {
			// Four rows' sums of squares at once: four independent chains,
			// each the sequential sum of its row (the same bits), where one
			// chain waits on its adds.
			for ; r+4 <= hi; r += 4 {
				ss := sumSquares4(x[r*n:(r+1)*n], x[(r+1)*n:(r+2)*n], x[(r+2)*n:(r+3)*n], x[(r+3)*n:(r+4)*n])
				for i, s := range ss {
					rmsNormScale(dst[(r+i)*n:], x[(r+i)*n:], w, n, s, eps, round, kind)
				}
			}
		}
		for ; r < hi; r++ {
			rmsNormRow(dst[r*n:], x[r*n:], w, n, eps, round, kind, acc)
		}
	})
}

// sumSquares4 returns the float32 sums Σ v·v of four rows of equal length,
// each in order (as rmsNormRow sums one).
func sumSquares4(a, b, c, d []float32) [4]float32 {
	n := len(a)
	b, c, d = b[:n], c[:n], d[:n]
	var sa, sb, sc, sd float32
	for i, v := range a {
		sa += float32(v * v)
		sb += float32(b[i] * b[i])
		sc += float32(c[i] * c[i])
		sd += float32(d[i] * d[i])
	}
	return [4]float32{sa, sb, sc, sd}
}
