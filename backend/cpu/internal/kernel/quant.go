package kernel

import "math"

// float is the accumulator type of a kernel: float32 (AccF32) or float64 (AccF64).
type float interface{ ~float32 | ~float64 }

func checkQuantArgs(kernel string, wq []uint32, scales, biases []float32, rows, cols, groupSize, bits int) {
	checkQuant(kernel, cols, groupSize, bits)
	check(rows >= 0, kernel, "negative row count %d", rows)
	need(kernel, "wq", len(wq), rows*WordsPerRow(cols, bits))
	need(kernel, "scales", len(scales), rows*cols/groupSize)
	need(kernel, "biases", len(biases), rows*cols/groupSize)
}

// quantGroup computes the float32 scale and bias of one group, exactly as
// MLX's CPU quantize (mlx/backend/cpu/quantized.cpp, quantize): true min
// and max (std::min/std::max, which skip NaN), s = max((max - min)/n,
// 1e-7), negated unless |min| > |max|; edge = the extreme of larger
// magnitude; q0 = rint(edge/s); if q0 != 0 then s = edge/q0 and bias = edge,
// else bias = 0. All in float32.
func quantGroup(w []float32, bits int) (scale, bias float32) {
	nBins := float32(int(1)<<bits - 1)
	const eps = float32(1e-7)
	wMin, wMax := float32(math.Inf(1)), float32(math.Inf(-1))
	for _, v := range w {
		if wMax < v { // std::max(w_max, v)
			wMax = v
		}
		if v < wMin { // std::min(w_min, v)
			wMin = v
		}
	}
	side := abs32(wMin) > abs32(wMax)
	scale = (wMax - wMin) / nBins
	if scale < eps { // std::max(scale, eps)
		scale = eps
	}
	if !side {
		scale = -scale
	}
	edge := wMax
	if side {
		edge = wMin
	}
	q0 := rint32(edge / scale)
	if q0 != 0 {
		scale = edge / q0
		bias = edge
	}
	return scale, bias
}

// quantCode is clamp(rint((v - bias)/scale), 0, 2^bits - 1) in float32 with
// the unrounded scale and bias, as MLX's CPU quantize computes it. A NaN code
// (from a NaN element, or a group whose scale is NaN) becomes 0, which is what
// MLX's CPU kernel stores on x86 (checked against the oracle in the tests).
func quantCode(v, scale, bias float32, bits int) uint32 {
	nBins := float32(int(1)<<bits - 1)
	q := rint32((v - bias) / scale)
	if q < 0 { // std::max(q, 0.0f)
		q = 0
	}
	if nBins < q { // std::min(q, n_bins)
		q = nBins
	}
	if q != q {
		return 0
	}
	return uint32(q)
}

func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// rint32 rounds to the nearest integer, ties to even (std::rint).
func rint32(f float32) float32 { return float32(math.RoundToEven(float64(f))) }

// quantizeRow quantizes one row of cols elements into its packed words and
// its cols/groupSize scales and biases.
func quantizeRow(wqRow []uint32, scales, biases, w []float32, cols, groupSize, bits int, round Rounder) {
	wpg := WordsPerRow(groupSize, bits)
	for g := range cols / groupSize {
		grp := w[g*groupSize : (g+1)*groupSize]
		s, b := quantGroup(grp, bits)
		packCodes(wqRow[g*wpg:(g+1)*wpg], func(i int) uint32 { return quantCode(grp[i], s, b, bits) }, groupSize, bits)
		scales[g] = round(s)
		biases[g] = round(b)
	}
}

