package kernel

import (
	"math"
	"sync"
	"unsafe"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
)

// The float32 SDPA (AccF32): a blocked online ("flash") softmax.
//
// Work is split into items: one batch, one KV head and a block of up to lb
// query positions, whose rows are the rep = h/hk query heads sharing the KV
// head at each position (row r = position·rep + head). An item walks its
// keys in blocks of sdpaBK (aligned to multiples of sdpaBK from key 0):
// the block's K rows are loaded once (transposed and converted to float32
// for the vector kernels), scored against every row that sees any of them,
// the row's softmax state (max m, sum l, accumulator acc) is updated, and
// the block's V rows are accumulated, again loaded once per item. A causal
// row stops at its last visible key: blocks past it are not visited and
// keys past it in its last block get no weight. Under MaskPrefix (causal,
// and a block of a prefix-shared sequence never sees another block) a
// block of keys past the prefix is scored only for the rows of the blocks
// it overlaps (an item wholly in a later block skips it), and a row reads
// no mask unless the block holds keys of an earlier block; skipping a
// block whose keys a row cannot see leaves the row's state as a block of
// masked scores would (factor exp(0) = 1, weights 0), so the result is
// that of the explicit Bool mask bit for bit.
//
// Keys are further grouped in chunks of sdpaChunk: each chunk's state is
// computed from the empty state and the chunks are merged in order. A
// single query row's arithmetic therefore depends only on its own position
// and mask, never on l or on the other rows of its item, so chunked and
// one-shot prefill agree bit for bit; and chunks of one item may run on
// different workers (decode at long context) with the same result.
//
// Per row and block, in float32:
//
//	s_j  = Σ_t qs_t·k_jt (+ Add mask)  qs = scale·q, summed in order of t (fused on AVX-512)
//	M    = max(m, max_j s_j)
//	f    = exp(m − M)                 (1 while M is −Inf; exp is mlxmath.Exp)
//	p_j  = exp(s_j − M)               (exp(s_j) while M is −Inf: 0 for −Inf scores)
//	l    = l·f + Σ_j p_j
//	acc  = acc·f + Σ_j p_j·v_j        (in order of j)
//
// and chunk states (M1, l1, acc1), (M2, l2, acc2) merge as M = max(M1, M2),
// f_i = exp(M_i − M) (1 when M is −Inf), l = l1·f1 + l2·f2, acc likewise.
// The output is round(acc/l). Keys a Bool mask hides inside a row's range
// score −Inf and are left out of the accumulation (runs of visible keys),
// so their values never reach the row, as in the reference.
//
// In the fast precision (AccQ8) the scores on bfloat16 keys of a model with
// at most four query heads a KV head (d = 64 or 128) run through VDPBF16PS
// where the CPU has AVX512_BF16 (bfScores): the query in bfloat16, the
// products of bfloat16 pairs summed in float32 in 16 lanes and the lanes in
// a tree, then the scale. The keys are read in place, not transposed
// (sdpaKT and the float32 scores were about half of the attention's time in
// SmolLM2's eight-row decode step); the score differs from the float32
// path's by float32 rounding (TestSDPABF16Fast). Every query row of such a
// model takes it, decode and prefill alike, so a row's bits still depend on
// its own position and mask alone (TestSDPABF16Chunked). Float32 and
// float16 keys of such a model (a float32 model's, such as the SmolLM2
// GGUF's conversion with its float32 norms, or a float16 checkpoint's)
// take the same shape (fScores): a block's keys in key order, read in
// place or widened to float32, not transposed, and each score's products
// summed in 16 lanes and a tree.
//
// With d, dv multiples of 16 the steps run in assembly kernels: those of
// sdpa_amd64.s with AVX-512 (asmF32), the same code with or without
// GOEXPERIMENT=simd, else those of sdpa_avx2_amd64.s with AVX2, FMA and
// F16C (sdpaAVX2), which give every lane the same instructions in the same
// order and so the same bits. Otherwise they run in Go loops (dot32,
// axpy32, ExpSlice: vector code with AVX2, see vecops.go), which keep the
// structure (and so the independence from l) but not the bits of the
// assembly paths.

const (
	sdpaBK    = 32  // keys per block (the width of the vector kernels)
	sdpaChunk = 256 // keys per chunk (a multiple of sdpaBK)
	sdpaRows  = 128 // target query rows per item
)

// Kernel sets of the float32 SDPA (sdpaJob.vk).
const (
	sdpaGo  = iota // the portable Go loops
	sdpa512        // the AVX-512 kernels of sdpa_amd64.s
	sdpa256        // the AVX2 kernels of sdpa_avx2_amd64.s
)

// sdpaKernels picks the kernel set for head sizes d and dv.
func sdpaKernels(d, dv int) int {
	switch {
	case !sdpaHaveAsm || d%16 != 0 || dv%16 != 0:
		return sdpaGo
	case asmF32:
		return sdpa512
	case sdpaAVX2:
		return sdpa256
	}
	return sdpaGo
}

// Storage kinds of the assembly kernels.
const (
	sdpaF32 = iota
	sdpaBF16
	sdpaF16
)

// sdpaKind is the storage kind of v.
func sdpaKind(v Vec) int {
	switch {
	case v.F32 != nil:
		return sdpaF32
	case v.F16:
		return sdpaF16
	}
	return sdpaBF16
}

// sdpaJob is one call of the float32 SDPA.
type sdpaJob struct {
	dst, q                     []float32
	k, v                       *KV // &kk, &vv
	kk, vv                     KV
	mm                         Mask
	b, h, hk, l, s, d, dv, rep int
	scale                      float32
	m                          *Mask
	round                      Rounder
	lb, nqb                    int  // query positions per item, query blocks
	rmax, rpad                 int  // rows per item: lb·rep, rounded up to 4
	vk                         int  // the kernel set: sdpaGo, sdpa512 or sdpa256
	asm                        bool // vk is an assembly set
	kkind, vkind               int
	rkind                      byte    // roundKind(round)
	qk8                        *q8Keys // the keys of the 8-bit key kernel, or nil (sdpa_q8.go)
	qpv8                       bool    // the 8-bit value kernel (sdpa_q8.go)
	bfk                        bool    // bfloat16 scores (bfScores)
	fk                         bool    // float32 or float16 keys in order (fScores)
	starts                     []int   // per batch entry, the key its blocks start from (keyStarts), or nil for 0
}

