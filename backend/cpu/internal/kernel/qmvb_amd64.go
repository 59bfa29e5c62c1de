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
// at six and eight rows.

// qmvBArgs are the arguments of the kernels (field offsets fixed in
// qmvb_amd64.s): w, s, b the weights, scales and biases of the first
// weight row; x, d, xs the rows of x interleaved per block (codes, lane
// scales, group sums: see qmvb_amd64.s); out the results, R floats per
// weight row; nrow weight rows; nstep, bps, rowb, gstr, hoff, sstep, nbch
// and bmask as in qmvArgs.
type qmvBArgs struct {
	w, s, b                 unsafe.Pointer // 0, 8, 16
	x, d, xs                unsafe.Pointer // 24, 32, 40
	out                     unsafe.Pointer // 48
	nrow, nstep, bps        int            // 56, 64, 72
	rowb, gstr, hoff, sstep uintptr        // 80, 88, 96, 104
	nbch                    int            // 112
	bmask                   uint64         // 120
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

// qmvbKernels are the kernels by bits (4, 8) and scale storage (float32,
// bfloat16, bfloat16 two groups per block, float16).
var qmvbKernels = [2][4]func(*qmvBArgs){
	{qmvbQ8B4F32R4, qmvbQ8B4BF16R4, qmvbQ8B4BF16HR4, qmvbQ8B4F16R4},
	{qmvbQ8B8F32R4, qmvbQ8B8BF16R4, qmvbQ8B8BF16HR4, qmvbQ8B8F16R4},
}

// qmvBatchMax is the most rows of x the batched kernels take in one call
// (in passes of four rows; tests raise it); qmvbOn switches them on (tests
// compare).
var (
	qmvBatchMax = 4
	qmvbOn      = true
)

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
// the one-row int8 kernel would not run (qmvRows's conditions).
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
	for r0 := 0; r0 < m; r0 += 4 {
		rows := min(4, m-r0)
		s.pass(dst[r0*n:], x[r0*k:], wq, sc, bi, rows, n, k, gs, bits, esize, l, round)
	}
	return true
}

// pass runs rows (at most R = 4) rows of x: padded with zero rows,
// interleaved per block, then the weight rows split across workers.
func (s *qmvbState) pass(dst, x []float32, wq []uint32, sc, bi Vec, rows, n, k, gs, bits int, esize uintptr, l qLayout, round Rounder) {
	const R = 4
	wpr, gpr, nblk := WordsPerRow(k, bits), k/gs, l.nblk
	cb := 128 // code bytes of one row per weight block
	if bits == 8 {
		cb = 64
	}
	s.xq, s.dxl, s.sums = grow(s.xq, k), grow(s.dxl, 16*nblk), grow(s.sums, l.gpad)
	s.bx, s.bd, s.bs = grow(s.bx, R*cb*nblk), grow(s.bd, R*16*nblk), grow(s.bs, R*l.gpad)
	for r := range R {
		if r >= rows {
			for b := range nblk {
				clear(s.bx[(b*R+r)*cb : (b*R+r+1)*cb])
				clear(s.bd[(b*R+r)*16 : (b*R+r+1)*16])
			}
			for c := range l.gpad / 16 {
				clear(s.bs[(c*R+r)*16 : (c*R+r+1)*16])
			}
			continue
		}
		xr := x[r*k : (r+1)*k]
		qmvSums(&s.sums[0], &xr[0], gpr, gs)
		if bits == 4 {
			qmvQuantQ8B4(&s.xq[0], &s.dxl[0], &xr[0], k/32)
		} else {
			qmvQuantQ8B8(&s.xq[0], &s.dxl[0], &xr[0], k/32)
		}
		for b := range nblk {
			copy(s.bx[(b*R+r)*cb:(b*R+r+1)*cb], s.xq[b*cb:(b+1)*cb])
			copy(s.bd[(b*R+r)*16:(b*R+r+1)*16], s.dxl[b*16:(b+1)*16])
		}
		for c := range l.gpad / 16 {
			copy(s.bs[(c*R+r)*16:(c*R+r+1)*16], s.sums[c*16:(c+1)*16])
		}
	}
	a := qmvBArgs{x: ptr(s.bx), d: ptr(s.bd), xs: ptr(s.bs), rowb: uintptr(4 * wpr)}
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
	kern := qmvbKernels[bits/8][st]
	s.out = grow(s.out, R*n)
	out := s.out
	parallelFor(n, 16, func(lo, hi int) {
		a := a
		a.w = unsafe.Add(ptr(wq), uintptr(lo)*a.rowb)
		a.s = unsafe.Add(s0, uintptr(lo)*a.gstr)
		a.b = unsafe.Add(b0, uintptr(lo)*a.gstr)
		a.out = ptr(out[lo*R:])
		a.nrow = hi - lo
		kern(&a)
		for r := range rows {
			d := dst[r*n+lo : r*n+hi]
			for j := range d {
				d[j] = out[(lo+j)*R+r]
			}
			roundSlice(d, round, roundKind(round))
		}
	})
}
