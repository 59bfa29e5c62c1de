package kernel

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run qmv_avx2_gen.go -o qmv_avx2_amd64.s

// The AVX2 kernels of the quantized matmul with transposed weights, for the
// combinations the AVX-512 kernels do not take (vecKernel returns 0: every
// CPU without AVX-512, and 4-bit group 32 on every CPU). They reproduce the
// portable loops (dotF32 + dotBias) bit for bit, eight weight rows at a time,
// so they may replace them for any number of rows of x: the one-row and
// multi-row paths stay equal and chunked prefill equals one-shot.

// avxArgs are the arguments of the kernels (field offsets fixed in
// qmv_avx2_gen.go): w the first weight row of tile 0, wstr the bytes between
// weight rows; x one row of x (float32, natural order); xs its group sums;
// s and b the float32 scales and biases of tile 0 as avxStage lays them out
// ([group][lane], eight lanes), gstr an eighth of the bytes between tiles
// (4·gpad, gpad the groups rounded up to eight); ngrp groups of upg units of four weight words per row;
// out the eight results of tile 0 (tile t's at out + 32·t); ntile tiles.
// The int8 kernels read x as avxPrepQ8 writes it (4-bit: per block
// of 32 the even codes, then the odd ones; 8-bit: the codes widened to
// int16), d the block scales of x, and count upg blocks of 32 per group
// (gleft is their scratch).
type avxArgs struct {
	w     unsafe.Pointer // 0
	wstr  uintptr        // 8
	x     unsafe.Pointer // 16
	xs    unsafe.Pointer // 24
	s, b  unsafe.Pointer // 32, 40
	gstr  uintptr        // 48
	ngrp  int            // 56
	upg   int            // 64
	out   unsafe.Pointer // 72
	ntile int            // 80
	d     unsafe.Pointer // 88
	gleft int            // 96: the kernels' group counter
	bleft int            // 104: the int8 kernels' block counter
}

// qavxF32B4 writes, for a.ntile tiles of eight consecutive 4-bit weight
// rows, dotF32(row) + dotBias(row) against one float32 row of x, doubled
// (avxDoubleX: each four values twice, read straight into the
// multiplies), to a.out: per row and group four partial sums a_j +=
// c_j·x_j + c_{j+4}·x_{j+4} word by word, s·((a0+a1)+(a2+a3)) summed over
// the groups, Σ b·xs summed separately and added last, every step a
// float32 multiply or add in the portable loop's order (the same bits).
// Each pair of rows' codes is unpacked while the previous pair multiplies
// (qmv_avx2_gen.go's f32Unit4): Llama-3.2-1B's reference decode on Zen 3
// read 10.5–12.0 tok/s before, 11.6–14.0 after (alternating runs).
//
//go:noescape
func qavxF32B4(a *avxArgs)

// qavxF32B8 is qavxF32B4 for 8-bit weights (dotF32's 8-bit loop: a_j +=
// c_j·x_j), x doubled too.
//
//go:noescape
func qavxF32B8(a *avxArgs)

// qavxQ8B4 writes, for a.ntile tiles of eight consecutive 4-bit weight
// rows, dotQ8(row) + dotBias(row) against one row of x quantized to int8
// (avxPrepQ8's layout) to a.out: per block of 32 the exact integer sum of
// codes times x codes, a += d_t·float(isum) over the group's blocks,
// s·a summed over the groups, Σ b·xs separately and added last, in the
// portable loop's float32 order (the same bits).
//
//go:noescape
func qavxQ8B4(a *avxArgs)

// qavxQ8B8 is qavxQ8B4 for 8-bit weights.
//
//go:noescape
func qavxQ8B8(a *avxArgs)

// qavxF32B2 is qavxF32B8 for 2-bit weights (dotF32's generic loop: the
// group's codes in steps of four, a_j += c_{4u+j}·x_{4u+j}), each chunk of
// eight codes read as eight bytes of which 2 are used.
//
//go:noescape
func qavxF32B2(a *avxArgs)

// qavxF32B3 is qavxF32B2 for 3-bit weights.
//
//go:noescape
func qavxF32B3(a *avxArgs)

// qavxF32B5 is qavxF32B2 for 5-bit weights.
//
//go:noescape
func qavxF32B5(a *avxArgs)

// qavxF32B6 is qavxF32B2 for 6-bit weights.
//
//go:noescape
func qavxF32B6(a *avxArgs)

// qavxQ8B2 is qavxQ8B4 for 2-bit weights, x as int32 (avxPrepQ8).
//
//go:noescape
func qavxQ8B2(a *avxArgs)