// sdpaState is the online-softmax state of an item's rows: m, l, the block
// rescale factors f (rpad+16 each: sdpaSoftmax works on groups of 16 rows)
// and the per-row count of visible keys n, and the accumulators acc
// (rpad·dv).
type sdpaState struct {
	m, l, f []float32
	n       []int
	acc     []float32
}

// newSDPAState lays a state out on buf (sdpaStateLen values) and n (rpad
// counts).
func newSDPAState(buf []float32, n []int, rpad, dv int) sdpaState {
	g := rpad + 16
	return sdpaState{m: buf[:g], l: buf[g : 2*g], f: buf[2*g : 3*g], acc: buf[3*g : 3*g+rpad*dv], n: n[:rpad]}
}

func sdpaStateLen(rpad, dv int) int { return 3*(rpad+16) + rpad*dv }

// reset empties rows [0, rows).
func (st *sdpaState) reset(rows, dv int) {
	for r := range rows {
		st.m[r], st.l[r], st.f[r], st.n[r] = float32(math.Inf(-1)), 0, 1, 0
	}
	clear(st.acc[:rows*dv])
}

// sdpaWork is one worker's scratch.
type sdpaWork struct {
	qs, sc, kt, kc, vb []float32
	qb, kb             []uint16  // bfScores: the rows' queries, a partial block's keys
	mx                 []float32 // scratch of sdpaMerge
	keep               []float32 // the states of rows chunk skips
	st, st2            sdpaState // an item's state and a chunk's
	stBuf, stBuf2      []float32
	nBuf               []int
	hole               []bool
	q8                 sdpaQ8Scratch
}

var sdpaPool = sync.Pool{New: func() any { return new(sdpaWork) }}

// sdpaSplit is runSplit's scratch: the chunk states (on buf and n) and the
// merge scratch of each item (x).
type sdpaSplit struct {
	buf, x []float32
	n      []int
	states []sdpaState
}

// sdpaSplitPool holds the scratch of runSplit.
var sdpaSplitPool = sync.Pool{New: func() any { return new(sdpaSplit) }}

func sdpaGrow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func (j *sdpaJob) work() *sdpaWork {
	w := sdpaPool.Get().(*sdpaWork)
	w.qs = sdpaGrow(w.qs, j.rpad*j.d)
	w.sc = sdpaGrow(w.sc, (j.rpad+16)*sdpaBK)
	w.mx = sdpaGrow(w.mx, 2*j.rpad+16)
	w.keep = sdpaGrow(w.keep, 32)
	w.kt = sdpaGrow(w.kt, sdpaBK*j.d)
	w.kc = sdpaGrow(w.kc, sdpaBK*j.d)
	w.vb = sdpaGrow(w.vb, sdpaBK*j.dv)
	w.stBuf = sdpaGrow(w.stBuf, sdpaStateLen(j.rpad, j.dv))
	if cap(w.nBuf) < 2*j.rpad {
		w.nBuf = make([]int, 2*j.rpad)
	}
	w.st = newSDPAState(w.stBuf, w.nBuf, j.rpad, j.dv)
	w.stBuf2 = sdpaGrow(w.stBuf2, sdpaStateLen(j.rpad, j.dv))
	w.st2 = newSDPAState(w.stBuf2, w.nBuf[j.rpad:], j.rpad, j.dv)
	if cap(w.hole) < j.rpad {
		w.hole = make([]bool, j.rpad)
	}
	w.hole = w.hole[:j.rpad]
	w.q8.grow(j)
	if j.bfk {
		w.qb = sdpaGrow16(w.qb, j.rpad*j.d)
		w.kb = sdpaGrow16(w.kb, sdpaBK*j.d)
	}
	return w
}

func sdpaGrow16(s []uint16, n int) []uint16 {
	if cap(s) < n {
		return make([]uint16, n)
	}
	return s[:n]
}

// sdpa32 is the float32 SDPA on a validated call (acc AccF32 or AccQ8:
// AccQ8 takes the 8-bit key kernel of sdpa_q8.go where it applies).
func sdpa32(dst, q []float32, k, v *KV, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder, acc Acc) {
	if b == 0 || l == 0 {
		return
	}
	j := newSDPAJob(dst, q, k, v, b, h, hk, l, s, d, dv, scale, m, round, acc)
	items := b * j.hk * j.nqb
	nch := (s + sdpaChunk - 1) / sdpaChunk
	th := Threads()
	if th > 1 && nch > 1 && items < 2*th && items*nch*sdpaStateLen(j.rpad, dv) <= 1<<22 {
		j.runSplit(items, nch)
		return
	}
	parallelFor(items, 1, func(lo, hi int) {
		w := j.work()
		defer sdpaPool.Put(w)
		for it := lo; it < hi; it++ {
			if it+1 < hi {
				j.prefetchItem(it + 1)
			}
			j.runItem(w, it)
		}
	})
}

// sdpa32Rows runs the float32 SDPA of each job (one batch entry each, the
// same head counts, query length and head dims) in one parallel pass over
// all their items. Each item runs as in sdpa32's unsplit path (runItem),
// whose results runSplit's match bit for bit, so every job gets what
// sdpa32 gives it alone.
func sdpa32Rows(jobs []*sdpaJob) {
	if len(jobs) == 0 {
		return
	}
	per := jobs[0].hk * jobs[0].nqb // items per job
	parallelFor(len(jobs)*per, 1, func(lo, hi int) {
		w := jobs[0].work() // every job has the same rpad, d and dv
		defer sdpaPool.Put(w)
		for it := lo; it < hi; it++ {
			if it+1 < hi {
				jobs[(it+1)/per].prefetchItem((it + 1) % per)
			}
			jobs[it/per].runItem(w, it%per)
		}
	})
}

// newSDPAJob sets up the float32 SDPA of a validated call.
func newSDPAJob(dst, q []float32, k, v *KV, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder, acc Acc) *sdpaJob {
	j := new(sdpaJob)
	j.init(dst, q, k, v, b, h, hk, l, s, d, dv, scale, m, round, acc)
	return j
}

