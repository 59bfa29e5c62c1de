//go:build amd64

package kernel

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// The quantized matmul for one row of x (decode, m = 1) with the kernels of
// qmv_amd64.s: each assembly call loops over tiles of four weight rows,
// reads the scales and biases in their storage dtype (float32, bfloat16
// or float16) and writes the results to dst. Workers take
// chunks of tiles from a shared counter, so a worker that starts late takes
// fewer. Every output gets the same float32 bits as the one-row-of-x path
// of the other vector kernels (qmm_amd64.s, simd_amd64.go), which keeps a
// prompt prefilled one token at a time equal to one-shot prefill.

// qmvArgs are the arguments of the kernels (field offsets fixed in
// qmv_amd64.s). w, s, b: the weights, scales and biases of the first tile's
// row 0; x (in the layout of permF32, or quantized in that of permQ8), d
// (int8: the block scale of x of each lane, as permQ8's dxl) and xs (the
// group sums of x, zero past the groups to a multiple of 16); out the
// results of the first tile. Per row: nstep scale steps of
// bps blocks (a step reads the scales at s and s + hoff, then moves sstep
// bytes), rowb weight bytes, gstr scale (and bias) bytes; nbch chunks of 16
// groups in the bias sum, the last one masked by bmask; pf the prefetch
// distance in bytes. The kernel updates b, out and ntile in place: after the
// last tile b and out point one past their arrays, which the garbage
// collector must never see as pointers, so they are uintptrs (the arrays are
// kept alive by qmvState while the kernel runs).
type qmvArgs struct {
	w, s                    unsafe.Pointer // 0, 8
	b                       uintptr        // 16: advanced in place by the kernel, so not a GC pointer (see below)
	x, d, xs                unsafe.Pointer // 24, 32, 40
	out                     uintptr        // 48: advanced in place by the kernel, like b
	ntile, nstep, bps       int            // 56, 64, 72
	rowb, gstr, hoff, sstep uintptr        // 80, 88, 96, 104
	nbch                    int            // 112
	bmask                   uint64         // 120
	pf                      uintptr        // 128
}

// The kernels, by precision (Q8, F32), bits (B4, B8) and scale storage:
// F32 float32, BF16 bfloat16, BF16H bfloat16 with two groups per block
// (the two scales of a block read with one load).

// qmvQ8B4F32 runs a.ntile tiles of four consecutive 4-bit weight rows
// against one row of x quantized to int8 (permQ8's layout), with float32
// scales and biases: each row from its first block to its last (per block
// the integer lane sums, times the lane scales of x and the block's
// scales, into the row's total), then the bias terms of the four rows, and
// the four horizontal sums to a.out. Each output is the bits of qdotQ8B4
// for one row of x.
//
//go:noescape
func qmvQ8B4F32(a *qmvArgs)

// qmvQ8B4BF16 is qmvQ8B4F32 with bfloat16 scales and biases.
//
//go:noescape
func qmvQ8B4BF16(a *qmvArgs)

// qmvQ8B4BF16H is qmvQ8B4BF16 for groups of half a block (8 lanes): the
// two scales of a block come from one load.
//
//go:noescape
func qmvQ8B4BF16H(a *qmvArgs)

// qmvQ8B8F32 is qmvQ8B4F32 for 8-bit weights (the bits of qdotQ8B8).
//
//go:noescape
func qmvQ8B8F32(a *qmvArgs)

// qmvQ8B8BF16 is qmvQ8B8F32 with bfloat16 scales and biases.
//
//go:noescape
func qmvQ8B8BF16(a *qmvArgs)

// qmvQ8B8BF16H is qmvQ8B8BF16 for groups of half a block (8 lanes): the
// two scales of a block come from one load.
//
//go:noescape
func qmvQ8B8BF16H(a *qmvArgs)

// qmvQ8B4F32P is qmvQ8B4F32 with the float32 kernels' prefetch (qmvQ8PF):
// the same bits.
//
//go:noescape
func qmvQ8B4F32P(a *qmvArgs)