// qavxQ8B3 is qavxQ8B2 for 3-bit weights.
//
//go:noescape
func qavxQ8B3(a *avxArgs)

// qavxQ8B5 is qavxQ8B2 for 5-bit weights.
//
//go:noescape
func qavxQ8B5(a *avxArgs)

// qavxQ8B6 is qavxQ8B2 for 6-bit weights.
//
//go:noescape
func qavxQ8B6(a *avxArgs)

// qavxG8B4 is qavxQ8B4 with the float steps of the int8 GEMM
// (qmmTQ8BlockRef, q8BlockDot) for two or more rows of x: per block acc =
// fma(float(isum)·d_t, s_g, acc), per group acc = fma(b_g, xs_g, acc),
// VFMADD231PS being the correctly rounded fused step of mlxmath.FMA32 (the
// same bits).
//
//go:noescape
func qavxG8B4(a *avxArgs)

// qavxG8B8 is qavxG8B4 for 8-bit weights.
//
//go:noescape
func qavxG8B8(a *avxArgs)

// qzmmF32B4 is qavxF32B4 with AVX-512 (F/BW/DQ/VL): the same lane steps
// and bits, the eight rows of a tile in two ZMM registers (half the
// instructions per weight byte; on Zen 5 qavxF32B4 ran at 7 GB of weights
// per CPU second, short of the 16 a core must read to keep decode at the
// bandwidth limit). At group 32 it reads x in avxBlockX's order and takes
// four groups of each row in one register (qmv_avx2_gen.go's f32zBlocks):
// Zen 4, one thread, 4096×1536 bf16 scales, 505-520 → 412-414 µs.
//
//go:noescape
func qzmmF32B4(a *avxArgs)

// refUnitPeak runs n iterations of the arithmetic of one unit of
// qzmmF32B4 (qmv_avx2_gen.go's f32z: eight rows of 4-bit codes, 32 codes
// each, against one row of x in MLX's lane order: per word and four rows a
// VPSHUFD, two VPSRLVD, two VPERMPS, two VMULPS and two VADDPS) from
// registers, without its loads, reductions or scale steps: 256
// multiply-adds an iteration, the rate that the reference precision's
// one-row 4-bit kernel cannot pass on this core whatever its memory
// does (BenchmarkFMAPeak). Requires AVX-512F; written by
// qmv_avx2_gen.go from the same steps as the kernel (wordStep).
//
//go:noescape
func refUnitPeak(n int)

// qzmmF32B4X is qzmmF32B4 with each pair's second product added by
// VFMADD231PS, one instruction instead of a multiply and an add: the same
// bits wherever that product is exact, which avxExactX checks x for (every
// float16 or bfloat16 activation passes).
//
//go:noescape
func qzmmF32B4X(a *avxArgs)

// avxBlockXAsm is avxBlockX's loop over nb whole blocks of 128 values
// with AVX-512 (F): the same values in the same places, each block's eight
// registers stored whole.
//
//go:noescape
func avxBlockXAsm(dst, x *float32, nb int)

// qzmmQ8B4 is qavxQ8B4 with AVX-512 and VNNI (the integer block sums by
// VPDPBUSD, exact): the same bits.
//
//go:noescape
func qzmmQ8B4(a *avxArgs)

// avxStageF32 writes, for nt tiles of eight float32 rows from src (rows
// rstr bytes apart, tiles eight rows apart), n8 blocks of eight groups of
// the tile's rows to dst transposed, the tiles one after the other:
// dst[8g+l] = row avxLanes[l]'s value of group g (avxStage).
//
//go:noescape
func avxStageF32(dst *float32, src unsafe.Pointer, rstr uintptr, n8, nt int)

// avxStageBF16 is avxStageF32 for bfloat16 rows (widened exactly).
//
//go:noescape
func avxStageBF16(dst *float32, src unsafe.Pointer, rstr uintptr, n8, nt int)

// avxStageF16 is avxStageF32 for float16 rows (VCVTPH2PS, exact).
//
//go:noescape
func avxStageF16(dst *float32, src unsafe.Pointer, rstr uintptr, n8, nt int)

// avxQuantQ8 is quantizeQ8Scalar on nb blocks of 32 values of x (codes
// to xq, block scales to d), also writing the codes to lay in the int8
// kernels' layout: mode 4 per block the even codes then the odd ones, 8 as
// int16, 32 as int32 (avxPrepQ8).
//
//go:noescape
func avxQuantQ8(x *float32, xq *int8, d *float32, nb int, lay unsafe.Pointer, mode int, qmax float32)

