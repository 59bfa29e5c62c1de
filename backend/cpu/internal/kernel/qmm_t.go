package kernel

import (
	"math"
	"sync"
	"unsafe"
)

// The fast quantized matmul with transposed weights (x @ Wᵀ, the linear
// layers of a model). The forms:
//
//   - float32 (AccF32): per output s·Σ(q·x) + b·Σx summed over the groups,
//     with Σx per group computed once per row of x. The portable loop keeps
//     four partial sums per group; the vector paths keep sixteen lanes and
//     fuse the scale per block of lanes. The summation order differs from
//     QuantizedMatmulTRef; the tests bound the difference.
//   - int8 (AccQ8), one row of x: x quantized per block of 32
//     (quantizeQ8), integer dot products of the codes with the int8 values
//     in the lane order of the vector path, see qmmTQ8Ref.
//   - int8 (AccQ8), two or more rows of x: the int8 GEMM of qmm_gemm.go
//     (the same integer block sums, combined per output in one sequential
//     float32 chain, see qmmTQ8BlockRef; it differs from the one-row form
//     only by float32 rounding, within the bound written there).
//
// Output rows of W are split across the worker pool. With the assembly
// kernels (qTiles) a worker converts the scales and biases of a tile of
// weight rows once, then runs them against the rows of x: eight at a time
// with the float32 GEMM kernel (qmm_gemmf32.go: the weight block unpacked
// once for the eight, x walked in chunks that stay in L1), the rest four at
// a time with the one-row kernels (qmm_amd64.s); other paths take one
// weight row and one row of x at a time. Every float32 output is computed
// from its own row of x by the same lane operations in the same order
// whatever m is, so a prompt prefilled in chunks gives the same bits as one
// pass (the model tests rely on it); an int8 output is the same for every
// m >= 2. The preparations of x (group sums, lane layouts, int8
// quantization) run in assembly with AVX-512 (bit-identical to their
// scalar loops) and are split across the workers by rows.

// Vector hooks, set by simd_amd64.go when the CPU has AVX-512; nil otherwise.
var (
	// simdDotF32 returns Σ_g s_g·Σ(q·x) + b_g·Σx for one weight row
	// against x in the permuted layout of permF32, with xs the group sums
	// of x; xs, s and b are padded with zeros to l.gpad.
	simdDotF32 func(row []uint32, xp, xs, s, b []float32, l *qLayout) float32
	// simdDotQ8 is the int8 form against x in the layout of permQ8 with
	// the lane-expanded block scales dxl.
	simdDotQ8 func(row []uint32, xq []int8, dxl, xs, s, b []float32, l *qLayout) float32
)

// qLayout describes a weight row to the vector kernels: nblk blocks of 16
// words, B codes per block, half when a group spans 8 lanes (two groups per
// block), else block b reads group b>>sh; gpad is the group count rounded
// up to 16.
type qLayout struct {
	bits, B, nblk, gpad int
	half                bool
	sh                  uint
}

func newQLayout(k, gs, bits int) qLayout {
	cpl := 32 / bits
	l := qLayout{bits: bits, B: 16 * cpl, nblk: k / (16 * cpl), gpad: (k/gs + 15) &^ 15, half: gs == 8*cpl}
	for gs > l.B<<l.sh {
		l.sh++
	}
	return l
}

// The assembly kernels (qmm_amd64.go, asmDot) are used when the CPU has
// AVX-512 (asmF32) and AVX512-VNNI (asmQ8). Each computes a.mr (1 to 4)
// outputs of one weight row in the lane layout of the vector path, in the
// order of simdDotF32 and simdDotQ8.
var asmF32, asmQ8 bool

// asmBF16 reports AVX512_BF16 (VDPBF16PS): the fast precision's bfloat16
// attention scores of a decode step (sdpaJob.bfScores) take it.
var asmBF16 bool

// asmAMXBF16 reports AMX-TILE and AMX-BF16, granted by the kernel
// (amxPermit): the fast precision's dense matmul on packed 16-bit weights
// then runs on the tile unit (dense_amx.go). MLXGO_NO_AMX=1 in the
// environment turns it off.
var asmAMXBF16 bool

// gsumAVX2 is groupSumsFlat's AVX2 loop (gsum8) installed.
var gsumAVX2 bool

func init() { installAsm() }