// qmvQ8B4BF16P is qmvQ8B4BF16 with the prefetch.
//
//go:noescape
func qmvQ8B4BF16P(a *qmvArgs)

// qmvQ8B4BF16HP is qmvQ8B4BF16H with the prefetch.
//
//go:noescape
func qmvQ8B4BF16HP(a *qmvArgs)

// qmvQ8B8F32P is qmvQ8B8F32 with the prefetch.
//
//go:noescape
func qmvQ8B8F32P(a *qmvArgs)

// qmvQ8B8BF16P is qmvQ8B8BF16 with the prefetch.
//
//go:noescape
func qmvQ8B8BF16P(a *qmvArgs)

// qmvQ8B8BF16HP is qmvQ8B8BF16H with the prefetch.
//
//go:noescape
func qmvQ8B8BF16HP(a *qmvArgs)

// The kernels with float16 scales and biases (converted exactly: the bits
// of float32 scales and biases of the same values), F16H the forms for
// two groups per block, P the int8 ones with the prefetch (qmvQ8PF).

// qmvF32B4F16 is qmvF32B4BF16 with float16 scales and biases.
//
//go:noescape
func qmvF32B4F16(a *qmvArgs)

// qmvQ8B4F16 is qmvQ8B4BF16 with float16 scales and biases.
//
//go:noescape
func qmvQ8B4F16(a *qmvArgs)

// qmvQ8B4F16P is qmvQ8B4BF16P with float16 scales and biases.
//
//go:noescape
func qmvQ8B4F16P(a *qmvArgs)

// qmvQ8B4F16H is qmvQ8B4BF16H with float16 scales and biases.
//
//go:noescape
func qmvQ8B4F16H(a *qmvArgs)

// qmvQ8B4F16HP is qmvQ8B4BF16HP with float16 scales and biases.
//
//go:noescape
func qmvQ8B4F16HP(a *qmvArgs)

// qmvQ8B8F16 is qmvQ8B8BF16 with float16 scales and biases.
//
//go:noescape
func qmvQ8B8F16(a *qmvArgs)

// qmvQ8B8F16P is qmvQ8B8BF16P with float16 scales and biases.
//
//go:noescape
func qmvQ8B8F16P(a *qmvArgs)

// qmvQ8B8F16H is qmvQ8B8BF16H with float16 scales and biases.
//
//go:noescape
func qmvQ8B8F16H(a *qmvArgs)

// qmvQ8B8F16HP is qmvQ8B8BF16HP with float16 scales and biases.
//
//go:noescape
func qmvQ8B8F16HP(a *qmvArgs)

// qmvF32B4F16H is qmvF32B4BF16H with float16 scales and biases.
//
//go:noescape
func qmvF32B4F16H(a *qmvArgs)

// qmvF32B8F16 is qmvF32B8BF16 with float16 scales and biases.
//
//go:noescape
func qmvF32B8F16(a *qmvArgs)

// qmvF32B8F16H is qmvF32B8BF16H with float16 scales and biases.
//
//go:noescape
func qmvF32B8F16H(a *qmvArgs)

// qmvQ8PF selects the int8 kernels that prefetch the weights (qmvCall).
// It was set on AMD CPUs only (they took two thirds of the CPU time of
// the others on Zen 5, and on the Intel Xeon of the first benchmarks
// prefetching made them slower); on the lent Intel Xeon of 2026-12-04 the
// prefetching kernels read 1.1-3.5× the weight bytes per CPU second
// (qmv_amd64.s gives the figures), so they are the default on every CPU.
// Tests set it both ways; BenchmarkQMVStream runs both (-pf1, -pf0).
var qmvQ8PF = true

// qmvF32B4F32 is qmvQ8B4F32 against float32 x (permF32's layout): per
// block the codes as float32 times x, two partial products summed, times
// the block's scales into the row's total; each output the bits of
// qdotF32B4 for one row of x. It prefetches the weights a.pf bytes ahead.
//
//go:noescape
func qmvF32B4F32(a *qmvArgs)