// hasF16C reports the F16C instructions (CPUID leaf 1, ECX bit 29).
func hasF16C() bool

// avxQMM is set when the CPU has AVX2 and FMA (the kernels use no FMA: the
// flag marks the CPU generation); avxF16 when it also has F16C.
var avxQMM, avxF16 bool

// avxOn switches the kernels on (tests compare with them off); avxZMM
// lets the 4-bit kernels take their AVX-512 forms (qzmmF32B4, qzmmQ8B4)
// where the CPU has them (asmF32, asmQ8).
var avxOn, avxZMM = true, true

func init() {
	avxQMM = cpu.X86.HasAVX && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	avxF16 = avxQMM && hasF16C()
}

// avxSpreadPF selects avxOneRow for one row of x (tests compare with it
// off).
var avxSpreadPF = true

// avxOneRow runs kern (set up in a for the staged tiles of rows j0 to j1)
// against one row of x, one tile of eight weight rows per call, and before
// each tile prefetches that tile's counterpart 64 rows on: its scales and
// biases, which the next chunk stages. avxStageZ prefetches the same lines
// in one burst per tile as it stages; spread between the tiles they
// arrive in time: on Zen 5, one thread, Llama-3.2-1B's layers streamed
// from memory (4-bit group 32, bf16 scales), the staging's share of the CPU
// time halved and the whole matvec read 24.3 -> 26.5 GB per CPU second
// (int8) and 14.9 -> 16.0 (float32). The outputs are the same bits: each
// tile is the kernel's own loop body with the pointers it would compute.
func avxOneRow(kern func(*avxArgs), a *avxArgs, s *avxState, x, dst []float32, wq []uint32, ss, bs []float32, sc, bi Vec, j0, j1, n, gpr, gpad, wpr, bits int, q8 bool) {
	a.x, a.xs = ptr(x), ptr(s.xs)
	switch {
	case q8 && bits == 4:
		a.x, a.d = ptr(s.xq), ptr(s.dx)
	case q8 && bits == 8:
		a.x, a.d = ptr(s.x16), ptr(s.dx)
	case q8:
		a.x, a.d = ptr(s.x32), ptr(s.dx)
	}
	a.ntile = 1
	for j := j0; j < j1; j += 8 {
		if pr := j + avxTileRows; pr+8 <= n {
			vecPrefetch(sc, pr*gpr, 8*gpr)
			vecPrefetch(bi, pr*gpr, 8*gpr)
		}
		// Each pointer stays inside its slice (the GC rejects one past
		// the end), so they are set per tile, not advanced after it.
		a.w, a.out = ptr(wq[j*wpr:]), ptr(dst[j:])
		a.s, a.b = ptr(ss[(j-j0)*gpad:]), ptr(bs[(j-j0)*gpad:])
		kern(a)
	}
}

// vecPrefetch prefetches the n values of v from off on (off+n <= v.Len()).
func vecPrefetch(v Vec, off, n int) {
	if v.F32 != nil {
		sdpa2Prefetch(ptr(v.F32[off:]), 0, 1, 4*n)
	} else {
		sdpa2Prefetch(ptr(v.U16[off:]), 0, 1, 2*n)
	}
}

// avxTileRows is how many weight rows a worker converts scales for and
// keeps in cache while it runs every row of x against them.
const avxTileRows = 64

// avxRows computes the quantized matmul with the AVX2 kernels when they
// cover the combination (reporting false otherwise): every output is the
// portable loop's, dotF32 (or, under AccQ8, dotQ8) + dotBias, bit for bit.
// Scratch (pooled): the group sums of x, x quantized twice (AccQ8), and per
// worker the float32 scales and biases of avxTileRows weight rows.
func avxRows(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder, q8 bool) bool {
	return avxRun(dst, x, wq, sc, bi, m, n, k, gs, bits, round, q8, false)
}

// avxGemmQ8 is the int8 GEMM (q8GemmGo's outputs, bit for bit) with the
// AVX2+FMA kernels when they cover the combination (reporting false
// otherwise): 4- or 8-bit weights, gemmQ8's shapes.
func avxGemmQ8(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder) bool {
	return gemmQ8(k, gs, bits) && avxRun(dst, x, wq, sc, bi, m, n, k, gs, bits, round, true, true)
}

// avxRun is avxRows, or with gemm avxGemmQ8.
func avxRun(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder, q8, gemm bool) bool {
	return avxRunFrom(dst, x, wq, sc, bi, nil, m, n, k, gs, bits, round, q8, gemm)
}

