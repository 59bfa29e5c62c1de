//go:build amd64

package kernel

import (
	"sync"
	"unsafe"
)

// The int8 one-row kernels for a few rows of x at once (qmvb_amd64.s): a
// decode step of a batch, or a speculative verify window, in the "fast"
// precision. Each weight block is read once for four rows of x, and each
// output has the bits the one-row kernel (qmvRows) gives for its row alone,
// so a sequence decodes to the same tokens in a batch of up to four, or
// verifying up to three drafts, as alone (the int8 GEMM, qmm_gemm.go, sums
// in another order). The GEMM stays the path for more rows: per row and
// block this kernel converts, scales and adds its integer lane sums (the
// one-row arithmetic) where the GEMM's panel lanes hold whole blocks: on a
// MiniCPM5-1B projection (BenchmarkQMVBatch, Zen 5, 2026-12-02) it took
// 0.6x the GEMM's time at four rows, and an eight-row form of it 1.2-1.4x
// at six and eight rows; eight rows in two passes of four over each chunk
// of weight rows (qmvBatchMax 8) took 1.5-1.6x the GEMM's CPU time on six
// MiniCPM5-1B layers and its head streamed from memory
// (BenchmarkBatchStream rows8/qmvb against rows8/gemm, one thread,
// 2026-12-02, the machine shared).

// qmvBArgs are the arguments of the kernels (field offsets fixed in
// qmvb_amd64.s): w, s, b the weights, scales and biases of the first
// weight row; x, d, xs the rows of x interleaved per block (codes, lane
// scales, group sums: see qmvb_amd64.s); out the results, R floats per
// weight row; nrow weight rows; nstep, bps, rowb, gstr, hoff, sstep, nbch
// and bmask as in qmvArgs; pf how far ahead of each weight block the
// kernel prefetches a line (0: the block itself, in effect none).
type qmvBArgs struct {
	w, s, b                 unsafe.Pointer // 0, 8, 16
	x, d, xs                unsafe.Pointer // 24, 32, 40
	out                     unsafe.Pointer // 48
	nrow, nstep, bps        int            // 56, 64, 72
	rowb, gstr, hoff, sstep uintptr        // 80, 88, 96, 104
	nbch                    int            // 112
	bmask                   uint64         // 120
	pf                      uintptr        // 128
}

// qmvbQ8B4F32R4 runs a.nrow 4-bit weight rows with float32 scales against
// four rows of x; the others are the same for 8-bit weights (B8) and
// bfloat16 scales (BF16, BF16H: two groups per block).
//
//go:noescape
func qmvbQ8B4F32R4(a *qmvBArgs)

// qmvbQ8B4BF16R4 is the 4-bit kernel with bfloat16 scales, 4 rows of x.
//
//go:noescape
func qmvbQ8B4BF16R4(a *qmvBArgs)

// qmvbQ8B4BF16HR4 is the 4-bit kernel with bfloat16 scales, two groups per block, 4 rows of x.
//
//go:noescape
func qmvbQ8B4BF16HR4(a *qmvBArgs)

// qmvbQ8B8F32R4 is the 8-bit kernel with float32 scales, 4 rows of x.
//
//go:noescape
func qmvbQ8B8F32R4(a *qmvBArgs)

// qmvbQ8B8BF16R4 is the 8-bit kernel with bfloat16 scales, 4 rows of x.
//
//go:noescape
func qmvbQ8B8BF16R4(a *qmvBArgs)

// qmvbQ8B8BF16HR4 is the 8-bit kernel with bfloat16 scales, two groups per block, 4 rows of x.
//
//go:noescape
func qmvbQ8B8BF16HR4(a *qmvBArgs)

// qmvbQ8B4F16R4 is the 4-bit kernel with float16 scales (one group or two
// per block: the scale steps differ, not the code).
//
//go:noescape
func qmvbQ8B4F16R4(a *qmvBArgs)

// qmvbQ8B8F16R4 is the 8-bit kernel with float16 scales.
//
//go:noescape
func qmvbQ8B8F16R4(a *qmvBArgs)