// init sets up j as newSDPAJob's job (SDPAKVRows sets up its rows' jobs in
// one slice).
func (j *sdpaJob) init(dst, q []float32, k, v *KV, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder, acc Acc) {
	*j = sdpaJob{dst: dst, q: q, kk: *k, vv: *v, mm: *m, b: b, h: h, hk: hk, l: l, s: s, d: d, dv: dv, rep: h / hk,
		scale: scale, round: round, kkind: sdpaKind(k.Vec), vkind: sdpaKind(v.Vec), rkind: roundKind(round)}
	j.k, j.v, j.m = &j.kk, &j.vv, &j.mm // copies: the caller's values stay on its stack
	j.lb = min(l, max(1, sdpaRows/j.rep))
	j.nqb = (l + j.lb - 1) / j.lb
	j.rmax = j.lb * j.rep
	j.rpad = (j.rmax + 3) &^ 3
	j.vk = sdpaKernels(d, dv)
	j.asm = j.vk != sdpaGo
	j.qk8 = sdpaQ8KeysOf(k, d, acc, j.vk)
	j.qpv8 = sdpaQ8Values(v, dv, j.vk)
	// Every query row of such a model (decode, a verify window, prefill)
	// takes bfScores, so a row's bits do not depend on l (TestSDPABF16Chunked).
	j.bfk = acc == AccQ8 && asmBF16 && j.vk == sdpa512 && j.qk8 == nil && !k.expanded() && k.Vec.F32 == nil && !k.Vec.F16 &&
		(d == 64 || d == 128) && j.rep <= 4
	// Likewise on float32 and float16 keys: fScores.
	j.fk = acc == AccQ8 && j.vk == sdpa512 && j.qk8 == nil && !k.expanded() && (k.Vec.F16 || k.Vec.F32 != nil) &&
		(d == 64 || d == 128) && j.rep <= 4
	j.starts = keyStarts(m, b, h, l, s)
}

// keyStarts returns, under a Bool mask, the first key any query of each
// batch entry sees (nil when that is key 0 everywhere). The key blocks of
// an entry start there, so that a row of a left-padded batch (mlx_lm's
// BatchKVCache: padding keys hidden before the row's first token) has its
// keys in the lanes and blocks they have when the row runs alone, and gets
// the bits it gets alone; the hidden keys before it add nothing to any
// sum. An entry whose queries see no key keeps 0.
func keyStarts(m *Mask, b, h, l, s int) []int {
	if m.Kind != MaskBool {
		return nil
	}
	hs, ls := h, l // a broadcast axis (stride 0) needs one pass
	if m.Strides[1] == 0 {
		hs = 1
	}
	if m.Strides[2] == 0 {
		ls = 1
	}
	var starts []int
	for bi := range b {
		first := s
		for hq := range hs {
			for i := range ls {
				for x := range first {
					if m.Bool[m.index(bi, hq, i, x)] {
						first = x
						break
					}
				}
			}
		}
		if first > 0 && first < s {
			if starts == nil {
				starts = make([]int, b)
			}
			starts[bi] = first
		}
	}
	return starts
}

// keyStart is the key where batch entry bi's blocks start for queries that
// see keys up to kEnd (exclusive): keyStarts's, or 0 where that is none or
// those queries see nothing past it.
func (j *sdpaJob) keyStart(bi, kEnd int) int {
	if j.starts == nil || j.starts[bi] >= kEnd {
		return 0
	}
	return j.starts[bi]
}

// item returns the batch, KV head and query block of item it. Query blocks
// alternate from both ends (0, last, 1, last-1, ...) so that contiguous
// ranges of items carry similar causal work.
func (j *sdpaJob) item(it int) (bi, kh, qb int) {
	x := it % j.nqb
	qb = x / 2
	if x%2 == 1 {
		qb = j.nqb - 1 - x/2
	}
	bh := it / j.nqb
	return bh / j.hk, bh % j.hk, qb
}

// positions returns the first query position of block qb and its count.
func (j *sdpaJob) positions(qb int) (i0, np int) {
	i0 = qb * j.lb
	return i0, min(j.lb, j.l-i0)
}

// lim is the last key query position i may see.
func (j *sdpaJob) lim(i int) int {
	if j.m.Kind == MaskCausal || j.m.Kind == MaskPrefix {
		return min(i+j.s-j.l, j.s-1)
	}
	return j.s - 1
}

// seeEnd is the end of the item's positions (from i0, np of them) that may
// see a key of the block [j0, j0+n): all of them, except under MaskPrefix
// where a block of keys past the prefix is seen only by the positions of
// the blocks it overlaps.
func (j *sdpaJob) seeEnd(i0, np, j0, n int) int {
	if j.m.Kind != MaskPrefix || j0 < j.m.Prefix {
		return np
	}
	return max(0, min(np, j.m.blockEnd(j0+n-1)-i0))
}

// prefixHidden reports whether MaskPrefix hides a key of [j0, j0+nv) from
// query i: those in [Prefix, its block's start).
func (j *sdpaJob) prefixHidden(i, j0, nv int) bool {
	return max(j0, j.m.Prefix) < min(j0+nv, j.m.blockStart(i))
}

// runItem computes an item's outputs, chunk after chunk.
func (j *sdpaJob) runItem(w *sdpaWork, it int) {
	bi, kh, qb := j.item(it)
	i0, np := j.positions(qb)
	rows := np * j.rep
	j.loadQ(w, bi, kh, i0, np)
	kEnd := j.lim(i0+np-1) + 1
	base := j.keyStart(bi, kEnd)
	st := &w.st
	st.reset(rows, j.dv)
	if kEnd > 0 {
		j.chunk(w, st, bi, kh, i0, np, base, min(kEnd, base+sdpaChunk))
	}
	for c0 := base + sdpaChunk; c0 < kEnd; c0 += sdpaChunk {
		tmp := &w.st2
		tmp.reset(rows, j.dv)
		j.chunk(w, tmp, bi, kh, i0, np, c0, min(kEnd, c0+sdpaChunk))
		sdpaMerge(st, tmp, rows, j.dv, j.vk, w.mx)
	}
	j.output(st, bi, kh, i0, np)
}