// qArgs are the arguments of the assembly kernels (the field offsets are
// fixed in qmm_amd64.s): weight row w (nblk blocks of 16 words); scales s2
// (block b's lanes 0-7 use the float at s2 + b·sstep bytes, lanes 8-15 the
// one hoff bytes further); bias row b and the group sums xs padded to gpad;
// x (permF32 floats or permQ8 bytes) and its lane scales d (int8 only) for
// the first of mr rows of x, with their byte strides; out the mr results.
type qArgs struct {
	w, s2, b       unsafe.Pointer // 0, 8, 16
	x              unsafe.Pointer // 24
	xstr           uintptr        // 32
	d              unsafe.Pointer // 40
	dstr           uintptr        // 48
	xs             unsafe.Pointer // 56
	xsstr          uintptr        // 64
	nblk, gpad, mr int            // 72, 80, 88
	out            [4]float32     // 96
	hoff, sstep    uintptr        // 112, 120
}

// vecKernel returns which vector kernel handles this matmul: 'a' the
// assembly tiles, 's' the archsimd rows, 0 none (the portable loops). Both
// need whole blocks of 16 words (k a multiple of 16·32/bits) and a group
// spanning at least 8 lanes (4-bit: group 64 or 128; 8-bit: 32, 64 or 128).
func vecKernel(k, gs, bits int, q8 bool) byte {
	switch {
	case bits == 4 && gs >= 64, bits == 8 && gs >= 32:
	default:
		return 0
	}
	if k%(16*32/bits) != 0 {
		return 0
	}
	switch {
	case q8 && asmQ8, !q8 && asmF32:
		return 'a'
	case q8 && simdDotQ8 != nil, !q8 && simdDotF32 != nil:
		return 's'
	}
	return 0
}

// QuantizedMatmulT is mx.quantized_matmul(x, W, transpose=True):
// y[m, n] = round(Σ_k x[m, k]·W[n, k]), W [n, k] stored quantized along k
// (wq [n, k·bits/32], scales and biases [n, k/groupSize]). Under AccF32 it
// accumulates per output s·Σ(q·x) + b·Σx over the groups in float32 (the
// structure of MLX's Metal qmv kernels, mlx/backend/metal/kernels/quantized.h
// qdot: the weight is never rounded to the dtype), in a summation order of
// its own (see qmm_t.go); AccF64 accumulates in float64; AccQ8 is the
// approximate int8 form (qmmTQ8Ref). The result is rounded once. Output
// columns are split across the worker pool. Scratch (pooled): the group sums
// of x and one rearranged copy of x; per worker two rows of scales.
func QuantizedMatmulT(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, groupSize, bits int, round Rounder, acc Acc) {
	checkQMM("QuantizedMatmulT", dst, x, wq, scales, biases, m, n, k, groupSize, bits, true)
	qmmTFast(dst, x, wq, F32Vec(scales), F32Vec(biases), nil, m, n, k, groupSize, bits, roundOr(round), acc)
}

// QuantizedMatmulTVec is [QuantizedMatmulT] with the scales and biases in
// their storage dtype.
func QuantizedMatmulTVec(dst, x []float32, wq []uint32, scales, biases Vec, m, n, k, groupSize, bits int, round Rounder, acc Acc) {
	checkQMMVec("QuantizedMatmulT", dst, x, wq, scales, biases, m, n, k, groupSize, bits)
	qmmTFast(dst, x, wq, scales, biases, nil, m, n, k, groupSize, bits, roundOr(round), acc)
}

// QuantizedMatmulTPacked is [QuantizedMatmulTVec] with a slot for the
// packed form of these weights (nil: none): where the int8 GEMM runs
// (AccQ8, enough rows) it reads the panels kept in the slot, packing them
// on its first run, instead of building them per call. The results are the
// same bits. A slot holds one matrix: the same wq, scales and biases at
// every call.
func QuantizedMatmulTPacked(dst, x []float32, wq []uint32, scales, biases Vec, slot *PackSlot, m, n, k, groupSize, bits int, round Rounder, acc Acc) {
	checkQMMVec("QuantizedMatmulT", dst, x, wq, scales, biases, m, n, k, groupSize, bits)
	if p := slot.packed(); p != nil {
		check(p.n == n && p.k == k && p.gs == groupSize && p.bits == bits, "QuantizedMatmulT", "packed weights of another shape")
	}
	qmmTFast(dst, x, wq, scales, biases, slot, m, n, k, groupSize, bits, roundOr(round), acc)
}