// QuantizeRef is the reference of [Quantize]: one goroutine, row by row.
func QuantizeRef(wq []uint32, scales, biases []float32, w []float32, rows, cols, groupSize, bits int, round Rounder) {
	checkQuantArgs("Quantize", wq, scales, biases, rows, cols, groupSize, bits)
	need("Quantize", "w", len(w), rows*cols)
	round = roundOr(round)
	wpr, gpr := WordsPerRow(cols, bits), cols/groupSize
	for r := range rows {
		quantizeRow(wq[r*wpr:(r+1)*wpr], scales[r*gpr:(r+1)*gpr], biases[r*gpr:(r+1)*gpr], w[r*cols:(r+1)*cols], cols, groupSize, bits, round)
	}
}

// Quantize is mx.quantize(w, groupSize, bits, mode="affine") as MLX's CPU
// computes it (mlx/backend/cpu/quantized.cpp quantize):
// w [rows, cols] (values already in the storage dtype) is cut into groups of
// groupSize along each row; per group the float32 scale s and bias b come from
// the min/max with the edge/q0 trick (see quantGroup), each code is
// clamp(rint((w - b)/s), 0, 2^bits-1) using the unrounded float32 s and b,
// and the stored scales and biases are round(s) and round(b). Codes are packed
// LSB first into wq [rows, cols*bits/32] (see pack.go). Rows are split across
// workers; no scratch.
func Quantize(wq []uint32, scales, biases []float32, w []float32, rows, cols, groupSize, bits int, round Rounder) {
	checkQuantArgs("Quantize", wq, scales, biases, rows, cols, groupSize, bits)
	need("Quantize", "w", len(w), rows*cols)
	round = roundOr(round)
	wpr, gpr := WordsPerRow(cols, bits), cols/groupSize
	parallelFor(rows, max(1, 16384/cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			quantizeRow(wq[r*wpr:(r+1)*wpr], scales[r*gpr:(r+1)*gpr], biases[r*gpr:(r+1)*gpr], w[r*cols:(r+1)*cols], cols, groupSize, bits, round)
		}
	})
}

// DequantizeRef is the reference of [Dequantize]: one goroutine, one code at
// a time with the plain bit extraction.
func DequantizeRef(dst []float32, wq []uint32, scales, biases []float32, rows, cols, groupSize, bits int, round Rounder) {
	checkQuantArgs("Dequantize", wq, scales, biases, rows, cols, groupSize, bits)
	need("Dequantize", "dst", len(dst), rows*cols)
	round = roundOr(round)
	wpr, gpr := WordsPerRow(cols, bits), cols/groupSize
	for r := range rows {
		row := wq[r*wpr : (r+1)*wpr]
		for i := range cols {
			g := r*gpr + i/groupSize
			q := float32(codeAt(row, i, bits))
			dst[r*cols+i] = round(round(float32(scales[g]*q)) + biases[g])
		}
	}
}

// Dequantize is mx.dequantize(wq, scales, biases, groupSize, bits) as MLX's
// CPU computes it: the graph fallback of affine_dequantize in mlx/ops.cpp
// (there is no CPU kernel in 0.32.x) multiplies the integer codes by the
// scales and then adds the biases, each op rounding to the dtype T:
//
//	dst[r, i] = round(round(scales[r, g]·q[r, i]) + biases[r, g]),  g = i/groupSize
//
// (checked bit for bit against mx.dequantize 0.32.4 in the tests; a single
// rounding of s·q+b differs in thousands of bf16 elements). Rows are split
// across workers; scratch: one group of decoded codes per worker (stack).
func Dequantize(dst []float32, wq []uint32, scales, biases []float32, rows, cols, groupSize, bits int, round Rounder) {
	checkQuantArgs("Dequantize", wq, scales, biases, rows, cols, groupSize, bits)
	need("Dequantize", "dst", len(dst), rows*cols)
	round = roundOr(round)
	wpr, wpg, gpr := WordsPerRow(cols, bits), WordsPerRow(groupSize, bits), cols/groupSize
	parallelFor(rows, max(1, 16384/cols), func(lo, hi int) {
		var codes [128]float32
		for r := lo; r < hi; r++ {
			for g := range gpr {
				decodeGroup(codes[:], wq[r*wpr+g*wpg:], groupSize, bits)
				s, b := scales[r*gpr+g], biases[r*gpr+g]
				out := dst[r*cols+g*groupSize : r*cols+(g+1)*groupSize]
				for i, q := range codes[:groupSize] {
					out[i] = round(round(float32(s*q)) + b)
				}
			}
		}
	})
}