// avxRunPacked is avxRows on the packed panels pk (float32, 4-bit group
// 32) where it takes the AVX-512 m-blocked kernels (avxGemmZ: enough rows
// of x), reporting false otherwise, having written nothing.
func avxRunPacked(dst, x []float32, pk *packedW, m int, round Rounder) bool {
	return avxRunFrom(dst, x, nil, Vec{}, Vec{}, pk, m, pk.n, pk.k, pk.gs, pk.bits, round, false, false)
}

// avxRunFrom is avxRun reading the weights, scales and biases from wq, sc
// and bi, or with pk from its packed panels (avxRunPacked).
func avxRunFrom(dst, x []float32, wq []uint32, sc, bi Vec, pk *packedW, m, n, k, gs, bits int, round Rounder, q8, gemm bool) bool {
	if !avxOn || !avxQMM || n < 8 || !gemm && vecKernel(k, gs, bits, q8) != 0 {
		return false
	}
	if gs%32 != 0 {
		return false
	}
	if (sc.F32 == nil && sc.F16 || bi.F32 == nil && bi.F16) && !avxF16 {
		return false
	}
	wpr, gpr := WordsPerRow(k, bits), k/gs
	gpad := (gpr + 7) &^ 7 // groups per staged tile row
	check((pk != nil || len(wq) >= n*wpr && sc.Len() >= n*gpr && bi.Len() >= n*gpr) && len(dst) >= m*n && len(x) >= m*k,
		"QuantizedMatmulT", "AVX2 kernel: slices too short")
	if pk != nil && (q8 || gemm || !avxGemmOn || m < avxGemmMinRows || !zf32Take(bits)) {
		return false
	}
	s := avxPool.Get().(*avxState)
	defer avxPool.Put(s)
	s.xs = grow(s.xs, m*gpr)
	// The group sums, split across the workers by rows (each its own
	// sequential loops: the same bits).
	parallelFor(m, max(1, 8192/k), func(lo, hi int) {
		groupSumsFlat(s.xs[lo*gpr:hi*gpr], x[lo*k:hi*k], (hi-lo)*gpr, gs)
	})
	kern := avxKernels[avxBitsIndex(bits)]
	double := false  // qavxF32B4 and qavxF32B8, which read x doubled (avxDoubleX)
	blocked := false // qzmmF32B4, which reads x blocked (avxBlockX)
	zmm4 := false    // qzmmF32B4, or qzmmF32B4X where x allows
	switch {
	case gemm:
		kern = avxKernelsG8[avxBitsIndex(bits)]
	case q8 && bits == 4 && avxZMM && asmQ8:
		kern = qzmmQ8B4
	case q8:
		kern = avxKernelsQ8[avxBitsIndex(bits)]
	case bits == 4 && avxZMM && asmF32:
		kern, blocked, zmm4 = qzmmF32B4, gs == 32, true
	case bits == 4 || bits == 8:
		double = true
	}
	upg := gs * bits / 128 // units of four words (4- and 8-bit)
	if bits != 4 && bits != 8 {
		upg = gs / 8 // chunks of eight codes
	}
	kern2, build, blk := avxGemmKind(bits, gs, q8, gemm)
	useGemm := avxGemmOn && kern2 != nil && (m >= avxGemmMinRows && (bits == 4 || bits == 8) || m >= avxGemmOddRows)
	xf, xstr := x, k // the one-row kernels' x and its row stride
	if double && !useGemm {
		s.x2 = grow(s.x2, 2*m*k)
		avxDoubleX(s.x2, x[:m*k])
		xf, xstr = s.x2, 2*k
	}
	if zmm4 && !useGemm && avxFused && avxExactX(x[:m*k]) {
		kern = qzmmF32B4X
		avxFusedCalls.Add(1)
	}
	if blocked && !useGemm {
		s.x2 = grow(s.x2, m*k)
		for r := range m {
			avxBlockX(s.x2[r*k:(r+1)*k], x[r*k:(r+1)*k])
		}
		xf = s.x2
	}
	if q8 {
		upg = gs / 32 // blocks of 32
		if useGemm && bits != 4 {
			avxPrepQ8(s, x, m*k, 8)
			avxLayS8(s, m*k) // the m-blocked kernels take x as int8 with 128·Σx for every width but 4
		} else {
			avxPrepQ8(s, x, m*k, bits)
		}
	}
	n8 := n &^ 7
	if bits != 4 && bits != 8 {
		// The odd-width kernels read eight bytes per chunk of bits bytes:
		// the last weight row stays on the portable loop, so the
		// over-read never leaves the weights.
		n8 = (n - 1) &^ 7
	}
	rk := roundKind(round)
	// Two or more rows of x: the m-blocked kernels (qmm_avx2_amd64.go)
	// where they cover the width, the same bits.
	var gj *avxGemmJob
	per := avxTileRows / 8
	if useGemm {
		set := avxGR
		z := !q8 && zf32Take(bits) // the AVX-512 float32 kernels (qmm_zf32_amd64.go)
		switch {
		case z:
			set = zR
		case !q8:
			set = f32Set
		}
		avxInterleave(s, m, k, gpr, set, q8)
		gj = &avxGemmJob{kern: kern2, build: build, blk: blk, dst: dst, wq: wq, sc: sc, bi: bi, s: s,
			x: ptr(x), xstr: uintptr(4 * k), m: m, n: n, k: k, wpr: wpr, gpr: gpr, gpad: gpad,
			upg: gs / 4, set: set, round: round, rk: rk}
		if bits == 4 {
			gj.upg = gs / 8
		}
		gj.gs = gs
		switch {
		case q8 && bits == 4:
			gj.x, gj.xstr, gj.upg = ptr(s.xq), uintptr(k), gs/32
		case q8:
			gj.x, gj.xstr, gj.upg = ptr(s.x16), uintptr(2*k), gs/32
		default:
			gj.f32 = true
		}
		per = max(1, min(per, avxGemmPanelBytes/(k/32*blk)))
		if z {
			gj.z, gj.bits, per = true, bits, max(2, per&^1) // whole pairs of tiles
			gj.pk = pk
			// The fused kernels where every code·x product is exact.
			gj.fused = avxFused && (bits == 4 && avxExactX(x[:m*k]) || bits == 8 && avxExactX8(x[:m*k]))
			if gj.fused {
				zfFusedCalls.Add(1)
			}
		}
	}
	parallelFor(n8/8, max(1, 4096/k), func(lo, hi int) {
		ws := avxPool.Get().(*avxState)
		defer avxPool.Put(ws)
		for t0 := lo; t0 < hi; t0 += per {
			t1 := min(t0+per, hi)
			j0, j1 := 8*t0, 8*t1
			nv := (j1 - j0) * gpad
			ws.row = grow(ws.row, 2*nv+8*gpad) // avxGemmZ reads 8·gpad past the biases
			if pk != nil {
				ws.x2 = grow(ws.x2, gpr*q8C)
				pk.stagePacked(ws.row[:nv], t0, t1-t0, gpad, false, ws.x2)
				pk.stagePacked(ws.row[nv:2*nv], t0, t1-t0, gpad, true, ws.x2)
			} else {
				avxStage(ws.row[:nv], sc, j0, t1-t0, gpr, gpad)
				avxStage(ws.row[nv:2*nv], bi, j0, t1-t0, gpr, gpad)
			}
			if gj != nil {
				avxGemm(gj, ws, t0, t1, min(t1+per, hi), ws.row[:2*nv+8*gpad], nv)
				continue
			}
			// The arguments live in the pooled state: a local handed to
			// the kernel through a func value escapes (one allocation per
			// tile run, about 2% of SmolLM2's decode samples).
			a := &ws.args
			*a = avxArgs{
				w: ptr(wq[j0*wpr:]), wstr: uintptr(4 * wpr), ngrp: gpr, upg: upg, ntile: t1 - t0,
				s: ptr(ws.row), b: ptr(ws.row[nv:]), gstr: uintptr(4 * gpad),
			}
			if m == 1 && avxSpreadPF {
				avxOneRow(kern, a, s, xf, dst, wq, ws.row[:nv], ws.row[nv:2*nv], sc, bi, j0, j1, n, gpr, gpad, wpr, bits, q8)
				roundSlice(dst[j0:j1], round, rk)
				continue
			}
			for r := range m {
				a.x, a.xs, a.out = ptr(xf[r*xstr:]), ptr(s.xs[r*gpr:]), ptr(dst[r*n+j0:])
				switch {
				case q8 && bits == 4:
					a.x, a.d = ptr(s.xq[r*k:]), ptr(s.dx[r*k/32:])
				case q8 && bits == 8:
					a.x, a.d = ptr(s.x16[r*k:]), ptr(s.dx[r*k/32:])
				case q8:
					a.x, a.d = ptr(s.x32[r*k:]), ptr(s.dx[r*k/32:])
				}
				kern(a)
				roundSlice(dst[r*n+j0:r*n+j1], round, rk)
			}
		}
	})
	if n8 < n {
		row := grow(s.row, 2*gpr)
		s.row = row
		// rowOf loads row j's scales and biases into row and returns its
		// words: from wq, sc and bi, or from pk's last panel, unpacked.
		rowOf := func(j int) []uint32 {
			sc.load(row[:gpr], j*gpr)
			bi.load(row[gpr:], j*gpr)
			return wq[j*wpr : (j+1)*wpr]
		}
		if pk != nil {
			c := n8 / q8C
			rn := n - c*q8C
			s.x2 = grow(s.x2, 2*gpr*q8C+2*rn*gpr)
			ts, us, ub := s.x2[:2*gpr*q8C], s.x2[2*gpr*q8C:][:rn*gpr], s.x2[2*gpr*q8C+rn*gpr:][:rn*gpr]
			uw := make([]uint32, rn*wpr)
			pk.unpackPanel(c, uw, us, ub, rn, ts)
			rowOf = func(j int) []uint32 {
				r := j - c*q8C
				copy(row[:gpr], us[r*gpr:(r+1)*gpr])
				copy(row[gpr:], ub[r*gpr:(r+1)*gpr])
				return uw[r*wpr : (r+1)*wpr]
			}
		}
		for j := n8; j < n; j++ {
			w := rowOf(j)
			for r := range m {
				var v float32
				if gemm {
					dst[r*n+j] = round(q8BlockDot(w, s.xqn[r*k:(r+1)*k], s.dx[r*k/32:(r+1)*k/32], s.xs[r*gpr:(r+1)*gpr], row[:gpr], row[gpr:], gs, bits))
					continue
				}
				if q8 {
					v = dotQ8(w, s.xqn[r*k:(r+1)*k], s.dx[r*k/32:(r+1)*k/32], row[:gpr], k, gs, bits)
				} else {
					v = dotF32(w, x[r*k:(r+1)*k], row[:gpr], k, gs, bits)
				}
				dst[r*n+j] = round(v + dotBias(row[gpr:], s.xs[r*gpr:(r+1)*gpr]))
			}
		}
	}
	return true
}