// qmvBatchMax is the most rows of x that decode as they do alone in the
// int8 precision without packed weights: a decode batch or a speculative
// verify window of up to this many rows takes the batched one-row kernels
// (qmvb_amd64.go, AVX-512 VNNI) or else the one-row kernels row by row
// (qmmTRows, the AVX2 kernels' m-blocked forms from four rows), never the
// int8 GEMM's own order (tests raise it). Through packed panels every
// number of rows takes one order (packedRow).
var qmvBatchMax = 4

func qmmTFast(dst, x []float32, wq []uint32, sc, bi Vec, slot *PackSlot, m, n, k, gs, bits int, round Rounder, acc Acc) {
	if m == 0 {
		return
	}
	switch {
	case acc == AccF64:
		qmmT64(dst, x, wq, sc, bi, m, n, k, gs, bits, round)
	case acc == AccQ8 && packedRow(slot, k, gs, bits):
		// the one-row order through the packed panels, at any number
		// of rows
		qmmTQ8Gemm(dst, x, wq, sc, bi, slot, m, n, k, gs, bits, round)
	case acc == AccF32 && refPackedRun(dst, x, wq, sc, bi, slot, m, n, k, gs, bits, round):
		// the reference precision on packed panels (qmm_pref.go)
	case acc == AccQ8 && qmvBatch(dst, x, wq, sc, bi, m, n, k, gs, bits, round):
		// a few rows (a decode batch, a verify window): the one-row
		// kernel's bits for each row (qmvb_amd64.go)
	case acc == AccQ8 && m >= 2 && (m > qmvBatchMax && gemmQ8(k, gs, bits) || gemmDot(k, gs, bits)):
		// the int8 GEMM: in its own order past a few rows, in the
		// one-row order (gemmDot) at any number
		qmmTQ8Gemm(dst, x, wq, sc, bi, slot, m, n, k, gs, bits, round)
	default:
		qmmTRows(dst, x, wq, sc, bi, m, n, k, gs, bits, round, acc == AccQ8)
	}
}

// qmmScratch holds the per-call rearrangements of x.
type qmmScratch struct {
	xs   []float32 // group sums of x, m·k/gs
	xp   []float32 // x permuted for the vector path
	xq   []int8    // x quantized (permuted for the vector path)
	xqn  []int8    // x quantized, natural order (before permuting)
	dx   []float32 // block scales of xq, m·k/32
	dxl  []float32 // block scales expanded to vector lanes
	wt   []float32 // (per worker) float32 scratch of other kernels
	row  []float32 // (per worker) scales and biases of one weight row
	args qArgs     // (per worker) arguments of the assembly kernels

	gx    []int8    // int8 GEMM: x codes in tiles of 8 rows (qmm_gemm.go)
	gd    []float32 // int8 GEMM: block scales of x per tile
	gxs   []float32 // int8 GEMM: group sums of x per tile
	xsf   []float32 // group sums of x, m·k/gs, before they are spread out
	xt    []float32 // float32 GEMM: x in tiles of 8 rows (qmm_gemmf32.go)
	acc   []float32 // (per worker) float32 GEMM: accumulators between chunks
	panel []byte    // (per worker) int8 GEMM: the panel of 16 weight rows
	gw    []uint32  // (per worker) int8 GEMM: a partial panel's weight rows
	gt    []uint32  // (per worker) int8 GEMM: the panel's words past its last chunk of 16, padded
	xb16  []uint16  // bfloat16 dense GEMM: x rounded to bfloat16 (densebf16_amd64.go)
}

var scratchPool = sync.Pool{New: func() any { return new(qmmScratch) }}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// groupSums writes Σx per group of gs, sequentially in float32, for m rows.
func groupSums(xs, x []float32, m, k, gs int) { groupSumsFlat(xs, x, m*k/gs, gs) }

// groupSumsFlat writes the sequential float32 sum of each of ng
// consecutive groups of gs values of x to dst[g]; with AVX-512, sixteen
// groups at a time in assembly (gsum16), with AVX2 eight (gsum8), the same
// bits.
func groupSumsFlat(dst, x []float32, ng, gs int) {
	g := 0
	switch {
	case asmF32 && gs%16 == 0 && ng >= 16:
		check(len(dst) >= ng && len(x) >= ng*gs, "QuantizedMatmulT", "group sums: slices too short")
		g = ng &^ 15
		gsum16(&dst[0], &x[0], gs, g/16)
	case gsumAVX2 && gs%8 == 0 && ng >= 8:
		check(len(dst) >= ng && len(x) >= ng*gs, "QuantizedMatmulT", "group sums: slices too short")
		g = ng &^ 7
		gsum8(&dst[0], &x[0], gs, g/8)
	}
	for ; g < ng; g++ {
		var s float32
		for _, v := range x[g*gs : (g+1)*gs] {
			s += v
		}
		dst[g] = s
	}
}