// runSplit runs the chunks of few items on separate workers, then merges
// them in order per item (the same operations as runItem).
func (j *sdpaJob) runSplit(items, nch int) {
	sl := sdpaStateLen(j.rpad, j.dv)
	sp := sdpaSplitPool.Get().(*sdpaSplit)
	defer sdpaSplitPool.Put(sp)
	sp.buf = sdpaGrow(sp.buf, items*nch*sl)
	xl := 2*j.rpad + 16
	sp.x = sdpaGrow(sp.x, items*xl)
	if cap(sp.n) < items*nch*j.rpad {
		sp.n = make([]int, items*nch*j.rpad)
	}
	if cap(sp.states) < items*nch {
		sp.states = make([]sdpaState, items*nch)
	}
	buf, nbuf, states := sp.buf, sp.n, sp.states[:items*nch]
	for x := range states {
		states[x] = newSDPAState(buf[x*sl:(x+1)*sl], nbuf[x*j.rpad:], j.rpad, j.dv)
	}
	parallelFor(items*nch, 1, func(lo, hi int) {
		w := j.work()
		defer sdpaPool.Put(w)
		last := -1
		for x := lo; x < hi; x++ {
			it, c := x/nch, x%nch
			bi, kh, qb := j.item(it)
			i0, np := j.positions(qb)
			if it != last {
				j.loadQ(w, bi, kh, i0, np)
				last = it
			}
			st := &states[x]
			st.reset(np*j.rep, j.dv)
			kEnd := j.lim(i0+np-1) + 1
			c0 := j.keyStart(bi, kEnd) + c*sdpaChunk
			if c0 < kEnd {
				j.chunk(w, st, bi, kh, i0, np, c0, min(kEnd, c0+sdpaChunk))
			}
		}
	})
	parallelFor(items, 1, func(lo, hi int) {
		for it := lo; it < hi; it++ {
			x := sp.x[it*xl : (it+1)*xl]
			bi, kh, qb := j.item(it)
			i0, np := j.positions(qb)
			st := &states[it*nch]
			for c := 1; c < nch; c++ {
				sdpaMerge(st, &states[it*nch+c], np*j.rep, j.dv, j.vk, x)
			}
			j.output(st, bi, kh, i0, np)
		}
	})
}

// loadQ writes scale·q of the item's rows to w.qs (zero rows up to rpad),
// and quantizes them for the 8-bit key kernel when the job takes it; for
// bfScores it writes the unscaled rows in bfloat16 to w.qb instead (exact
// for a bfloat16 model's queries).
func (j *sdpaJob) loadQ(w *sdpaWork, bi, kh, i0, np int) {
	d, qs := j.d, w.qs
	for pi := range np {
		for g := range j.rep {
			hq := kh*j.rep + g
			src := j.q[((bi*j.h+hq)*j.l+i0+pi)*d:][:d]
			r := pi*j.rep + g
			if j.bfk {
				float32sToBF16(w.qb[r*d:(r+1)*d], src)
				continue
			}
			dst := qs[r*d:][:d]
			switch j.vk {
			case sdpa512:
				sdpaScale(&dst[0], &src[0], j.scale, d)
				continue
			case sdpa256:
				sdpa2Scale(&dst[0], &src[0], j.scale, d)
				continue
			}
			for t, x := range src {
				dst[t] = j.scale * x
			}
		}
	}
	if j.bfk {
		return
	}
	clear(qs[np*j.rep*d : j.rpad*d])
	if j.qk8 != nil {
		j.quantQ(w, qs)
	}
}

// sdpaMerge merges chunk state c into st for rows [0, rows): with M =
// max(m, c.m), f1 = exp(m − M) and f2 = exp(c.m − M) (1 when M is −Inf),
// l·f1 + c.l·f2 and acc·f1 + c.acc·f2 (fused with the kernel sets vk of
// the assembly paths). x is scratch of 2·rows+16 values.
func sdpaMerge(st, c *sdpaState, rows, dv, vk int, x []float32) {
	n := (2*rows + 15) &^ 15
	x = x[:n]
	clear(x)
	for r := range rows {
		if c.n[r] == 0 || st.n[r] == 0 {
			continue
		}
		m := max(st.m[r], c.m[r])
		if !math.IsInf(float64(m), -1) {
			x[2*r], x[2*r+1] = st.m[r]-m, c.m[r]-m
		}
	}
	if vk == sdpa512 {
		sdpaExp(&x[0], &x[0], n)
	} else {
		ExpSlice(x, x) // the same bits (mlxmath.Exp), vector code with AVX2
	}
	for r := range rows {
		if c.n[r] == 0 {
			continue
		}
		a, ca := st.acc[r*dv:(r+1)*dv], c.acc[r*dv:(r+1)*dv]
		if st.n[r] == 0 {
			st.m[r], st.l[r], st.n[r] = c.m[r], c.l[r], c.n[r]
			copy(a, ca)
			continue
		}
		f1, f2 := x[2*r], x[2*r+1]
		st.m[r], st.n[r] = max(st.m[r], c.m[r]), st.n[r]+c.n[r]
		st.l[r] = st.l[r]*f1 + c.l[r]*f2
		switch vk {
		case sdpa512:
			sdpaMergeAcc(&a[0], &ca[0], f1, f2, dv)
			continue
		case sdpa256:
			sdpa2MergeAcc(&a[0], &ca[0], f1, f2, dv)
			continue
		}
		for t := range a {
			a[t] = a[t]*f1 + ca[t]*f2
		}
	}
}

// output writes round(acc/l) of the item's rows to dst; a row that saw no
// key gets the mean of all of v (MLX's uniform softmax over masked scores).
func (j *sdpaJob) output(st *sdpaState, bi, kh, i0, np int) {
	dv := j.dv
	for pi := range np {
		for g := range j.rep {
			r := pi*j.rep + g
			hq := kh*j.rep + g
			o := j.dst[((bi*j.h+hq)*j.l+i0+pi)*dv:][:dv]
			a := st.acc[r*dv : (r+1)*dv]
			if st.n[r] == 0 {
				j.meanV(o, a, bi, kh)
				continue
			}
			l := st.l[r]
			if j.asm {
				bf16 := 0
				if j.rkind == 'b' {
					bf16 = 1
				}
				if j.vk == sdpa512 {
					sdpaOut(&o[0], &a[0], l, dv, bf16)
				} else {
					sdpa2Out(&o[0], &a[0], l, dv, bf16)
				}
				if j.rkind != 'b' {
					roundSlice(o, j.round, j.rkind)
				}
				continue
			}
			for t, x := range a {
				o[t] = x / l
			}
			roundSlice(o, j.round, j.rkind)
		}
	}
}