// avxState is the pooled per-call scratch: the group sums of x, x
// quantized (natural order, and in the kernels' layout), the block scales,
// a worker's float32 scales and biases, and the m-blocked kernels' data.
type avxState struct {
	xs, dx, row []float32
	xqn, xq     []int8
	x16         []int16
	x32         []int32
	x2          []float32 // x doubled for qavxF32B4 and qavxF32B8 (avxDoubleX), or blocked for qzmmF32B4 (avxBlockX)
	gxs, gd     []float32 // the m-blocked kernels: group sums and block scales of x, interleaved (avxInterleave)
	panel       []byte    // (per worker) the m-blocked kernels' panels
	state       []float32 // (per worker) the float32 m-blocked kernels' sums between chunks
	args        avxArgs   // (per worker) the one-row kernels' arguments
}

// avxKernels and avxKernelsQ8 are the kernels by width (avxBitsIndex),
// avxKernelsG8 the int8 GEMM kernels (4- and 8-bit only; nil elsewhere).
var (
	avxKernels   = [6]func(*avxArgs){qavxF32B2, qavxF32B3, qavxF32B4, qavxF32B5, qavxF32B6, qavxF32B8}
	avxKernelsQ8 = [6]func(*avxArgs){qavxQ8B2, qavxQ8B3, qavxQ8B4, qavxQ8B5, qavxQ8B6, qavxQ8B8}
	avxKernelsG8 = [6]func(*avxArgs){2: qavxG8B4, 5: qavxG8B8}
)

