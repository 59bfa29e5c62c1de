package kernel

// The dense (unquantized) matmul with transposed weights: y = x·Wᵀ for a
// row-major weight matrix W [n, k] of float32, bfloat16 or float16 values,
// read in place (never converted whole), and x [m, k] float32. This is
// nn.Dense's Matmul(x, Transpose(W)) and the tied head's Embedding.AsLinear.
//
// Two precisions:
//
//   - reference: every output is Σ_l x[i,l]·W[j,l] accumulated in order
//     over l in float32, a separate multiply and add per term (no FMA): the
//     bits of the plain loop (DenseMatmulTRef, and the backend's
//     matmulRef). The AVX2 form (dense_amd64.go) takes sixteen weight rows
//     at a time, converts blocks of eight values of eight rows to float32
//     and transposes them in registers, so that each vector lane holds one
//     output and performs its scalar loop: for one or two rows of x
//     (decode) straight from the weights, for more rows (prefill) through a
//     transposed panel that up to six rows of x at a time reuse.
//   - fast: FMA and any order; the AVX2 form reads four weight rows in place
//     (three against four rows of x in prefill) and accumulates eight
//     partial sums per output along k, in the same order in every kernel;
//     the AVX-512 form (denseZ kernels) sixteen, for up to four rows of x
//     by six (or, decode, one by eight) weight rows a call, the weights
//     prefetched in decode. Its error is bounded by DenseFastBound. On
//     AVX512_BF16, bfloat16 and float16 weights with k a multiple of 32
//     take the denseB kernels instead (densebf16_amd64.go): x and the
//     weights rounded to bfloat16, the pairs' products summed by
//     VDPBF16PS, within DenseFastBoundW.
//
// Both split the output columns across the worker pool; without AVX2 (or
// float16 weights without F16C) they run the portable loop denseGo, which
// gives the reference bits.

// DenseMatmulT sets dst[i·n+j] = Σ_l x[i·k+l]·W[j·k+l] for i < m, j < n,
// W the n×k values of w. With fast false the result is the in-order
// float32 loop's, bit for bit; with fast true the sum may be fused and
// reordered (within DenseFastBound of the exact sum).
func DenseMatmulT(dst, x []float32, w Vec, m, n, k int, fast bool) {
	need("DenseMatmulT", "dst", len(dst), m*n)
	need("DenseMatmulT", "x", len(x), m*k)
	need("DenseMatmulT", "w", w.Len(), n*k)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 { // empty sums
		clear(dst[:m*n])
		return
	}
	if denseAsm(dst, x, w, m, n, k, fast) {
		return
	}
	denseGo(dst, x, w, m, n, k)
}

// denseMinChunk is the number of work units (weight rows, or tiles of
// them) that gives one pool chunk about 64k multiply-adds.
func denseMinChunk(unit, m, k int) int { return max(1, 65536/max(1, unit*m*k)) }

// denseGo is the portable loop: for each weight row (split across the
// pool) the row converted to float32 once, then every row of x against it,
// in order, a separate multiply and add.
func denseGo(dst, x []float32, w Vec, m, n, k int) {
	parallelFor(n, denseMinChunk(1, m, k), func(lo, hi int) {
		row := make([]float32, k)
		for j := lo; j < hi; j++ {
			wr := VecRow(w, j*k, row)
			for i := range m {
				xr := x[i*k : i*k+k]
				var s float32
				for l, xv := range xr {
					s += float32(xv * wr[l]) // explicit conversion: no FMA
				}
				dst[i*n+j] = s
			}
		}
	})
}

// DenseMatmulTRef is the single-goroutine definition of DenseMatmulT's
// reference precision, the twin the tests hold every kernel to: for each
// output the in-order float32 loop, a separate multiply and add per term.
func DenseMatmulTRef(dst, x []float32, w Vec, m, n, k int) {
	for i := range m {
		for j := range n {
			var s float32
			for l := range k {
				s += float32(x[i*k+l] * w.At(j*k+l))
			}
			dst[i*n+j] = s
		}
	}
}

// DenseFastBound returns the bound the fast precision of DenseMatmulT is held to for one
// output of a k-long dot product whose terms have absolute sum abs:
// γ(k/8 + 12)·abs, γ(n) = n·u/(1 - n·u), u = 2⁻²⁴. The fast kernel sums
// each of eight lanes over at most ⌊k/8⌋ + 1 terms with FMA (one rounding
// per step, the products exact), adds the lanes in a tree (three
// roundings) and then the k mod 8 tail terms one by one (a rounded product
// and an add each, at most seven): every term passes through at most
// k/8 + 11 roundings, so by the standard summation bound the result is
// within γ(k/8+11)·abs of the exact sum. The reference loop's own
// guarantee is γ(k)·abs, so for k ≥ 14 the fast bound is the tighter one,
// and far inside the conformance table's float32 rows (within twice MLX's
// own error against float64). The AVX-512 kernels sum each of sixteen
// lanes over at most ⌈k/16⌉ terms with FMA (the last k mod 16 in a masked
// step) and reduce the lanes in four roundings: at most k/16 + 5 ≤ k/8 +
// 11 roundings per term, within the same bound.
func DenseFastBound(k int, abs float64) float64 {
	nu := (float64(k)/8 + 12) * 0x1p-24
	return nu / (1 - nu) * abs
}

