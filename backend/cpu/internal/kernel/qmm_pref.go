package kernel

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// The reference precision on packed 4-bit weights. Its one-row kernels on
// the original layout (qzmmF32B4 and its forms) hold eight weight rows
// four lanes each, which costs the shuffle ports two thirds of their
// instructions, a reduction of the lanes per group and a staged copy of
// every scale and bias per call: on Llama-3.2-1B's shapes (4-bit group 32,
// bfloat16 scales) 4.4 codes a cycle from cache, and a decode step spent
// 16% of its time staging. The int8 GEMM's panels (pack) hold word W of
// sixteen rows side by side and the scales as [group][16], a row per lane
// as they lie, so qprefB4 (qmm_pref_gen.go) runs dotF32's steps in each
// lane with half the shuffles, no reduction across lanes and the scales read
// in place: the same bits. The fast and reference precisions pack alike,
// so a matrix has one packed form whichever reads it.
//
// Once packed, the matrix is read from the panels alone (the backend gives
// the original pages back): one to three rows of x by qprefB4, a row at a
// time, where x allows it (prefScaleX); four or more by the AVX-512
// m-blocked kernels (avxRunPacked: avxGemmZ gathers its panels from the
// packed ones and stages their scales and biases); otherwise the panels
// are unpacked a slice of rows at a time into scratch for the row kernels
// (qmmTRefUnpacked).
//
// Measured on Zen 4 (2026-12-06): BenchmarkRefPackedQMV, one thread,
// Llama-3.2-1B's up projection (8 MB of codes, from L3): 16.8 G codes per
// CPU second on the original layout, 25.1 packed, 28.7 with the fused
// pairs (qprefB4*X). Llama-3.2-1B synth reference decode (mlxgo bench, two
// alternating runs) 18.7-19.9 -> 29.7-30.6 tok/s, 32.6-33.6 fused, prefill
// 512 the same (83-85 tok/s); the real SmolLM2 pair (float32
// x, float16 scales and biases) 120-122 -> 135-145 tok/s, the same text.

// prefNP is how many packed panels a qprefB4 call runs (np in
// qmm_pref_gen.go).
const prefNP = 3

// prefArgs are the arguments of the qprefB4 kernels (offsets fixed in
// qmm_pref_gen.go): prefNP packed panels (codes, scales; the biases boff
// bytes after the scales: the scales themselves when the matrix is
// symmetric, bf then its factor, else 1), x and xh (prefScaleX), the
// group sums of x, each panel's sixteen outputs, the groups per row and the
// words per group.
type prefArgs struct {
	w    [prefNP]unsafe.Pointer
	s    [prefNP]unsafe.Pointer
	boff uintptr
	x    unsafe.Pointer
	xh   unsafe.Pointer
	xs   unsafe.Pointer
	out  [prefNP]unsafe.Pointer
	ng   int
	wpg  int
	bf   float32
	_    float32
}

// refPacks reports whether the reference precision reads matrices of this
// shape from packed panels, on a CPU where they pack (AVX-512 VNNI, which
// implies the AVX-512F of the kernels): 4-bit codes in groups of 32, whose
// one-row order is dotF32's (qprefB4), and the shapes whose one-row order
// is the vector kernels' lane order (qpreflB, qmm_prefl.go).
func refPacks(k, gs, bits int) bool {
	return (bits == 4 && gs == 32 || laneOrder(k, gs, bits)) && packs(k, gs, bits)
}

// RefPackReplaces reports whether, in the reference precision, a matrix of
// k columns in groups of gs of bits bits is read from its packed copy alone
// once QuantizedMatmulTPacked has made it, at any number of rows, so that
// the original may leave memory.
func RefPackReplaces(k, gs, bits int) bool { return refPacks(k, gs, bits) }

// prefOn switches qprefB4 on (tests and benchmarks compare with the
// unpacking path); prefCalls counts the matmuls it ran (tests).
var (
	prefOn    = true
	prefCalls atomic.Int64
)