func checkQMM(kernel string, dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, groupSize, bits int, transpose bool) {
	check(m >= 0 && n > 0 && k > 0, kernel, "sizes m=%d n=%d k=%d", m, n, k)
	if transpose {
		checkQuantArgs(kernel, wq, scales, biases, n, k, groupSize, bits)
	} else {
		checkQuantArgs(kernel, wq, scales, biases, k, n, groupSize, bits)
	}
	need(kernel, "x", len(x), m*k)
	need(kernel, "dst", len(dst), m*n)
}

// checkQMMVec is checkQMM for the transposed form with scales given as Vecs.
func checkQMMVec(kernel string, dst, x []float32, wq []uint32, scales, biases Vec, m, n, k, groupSize, bits int) {
	check(m >= 0 && n > 0 && k > 0, kernel, "sizes m=%d n=%d k=%d", m, n, k)
	checkQuant(kernel, k, groupSize, bits)
	need(kernel, "wq", len(wq), n*WordsPerRow(k, bits))
	need(kernel, "scales", scales.Len(), n*k/groupSize)
	need(kernel, "biases", biases.Len(), n*k/groupSize)
	need(kernel, "x", len(x), m*k)
	need(kernel, "dst", len(dst), m*n)
}

// QuantizedMatmulTRef is the reference of [QuantizedMatmulT]:
//
//	for each row r of x and output j:
//	    res = 0
//	    for each group g of k:            (q = codes of W[j, g], s, b its scale and bias)
//	        a  = Σ_i q_i·x[r, g·gs+i]    (sequential, in the accumulator type)
//	        xs = Σ_i x[r, g·gs+i]
//	        res += s·a + b·xs
//	    dst[r, j] = round(res)
//
// Under AccQ8 it is the approximate int8 form instead, see [qmmTQ8Ref].
func QuantizedMatmulTRef(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, groupSize, bits int, round Rounder, acc Acc) {
	checkQMM("QuantizedMatmulT", dst, x, wq, scales, biases, m, n, k, groupSize, bits, true)
	switch acc {
	case AccF64:
		qmmTRef[float64](dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round))
	case AccQ8:
		qmmTQ8Ref(dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round))
	default:
		qmmTRef[float32](dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round))
	}
}

func qmmTRef[A float](dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder) {
	wpr, gpr := WordsPerRow(k, bits), k/gs
	for r := range m {
		for j := range n {
			row := wq[j*wpr : (j+1)*wpr]
			var res A
			for g := range gpr {
				var a, xs A
				for i := g * gs; i < (g+1)*gs; i++ {
					xv := A(x[r*k+i])
					a += A(A(codeAt(row, i, bits)) * xv)
					xs += xv
				}
				s, b := A(scales[j*gpr+g]), A(biases[j*gpr+g])
				res += A(s*a) + A(b*xs)
			}
			dst[r*n+j] = round(float32(res))
		}
	}
}

// QuantizedMatmulNRef is the reference of [QuantizedMatmulN]:
//
//	for each row r of x and output column j (g = j/gs):
//	    res = 0
//	    for kk = 0..k-1:
//	        w = (s[kk, g]·q[kk, j]) + b[kk, g]     (each op in the accumulator type)
//	        res += x[r, kk]·w
//	    dst[r, j] = round(res)
func QuantizedMatmulNRef(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, groupSize, bits int, round Rounder, acc Acc) {
	checkQMM("QuantizedMatmulN", dst, x, wq, scales, biases, m, n, k, groupSize, bits, false)
	if acc == AccF64 {
		qmmNRef[float64](dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round))
	} else {
		qmmNRef[float32](dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round))
	}
}