// avxBitsIndex numbers the widths 2, 3, 4, 5, 6, 8.
func avxBitsIndex(bits int) int {
	if bits == 8 {
		return 5
	}
	return bits - 2
}

var avxPool = sync.Pool{New: func() any { return new(avxState) }}

// avxPrepQ8 quantizes n values of x (quantizeQ8, as dotQ8's callers do)
// into s.xqn and s.dx and lays them out for the int8 kernels: 4-bit, per
// block of 32 the 16 even codes then the 16 odd ones (the low and high
// nibbles of the block's weight bytes) in s.xq; 8-bit, the codes as int16
// in s.x16; other widths as int32 in s.x32. avxQuantQ8 does both in one
// pass with the same bits, the blocks split across the workers.
func avxPrepQ8(s *avxState, x []float32, n, bits int) {
	s.xqn, s.dx = grow(s.xqn, n), grow(s.dx, n/32)
	nb := n / 32
	if nb == 0 {
		return
	}
	_ = x[nb*32-1]
	var lay unsafe.Pointer
	mode, esz := 32, 4 // the layout's mode and bytes per code
	switch bits {
	case 4:
		s.xq = grow(s.xq, n)
		lay, mode, esz = unsafe.Pointer(&s.xq[0]), 4, 1
	case 8:
		s.x16 = grow(s.x16, n)
		lay, mode, esz = unsafe.Pointer(&s.x16[0]), 8, 2
	default:
		s.x32 = grow(s.x32, n)
		lay = unsafe.Pointer(&s.x32[0])
	}
	// Blocks are independent: split across the workers (the same bytes).
	parallelFor(nb, 256, func(lo, hi int) {
		avxQuantQ8(&x[32*lo], &s.xqn[32*lo], &s.dx[lo], hi-lo, unsafe.Add(lay, 32*lo*esz), mode, q8Max(bits))
	})
}