// dotBias is Σ_g b_g·xs_g in float32.
func dotBias(b, xs []float32) float32 {
	xs = xs[:len(b)]
	var s float32
	for g, v := range b {
		s += v * xs[g]
	}
	return s
}

// permF32 writes x (m rows of k) in the lane layout of the vector path: in
// each block of 16 words (16·cpl codes, cpl = 32/bits), position p of lane l
// is code cpl·l + p, stored at p·16 + l. With AVX-512 it runs in assembly
// (permF32Asm, the same bits).
func permF32(dst, x []float32, m, k, bits int) {
	cpl := 32 / bits
	B := 16 * cpl
	if asmF32 && (bits == 4 || bits == 8) && m*k >= B {
		nb := m * k / B
		check(len(dst) >= nb*B && len(x) >= nb*B, "QuantizedMatmulT", "permF32: slices too short")
		permF32Asm(&dst[0], &x[0], nb, uintptr(4*B), bits)
		return
	}
	for b := range m * k / B {
		src, out := x[b*B:(b+1)*B], dst[b*B:(b+1)*B]
		for l := range 16 {
			for p := range cpl {
				out[p*16+l] = src[cpl*l+p]
			}
		}
	}
}

// permQ8 rearranges quantized x for the vector int8 path: 4-bit blocks of
// 128 codes put the even codes (low nibbles) first and the odd codes (high
// nibbles) after; 8-bit keeps the natural order. dxl gets, per block of 16
// lanes, the scale of the x block each lane reads. With AVX-512 it runs in
// assembly (permQ8Asm, the same bytes).
func permQ8(dst, src []int8, dxl, dx []float32, m, k, bits int) {
	cpl := 32 / bits
	B := 16 * cpl
	if nb := m * k / B; asmF32 && (bits == 4 || bits == 8) && nb > 0 {
		check(len(dst) >= nb*B && len(src) >= nb*B && len(dxl) >= 16*nb && len(dx) >= nb*B/32, "QuantizedMatmulT", "permQ8: slices too short")
		permQ8Asm(&dst[0], &src[0], &dxl[0], &dx[0], nb, bits)
		return
	}
	if bits == 4 {
		for b := range m * k / B {
			s, o := src[b*B:(b+1)*B], dst[b*B:(b+1)*B]
			for i := range 64 {
				o[i], o[64+i] = s[2*i], s[2*i+1]
			}
		}
	} else {
		copy(dst, src[:m*k])
	}
	for b := range m * k / B {
		for l := range 16 {
			dxl[b*16+l] = dx[(b*B+cpl*l)/32]
		}
	}
}

// q8Max is the largest |int8| activation code. Every int8 kernel computes
// its integer sums exactly at this range (VPDPBUSD, VPMADDWD on widened
// bytes, or VPMADDUBSW where the codes are 4-bit: 2·15·127 < 2^15).
func q8Max(bits int) float32 { return 127 }

// quantizeQ8 quantizes n values of x (n a multiple of 32) per block of 32:
// amax = max|x|, d = amax/qmax, xq = clamp(rint(x·(qmax/amax)), ±qmax), with
// d = 0 and xq = 0 for an all-zero block. NaN elements get code 0 (the group
// sums of x carry the NaN into the result). With AVX-512 (and qmax = 127)
// the blocks run in assembly (q8Quant, the same bits), split across the
// workers when there are many.
func quantizeQ8(xq []int8, dx, x []float32, n int, qmax float32) {
	nb := n / 32
	if !asmF32 || qmax != 127 || nb == 0 {
		quantizeQ8Scalar(xq, dx, x, n, qmax)
		return
	}
	check(len(xq) >= nb*32 && len(dx) >= nb && len(x) >= nb*32, "QuantizedMatmulT", "quantizeQ8: slices too short")
	parallelFor(nb, 512, func(lo, hi int) {
		q8Quant(&x[lo*32], &xq[lo*32], &dx[lo], hi-lo, 32, 4, false)
	})
}