// meanV writes round(Σ_j v_j / s) to o, summing in order of j like the
// reference (tmp is scratch of dv values).
func (j *sdpaJob) meanV(o, tmp []float32, bi, kh int) {
	clear(tmp)
	buf := make([]float32, j.dv)
	for key := range j.s {
		for t, x := range kvRow(j.v, bi, kh, key, j.dv, buf) {
			tmp[t] += x
		}
	}
	n := float32(j.s)
	for t, x := range tmp {
		o[t] = j.round(x / n)
	}
}

// sdpaVecPtr returns a pointer to element off of v's storage.
func sdpaVecPtr(v Vec, off int) unsafe.Pointer {
	if v.F32 != nil {
		return unsafe.Pointer(&v.F32[off])
	}
	return unsafe.Pointer(&v.U16[off])
}

// sdpaElemSize is the size in bytes of one of v's values.
func sdpaElemSize(v Vec) uintptr {
	if v.F32 != nil {
		return 4
	}
	return 2
}

// chunk accumulates keys [c0, c1) into st (emptied by the caller) for the
// rows of positions i0..i0+np-1.
func (j *sdpaJob) chunk(w *sdpaWork, st *sdpaState, bi, kh, i0, np, c0, c1 int) {
	rep := j.rep
	ninf := float32(math.Inf(-1))
	for j0 := c0; j0 < c1; j0 += sdpaBK {
		n := min(sdpaBK, c1-j0)
		// Rows whose positions see no key of this block come first (lim
		// grows with the position): skip them.
		p0 := 0
		for p0 < np && j.lim(i0+p0) < j0 {
			p0++
		}
		if p0 == np {
			break
		}
		// Rows past p1 see no key of this block (MaskPrefix: a later
		// block's queries): skip them; their state is that of a block
		// whose scores are all masked, which leaves it unchanged.
		p1 := j.seeEnd(i0, np, j0, n)
		if p1 <= p0 {
			continue
		}
		r0, rows := p0*rep, p1*rep
		if j.vk == sdpa256 || j.qk8 != nil || j.qpv8 {
			// A decode step finds the cache evicted by the matmuls: ask
			// for this block's values (read after the scores) and the keys
			// two blocks on (sdpa2KT asks for the next block's; the 8-bit
			// kernels ask for nothing themselves).
			sdpaPrefetchRows(j.v, bi, kh, j0, n, j.dv, false)
			if k0 := j0 + 2*sdpaBK; k0 < j.s {
				if k := j.qk8; k != nil {
					sdpa2Prefetch(unsafe.Pointer(&k.codes[k.row(bi, kh, k0)]), uintptr(k.rst), min(sdpaBK, j.s-k0), j.d)
				} else {
					sdpaPrefetchRows(j.k, bi, kh, k0, min(sdpaBK, j.s-k0), j.d, false)
				}
			}
		} else if j.plainL2PF() {
			// The AVX-512 kernels on plain storage: this block's values
			// and the next block's keys into L2 (the item's first keys
			// were asked for before it started: prefetchItem).
			sdpaPrefetchRows(j.v, bi, kh, j0, n, j.dv, true)
			if k0 := j0 + sdpaBK; k0 < j.s {
				sdpaPrefetchRows(j.k, bi, kh, k0, min(sdpaBK, j.s-k0), j.d, true)
			}
		}
		j.scores(w, bi, kh, j0, n, r0, rows)
		for pi := p0; pi < p1; pi++ {
			nv := min(n, j.lim(i0+pi)-j0+1)
			for g := range rep {
				r := pi*rep + g
				sc := w.sc[r*sdpaBK : (r+1)*sdpaBK]
				for x := nv; x < sdpaBK; x++ {
					sc[x] = ninf
				}
				cnt := nv
				w.hole[r] = false
				switch j.m.Kind {
				case MaskBool:
					hq := kh*rep + g
					for x := range nv {
						if !j.m.Bool[j.m.index(bi, hq, i0+pi, j0+x)] {
							sc[x] = ninf
							w.hole[r] = true
							cnt--
						}
					}
				case MaskAdd:
					hq := kh*rep + g
					for x := range nv {
						sc[x] += j.m.Add[j.m.index(bi, hq, i0+pi, j0+x)]
					}
				case MaskPrefix:
					if !j.prefixHidden(i0+pi, j0, nv) {
						break // every key up to the position: no mask read
					}
					for x := range nv {
						if !j.m.visible0(i0+pi, j0+x) {
							sc[x] = ninf
							w.hole[r] = true
							cnt--
						}
					}
				}
				st.n[r] += cnt
			}
		}
		// The assembly softmax works on groups of 8 or 16 rows and leaves
		// garbage in the states of the rows past the last: keep those of
		// the skipped rows.
		keep := min(np*rep, (r0+(rows-r0+15)&^15)) - rows
		if keep > 0 {
			copy(w.keep[:keep], st.m[rows:])
			copy(w.keep[keep:2*keep], st.l[rows:])
		}
		switch j.vk {
		case sdpa512:
			sdpaSoftmax(&w.sc[r0*sdpaBK], &st.m[r0], &st.l[r0], &st.f[r0], rows-r0)
		case sdpa256:
			sdpa2Softmax(&w.sc[r0*sdpaBK], &st.m[r0], &st.l[r0], &st.f[r0], rows-r0)
		default:
			sdpaSoftmaxGo(w.sc[r0*sdpaBK:rows*sdpaBK], st.m[r0:rows], st.l[r0:rows], st.f[r0:rows])
		}
		if keep > 0 {
			copy(st.m[rows:rows+keep], w.keep[:keep])
			copy(st.l[rows:rows+keep], w.keep[keep:2*keep])
		}
		j.pv(w, st, bi, kh, i0, j0, n, p0, p1, np*rep)
	}
}