// qmvbCall runs the kernel for bits (4, 8) and scale storage st (0
// float32, 1 bfloat16, 2 bfloat16 two groups per block, 3 float16) on a,
// by direct calls (a stays on the caller's stack).
func qmvbCall(bits, st int, a *qmvBArgs) {
	switch {
	case bits == 4 && st == 0:
		qmvbQ8B4F32R4(a)
	case bits == 4 && st == 1:
		qmvbQ8B4BF16R4(a)
	case bits == 4 && st == 2:
		qmvbQ8B4BF16HR4(a)
	case bits == 4:
		qmvbQ8B4F16R4(a)
	case st == 0:
		qmvbQ8B8F32R4(a)
	case st == 1:
		qmvbQ8B8BF16R4(a)
	case st == 2:
		qmvbQ8B8BF16HR4(a)
	default:
		qmvbQ8B8F16R4(a)
	}
}

// qmvbOn switches the batched kernels on (tests compare); they take up to
// qmvBatchMax rows (qmm_t.go) in one call, in passes of four.
var qmvbOn = true

// qmvbState is the pooled per-call scratch.
type qmvbState struct {
	xq        []int8    // one row of x quantized (qmvQuantQ8B4/B8)
	dxl, sums []float32 // its lane scales and group sums
	bx        []int8    // R rows' codes, interleaved per block
	bd, bs    []float32 // their lane scales and group sums, interleaved
	out       []float32 // R results per weight row
}

var qmvbPool = sync.Pool{New: func() any { return new(qmvbState) }}

// qmvBatch computes dst[r, j] = round(x[r]·W[j]) for 2 <= m <=
// qmvBatchMax rows of x in the int8 precision with the kernels of
// qmvb_amd64.s and reports true, or reports false (and does nothing) where
// the one-row int8 kernel would not run (qmvRows's conditions). More than
// four rows run in passes of four over each worker's chunk of weight rows
// while it is in cache (the weights are read from memory once).
func qmvBatch(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder) bool {
	if !qmvbOn || !qmvOn || m < 2 || m > qmvBatchMax || n <= 0 || vecKernel(k, gs, bits, true) != 'a' || q8Max(bits) != 127 {
		return false
	}
	var esize uintptr
	switch {
	case sc.F32 != nil && bi.F32 != nil:
		esize = 4
	case sc.F32 == nil && bi.F32 == nil && sc.F16 == bi.F16:
		esize = 2 // bfloat16, or float16 (F16)
	default:
		return false
	}
	l := newQLayout(k, gs, bits)
	wpr, gpr := WordsPerRow(k, bits), k/gs
	check(wpr == 16*l.nblk && len(wq) >= n*wpr && len(dst) >= m*n && len(x) >= m*k &&
		sc.Len() >= n*gpr && bi.Len() >= n*gpr, "QuantizedMatmulT", "batched one-row kernel: slices too short")
	s := qmvbPool.Get().(*qmvbState)
	defer qmvbPool.Put(s)
	s.run(dst, x, wq, sc, bi, m, n, k, gs, bits, esize, l, round)
	return true
}

// qmvbChunk is the weight bytes of the rows a worker runs every pass of
// four rows of x over before it moves on (they stay in L1 and L2 between
// passes).
const qmvbChunk = 32 << 10