// avxLayS8 rewrites s.x16 (2n bytes) in the layout of the m-blocked 8-bit
// int8 kernels (qgemmG8B8R*, qgemmQ8B8R*, avxPanelS8; they also serve the
// widths 2, 3, 5 and 6): per block of 32 codes of s.xqn, the
// codes as int8, then 128·Σ codes as an int32, then 28 bytes unused: 64
// bytes, the int16 layout's stride. The sum restores Σ c·x from the
// panel's c - 128: exact (|128·Σ| < 2^20).
func avxLayS8(s *avxState, n int) {
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s.x16))), 2*n)
	// Blocks are independent: split across the workers (1% of MiniCPM5-1B's
	// fast prefill on the caller alone).
	parallelFor(n/32, 256, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			blk, codes := out[64*t:64*t+64], s.xqn[32*t:32*t+32]
			var sum int32
			for i, c := range codes {
				blk[i] = byte(c)
				sum += int32(c)
			}
			binary.LittleEndian.PutUint32(blk[32:], uint32(128*sum))
		}
	})
}

// avxDoubleX writes each four values of x twice into dst (2·len(x)
// values): the layout in which qavxF32B4 and qavxF32B8 multiply by x
// straight from memory, a 32-byte operand holding the four values in both
// halves.
func avxDoubleX(dst, x []float32) {
	for i := 0; i+4 <= len(x); i += 4 {
		q := dst[2*i : 2*i+8]
		copy(q[:4], x[i:i+4])
		copy(q[4:], x[i:i+4])
	}
}

// avxFused lets qzmmF32B4X replace qzmmF32B4, and the fused AVX-512
// m-blocked kernels (qgemmZF32B<bits>R<rows>X) the others, where
// avxExactX (avxExactX8) allows (tests compare both); avxFusedCalls and
// zfFusedCalls count the matmuls each ran (tests).
var (
	avxFused      = true
	avxFusedCalls atomic.Int64
	zfFusedCalls  atomic.Int64
)

// avxExactX reports whether every product of a 4-bit code (0 to 15) and
// a value of x is exact in float32, and finite: each value's significand
// has its four low bits zero (so its product with a code fits 24 bits;
// every float16 and bfloat16 value has at most 11 significant bits) and
// its magnitude is below 2^124 (so no product overflows; no infinities or
// NaNs). Then c·x rounded and c·x exact are the same, and adding it in a
// fused step gives the sum's bits.
func avxExactX(x []float32) bool {
	for _, v := range x {
		if b := math.Float32bits(v); b&0xf != 0 || b>>23&0xff >= 127+124 {
			return false
		}
	}
	return true
}

// avxExactX8 is avxExactX for 8-bit codes (0 to 255): each value's
// significand has its eight low bits zero and its magnitude is below 2^120
// (every float16 and bfloat16 value qualifies but the largest).
func avxExactX8(x []float32) bool {
	for _, v := range x {
		if b := math.Float32bits(v); b&0xff != 0 || b>>23&0xff >= 127+120 {
			return false
		}
	}
	return true
}