// qmmTRefPacked is the reference precision's matmul on packed 4-bit
// weights: the portable loop's bits, rounded by round.
func qmmTRefPacked(dst, x []float32, p *packedW, m int, round Rounder) {
	switch {
	case !prefOn:
	case m < prefGemmRows():
		// a row at a time by qprefB4, the bits of a row alone
		for r := range m {
			xr := x[r*p.k : (r+1)*p.k]
			if out := dst[r*p.n : (r+1)*p.n]; !qmvRefPacked(out, xr, p, round) {
				qmmTRefUnpacked(out, xr, p, 1, round)
			}
		}
		return
	case prefGemm(dst, x, p, m, round):
		return
	}
	qmmTRefUnpacked(dst, x, p, m, round)
}

// refPackedRun runs qmmTRefPacked where slot may hold the packed form of
// these weights (packing them on the first call), reporting false
// otherwise.
func refPackedRun(dst, x []float32, wq []uint32, sc, bi Vec, slot *PackSlot, m, n, k, gs, bits int, round Rounder) bool {
	if slot == nil || !refPacks(k, gs, bits) {
		return false
	}
	p := slot.get(wq, sc, bi, n, k, gs, bits)
	if p == nil {
		return false
	}
	qmmTRefPacked(dst, x, p, m, round)
	return true
}

// prefScale is 2^-4s for the nibbles s = 4..7 taken by conversion.
var prefScale = [4]float32{0x1p-16, 0x1p-20, 0x1p-24, 0x1p-28}

// prefScaleX writes xh[8i+s] = x[8i+s]·2^-4s for s = 4..7 of every word i
// and reports whether each of those scalings is exact (x zero, not finite,
// or of magnitude 2^-98 or more, where the scaled value stays normal), so
// that (c·2^4s)·xh rounds as c·x does. Where it is not, qmvRefPacked
// declines.
func prefScaleX(xh, x []float32) bool {
	for i := 0; i+8 <= len(x); i += 8 {
		for s := 4; s < 8; s++ {
			v := x[i+s]
			if a := math.Abs(float64(v)); a != 0 && a < 0x1p-98 {
				return false
			}
			xh[i+s] = v * prefScale[s-4]
		}
	}
	return true
}

// prefX is one row of x prepared for qprefB4 (prefPrepare): x itself, xh
// (prefScaleX), the group sums, and whether the fused kernels take it.
type prefX struct {
	x, xh, xs []float32
	fused     bool
}

// prefPrepare prepares x (k values, groups of gs) in s's scratch (xh in
// s.xp[off:], the group sums in s.xs[off/gs:]), reporting false where
// prefScaleX declines it.
func prefPrepare(s *qmmScratch, x []float32, k, gs, off int) (prefX, bool) {
	xh := s.xp[off : off+k]
	scaled, fused := prefScan(xh, x[:k])
	if !scaled {
		return prefX{}, false
	}
	xs := s.xs[off/gs : (off+k)/gs]
	groupSumsFlat(xs, x, k/gs, gs)
	return prefX{x: x[:k], xh: xh, xs: xs, fused: fused}, true
}

// prefJob is one matrix's qprefB4 calls against one prepared row of x,
// prefNP panels a call.
type prefJob struct {
	dst   []float32
	p     *packedW
	x     prefX
	kern  func(*prefArgs)
	bf    float32
	round Rounder
	rk    byte
	np    int // panels
}

func newPrefJob(dst []float32, p *packedW, x prefX, round Rounder) prefJob {
	j := prefJob{dst: dst, p: p, x: x, kern: prefKernel(p, x.fused), bf: 1, round: round, rk: roundKind(round), np: (p.n + q8C - 1) / q8C}
	if p.symk != 0 {
		j.bf = p.symk
	}
	return j
}

// calls is how many kernel calls the job takes.
func (j *prefJob) calls() int { return (j.np + prefNP - 1) / prefNP }