// DenseFastBoundW is DenseFastBound for weights of 16 bits (w16: bfloat16
// or float16) or float32, taking the kernels this CPU runs: where the
// bfloat16 kernels take the product (AVX512_BF16, 16-bit weights, k a
// multiple of 32: densebf16_amd64.go), x and the weights are rounded to
// bfloat16 (unit roundoff 2⁻⁸ each; bfloat16 weights exactly), so each
// product is within 2⁻⁷ + 2⁻¹⁶ of its exact value relatively, and the
// float32 sums pass each product through at most k/16 + 4 roundings (two
// adds a step of 32 values per lane, four in the lanes' reduction):
// (2⁻⁷ + 2⁻¹⁵ + γ(k/16 + 5))·abs, plus k·2⁻¹²⁰ for the subnormal inputs and
// outputs VDPBF16PS flushes to zero. That is about 2⁻⁷ of Σ|x·w|: the
// class of the fast precision's int8 activations (2⁻⁸ of a block's
// largest value), far from a broken kernel's error (a lost term or a
// wrong row moves an output by its whole scale).
func DenseFastBoundW(k int, abs float64, w16 bool) float64 {
	if w16 && asmAMXBF16 && k%32 == 0 {
		// The AMX kernel (dense_amx.go) rounds x and the weights as the
		// bfloat16 kernels do and adds the k exact products in an order
		// and rounding Intel leaves unsaid: any order of k additions,
		// each rounding faithfully (within 2u), is within γ(2k).
		nu := (2*float64(k) + 10) * 0x1p-24
		return (0x1p-7+0x1p-15+nu/(1-nu))*abs + float64(k)*0x1p-120
	}
	if !w16 || !denseBF16Path(k) {
		return DenseFastBound(k, abs)
	}
	nu := (float64(k)/16 + 5) * 0x1p-24
	return (0x1p-7+0x1p-15+nu/(1-nu))*abs + float64(k)*0x1p-120
}

// MatmulNN sets dst[i·n+j] = Σ_l a[i·k+l]·b[l·n+j] for row-major a [m, k]
// and b [k, n], each output accumulated in order over l in float32, a
// separate multiply and add per term: the bits of the plain loop
// (MatmulNNRef), on the dense reference kernels where the CPU has them
// (split across the worker pool), else on that loop.
func MatmulNN(dst, a, b []float32, m, n, k int) {
	need("MatmulNN", "dst", len(dst), m*n)
	need("MatmulNN", "a", len(a), m*k)
	need("MatmulNN", "b", len(b), k*n)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || !denseNNAsm(dst, a, b, m, n, k) {
		MatmulNNRef(dst, a, b, m, n, k)
	}
}

// MatmulNNRef is MatmulNN's plain loop (k-outer, n-inner per row of a).
func MatmulNNRef(dst, a, b []float32, m, n, k int) {
	for i := range m {
		drow := dst[i*n : (i+1)*n]
		clear(drow)
		for l, av := range a[i*k : (i+1)*k] {
			for j, bv := range b[l*n : (l+1)*n] {
				drow[j] += float32(av * bv) // explicit conversion: no FMA
			}
		}
	}
}

// densePackRows is the fewest rows of x in a block for which the AVX-512
// fast GEMM (denseFastZ) widens each group of bfloat16 or float16 weight
// rows to float32 once, for all the block's rows, and runs the float32
// kernels on the copy: the same bits (the widening is exact, and the
// kernels sum in the same order whatever the dtype), without converting
// the weights again for every four rows of x. On Intel cores the widening
// (VCVTPH2PS, or VPMOVZXWD and VPSLLD) takes the two FMA ports. The AVX2
// GEMM (denseFastAVX) does not: on Zen 3 the same copy made SmolLM2-360M's
// float16 GEMM at 512 rows 5-15% slower (F16C widens in the load). AMD's
// AVX-512 cores (Zen 4 on) read in place (dense_amd64.go's init): there the copy cost
// 6-15% at 512x960x2560 and 512x2560x960, float16 and bfloat16
// (BenchmarkDense fast against fast-nocopy, 2026-12-04).
var densePackRows = 16