// scores writes the scores of rows [r0, rows) against keys j0..j0+n-1 to
// w.sc (row r at r·sdpaBK; lanes n..31 are left to the caller's mask).
func (j *sdpaJob) scores(w *sdpaWork, bi, kh, j0, n, r0, rows int) {
	d, k := j.d, j.k
	if j.qk8 != nil && w.q8.qok {
		j.q8Scores(w, bi, kh, j0, n, r0, rows)
		return
	}
	if j.bfk {
		j.bfScores(w, bi, kh, j0, n, r0, rows)
		return
	}
	if j.fk {
		j.fScores(w, bi, kh, j0, n, r0, rows)
		return
	}
	if j.asm {
		if k.expanded() {
			// Quantized or decoded keys: expand the block's rows to
			// float32, zero rows after a partial block, then transpose.
			expandRows(w.kc, d, k, bi, kh, j0, n, d)
			clear(w.kc[n*d : sdpaBK*d])
			j.kt(w.kt, unsafe.Pointer(&w.kc[0]), uintptr(4*d), sdpaF32)
		} else if n == sdpaBK {
			es := sdpaElemSize(k.Vec)
			src := sdpaVecPtr(k.Vec, k.row(bi, kh, j0))
			stride := uintptr(k.RowStride) * es
			j.kt(w.kt, src, stride, j.kkind)
		} else {
			// A partial block: convert its rows to float32 with zero rows
			// after them, then transpose.
			j.cvt(w.kc, d, sdpaVecPtr(k.Vec, k.row(bi, kh, j0)), uintptr(k.RowStride)*sdpaElemSize(k.Vec), n, d, j.kkind)
			clear(w.kc[n*d : sdpaBK*d])
			j.kt(w.kt, unsafe.Pointer(&w.kc[0]), uintptr(4*d), sdpaF32)
		}
		ra := r0 &^ 3
		switch {
		case j.vk == sdpa512 && rows-ra == 3:
			// A decode step's three query heads of one KV head (SmolLM2):
			// no padding row's multiply-adds (the same chain per row).
			sdpaScores3(&w.sc[ra*sdpaBK], &w.qs[ra*d], &w.kt[0], d)
		case j.vk == sdpa512:
			sdpaScores(&w.sc[ra*sdpaBK], &w.qs[ra*d], &w.kt[0], j.rpadRows(rows)-ra, d)
		default:
			sdpa2Scores(&w.sc[ra*sdpaBK], &w.qs[ra*d], &w.kt[0], j.rpadRows(rows)-ra, d)
		}
		return
	}
	if k.expanded() {
		expandRows(w.kc, d, k, bi, kh, j0, n, d)
	}
	for x := range n {
		kr := w.kc[x*d : (x+1)*d]
		if !k.expanded() {
			kr = kvRow(k, bi, kh, j0+x, d, kr)
		}
		for r := r0; r < rows; r++ {
			w.sc[r*sdpaBK+x] = dot32(w.qs[r*d:(r+1)*d], kr)
		}
	}
}

// bfScores is scores in the fast precision on bfloat16 keys
// (sdpaJob.bfk): sdpaScoresBF64 or 128 on the
// block's keys in place (a partial block's too where its sdpaBK rows lie
// inside the storage: see blockInside), or on a copy of a partial block's
// keys followed by zero keys (whose scores the caller masks). Each score is
// scale·(q·k) with q and k in bfloat16 and the products summed in float32
// in the kernel's order (pairs, then lanes in a tree), where the float32
// path sums scale·q·k along the key: within float32 rounding of each
// other, and the same for a row whatever the rows beside it.
func (j *sdpaJob) bfScores(w *sdpaWork, bi, kh, j0, n, r0, rows int) {
	d, k := j.d, j.k
	src := sdpaVecPtr(k.Vec, k.row(bi, kh, j0))
	stride := uintptr(k.RowStride) * 2
	if n < sdpaBK && !k.blockInside(bi, kh, j0, d) {
		for x := range n {
			copy(w.kb[x*d:(x+1)*d], k.Vec.U16[k.row(bi, kh, j0+x):][:d])
		}
		clear(w.kb[n*d:])
		src, stride = unsafe.Pointer(&w.kb[0]), uintptr(2*d)
	}
	if d == 64 {
		sdpaScoresBF64(&w.sc[r0*sdpaBK], &w.qb[r0*d], src, stride, rows-r0, j.scale)
	} else {
		sdpaScoresBF128(&w.sc[r0*sdpaBK], &w.qb[r0*d], src, stride, rows-r0, j.scale)
	}
}

// fScores is bfScores on float32 and float16 keys (sdpaJob.fk):
// sdpaScoresF64 or 128 against the rows of scale·q (w.qs), on float32 keys
// in place (a partial block's too where its sdpaBK rows lie inside the
// storage: see blockInside), or on a float32 copy of the block's keys in
// key order (float16 keys widened, exactly; a partial block's followed by
// zero keys, whose scores the caller masks). Each score sums the float32 products in the
// kernel's order (16 lanes, then a tree), where the float32 path sums
// along the key: within float32 rounding of each other, and the same for a
// row whatever the rows beside it.
func (j *sdpaJob) fScores(w *sdpaWork, bi, kh, j0, n, r0, rows int) {
	d, k := j.d, j.k
	var src unsafe.Pointer
	var stride uintptr
	switch {
	case k.Vec.F32 != nil && (n == sdpaBK || k.blockInside(bi, kh, j0, d)):
		src, stride = unsafe.Pointer(&k.Vec.F32[k.row(bi, kh, j0)]), uintptr(k.RowStride)*4
	case k.Vec.F32 != nil:
		for x := range n {
			copy(w.kc[x*d:(x+1)*d], k.Vec.F32[k.row(bi, kh, j0+x):][:d])
		}
		clear(w.kc[n*d : sdpaBK*d])
		src, stride = unsafe.Pointer(&w.kc[0]), uintptr(4*d)
	default:
		j.cvt(w.kc, d, sdpaVecPtr(k.Vec, k.row(bi, kh, j0)), uintptr(k.RowStride)*2, n, d, sdpaF16)
		clear(w.kc[n*d : sdpaBK*d])
		src, stride = unsafe.Pointer(&w.kc[0]), uintptr(4*d)
	}
	if d == 64 {
		sdpaScoresF64(&w.sc[r0*sdpaBK], &w.qs[r0*d], src, stride, rows-r0)
	} else {
		sdpaScoresF128(&w.sc[r0*sdpaBK], &w.qs[r0*d], src, stride, rows-r0)
	}
}