// quantizeQ8Scalar is the portable loop of quantizeQ8.
func quantizeQ8Scalar(xq []int8, dx, x []float32, n int, qmax float32) {
	for blk := range n / 32 {
		xb := x[blk*32 : (blk+1)*32]
		var amax float32
		for _, v := range xb {
			if a := abs32(v); a > amax {
				amax = a
			}
		}
		dx[blk] = amax / qmax
		var id float32
		if amax > 0 && amax <= math.MaxFloat32 {
			id = qmax / amax
		}
		out := xq[blk*32 : (blk+1)*32]
		for i, v := range xb {
			q := rint32(v * id)
			switch {
			case q != q:
				q = 0
			case q > qmax:
				q = qmax
			case q < -qmax:
				q = -qmax
			}
			out[i] = int8(q)
		}
	}
}

// qmmTQ8Ref is the int8 form of the quantized matmul (the "fast" precision,
// after llama.cpp's Q8_0 activations):
//
//	x[r] is quantized per block t of 32 (quantizeQ8): xq, d_t
//	for each output j and group g of W[j] (codes q, scale s, bias b):
//	    a  = Σ_{t in g} d_t·float(Σ_{i in t} q_i·xq_i)   (integer inner sums)
//	    xs = Σ_{i in g} x_i                               (float32, exact x)
//	    res += s·a + b·xs
//	dst[r, j] = round(res)
//
// It is approximate: the activations keep 7 or 8 bits per block.
func qmmTQ8Ref(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder) {
	xq, dx := make([]int8, m*k), make([]float32, m*k/32)
	quantizeQ8(xq, dx, x, m*k, q8Max(bits))
	wpr, gpr := WordsPerRow(k, bits), k/gs
	for r := range m {
		for j := range n {
			row := wq[j*wpr : (j+1)*wpr]
			var res float32
			for g := range gpr {
				var a, xs float32
				for t := g * gs / 32; t < (g+1)*gs/32; t++ {
					var isum int32
					for i := t * 32; i < (t+1)*32; i++ {
						isum += int32(codeAt(row, i, bits)) * int32(xq[r*k+i])
					}
					a += float32(dx[r*k/32+t] * float32(isum))
				}
				for _, v := range x[r*k+g*gs : r*k+(g+1)*gs] {
					xs += v
				}
				res += float32(scales[j*gpr+g]*a) + float32(biases[j*gpr+g]*xs)
			}
			dst[r*n+j] = round(res)
		}
	}
}

// qmmTRows is the driver: weight rows are split across workers; each
// output dst[r, j] = round(dot + bias term) is computed from row j of W and
// row r of x alone, by the same kernel whatever m is.
func qmmTRows(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder, q8 bool) {
	if m == 1 && qmvRows(dst, x, wq, sc, bi, n, k, gs, bits, round, q8) {
		return // one row of x (decode): qmv_amd64.go
	}
	if avxRows(dst, x, wq, sc, bi, m, n, k, gs, bits, round, q8) {
		return // the portable loops' bits with AVX2: qmv_avx2_amd64.go
	}
	wpr, gpr := WordsPerRow(k, bits), k/gs
	kind := vecKernel(k, gs, bits, q8)
	vec := kind != 0
	if !vec {
		noteSlow(n, gs, bits, sc, q8)
	}
	s := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(s)
	gw := gpr // row stride of the group sums
	var lay qLayout
	if vec {
		lay = newQLayout(k, gs, bits)
		gw = lay.gpad
	}
	lanes := 0
	if vec {
		lanes = k / (32 / bits)
	}
	// The float32 assembly GEMM takes the rows of x in whole tiles of 8
	// (m8 rows, rearranged into s.xt), the one-row kernels the rest (s.xp).
	m8 := 0
	if kind == 'a' && !q8 {
		m8 = m &^ 7
		s.xt = grow(s.xt, m8*k)
	}
	if vec && !q8 {
		s.xp = grow(s.xp, (m-m8)*k)
	}
	s.xs, s.xsf = grow(s.xs, m*gw), grow(s.xsf, m*gpr)
	parallelFor(m, max(1, 4096/k), func(lo, hi int) {
		groupSumsFlat(s.xsf[lo*gpr:hi*gpr], x[lo*k:hi*k], (hi-lo)*gpr, gs)
		for r := lo; r < hi; r++ {
			xr, xs := x[r*k:(r+1)*k], s.xs[r*gw:(r+1)*gw]
			copy(xs, s.xsf[r*gpr:(r+1)*gpr])
			clear(xs[gpr:])
			switch {
			case r < m8:
				permF32Tile(s.xt[r&^7*k:], xr, r&7, k, bits)
			case vec && !q8:
				permF32(s.xp[(r-m8)*k:], xr, 1, k, bits)
			}
		}
	})
	if q8 {
		s.xqn, s.dx = grow(s.xqn, m*k), grow(s.dx, m*k/32)
		quantizeQ8(s.xqn, s.dx, x, m*k, q8Max(bits))
		if vec {
			s.xq, s.dxl = grow(s.xq, m*k), grow(s.dxl, m*lanes)
			permQ8(s.xq, s.xqn, s.dxl, s.dx, m, k, bits)
		}
	}
	if kind == 'a' {
		t := qTiles{dst: dst, wq: wq, sc: sc, bi: bi, s: s, lay: &lay, m: m, m8: m8, n: n, k: k, gpr: gpr, wpr: wpr, lanes: lanes, round: round, q8: q8}
		parallelFor(n, max(1, 16384/k), t.run)
		return
	}
	parallelFor(n, max(1, 16384/k), func(lo, hi int) {
		ws := scratchPool.Get().(*qmmScratch)
		defer scratchPool.Put(ws)
		ws.row = grow(ws.row, 2*gw)
		srow, brow := ws.row[:gw], ws.row[gw:2*gw]
		clear(ws.row)
		for j := lo; j < hi; j++ {
			sc.load(srow[:gpr], j*gpr)
			bi.load(brow[:gpr], j*gpr)
			row := wq[j*wpr : (j+1)*wpr]
			for r := range m {
				xs := s.xs[r*gw : (r+1)*gw]
				var v float32
				switch {
				case q8 && vec:
					v = simdDotQ8(row, s.xq[r*k:(r+1)*k], s.dxl[r*lanes:(r+1)*lanes], xs, srow, brow, &lay)
				case vec:
					v = simdDotF32(row, s.xp[r*k:(r+1)*k], xs, srow, brow, &lay)
				case q8:
					v = dotQ8(row, s.xqn[r*k:(r+1)*k], s.dx[r*k/32:(r+1)*k/32], srow, k, gs, bits) + dotBias(brow[:gpr], xs)
				default:
					v = dotF32(row, x[r*k:(r+1)*k], srow, k, gs, bits) + dotBias(brow[:gpr], xs)
				}
				dst[r*n+j] = round(v)
			}
		}
	})
}