// qmvF32B4BF16 is qmvF32B4F32 with bfloat16 scales and biases.
//
//go:noescape
func qmvF32B4BF16(a *qmvArgs)

// qmvF32B4BF16H is qmvF32B4BF16 for groups of half a block (8 lanes): the
// two scales of a block come from one load.
//
//go:noescape
func qmvF32B4BF16H(a *qmvArgs)

// qmvF32B8F32 is qmvF32B4F32 for 8-bit weights (the bits of qdotF32B8).
//
//go:noescape
func qmvF32B8F32(a *qmvArgs)

// qmvF32B8BF16 is qmvF32B8F32 with bfloat16 scales and biases.
//
//go:noescape
func qmvF32B8BF16(a *qmvArgs)

// qmvF32B8BF16H is qmvF32B8BF16 for groups of half a block (8 lanes): the
// two scales of a block come from one load.
//
//go:noescape
func qmvF32B8BF16H(a *qmvArgs)

// qmvKind numbers the kernels: float32 or bfloat16 scales 6·(int8) +
// 3·(8-bit) + scale storage (0 float32, 1 bfloat16, 2 bfloat16 with two
// groups per block); float16 scales 12 + 4·(int8) + 2·(8-bit) + (two
// groups per block).
func qmvKind(bits int, q8, bf16, f16, half bool) int {
	if f16 {
		v := 12
		if q8 {
			v += 4
		}
		if bits == 8 {
			v += 2
		}
		if half {
			v++
		}
		return v
	}
	v := 0
	if q8 {
		v += 6
	}
	if bits == 8 {
		v += 3
	}
	switch {
	case bf16 && half:
		v += 2
	case bf16:
		v++
	}
	return v
}

// qmvCall runs kernel v (qmvKind) on a; the int8 kernels (v >= 6) in
// their prefetching form when qmvQ8PF is set.
func qmvCall(a *qmvArgs, v int) {
	if v >= 12 {
		qmvCallF16(a, v)
		return
	}
	if v >= 6 && qmvQ8PF {
		switch v {
		case 6:
			qmvQ8B4F32P(a)
		case 7:
			qmvQ8B4BF16P(a)
		case 8:
			qmvQ8B4BF16HP(a)
		case 9:
			qmvQ8B8F32P(a)
		case 10:
			qmvQ8B8BF16P(a)
		default:
			qmvQ8B8BF16HP(a)
		}
		return
	}
	switch v {
	case 0:
		qmvF32B4F32(a)
	case 1:
		qmvF32B4BF16(a)
	case 2:
		qmvF32B4BF16H(a)
	case 3:
		qmvF32B8F32(a)
	case 4:
		qmvF32B8BF16(a)
	case 5:
		qmvF32B8BF16H(a)
	case 6:
		qmvQ8B4F32(a)
	case 7:
		qmvQ8B4BF16(a)
	case 8:
		qmvQ8B4BF16H(a)
	case 9:
		qmvQ8B8F32(a)
	case 10:
		qmvQ8B8BF16(a)
	default:
		qmvQ8B8BF16H(a)
	}
}

// qmvCallF16 runs float16 kernel v (qmvKind, 12-19) on a.
func qmvCallF16(a *qmvArgs, v int) {
	switch v {
	case 12:
		qmvF32B4F16(a)
	case 13:
		qmvF32B4F16H(a)
	case 14:
		qmvF32B8F16(a)
	case 15:
		qmvF32B8F16H(a)
	}
	if qmvQ8PF {
		switch v {
		case 16:
			qmvQ8B4F16P(a)
		case 17:
			qmvQ8B4F16HP(a)
		case 18:
			qmvQ8B8F16P(a)
		case 19:
			qmvQ8B8F16HP(a)
		}
		return
	}
	switch v {
	case 16:
		qmvQ8B4F16(a)
	case 17:
		qmvQ8B4F16H(a)
	case 18:
		qmvQ8B8F16(a)
	case 19:
		qmvQ8B8F16H(a)
	}
}