// kt transposes (and converts) the sdpaBK rows of a block of keys at src
// into dst[t·32 + r].
func (j *sdpaJob) kt(dst []float32, src unsafe.Pointer, stride uintptr, kind int) {
	if j.vk == sdpa256 {
		sdpa2KT(&dst[0], src, stride, j.d, kind)
		return
	}
	sdpaKT(&dst[0], src, stride, j.d, kind)
	sdpaKT(&dst[16], unsafe.Add(src, 16*stride), stride, j.d, kind)
}

// cvt converts rows of n values to float32 rows dstride apart in dst.
func (j *sdpaJob) cvt(dst []float32, dstride int, src unsafe.Pointer, sstride uintptr, rows, n, kind int) {
	if j.vk == sdpa256 {
		sdpa2Cvt(&dst[0], dstride, src, sstride, rows, n, kind)
		return
	}
	sdpaCvt(&dst[0], dstride, src, sstride, rows, n, kind)
}

// rpadRows rounds rows up to a multiple of 4.
func (j *sdpaJob) rpadRows(rows int) int { return (rows + 3) &^ 3 }

// pv accumulates the weights in w.sc against the block's V rows for the
// positions p0..np-1; the item has real rows in all (rows past them, up to
// rpad, are padding).
func (j *sdpaJob) pv(w *sdpaWork, st *sdpaState, bi, kh, i0, j0, n, p0, np, real int) {
	rep, dv, v := j.rep, j.dv, j.v
	nvis := func(r int) int { return min(n, j.lim(i0+r/rep)-j0+1) }
	rows := np * rep
	r := p0 * rep
	if j.qpv8 {
		// Groups of 8 rows that see the whole block read the 8-bit values
		// in place (the same bits as below on the expanded rows); the
		// rest, if any, take the loop below.
		for r+8 <= rows && nvis(r) == n && nvis(r+7) == n && !slicesAny(w.hole[r:r+8]) {
			j.runQPV8(w, st, bi, kh, j0, n, r)
			r += 8
		}
		if r == rows {
			return
		}
	}
	var vp unsafe.Pointer
	var vstride uintptr
	var vrows []float32 // portable path: the block's V rows, or nil when read in place
	vkind := sdpaF32    // the storage sdpaPV512 reads at vp
	if j.asm {
		switch {
		case v.expanded():
			expandRows(w.vb, dv, v, bi, kh, j0, n, dv)
			vp, vstride = unsafe.Pointer(&w.vb[0]), uintptr(dv)*4
		case v.Vec.F32 != nil:
			vp, vstride = sdpaVecPtr(v.Vec, v.row(bi, kh, j0)), uintptr(v.RowStride)*4
		case j.vk == sdpa512:
			// 16-bit values read in place, widened as they load (the
			// bits of the float32 kernels on converted rows).
			vp, vstride, vkind = sdpaVecPtr(v.Vec, v.row(bi, kh, j0)), uintptr(v.RowStride)*2, j.vkind
		default:
			j.cvt(w.vb, dv, sdpaVecPtr(v.Vec, v.row(bi, kh, j0)), uintptr(v.RowStride)*2, n, dv, j.vkind)
			vp, vstride = unsafe.Pointer(&w.vb[0]), uintptr(dv)*4
		}
	} else if v.expanded() {
		expandRows(w.vb, dv, v, bi, kh, j0, n, dv)
		vrows = w.vb
	} else if v.Vec.F32 == nil {
		for x := range n {
			v.Vec.load(w.vb[x*dv:(x+1)*dv], v.row(bi, kh, j0+x))
		}
		vrows = w.vb
	}
	vrow := func(x int) []float32 {
		if vrows != nil {
			return vrows[x*dv : (x+1)*dv]
		}
		return v.Vec.F32[v.row(bi, kh, j0+x):][:dv]
	}
	one := float32(1)
	for r < rows {
		nv := nvis(r)
		if w.hole[r] { // Bool mask: accumulate the runs of visible keys
			pi, hq, f := r/rep, kh*rep+r%rep, &st.f[r]
			for x := 0; x < nv; {
				if !j.visible(bi, hq, i0+pi, j0+x) {
					x++
					continue
				}
				e := x + 1
				for e < nv && j.visible(bi, hq, i0+pi, j0+e) {
					e++
				}
				switch j.vk {
				case sdpa512:
					sdpaPV512(1, vkind, &st.acc[r*dv], &w.sc[r*sdpaBK+x], unsafe.Add(vp, uintptr(x)*vstride), vstride, f, e-x, dv)
				case sdpa256:
					sdpa2PV1(&st.acc[r*dv], &w.sc[r*sdpaBK+x], unsafe.Add(vp, uintptr(x)*vstride), vstride, f, e-x, dv)
				default:
					sdpaPVGo(st.acc[r*dv:(r+1)*dv], w.sc[r*sdpaBK+x:r*sdpaBK+e], *f, func(y int) []float32 { return vrow(x + y) })
				}
				f = &one // the rescale applies once
				x = e
			}
			r++
			continue
		}
		// Up to four rows (heads of one position, or positions that see
		// the whole block) with the same keys and no holes go together.
		g := 1
		if j.asm {
			for g < 4 && r+g < rows && nvis(r+g) == nv && !w.hole[r+g] {
				g++
			}
		}
		if j.vk == sdpa512 && g == 2 && r+g == real && rows == real && r+4 <= j.rpad {
			// The item's last two rows (a decode step's query heads of
			// one KV head): padding rows with zero weights make a group
			// of four, so the block's values are read and widened once,
			// not once per row. Each row's arithmetic is its own: the
			// real rows get the bits of the one-row kernel.
			for x := r + g; x < r+4; x++ {
				clear(w.sc[x*sdpaBK : (x+1)*sdpaBK])
				clear(st.acc[x*dv : (x+1)*dv])
				st.f[x] = 0
			}
			sdpaPV512(4, vkind, &st.acc[r*dv], &w.sc[r*sdpaBK], vp, vstride, &st.f[r], nv, dv)
			r += g
			continue
		}
		switch {
		case j.vk == sdpa512 && (g == 4 || g == 3):
			// Four rows, or three (a decode step's query heads of one KV
			// head in SmolLM2; the kernel of three has no padding row).
			sdpaPV512(g, vkind, &st.acc[r*dv], &w.sc[r*sdpaBK], vp, vstride, &st.f[r], nv, dv)
		case j.vk == sdpa512:
			g = 1
			sdpaPV512(1, vkind, &st.acc[r*dv], &w.sc[r*sdpaBK], vp, vstride, &st.f[r], nv, dv)
		case j.vk == sdpa256:
			sdpa2PV(g, &st.acc[r*dv], &w.sc[r*sdpaBK], vp, vstride, &st.f[r], nv, dv)
		default:
			sdpaPVGo(st.acc[r*dv:(r+1)*dv], w.sc[r*sdpaBK:r*sdpaBK+nv], st.f[r], vrow)
		}
		r += g
	}
}