// qTiles runs the assembly kernels over a range of weight rows: blocks of
// up to tileRows weight rows (their scales converted once, the rows kept in
// cache) against the rows of x four at a time.
type qTiles struct {
	dst                          []float32
	wq                           []uint32
	sc, bi                       Vec
	s                            *qmmScratch
	lay                          *qLayout
	m, m8, n, k, gpr, wpr, lanes int
	round                        Rounder
	q8                           bool
}

const tileRows = 64

// ptr is the address of a slice's first element.
func ptr[T any](s []T) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(s)) }

func (t *qTiles) run(lo, hi int) {
	l, m, k, gpr := t.lay, t.m, t.k, t.gpr
	gw := l.gpad
	// Everything the kernels read, checked once: the weight rows, x and its
	// lane scales and group sums for m rows, the padded scale rows.
	check(len(t.wq) >= hi*t.wpr && t.wpr == 16*l.nblk, "QuantizedMatmulT", "weights too short for the tiles")
	check(len(t.s.xs) >= m*gw && len(t.dst) >= m*t.n, "QuantizedMatmulT", "group sums or output too short")
	check(len(t.s.xt) >= t.m8*k && t.m8%8 == 0, "QuantizedMatmulT", "x tiles too short")
	var xb, db unsafe.Pointer
	var xstr, dstr uintptr
	if t.q8 {
		check(len(t.s.xq) >= m*k && len(t.s.dxl) >= m*t.lanes, "QuantizedMatmulT", "int8 x too short")
		xb, xstr = ptr(t.s.xq), uintptr(k)
		db, dstr = ptr(t.s.dxl), uintptr(4*t.lanes)
	} else {
		check(len(t.s.xp) >= (m-t.m8)*k, "QuantizedMatmulT", "permuted x too short")
		xb, xstr = ptr(t.s.xp), uintptr(4*k)
	}
	// The kernel reads block b's scales at b·sstep and b·sstep + hoff bytes:
	// in place when a block spans two groups (half) or one; two copies per
	// block (s2) when a group spans several blocks.
	expand := !l.half && l.sh > 0
	hoff, sstep, s2w := uintptr(0), uintptr(4), 0
	switch {
	case l.half:
		hoff, sstep = 4, 8
	case expand:
		hoff, sstep, s2w = 4, 8, 2*l.nblk
	}
	ws := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(ws)
	per := 2*gw + s2w // scales, biases (padded with zeros) and s2 of one weight row
	// One pass of x per tile: with a single block of x rows (decode) a
	// weight row's scales are converted just before its kernel call.
	tile := tileRows
	if m <= 4 {
		tile = 1
	}
	ws.row = grow(ws.row, tile*per)
	clear(ws.row) // the padding past gpr stays zero
	for j0 := lo; j0 < hi; j0 += tile {
		j1 := min(j0+tile, hi)
		for j := j0; j < j1; j++ {
			sr := ws.row[(j-j0)*per : (j-j0+1)*per]
			t.sc.load(sr[:gpr], j*gpr)
			t.bi.load(sr[gw:gw+gpr], j*gpr)
			if expand {
				s2 := sr[2*gw:]
				for b := range l.nblk {
					s2[2*b], s2[2*b+1] = sr[b>>l.sh], sr[b>>l.sh]
				}
			}
		}
		if t.m8 > 0 {
			t.gemm(ws, j0, j1, per, hoff, sstep, expand)
		}
		for r := t.m8; r < m; r += 4 {
			// a lives across the calls of a tile: its fields are written
			// once (the kernel reads them back with narrow loads, which
			// wide zeroing stores would stall) and only w, b, s2 change.
			a := &ws.args
			if m > 4 || j0 == lo { // with one block of x rows, set once
				*a = qArgs{
					x: unsafe.Add(xb, uintptr(r-t.m8)*xstr), xstr: xstr,
					xs: unsafe.Add(ptr(t.s.xs), 4*r*gw), xsstr: uintptr(4 * gw),
					nblk: l.nblk, gpad: gw, mr: min(4, m-r), hoff: hoff, sstep: sstep,
				}
				if db != nil {
					a.d, a.dstr = unsafe.Add(db, uintptr(r)*dstr), dstr
				}
			}
			for j := j0; j < j1; j++ {
				sr := ws.row[(j-j0)*per : (j-j0+1)*per]
				a.w, a.b, a.s2 = ptr(t.wq[j*t.wpr:]), ptr(sr[gw:]), ptr(sr)
				if expand {
					a.s2 = ptr(sr[2*gw:])
				}
				asmDot(a, l.bits, t.q8)
				for i := range a.mr {
					t.dst[(r+i)*t.n+j] = a.out[i]
				}
			}
		}
	}
	kind := roundKind(t.round)
	for r := range m {
		if r < t.m8 && kind == 'b' {
			continue // rounded by the GEMM kernel
		}
		roundSlice(t.dst[r*t.n+lo:r*t.n+hi], t.round, kind)
	}
}