// run makes calls lo..hi-1.
func (j *prefJob) run(lo, hi int) {
	p, n, np, dst := j.p, j.p.n, j.np, j.dst
	var spare [prefNP * q8C]float32 // the outputs of rows past n
	a := prefArgs{x: ptr(j.x.x), xh: ptr(j.x.xh), xs: ptr(j.x.xs), ng: p.k / p.gs, wpg: p.gs / 8, bf: j.bf}
	for q := lo; q < hi; q++ {
		c0 := prefNP * q
		for h := range prefNP {
			c := min(c0+h, np-1) // panels past the last: run it again
			var b unsafe.Pointer
			a.w[h], a.s[h], b = p.panel(c)
			a.boff = uintptr(b) - uintptr(a.s[h])
			a.out[h] = unsafe.Pointer(&spare[h*q8C])
			if r := c * q8C; c == c0+h && r+q8C <= n {
				a.out[h] = unsafe.Pointer(&dst[r])
			}
		}
		j.kern(&a)
		for h := range prefNP {
			if r := (c0 + h) * q8C; c0+h < np && r+q8C > n {
				copy(dst[r:n], spare[h*q8C:])
			}
		}
		roundSlice(dst[c0*q8C:min(n, (c0+prefNP)*q8C)], j.round, j.rk)
	}
}

// qmvRefPacked runs qprefB4 over p's panels, prefNP a call, split across the
// workers; it reports false (having written nothing) where prefScaleX
// declines x.
func qmvRefPacked(dst, x []float32, p *packedW, round Rounder) bool {
	if laneOrder(p.k, p.gs, p.bits) {
		qmvRefLanes(dst, x, p, round)
		return true
	}
	s := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(s)
	s.xp, s.xs = grow(s.xp, p.k), grow(s.xs, p.k/p.gs)
	px, ok := prefPrepare(s, x, p.k, p.gs, 0)
	if !ok {
		return false
	}
	j := newPrefJob(dst, p, px, round)
	parallelFor(j.calls(), max(1, 2048/p.k), j.run)
	prefCalls.Add(1)
	return true
}

// refSharedRun is QuantizedMatmulTPackedShared's reference form for one to
// three rows of x where every matrix reads packed panels (refPacks, a
// slot): each row of x prepared once, and per row every matrix's calls
// in one pass of the workers. It reports false (having written nothing)
// where that does not apply or prefScaleX declines a row.
func refSharedRun(x []float32, mats []SharedMat, m, k, gs, bits int, round Rounder) bool {
	if !prefOn || m >= prefGemmRows() || !refPacks(k, gs, bits) {
		return false
	}
	for _, a := range mats {
		if a.Slot == nil {
			return false
		}
	}
	packed := make([]*packedW, len(mats))
	for i, a := range mats {
		if packed[i] = a.Slot.get(a.WQ, a.Scales, a.Biases, a.N, k, gs, bits); packed[i] == nil {
			return false // (never where refPacks holds; nothing written yet)
		}
	}
	if laneOrder(k, gs, bits) {
		refSharedLanes(x, mats, packed, m, k, gs, round)
		return true
	}
	s := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(s)
	s.xp, s.xs = grow(s.xp, m*k), grow(s.xs, m*k/gs)
	xs := make([]prefX, m)
	for r := range m {
		var ok bool
		if xs[r], ok = prefPrepare(s, x[r*k:], k, gs, r*k); !ok {
			return false
		}
	}
	jobs := make([]prefJob, len(mats))
	calls := make([]int, len(mats))
	for r := range m {
		for i, a := range mats {
			jobs[i] = newPrefJob(a.Dst[r*a.N:(r+1)*a.N], packed[i], xs[r], round)
			calls[i] = jobs[i].calls()
		}
		parallelJobs(calls, max(1, 2048/k), func(i, lo, hi int) { jobs[i].run(lo, hi) })
	}
	prefCalls.Add(int64(len(mats)))
	return true
}

// prefUnpackBytes bounds the codes qmmTRefUnpacked unpacks at a time, and
// the outputs it holds before copying them out.
const prefUnpackBytes = 8 << 20