// slicesAny reports whether any of bs is true.
func slicesAny(bs []bool) bool {
	for _, b := range bs {
		if b {
			return true
		}
	}
	return false
}

// sdpa2PV runs the AVX2 accumulation of g rows (1 to 4).
func sdpa2PV(g int, acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	switch g {
	case 4:
		sdpa2PV4(acc, p, v, vstride, f, n, dv)
	case 3:
		sdpa2PV3(acc, p, v, vstride, f, n, dv)
	case 2:
		sdpa2PV2(acc, p, v, vstride, f, n, dv)
	default:
		sdpa2PV1(acc, p, v, vstride, f, n, dv)
	}
}

// visible reports whether the Bool or prefix mask lets query (bi, hq, i)
// see key j.
func (j *sdpaJob) visible(bi, hq, i, key int) bool {
	switch j.m.Kind {
	case MaskBool:
		return j.m.Bool[j.m.index(bi, hq, i, key)]
	case MaskPrefix:
		return j.m.visible0(i, key)
	}
	return true
}

// sdpaSoftmaxGo is the portable sdpaSoftmax: per row r of sdpaBK scores in
// s, M = max(m_r, max_j s_j); f_r = exp(m_r − M) and s_j = exp(s_j − M)
// (f_r = 1 and s_j = exp(s_j) when M is −Inf); l_r = l_r·f_r + Σ_j s_j;
// m_r = M.
func sdpaSoftmaxGo(s, m, l, f []float32) {
	for r := range m {
		row := s[r*sdpaBK : (r+1)*sdpaBK]
		bm := float32(math.Inf(-1))
		for _, x := range row {
			if x > bm || x != x {
				bm = x
			}
		}
		mn := m[r]
		if bm > mn || bm != bm {
			mn = bm
		}
		shift, fr := float32(0), float32(1)
		if !math.IsInf(float64(mn), -1) {
			shift, fr = mn, mlxmath.Exp(m[r]-mn)
		}
		for x, v := range row {
			row[x] = v - shift
		}
		ExpSlice(row, row) // mlxmath.Exp of each, vector code where the CPU allows
		var sum float32
		for _, e := range row {
			sum += e
		}
		m[r], f[r] = mn, fr
		l[r] = l[r]*fr + sum
	}
}

// sdpaPVGo is the portable sdpaPV1: acc = acc·f, then acc += p_x·v_x for
// each weight p_x in order (vrow returns V row x).
func sdpaPVGo(acc []float32, p []float32, f float32, vrow func(x int) []float32) {
	if f != 1 {
		for t := range acc {
			acc[t] *= f
		}
	}
	for x, e := range p {
		axpy32(acc, e, vrow(x))
	}
}

// sdpaPrefetchRows prefetches rows rows (at least 1) of width values of kv
// from row0, all inside kv's storage: into L2 (sdpaPrefetchL2) when l2 is
// set, else into L1 (sdpa2Prefetch).
func sdpaPrefetchRows(kv *KV, bi, kh, row0, rows, width int, l2 bool) {
	if kv.Rows != nil {
		return // the source's storage is its own
	}
	pf := sdpa2Prefetch
	if l2 {
		pf = sdpaPrefetchL2
	}
	if q := kv.Q; q != nil { // the codes (the scales are a sixteenth of them at most)
		pf(unsafe.Pointer(&q.W[q.wrow(bi, kh, row0)]), uintptr(q.RowStride)*4, rows, width*q.Bits/8)
		return
	}
	es := sdpaElemSize(kv.Vec)
	pf(sdpaVecPtr(kv.Vec, kv.row(bi, kh, row0)), uintptr(kv.RowStride)*es, rows, width*int(es))
}

// plainL2PF reports whether the job's blocks are prefetched into L2 as it
// runs: the AVX-512 kernels (sdpa512) reading keys and values in place
// (not expanded from a quantized cache or a RowSource, nor the 8-bit key
// or value kernels, which the AVX2 path's prefetch serves).
func (j *sdpaJob) plainL2PF() bool {
	return j.vk == sdpa512 && j.qk8 == nil && !j.qpv8 && !j.k.expanded() && !j.v.expanded()
}

// prefetchItem asks for the first sdpaPFItemKeys keys of item it into L2
// (the workers call it as they start the item before): a decode step's
// items are short (a row's KV head over its context), and each one's first
// blocks would otherwise come from memory while the kernel waits (the
// matmuls between two steps evict the caches). BenchmarkSDPARowsCold, Zen
// 4, 2026-12-05: with the in-block prefetch alone ctx96/fast 44-48 ->
// 37-41 µs a layer; with this too 32-34 (ctx192 67-73 -> 53-60, f32 ctx96
// 52-72 -> 39-40).
func (j *sdpaJob) prefetchItem(it int) {
	if !j.plainL2PF() {
		return
	}
	bi, kh, qb := j.item(it)
	i0, np := j.positions(qb)
	kEnd := j.lim(i0+np-1) + 1
	base := j.keyStart(bi, kEnd)
	if n := min(sdpaPFItemKeys, kEnd-base); n > 0 {
		sdpaPrefetchRows(j.k, bi, kh, base, n, j.d, true)
	}
}

// sdpaPFItemKeys is how many keys prefetchItem asks for: two blocks.
const sdpaPFItemKeys = 2 * sdpaBK