// gemm runs the float32 GEMM kernel over the tile's weight rows j0..j1-1
// (their scales and biases converted in ws.row, per floats a row) and the
// first m8 rows of x, in chunks of blocks (qmm_gemmf32.go).
func (t *qTiles) gemm(ws *qmmScratch, j0, j1, per int, hoff, sstep uintptr, expand bool) {
	l, n := t.lay, t.n
	gw := l.gpad
	nbc := max(1, f32ChunkBytes/(8*l.B*4))
	ws.acc = grow(ws.acc, 128*(j1-j0))
	sr := ws.row[:per]
	sp := ptr(sr)
	if expand {
		sp = ptr(sr[2*gw:])
	}
	a := f32gArgs{
		wstr: uintptr(4 * t.wpr), sstr: uintptr(4 * per), acc: ptr(ws.acc), nrow: j1 - j0,
		hoff: hoff, sstep: sstep, b: ptr(sr[gw:]), xsstr: uintptr(4 * gw), gpad: gw, ostr: uintptr(4 * n),
	}
	if roundKind(t.round) == 'b' {
		a.bf16 = 1
	}
	for rt := range t.m8 / 8 {
		a.xs, a.out = ptr(t.s.xs[rt*8*gw:]), ptr(t.dst[rt*8*n+j0:])
		for c0 := 0; c0 < l.nblk; c0 += nbc {
			a.w = ptr(t.wq[j0*t.wpr+16*c0:])
			a.s = unsafe.Add(sp, uintptr(c0)*sstep)
			a.x = ptr(t.s.xt[(rt*l.nblk+c0)*8*l.B:])
			a.nblk = min(nbc, l.nblk-c0)
			a.first, a.last = 0, 0
			if c0 == 0 {
				a.first = 1
			}
			if c0+nbc >= l.nblk {
				a.last = 1
			}
			if l.bits == 4 {
				f32gemmB4(&a)
			} else {
				f32gemmB8(&a)
			}
		}
	}
}