// qmvPrefetch is how far the kernels that prefetch (the float32 ones, and
// the int8 ones under qmvQ8PF) read ahead of the loads, in bytes past one
// tile (see qmv_amd64.s; 0 to 8192 made no difference beyond the noise on
// Zen 5). qmvChunk is the weight bytes of
// one chunk of tiles taken by a worker (32-128 KiB within a few percent of
// each other once each worker reads its own range; see run).
const qmvPrefetch = 2048

var qmvChunk = 64 << 10

// qmvSpreadPF has tiles run the full tiles of a chunk qmvSpreadTiles at a
// time and, before each call, prefetch the scales and biases of the same
// tiles one chunk on (tests compare with it off). The kernels prefetch the
// weights but leave the scale and bias streams (an eighth to a quarter of
// the bytes) to the hardware prefetcher; prefetched a few lines at a
// time, a chunk ahead, they are in cache when read: on Zen 5, one thread,
// decode layers streamed from memory (BenchmarkQMVSpreadPF, alternating
// runs, loaded machine), 8-bit g32 bf16 (Qwen2.5-0.5B's shapes) read
// 24.5 -> 30.6 GB per CPU second (float32) and 27.0 -> 34.0 (int8), 4-bit
// g64 (MiniCPM5-1B's) 20.2 -> 23.0 and 26.9 -> 32.8, 8-bit g64 29.5 ->
// 32.0 and 33.7 -> 40.2. Two to eight tiles per call were within a few
// percent of each other.
var qmvSpreadPF = true

// qmvSpreadTiles is the tiles per kernel call under qmvSpreadPF.
const qmvSpreadTiles = 4

// qmvOn switches the one-row kernels on (tests compare with them off).
var qmvOn = true

// qmvState is the pooled per-call state: x rearranged, the argument
// template, the chunk counter and the copy of a partial last tile.
type qmvState struct {
	xs, xp, dxl []float32
	xq          []int8
	tw          []uint32   // the partial tile's weights, 4 rows
	tf          []float32  // its float32 scales and biases
	tu          []uint16   // its bfloat16 scales and biases
	tout        [4]float32 // its results

	args               qmvArgs
	dst                []float32
	wq                 []uint32
	sc, bi             Vec
	n, wpr, gpr        int
	kern               int // qmvKind
	bf16               bool
	round              Rounder
	kind               byte // roundKind
	ntile, full, chunk int
	nrange             int
	next               [qmvMaxRanges]qmvCounter
	fn                 func(lo, hi int)
}

// qmvMaxRanges bounds the ranges a call's tiles are cut into (one per
// worker).
const qmvMaxRanges = 64

// qmvCounter counts the chunks claimed from one range, on its own cache
// line.
type qmvCounter struct {
	n atomic.Int64
	_ [56]byte
}

var qmvPool = sync.Pool{New: func() any {
	s := new(qmvState)
	s.fn = s.run
	return s
}}