// avxBlockX writes one row of x (a multiple of 32 values) in the order in
// which qzmmF32B4 reads it: each block of four groups of 32 (128 values)
// as eight registers, register 2i+h holding in lane 4u+j the value
// 32u+8i+4h+j of the block (word i's code j, h = 0, or j+4, h = 1, of
// group u); the groups after the last whole block in their own order.
func avxBlockX(dst, x []float32) {
	nb := len(x) / 128
	if nb > 0 && asmF32 && avxBlockXOn {
		avxBlockXAsm(&dst[0], &x[0], nb)
		copy(dst[128*nb:], x[128*nb:])
		return
	}
	for b := range nb {
		src, out := (*[128]float32)(x[128*b:]), (*[128]float32)(dst[128*b:])
		for v := range 8 { // register v = 2i+h: x at 8i+4h = 4v of each group
			for u := range 4 {
				o, s := out[16*v+4*u:16*v+4*u+4], src[32*u+4*v:32*u+4*v+4]
				o[0], o[1], o[2], o[3] = s[0], s[1], s[2], s[3]
			}
		}
	}
	copy(dst[128*nb:], x[128*nb:])
}

// avxBlockXOn lets avxBlockX take avxBlockXAsm (tests compare both).
var avxBlockXOn = true

// avxLanes are the weight rows of a tile in the kernels' lane order.
var avxLanes = [8]int{0, 2, 4, 6, 1, 3, 5, 7}

// avxStage lays out the scales (or biases) v of tiles of eight weight rows
// from row0 (gpr groups per row) as the kernels read them: per tile, gpad
// (gpr rounded up to eight) groups of the eight rows' values as float32
// (exact) in avxLanes order, through the assembly transposes (avxStageF32,
// avxStageBF16, avxStageF16: float16 needs F16C, which avxRun checks) eight
// groups at a time. A row's last block reads past the row into the next
// (values the kernels never use) wherever v goes on that far; at the end of
// v the last groups are first copied into a padded block of eight.
func avxStage(dst []float32, v Vec, row0, tiles, gpr, gpad int) {
	size := 2
	if v.F32 != nil {
		size = 4
	}
	rstr := uintptr(size * gpr)
	// With AVX-512 the first multiple of 32 groups (qmm_zf32_amd64.go).
	g0 := avxStageZ(dst, v, row0, tiles, gpr, gpad)
	if g0 == gpad {
		return
	}
	// The tiles whose last row's blocks stay inside v, in one call.
	whole := 0
	if last := v.Len() - 7*gpr - gpad - row0*gpr; last >= 0 {
		whole = min(tiles, last/(8*gpr)+1)
	}
	switch {
	case whole > 0 && g0 == 0:
		avxStageBlocks(&dst[0], v, row0*gpr, rstr, gpad/8, whole)
	case whole > 0:
		for t := range whole {
			avxStageBlocks(&dst[t*8*gpad+8*g0], v, (row0+8*t)*gpr+g0, rstr, (gpad-g0)/8, 1)
		}
	}
	for t := whole; t < tiles; t++ {
		base := (row0 + 8*t) * gpr
		out := dst[t*8*gpad:][:8*gpad]
		g8, rem := gpr&^7, gpr&7
		if g8 > g0 {
			avxStageBlocks(&out[8*g0], v, base+g0, rstr, (g8-g0)/8, 1)
		}
		var tail [8 * 8]uint32 // eight rows of eight values: the last groups, padded
		for r := range 8 {
			lo := base + r*gpr + g8
			if v.F32 != nil {
				copy(unsafe.Slice((*float32)(unsafe.Pointer(&tail[8*r])), 8), v.F32[lo:lo+rem])
			} else {
				copy(unsafe.Slice((*uint16)(unsafe.Pointer(&tail[4*r])), 8), v.U16[lo:lo+rem])
			}
		}
		tv := Vec{F16: v.F16}
		if v.F32 != nil {
			tv.F32 = unsafe.Slice((*float32)(unsafe.Pointer(&tail[0])), 64)
		} else {
			tv.U16 = unsafe.Slice((*uint16)(unsafe.Pointer(&tail[0])), 64)
		}
		avxStageBlocks(&out[8*g8], tv, 0, uintptr(8*size), 1, 1)
	}
}

// avxStageBlocks runs the transpose of v's kind on nt tiles of n8 blocks
// of eight groups from element base, rows rstr bytes apart.
func avxStageBlocks(dst *float32, v Vec, base int, rstr uintptr, n8, nt int) {
	switch {
	case v.F32 != nil:
		avxStageF32(dst, unsafe.Pointer(&v.F32[base]), rstr, n8, nt)
	case v.F16:
		avxStageF16(dst, unsafe.Pointer(&v.U16[base]), rstr, n8, nt)
	default:
		avxStageBF16(dst, unsafe.Pointer(&v.U16[base]), rstr, n8, nt)
	}
}