// dotF32 is the portable Σ_g s_g·Σ(q·x) of one weight row, four partial
// sums per group.
func dotF32(row []uint32, x, s []float32, k, gs, bits int) float32 {
	gpr, wpg := k/gs, gs*bits/32
	var res float32
	switch bits {
	case 4:
		for g := range gpr {
			ws := row[g*wpg : (g+1)*wpg]
			xg := x[g*gs : (g+1)*gs]
			var a0, a1, a2, a3 float32
			for i, w := range ws {
				xx := xg[8*i : 8*i+8]
				a0 += float32(w&15)*xx[0] + float32(w>>16&15)*xx[4]
				a1 += float32(w>>4&15)*xx[1] + float32(w>>20&15)*xx[5]
				a2 += float32(w>>8&15)*xx[2] + float32(w>>24&15)*xx[6]
				a3 += float32(w>>12&15)*xx[3] + float32(w>>28)*xx[7]
			}
			res += s[g] * ((a0 + a1) + (a2 + a3))
		}
	case 8:
		for g := range gpr {
			ws := row[g*wpg : (g+1)*wpg]
			xg := x[g*gs : (g+1)*gs]
			var a0, a1, a2, a3 float32
			for i, w := range ws {
				xx := xg[4*i : 4*i+4]
				a0 += float32(w&255) * xx[0]
				a1 += float32(w>>8&255) * xx[1]
				a2 += float32(w>>16&255) * xx[2]
				a3 += float32(w>>24) * xx[3]
			}
			res += s[g] * ((a0 + a1) + (a2 + a3))
		}
	default:
		var codes [128]float32
		for g := range gpr {
			decodeGroup(codes[:], row[g*wpg:], gs, bits)
			xg := x[g*gs : (g+1)*gs]
			var a0, a1, a2, a3 float32
			for i := 0; i < gs; i += 4 {
				a0 += codes[i] * xg[i]
				a1 += codes[i+1] * xg[i+1]
				a2 += codes[i+2] * xg[i+2]
				a3 += codes[i+3] * xg[i+3]
			}
			res += s[g] * ((a0 + a1) + (a2 + a3))
		}
	}
	return res
}

// dotQ8 is the portable int8 Σ_g s_g·Σ_t d_t·Σ(q·xq) of one weight row
// against x quantized in natural order.
func dotQ8(row []uint32, xq []int8, dx, s []float32, k, gs, bits int) float32 {
	bpg := gs / 32
	var res float32
	for g := range k / gs {
		var a float32
		for t := g * bpg; t < (g+1)*bpg; t++ {
			ws := row[t*bits : (t+1)*bits] // 32 codes take `bits` words
			xb := xq[t*32 : (t+1)*32]
			isum := blockISum(ws, xb, bits)
			a += dx[t] * float32(isum)
		}
		res += s[g] * a
	}
	return res
}

// qmmT64 is the float64 (AccF64) form: per output and group s·Σ(q·x) +
// b·Σx in float64, the terms in the order of QuantizedMatmulTRef.
func qmmT64(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder) {
	wpr, wpg, gpr := WordsPerRow(k, bits), WordsPerRow(gs, bits), k/gs
	xsum := make([]float64, m*gpr)
	for r := range m {
		for g := range gpr {
			var s float64
			for _, v := range x[r*k+g*gs : r*k+(g+1)*gs] {
				s += float64(v)
			}
			xsum[r*gpr+g] = s
		}
	}
	parallelFor(n, max(1, 8192/max(1, k*m)), func(lo, hi int) {
		var codes [128]float32
		srow, brow := make([]float32, gpr), make([]float32, gpr)
		for j := lo; j < hi; j++ {
			sc.load(srow, j*gpr)
			bi.load(brow, j*gpr)
			for r := range m {
				var res float64
				for g := range gpr {
					decodeGroup(codes[:], wq[j*wpr+g*wpg:], gs, bits)
					xr := x[r*k+g*gs : r*k+g*gs+gs]
					var a float64
					for i, c := range codes[:gs] {
						a += float64(c) * float64(xr[i])
					}
					res += float64(srow[g])*a + float64(brow[g])*xsum[r*gpr+g]
				}
				dst[r*n+j] = round(float32(res))
			}
		}
	})
}