// run lays out the rows of x in passes of R = 4 (the last one padded with
// zero rows), each interleaved per block, then splits the weight rows
// across workers, each running every pass over its chunk.
func (s *qmvbState) run(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, esize uintptr, l qLayout, round Rounder) {
	const R = 4
	wpr, gpr, nblk := WordsPerRow(k, bits), k/gs, l.nblk
	cb := 128 // code bytes of one row per weight block
	if bits == 8 {
		cb = 64
	}
	np := (m + R - 1) / R
	xb, db, sbs := R*cb*nblk, R*16*nblk, R*l.gpad // one pass's codes, lane scales, group sums
	s.xq, s.dxl, s.sums = grow(s.xq, k), grow(s.dxl, 16*nblk), grow(s.sums, l.gpad)
	s.bx, s.bd, s.bs = grow(s.bx, np*xb), grow(s.bd, np*db), grow(s.bs, np*sbs)
	for p := range np {
		bx, bd, bs := s.bx[p*xb:(p+1)*xb], s.bd[p*db:(p+1)*db], s.bs[p*sbs:(p+1)*sbs]
		for r := range R {
			if p*R+r >= m {
				for b := range nblk {
					clear(bx[(b*R+r)*cb : (b*R+r+1)*cb])
					clear(bd[(b*R+r)*16 : (b*R+r+1)*16])
				}
				for c := range l.gpad / 16 {
					clear(bs[(c*R+r)*16 : (c*R+r+1)*16])
				}
				continue
			}
			xr := x[(p*R+r)*k : (p*R+r+1)*k]
			qmvSums(&s.sums[0], &xr[0], gpr, gs)
			if bits == 4 {
				qmvQuantQ8B4(&s.xq[0], &s.dxl[0], &xr[0], k/32)
			} else {
				qmvQuantQ8B8(&s.xq[0], &s.dxl[0], &xr[0], k/32)
			}
			for b := range nblk {
				copy(bx[(b*R+r)*cb:(b*R+r+1)*cb], s.xq[b*cb:(b+1)*cb])
				copy(bd[(b*R+r)*16:(b*R+r+1)*16], s.dxl[b*16:(b+1)*16])
			}
			for c := range l.gpad / 16 {
				copy(bs[(c*R+r)*16:(c*R+r+1)*16], s.sums[c*16:(c+1)*16])
			}
		}
	}
	a := qmvBArgs{rowb: uintptr(4 * wpr)}
	if qmvQ8PF { // the one-row kernels' prefetch (AMD), as far ahead
		a.pf = uintptr(16*wpr + qmvPrefetch)
	}
	if l.half {
		a.nstep, a.bps, a.hoff, a.sstep = nblk, 1, esize, 2*esize
	} else {
		a.nstep, a.bps, a.hoff, a.sstep = nblk>>l.sh, 1<<l.sh, 0, esize
	}
	a.gstr = uintptr(gpr) * esize
	a.nbch = (gpr + 15) / 16
	a.bmask = 0xffff
	if r := gpr % 16; r != 0 {
		a.bmask = 1<<r - 1
	}
	var s0, b0 unsafe.Pointer
	if esize == 4 {
		s0, b0 = ptr(sc.F32), ptr(bi.F32)
	} else {
		s0, b0 = ptr(sc.U16), ptr(bi.U16)
	}
	st := 0
	switch {
	case sc.F16:
		st = 3
	case esize == 2 && l.half:
		st = 2
	case esize == 2:
		st = 1
	}
	s.out = grow(s.out, np*R*n)
	out := s.out
	chunk := max(1, qmvbChunk/(4*wpr)) // weight rows per chunk
	parallelFor(n, 16, func(lo, hi int) {
		for c0 := lo; c0 < hi; c0 += chunk {
			c1 := min(c0+chunk, hi)
			for p := range np {
				a := a
				a.x, a.d, a.xs = ptr(s.bx[p*xb:]), ptr(s.bd[p*db:]), ptr(s.bs[p*sbs:])
				a.w = unsafe.Add(ptr(wq), uintptr(c0)*a.rowb)
				a.s = unsafe.Add(s0, uintptr(c0)*a.gstr)
				a.b = unsafe.Add(b0, uintptr(c0)*a.gstr)
				o := out[p*R*n:]
				a.out = ptr(o[c0*R:])
				a.nrow = c1 - c0
				qmvbCall(bits, st, &a)
				for r := range min(R, m-p*R) {
					d := dst[(p*R+r)*n+c0 : (p*R+r)*n+c1]
					for j := range d {
						d[j] = o[(c0+j)*R+r]
					}
					roundSlice(d, round, roundKind(round))
				}
			}
		}
	})
}