// qmmTRefUnpacked unpacks p's panels a slice of rows at a time into the
// row layout, scales and biases as float32 (exact), and runs qmmTRows on
// each slice: the bits it gives the original weights.
func qmmTRefUnpacked(dst, x []float32, p *packedW, m int, round Rounder) {
	n, k, gs, bits := p.n, p.k, p.gs, p.bits
	wpr, ng := WordsPerRow(k, bits), k/gs
	rows := max(q8C, min(n+q8C-1, prefUnpackBytes/(4*wpr), prefUnpackBytes/(4*m))) &^ (q8C - 1)
	u := prefPool.Get().(*prefScratch)
	defer prefPool.Put(u)
	u.wq, u.sb, u.out = grow(u.wq, rows*wpr), grow(u.sb, 2*rows*ng), grow(u.out, m*rows)
	for j0 := 0; j0 < n; j0 += rows {
		nr := min(rows, n-j0)
		wq, sc, bi := u.wq[:nr*wpr], u.sb[:nr*ng], u.sb[rows*ng:][:nr*ng]
		parallelFor((nr+q8C-1)/q8C, 1, func(lo, hi int) {
			ts := make([]float32, 2*ng*q8C)
			for c := lo; c < hi; c++ {
				r0 := c * q8C
				rn := min(q8C, nr-r0)
				p.unpackPanel(j0/q8C+c, wq[r0*wpr:(r0+rn)*wpr], sc[r0*ng:(r0+rn)*ng], bi[r0*ng:(r0+rn)*ng], rn, ts)
			}
		})
		out := u.out[:m*nr]
		qmmTRows(out, x, wq, F32Vec(sc), F32Vec(bi), m, nr, k, gs, bits, round, false)
		for r := range m {
			copy(dst[r*n+j0:r*n+j0+nr], out[r*nr:(r+1)*nr])
		}
	}
}

// unpackPanel writes the first rn rows of panel ct back in the row layout:
// their words to wq (rn·wpr), scales and biases as float32 to sc and bi
// (rn·ng; the biases are symk times the scales in a symmetric matrix, the
// values symmetricFactor found stored); ts is scratch of 2·ng·16 floats.
func (p *packedW) unpackPanel(ct int, wq []uint32, sc, bi []float32, rn int, ts []float32) {
	k, gs, bits := p.k, p.gs, p.bits
	wpr, ng := WordsPerRow(k, bits), k/gs
	codes, _, _ := p.panel(ct)
	var t [q8C * 16]uint32 // one chunk: row r's 16 words at 16·r
	for c := 0; 16*c < wpr; c++ {
		q8Transpose(ptr(t[:]), unsafe.Add(codes, 1024*c), 64, 1, false)
		cnt := min(16, wpr-16*c)
		for r := range rn {
			copy(wq[r*wpr+16*c:r*wpr+16*c+cnt], t[16*r:16*r+cnt])
		}
	}
	p.panelFloats(ct, false, ts[:ng*q8C])
	p.panelFloats(ct, true, ts[ng*q8C:])
	for r := range rn {
		for g := range ng {
			sc[r*ng+g] = ts[g*q8C+r]
			bi[r*ng+g] = ts[ng*q8C+g*q8C+r]
		}
	}
}

// panelFloats writes panel ct's scales, or with bias its biases, as
// float32 ([ng][16], exact) to dst: in a symmetric matrix the biases are
// symk times the scales, the values symmetricFactor found stored.
func (p *packedW) panelFloats(ct int, bias bool, dst []float32) {
	n := p.k / p.gs * q8C
	_, sp, bp := p.panel(ct)
	if bias && p.symk == 0 {
		sp = bp
	}
	p.panelVec(sp, n).load(dst[:n], 0)
	if bias && p.symk != 0 {
		for i := range dst[:n] {
			dst[i] *= p.symk
		}
	}
}

// panelVec wraps n scales or biases of p at v in a Vec of p's dtype.
func (p *packedW) panelVec(v unsafe.Pointer, n int) Vec {
	if p.sb16 == nil {
		return F32Vec(unsafe.Slice((*float32)(v), n))
	}
	return Vec{U16: unsafe.Slice((*uint16)(v), n), F16: p.sdt == 1}
}

// prefScratch is qmmTRefUnpacked's pooled scratch: a slice of rows' words,
// their scales then biases, and the outputs.
type prefScratch struct {
	wq  []uint32
	sb  []float32
	out []float32
}

var prefPool = sync.Pool{New: func() any { return new(prefScratch) }}