func qmmNRef[A float](dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder) {
	wpr, gpr := WordsPerRow(n, bits), n/gs
	for r := range m {
		for j := range n {
			var res A
			for kk := range k {
				q := A(codeAt(wq[kk*wpr:(kk+1)*wpr], j, bits))
				w := A(A(scales[kk*gpr+j/gs])*q) + A(biases[kk*gpr+j/gs])
				res += A(A(x[r*k+kk]) * w)
			}
			dst[r*n+j] = round(float32(res))
		}
	}
}

// Tile sizes of QuantizedMatmulN: rows of x per block and columns per tile.
const (
	qmmRowsPerBlock = 32
	qmmColTile      = 256
)

// QuantizedMatmulN is mx.quantized_matmul(x, W, transpose=False):
// y[m, n] = round(Σ_k x[m, k]·W[k, n]), W [k, n] stored quantized along n
// (wq [k, n·bits/32], scales and biases [k, n/groupSize]). Groups run along
// the output, so each weight is expanded in registers as w = s·q + b (in the
// accumulator type, unrounded, like MLX's CPU _qmm for float32) and
// accumulated over k in order; see [QuantizedMatmulNRef]. Column tiles of 256
// are split across workers, with blocks of 32 rows of x. Scratch per worker:
// one tile of expanded weights and 32×256 accumulators. On amd64 with AVX2
// the float32 accumulation runs on the dense matmul's reference kernels
// instead (qmm_n_amd64.go), the same operations in the same order: the same
// bits. This is the input gradient of every quantized linear layer.
func QuantizedMatmulN(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, groupSize, bits int, round Rounder, acc Acc) {
	checkQMM("QuantizedMatmulN", dst, x, wq, scales, biases, m, n, k, groupSize, bits, false)
	switch {
	case acc == AccF64:
		qmmN[float64](dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round))
	case qmmNAsm(dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round)):
	default:
		qmmN[float32](dst, x, wq, scales, biases, m, n, k, groupSize, bits, roundOr(round))
	}
}

func qmmN[A float](dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder) {
	wpr, wpg, gpr := WordsPerRow(n, bits), WordsPerRow(gs, bits), n/gs
	tileGroups := max(1, qmmColTile/gs)
	nTiles := (gpr + tileGroups - 1) / tileGroups
	parallelFor(nTiles, 1, func(lo, hi int) {
		var codes [128]float32
		wbuf := make([]A, tileGroups*gs)
		accs := make([]A, qmmRowsPerBlock*tileGroups*gs)
		for t := lo; t < hi; t++ {
			g0, g1 := t*tileGroups, min((t+1)*tileGroups, gpr)
			c0, cw := g0*gs, (g1-g0)*gs
			for r0 := 0; r0 < m; r0 += qmmRowsPerBlock {
				r1 := min(r0+qmmRowsPerBlock, m)
				a := accs[:(r1-r0)*cw]
				clear(a)
				for kk := range k {
					for g := g0; g < g1; g++ {
						decodeGroup(codes[:], wq[kk*wpr+g*wpg:], gs, bits)
						s, b := A(scales[kk*gpr+g]), A(biases[kk*gpr+g])
						wg := wbuf[(g-g0)*gs : (g-g0+1)*gs]
						for i, c := range codes[:gs] {
							wg[i] = A(s*A(c)) + b
						}
					}
					w := wbuf[:cw]
					for r := r0; r < r1; r++ {
						xv := A(x[r*k+kk])
						ar := a[(r-r0)*cw : (r-r0+1)*cw]
						for i, wv := range w {
							ar[i] += A(xv * wv)
						}
					}
				}
				for r := r0; r < r1; r++ {
					out := dst[r*n+c0 : r*n+c0+cw]
					for i, v := range a[(r-r0)*cw : (r-r0+1)*cw] {
						out[i] = round(float32(v))
					}
				}
			}
		}
	})
}