// qmvRows computes dst[j] = round(x·W[j]) for the n weight rows with the
// kernels of qmv_amd64.s and reports true, or reports false (and does
// nothing) when they do not apply: no assembly kernel for these sizes and
// precision (vecKernel), or scales and biases not both float32, both
// bfloat16 or both float16.
func qmvRows(dst, x []float32, wq []uint32, sc, bi Vec, n, k, gs, bits int, round Rounder, q8 bool) bool {
	if !qmvOn || vecKernel(k, gs, bits, q8) != 'a' || n <= 0 || q8 && q8Max(bits) != 127 {
		return false // (the int8 rearrangement in assembly quantizes to ±127)
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
	check(wpr == 16*l.nblk && len(wq) >= n*wpr && len(dst) >= n && len(x) >= k &&
		sc.Len() >= n*gpr && bi.Len() >= n*gpr, "QuantizedMatmulT", "one-row kernel: slices too short")
	s := qmvPool.Get().(*qmvState)
	defer qmvPool.Put(s)

	// x: group sums (zero past the groups to gpad), then the layout of the
	// kernel, by the assembly forms of groupSums, permF32, quantizeQ8 and
	// permQ8.
	s.xs = grow(s.xs, l.gpad)
	qmvSums(&s.xs[0], &x[0], gpr, gs)
	a := qmvArgs{w: ptr(wq), xs: ptr(s.xs), out: uintptr(ptr(dst)), rowb: uintptr(4 * wpr), pf: uintptr(16*wpr + qmvPrefetch)}
	if q8 {
		s.xq, s.dxl = grow(s.xq, k), grow(s.dxl, k/(32/bits))
		if bits == 4 {
			qmvQuantQ8B4(&s.xq[0], &s.dxl[0], &x[0], k/32)
		} else {
			qmvQuantQ8B8(&s.xq[0], &s.dxl[0], &x[0], k/32)
		}
		a.x, a.d = ptr(s.xq), ptr(s.dxl)
	} else {
		s.xp = grow(s.xp, k)
		qmvPermF32(&s.xp[0], &x[0], l.nblk, 32/bits)
		a.x = ptr(s.xp)
	}
	// Scales: two groups per block (half), or one group per 2^sh blocks.
	if l.half {
		a.nstep, a.bps, a.hoff, a.sstep = l.nblk, 1, esize, 2*esize
	} else {
		a.nstep, a.bps, a.hoff, a.sstep = l.nblk>>l.sh, 1<<l.sh, 0, esize
	}
	a.gstr = uintptr(gpr) * esize
	a.nbch = (gpr + 15) / 16
	a.bmask = 0xffff
	if r := gpr % 16; r != 0 {
		a.bmask = 1<<r - 1
	}
	if esize == 4 {
		a.s, a.b = ptr(sc.F32), uintptr(ptr(bi.F32))
	} else {
		a.s, a.b = ptr(sc.U16), uintptr(ptr(bi.U16))
	}
	s.args, s.dst, s.wq, s.sc, s.bi = a, dst, wq, sc, bi
	s.n, s.wpr, s.gpr, s.bf16 = n, wpr, gpr, esize == 2
	s.kern = qmvKind(bits, q8, esize == 2, esize == 2 && sc.F16, l.half)
	s.round, s.kind = round, roundKind(round)
	s.full, s.ntile = n/4, (n+3)/4
	s.chunk = max(1, qmvChunk/(16*wpr))
	workers := min(Threads(), (s.ntile+s.chunk-1)/s.chunk, qmvMaxRanges)
	s.nrange = workers
	for r := range workers {
		s.next[r].n.Store(0)
	}
	parallelFor(workers, 1, s.fn)
	s.args, s.dst, s.wq, s.sc, s.bi, s.round = qmvArgs{}, nil, nil, Vec{}, Vec{}, nil
	return true
}

// run is a worker. The tiles are cut into one contiguous range per worker;
// worker w takes chunks from the front of range w, in memory order, then
// helps with the other ranges. Each worker thus reads one long sequential
// stream, which the hardware prefetcher follows across chunks (chunks
// handed out round-robin from one counter ran at 16-28 GB/s on two cores
// against 31-33 for contiguous streams), and a worker that starts late
// still costs at most one chunk at the end.
func (s *qmvState) run(w, _ int) {
	for j := range s.nrange {
		r := (w + j) % s.nrange
		lo, hi := r*s.ntile/s.nrange, (r+1)*s.ntile/s.nrange
		for {
			t0 := lo + int(s.next[r].n.Add(1)-1)*s.chunk
			if t0 >= hi {
				break
			}
			s.tiles(t0, min(t0+s.chunk, hi))
		}
	}
}

// tiles computes the rows of tiles t0 to t1 (exclusive): the full tiles in
// one kernel call, or under qmvSpreadPF in calls of qmvSpreadTiles, each
// after prefetching the scales and biases of its tiles' counterparts a
// chunk on.
func (s *qmvState) tiles(t0, t1 int) {
	if full := min(t1, s.full); full > t0 {
		if !qmvSpreadPF {
			s.call(t0, full)
		} else {
			for u := t0; u < full; u += qmvSpreadTiles {
				v := min(u+qmvSpreadTiles, full)
				if p := u + s.chunk; p+qmvSpreadTiles <= s.full {
					vecPrefetch(s.sc, 4*p*s.gpr, 4*qmvSpreadTiles*s.gpr)
					vecPrefetch(s.bi, 4*p*s.gpr, 4*qmvSpreadTiles*s.gpr)
				}
				s.call(u, v)
			}
		}
	}
	if t1 > s.full {
		s.tail()
	}
	roundSlice(s.dst[4*t0:min(4*t1, s.n)], s.round, s.kind)
}

// call runs the kernel over the full tiles u to v (exclusive).
func (s *qmvState) call(u, v int) {
	a := s.args
	j := uintptr(4 * u)
	a.w = unsafe.Add(a.w, j*a.rowb)
	a.s = unsafe.Add(a.s, j*a.gstr)
	a.b += j * a.gstr
	a.out += 4 * j
	a.ntile = v - u
	qmvCall(&a, s.kern)
}

// tail runs the partial last tile (n mod 4 rows) from a copy padded with
// zero rows.
func (s *qmvState) tail() {
	j0, r, wpr, gpr := 4*s.full, s.n-4*s.full, s.wpr, s.gpr
	s.tw = grow(s.tw, 4*wpr)
	clear(s.tw[copy(s.tw, s.wq[j0*wpr:s.n*wpr]):])
	a := s.args
	a.w, a.ntile = ptr(s.tw), 1
	if s.bf16 {
		s.tu = grow(s.tu, 8*gpr)
		clear(s.tu)
		copy(s.tu, s.sc.U16[j0*gpr:s.n*gpr])
		copy(s.tu[4*gpr:], s.bi.U16[j0*gpr:s.n*gpr])
		a.s, a.b = ptr(s.tu), uintptr(ptr(s.tu[4*gpr:]))
	} else {
		s.tf = grow(s.tf, 8*gpr)
		clear(s.tf)
		copy(s.tf, s.sc.F32[j0*gpr:s.n*gpr])
		copy(s.tf[4*gpr:], s.bi.F32[j0*gpr:s.n*gpr])
		a.s, a.b = ptr(s.tf), uintptr(ptr(s.tf[4*gpr:]))
	}
	a.out = uintptr(unsafe.Pointer(&s.tout))
	qmvCall(&a, s.kern)
	copy(s.dst[j0:s.n], s.tout[:r])
}

// qmvSums is groupSums for one row: xs[g] = Σ x[g·gs + i] for i =
// 0..gs-1, added in order in float32, sixteen groups at a time (lane g
// gathering its group's elements one by one); xs gets ng rounded up to 16
// values, zero past ng.
//
//go:noescape
func qmvSums(xs, x *float32, ng, gs int)

// qmvPermF32 is permF32 for one row of nblk blocks of 16·cpl values:
// vector p of a block (at xp + p·64 bytes) gathers elements cpl·l + p,
// l = 0..15.
//
//go:noescape
func qmvPermF32(xp, x *float32, nblk, cpl int)

// qmvQuantQ8B8 is quantizeQ8 (qmax 127) and permQ8 for one row of nq
// blocks of 32 with 8-bit weights, the same bits: codes in natural order,
// each block's scale repeated for its 8 lanes in dxl.
//
//go:noescape
func qmvQuantQ8B8(xq *int8, dxl, x *float32, nq int)

// qmvQuantQ8B4 is quantizeQ8 (qmax 127) and permQ8 for one row of nq
// blocks of 32 (nq a multiple of 4) with 4-bit weights, the same bits: per
// 128 codes the 64 even codes, then the 64 odd ones; each block's scale
// repeated for its 4 lanes in dxl.
//
//go:noescape
func qmvQuantQ8B4(xq *int8, dxl, x *float32, nq int)
