package kernel

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/internal/mmap"
)

// The int8 quantized matmul with transposed weights for two or more rows of
// x (prefill in the "fast" precision, AccQ8). Its arithmetic, per output
// y[r, j] (qmmTQ8BlockRef is the plain loop):
//
//	x[r] is quantized per block t of 32 (quantizeQ8): codes xq, scale d_t
//	xs_g = Σ_{i in g} x[r, i], sequentially in float32 (groupSums)
//	acc = 0
//	for each group g of W[j] (scale s_g, bias b_g):
//	    for each block t of 32 in g:
//	        I_t = Σ_{i in t} q_i·xq_i                  (exact int32)
//	        acc = fma(float32(I_t)·d_t, s_g, acc)      (product rounded, then one fused step)
//	    acc = fma(b_g, xs_g, acc)
//	y[r, j] = round(acc)
//
// Each output is one sequential float32 chain over its own row of x and W,
// so the result does not depend on m, on the tiling or on the machine: the
// assembly GEMMs (AVX-512 VNNI; AVX2+FMA, qmv_avx2_amd64.go) and the
// portable loop give the same bits.
// (4-bit weights in groups of 32 are the exception: there the GEMM sums in
// the one-row order, gemmDot.)
// The one-row path (m = 1, the decode kernels) sums the same terms, exactly
// the same integer block sums I_t, block scales d_t and group sums xs_g, in
// the lane order of qmmTQ8Ref instead; the two differ only by float32
// rounding: |y_gemm - y_row| <= 2·γ_{k/32 + 2k/gs + 4}·Σ|terms| (γ_j =
// j·u/(1 - j·u), u = 2^-24), before the final rounding to the dtype
// (TestQ8GemmVsRows holds them to it).
//
// The assembly form (qmm_gemm_amd64.s). x is quantized once per call into
// tiles of 8 rows: tile T holds, per block t, the 8 rows' 32 codes (256
// bytes, [t][row][32]), their block scales ([t][row] float32) and group
// sums ([g][row] float32); the rows past m are zero. For 4-bit weights the
// codes of each 8 are stored in the order 0, 2, 4, 6, 1, 3, 5, 7, matching
// the low and high nibbles of a weight word (the integer sum of a block
// does not depend on the order). The weights are taken 16 rows (output
// columns) at a time: their words are transposed into a panel of one dword
// per column and quad of codes (4-bit words split into low and high
// nibbles, one code per byte), 512 bytes per block of 32 codes, with the
// scales and biases as [group][16 columns] float32. The kernel then runs
// every tile of x against the panel: per block, 8 panel registers times
// 8 rows of x (VPDPBUSD with a broadcast dword of x codes; weight codes
// are the unsigned operand, x codes the signed one) give the 16·8 integer
// sums, which are folded into 8 accumulators of 16 columns as above.

const (
	q8R = 8  // rows of x per tile
	q8C = 16 // weight rows (output columns) per panel
)

// q8gArgs are the arguments of q8gemm (field offsets fixed in
// qmm_gemm_amd64.s): the panel of one tile of weight rows with its scales
// and biases ([group][16]); the first tile of x (codes, block scales, group
// sums, consecutive tiles following each other); out, the output of row 0
// and column 0 of the panel, with the byte stride of an output row; ng
// groups of bpg blocks; mt tiles of x, the last one with mlast rows; cmask
// the columns stored; bf16 rounds the outputs to bfloat16 when 1, to
// float16 when 2. While
// it runs, the kernel prefetches pfn bytes from pf (the next panel's weight
// rows), pfg bytes (a multiple of 512) per group, advancing both,
// and first spn bytes of the next panel's scales and biases at sps and spb.
type q8gArgs struct {
	panel, s, b unsafe.Pointer // 0, 8, 16
	x, d, xs    unsafe.Pointer // 24, 32, 40
	out         unsafe.Pointer // 48
	ostr        uintptr        // 56
	ng, bpg     int            // 64, 72
	mt, mlast   int            // 80, 88
	cmask       uint64         // 96
	bf16        int            // 104
	pf          uintptr        // 112: advanced in place by the kernel (ends one past the weights), so not a GC pointer; j.wq keeps them alive
	pfn         int            // 120
	pfg         uintptr        // 128
	sps, spb    uintptr        // 136, 144: the next panel's scales and biases (prefetched; j.sc and j.bi keep them alive)
	spn         int            // 152: their bytes each
	nib         int            // 160: 1 when the panel holds whole 4-bit words (pack's layout), split by the kernel
	sdt         int            // 168: the scales' and biases' storage: 0 float32, 1 float16, 2 bfloat16
	sstr        uintptr        // 176: their bytes per group (64 for float32, 32 for 16-bit)
	pfl2        int            // 184: 1 to prefetch the next panel into L2 (PREFETCHT1), 0 into L1 (gemmPFL2)
	symk        float32        // 192: when not 0, b points at the scales and each bias is symk·scale (packedW.symk)
	pfs         uintptr        // 200: q8gemvDot and q8gemv: how far ahead in the panel stream they prefetch (gemvPF)
}

// gemmPFL2 is every GEMM's q8gArgs.pfl2: 1, the next panel prefetched
// into L2, except on AMD Zen 5 and later (installAsm), where prefetching
// into L1 read 3-25% more weight bytes per CPU second in eight-row decode
// (BenchmarkBatchStream). On Zen 4 (2026-12-04, one thread, three
// alternating runs) into L2 ran MiniCPM5-1B's eight-row step through
// packed panels in 21-25 ms against 30-31, its unpacked GEMM in 30-36
// against 41-44, SmolLM2-135M's packed eight rows in 8.6-9.6 against
// 9.4-10.7 (a PREFETCHT0 holds one of the core's few L1 miss buffers until
// its line comes).
var gemmPFL2 = 1

// gemvPF is q8gArgs.pfs, how far ahead in their panel stream q8gemvDot
// and q8gemv prefetch: 1 KB, except on Intel CPUs (installAsm), where 4 KB
// decoded Llama-3.2-1B at 39.1-43.3 tok/s against 31.3-35.1 (Xeon with a
// 300 MiB L3, 2026-12-06, mlxgo generate --precision fast, 128 tokens,
// three alternating runs; PREFETCHT0 at 4 or 8 KB 37.8-42.2). On Zen 4
// 512 B, 2, 3 and 4 KB read less than 1 KB (2026-12-05).
var gemvPF uintptr = 1024

// gemmQ8 reports whether the int8 GEMM takes a matmul of this shape: 4- or
// 8-bit codes, groups of whole blocks of 32, and rows of whole chunks of 16
// words (the unit of the panel transpose).
func gemmQ8(k, gs, bits int) bool {
	return (bits == 4 || bits == 8) && gs > 0 && gs%32 == 0 && k%gs == 0 && k%(16*32/bits) == 0
}

// gemmDot reports whether the int8 GEMM takes a matmul of this shape in
// the order of the one-row kernels (q8gemmDot on AVX-512 VNNI): 4-bit
// weights in groups of 32 (one block), for any k of whole groups. Their one-row
// path is dotQ8 + dotBias (the AVX2 kernels and their AVX-512 forms,
// qzmmQ8B4; the vector kernels of qmv_amd64.s take 4-bit groups of 64 and
// more only), whose float32 steps per output are per group a = d·I, total
// += s·a, and Σ b·xs added last: one sequential chain per output, which
// the GEMM's layout (outputs in lanes, exact block sums) computes as well.
// Every row of x then gets the bits it gets alone, at any number of rows.
// Without VNNI the one-row kernels' m-blocked AVX2 forms and the portable
// loops give that order (qmmTRows), so the results do not depend on the
// CPU.
func gemmDot(k, gs, bits int) bool {
	return gemmDotOn && bits == 4 && gs == 32 && k > 0 && k%32 == 0
}

// packedRow reports whether a few rows of x (decode, one to four) run
// through the packed panels of slot rather than the one-row kernels: every
// shape the int8 GEMM takes, on a CPU with VNNI, when the slot may pack.
// Where the GEMM computes in the one-row order (gemmDot) the bits are the
// one-row kernels'; elsewhere they are the GEMM's own order at every
// number of rows, so a row of x gets the same bits alone as in a batch of
// any size. One row takes q8gemvDot or q8gemv, which do an eighth of the
// GEMM's work per weight byte and fewer instructions than the one-row
// kernels (they load each group's words from 8 weight rows and reduce
// across lanes per block); two to four take the GEMM's tile of eight,
// which reads the weights once (on SmolLM2's matrices, one thread, Zen 4:
// eight rows 9.7 ms where the batched one-row kernels took 13.8 ms for two
// rows and 19.4 for four, BenchmarkBatchStream).
func packedRow(slot *PackSlot, k, gs, bits int) bool {
	return slot != nil && PackReplaces(k, gs, bits)
}

// PackReplaces reports whether, once a matrix of k columns in groups of gs
// of bits bits is packed, the fast int8 matmul reads only its packed copy,
// at any number of rows (packedRow), so that the original form may leave
// memory: on a CPU with AVX-512 VNNI, for every shape that packs.
func PackReplaces(k, gs, bits int) bool { return packs(k, gs, bits) }

// gemmDotOn switches the one-row order of gemmDot on (benchmarks compare
// with the paths it replaced: the GEMM's order where gemmQ8 takes the
// shape, the one-row kernels and their m-blocked AVX2 forms elsewhere).
var gemmDotOn = true

// gemmDotMinRows is the fewest rows of x q8gemmDot takes; fewer run the
// one-row kernels once per row (the same bits). Its tile of eight rows
// does the work of eight for two rows: on SmolLM2's MLP projections
// (BenchmarkQ8GemmDot, one thread, Zen 5 shared with other jobs) it took
// 1.1-1.5× the CPU time of the one-row kernels at two rows, 0.5-0.8× at
// four and 0.3× at eight.
const gemmDotMinRows = 4

// qmmTQ8Gemm is the AccQ8 matmul for m >= 2 (see the top of this file);
// where gemmDot takes the shape, in the one-row order. With a slot it
// also takes m = 1 where packedRow does.
func qmmTQ8Gemm(dst, x []float32, wq []uint32, sc, bi Vec, slot *PackSlot, m, n, k, gs, bits int, round Rounder) {
	panels := packedRow(slot, k, gs, bits)
	one := m == 1 && panels
	if gemmDot(k, gs, bits) && (!asmQ8 || m < gemmDotMinRows) && !panels {
		qmmTRows(dst, x, wq, sc, bi, m, n, k, gs, bits, round, true)
		return
	}
	if !asmQ8 {
		if !avxGemmQ8(dst, x, wq, sc, bi, m, n, k, gs, bits, round) { // AVX2+FMA: qmv_avx2_amd64.go
			noteSlow(n, gs, bits, sc, true)
			q8GemmGo(dst, x, wq, sc, bi, m, n, k, gs, bits, round)
		}
		return
	}
	s := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(s)
	s.quantizeX(x, m, k, gs, bits, one)
	j := newQ8Job(dst, wq, sc, bi, slot, s, m, n, k, gs, bits, round, one)
	parallelFor((n+q8C-1)/q8C, 1, j.run)
}

// quantizeX lays out m rows of x (k columns) for the int8 GEMM: each block
// of 32 quantized to int8 with its scale (q8Quant; permuted for 4-bit
// weights) and each group of gs summed, in tiles of q8R rows (one: a
// single row, q8gemvDot's, which reads row 0 alone). The workers take
// whole tiles: the rows of a tile share the cache lines of its block
// scales and group sums (eight floats a block or group), so rows of one
// tile quantized on two cores pass those lines back and forth. A decode
// step's tile of eight rows runs on one thread: SmolLM2-135M's widths, the
// Intel Xeon of 2026-12-06, 1.13 µs (k 576) and 3.06 µs (k 1536) where
// its rows split over two threads took 2.66 and 5.45.
func (s *qmmScratch) quantizeX(x []float32, m, k, gs, bits int, one bool) {
	nb, ng := k/32, k/gs
	mt := (m + q8R - 1) / q8R
	s.gx, s.gd, s.gxs = grow(s.gx, mt*nb*32*q8R), grow(s.gd, mt*nb*q8R), grow(s.gxs, mt*ng*q8R)
	if m%q8R != 0 && !one { // the padding rows of the last tile stay zero (q8gemvDot reads row 0 only)
		t := mt - 1
		clear(s.gx[t*nb*32*q8R:])
		clear(s.gd[t*nb*q8R:])
		clear(s.gxs[t*ng*q8R:])
	}
	perm := bits == 4
	s.xsf = grow(s.xsf, m*ng)
	parallelFor(mt, max(1, 2048/(k*q8R)), func(tlo, thi int) {
		lo, hi := tlo*q8R, min(m, thi*q8R)
		groupSumsFlat(s.xsf[lo*ng:hi*ng], x[lo*k:hi*k], (hi-lo)*ng, gs)
		for r := lo; r < hi; r++ {
			t, i := r/q8R, r%q8R
			q8Quant(&x[r*k], &s.gx[t*nb*32*q8R+32*i], &s.gd[t*nb*q8R+i], nb, 32*q8R, 4*q8R, perm)
			for g, v := range s.xsf[r*ng : (r+1)*ng] {
				s.gxs[(t*ng+g)*q8R+i] = v
			}
		}
	})
}

// newQ8Job is the GEMM of x (laid out in s by quantizeX) against one
// weight matrix of n rows.
func newQ8Job(dst []float32, wq []uint32, sc, bi Vec, slot *PackSlot, s *qmmScratch, m, n, k, gs, bits int, round Rounder, one bool) q8Job {
	j := q8Job{dst: dst, wq: wq, sc: sc, bi: bi, s: s, m: m, n: n, k: k, gs: gs, bits: bits, mt: (m + q8R - 1) / q8R, round: round, dot: gemmDot(k, gs, bits), one: one}
	if slot != nil {
		j.packed = slot.get(wq, sc, bi, n, k, gs, bits)
	}
	return j
}

// SharedMat is one weight matrix of QuantizedMatmulTPackedShared: n rows
// of codes with their scales and biases and packed slot (as
// QuantizedMatmulTPacked takes them), and its output, m·n values.
type SharedMat struct {
	Dst            []float32
	WQ             []uint32
	Scales, Biases Vec
	Slot           *PackSlot
	N              int
}

// QuantizedMatmulTPackedShared is QuantizedMatmulTPacked of one x (m rows
// of k) against each of mats (the projections of a layer that read the same
// input), every mats[i].Dst getting what QuantizedMatmulTPacked gives it
// alone, bit for bit. Where every matrix reads packed panels (AccQ8,
// packedRow), x is quantized once and all the matrices' panels go to the
// workers in one pass; otherwise the matrices go one call each.
func QuantizedMatmulTPackedShared(x []float32, mats []SharedMat, m, k, groupSize, bits int, round Rounder, acc Acc) {
	round = roundOr(round)
	shared := acc == AccQ8 && asmQ8 && m > 0
	for _, a := range mats {
		checkQMMVec("QuantizedMatmulT", a.Dst, x, a.WQ, a.Scales, a.Biases, m, a.N, k, groupSize, bits)
		if p := a.Slot.packed(); p != nil {
			check(p.n == a.N && p.k == k && p.gs == groupSize && p.bits == bits, "QuantizedMatmulT", "packed weights of another shape")
		}
		shared = shared && packedRow(a.Slot, k, groupSize, bits)
	}
	if !shared {
		if acc == AccF32 && m > 0 && refSharedRun(x, mats, m, k, groupSize, bits, round) {
			return // the reference precision on packed panels, x prepared once
		}
		for _, a := range mats {
			qmmTFast(a.Dst, x, a.WQ, a.Scales, a.Biases, a.Slot, m, a.N, k, groupSize, bits, round, acc)
		}
		return
	}
	s := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(s)
	one := m == 1
	s.quantizeX(x, m, k, groupSize, bits, one)
	jobs := make([]q8Job, len(mats))
	panels := make([]int, len(mats))
	for i, a := range mats {
		jobs[i] = newQ8Job(a.Dst, a.WQ, a.Scales, a.Biases, a.Slot, s, m, a.N, k, groupSize, bits, round, one)
		panels[i] = (a.N + q8C - 1) / q8C
	}
	parallelJobs(panels, 1, func(i, lo, hi int) { jobs[i].run(lo, hi) })
}

// q8Job runs the GEMM over a range of panels (16 weight rows each).
type q8Job struct {
	dst                   []float32
	wq                    []uint32
	sc, bi                Vec
	s                     *qmmScratch
	m, n, k, gs, bits, mt int
	round                 Rounder
	dot                   bool     // q8gemmDot (gemmDot), else q8gemm
	one                   bool     // q8gemvDot or q8gemv: one row of x (packedRow)
	packed                *packedW // the panels built beforehand, or nil: built per call
}

// panelGeom is the panel layout of a weight matrix of k columns for the
// int8 GEMM. The panel is transposed in chunks of 16 words of each weight
// row; the words past the last whole chunk (the one-row order takes any k)
// go through a copy padded with zeros.
type panelGeom struct {
	ng, wpr    int  // groups and words per weight row
	gp         int  // groups rounded up to 16 (rows of the transposed scales)
	full, tail int  // whole chunks of 16 words, words past them
	split      bool // 4-bit words split into low and high nibbles, one code per byte
	cb         int  // panel bytes per chunk: one dword per column and word, two when split
}

// newPanelGeom returns the layout of a matrix of k columns; split asks for
// 4-bit words split (the kernels' per-call layout) rather than whole
// (pack's, split by the kernels).
func newPanelGeom(k, gs, bits int, split bool) panelGeom {
	g := panelGeom{ng: k / gs, wpr: WordsPerRow(k, bits), cb: 1024, split: split && bits == 4}
	g.gp = (g.ng + 15) &^ 15
	g.full, g.tail = g.wpr/16, g.wpr%16
	if g.split {
		g.cb = 2048
	}
	return g
}

// bytes is the size of one panel's codes.
func (g panelGeom) bytes() int {
	if g.tail > 0 {
		return (g.full + 1) * g.cb
	}
	return g.full * g.cb
}

// packPanel writes the panel of weight rows j0..j0+15 (rows past n are
// zeros) to panel (64-byte aligned, g.bytes()) and their scales and
// biases, transposed to [gp][16] float32, to sT and bT; ws is the
// worker's scratch.
func packPanel(ws *qmmScratch, g panelGeom, wq []uint32, sc, bi Vec, n, j0 int, panel unsafe.Pointer, sT, bT []float32) {
	ng := g.ng
	nc := min(q8C, n-j0)
	// Scales and biases of 16 rows as loaded ([16][ng], plus the 16 floats
	// the transpose reads past the last row).
	ws.row = grow(ws.row, 2*(q8C*ng+16))
	st, bt := ws.row[:q8C*ng+16], ws.row[q8C*ng+16:]
	sc.load(st[:nc*ng], j0*ng)
	bi.load(bt[:nc*ng], j0*ng)
	clear(st[nc*ng:])
	clear(bt[nc*ng:])
	q8Transpose(ptr(sT), ptr(st), uintptr(4*ng), g.gp/16, false)
	q8Transpose(ptr(bT), ptr(bt), uintptr(4*ng), g.gp/16, false)
	panelCodes(ws, g, wq, n, j0, panel)
}

// panelCodes writes the codes of packPanel's panel.
func panelCodes(ws *qmmScratch, g panelGeom, wq []uint32, n, j0 int, panel unsafe.Pointer) {
	wpr := g.wpr
	nc := min(q8C, n-j0)
	w := ptr(wq[j0*wpr:])
	if nc < q8C { // a partial panel: its rows copied into zeros
		ws.gw = grow(ws.gw, q8C*wpr)
		clear(ws.gw)
		copy(ws.gw, wq[j0*wpr:(j0+nc)*wpr])
		w = ptr(ws.gw)
	}
	q8Transpose(panel, w, uintptr(4*wpr), g.full, g.split)
	if g.tail > 0 {
		ws.gt = grow(ws.gt, q8C*16)
		for r := range nc {
			copy(ws.gt[16*r:16*r+g.tail], wq[(j0+r)*wpr+16*g.full:(j0+r+1)*wpr])
			clear(ws.gt[16*r+g.tail : 16*(r+1)])
		}
		clear(ws.gt[16*nc:])
		q8Transpose(unsafe.Add(panel, g.full*g.cb), ptr(ws.gt), 64, 1, g.split)
	}
}

func (j *q8Job) run(lo, hi int) {
	k, n, m := j.k, j.n, j.m
	g := newPanelGeom(k, j.gs, j.bits, j.packed == nil)
	ng, wpr, gp := g.ng, g.wpr, g.gp
	check(len(j.wq) >= n*wpr && len(j.dst) >= m*n && (g.tail == 0 || j.dot) && wpr%4 == 0, "QuantizedMatmulT", "int8 GEMM: slices too short")
	check(len(j.s.gx) >= j.mt*k*q8R && len(j.s.gd) >= j.mt*k/32*q8R && len(j.s.gxs) >= j.mt*ng*q8R, "QuantizedMatmulT", "int8 GEMM: x tiles too short")
	ws := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(ws)
	var panel unsafe.Pointer
	var sT, bT []float32
	if j.packed == nil {
		ws.panel = grow(ws.panel, g.bytes()+64)
		panel = align64(ws.panel)
		ws.wt = grow(ws.wt, 2*gp*q8C)
		sT, bT = ws.wt[:gp*q8C], ws.wt[gp*q8C:]
	}
	kind := roundKind(j.round)
	a := q8gArgs{
		x: ptr(j.s.gx), d: ptr(j.s.gd), xs: ptr(j.s.gxs),
		ostr: uintptr(4 * n), ng: ng, bpg: j.gs / 32, mt: j.mt, mlast: m - (j.mt-1)*q8R, sstr: 4 * q8C,
		// a whole panel's weights prefetched over the groups
		pfg: uintptr(max(512, (4*q8C*wpr/ng+511)&^511)), pfl2: gemmPFL2, pfs: gemvPF,
	}
	if j.packed != nil {
		a.pfg = uintptr(max(512, (g.bytes()/ng+511)&^511))
		if j.bits == 4 {
			a.nib = 1
		}
		a.sdt, a.sstr, a.symk = j.packed.sdt, uintptr(j.packed.ssize*q8C), j.packed.symk
	}
	switch kind {
	case 'b':
		a.bf16 = 1
	case 'h':
		a.bf16 = 2
	}
	for ct := lo; ct < hi; ct++ {
		j0 := ct * q8C
		nc := min(q8C, n-j0)
		a.pf, a.pfn, a.spn = 0, 0, 0
		if p := j.packed; p != nil {
			a.panel, a.s, a.b = p.panel(ct)
			// The next panel's codes prefetched over the groups; its
			// scales and biases, which follow the panel's own in memory,
			// are left to the hardware prefetcher (prefetching them too
			// cost SmolLM2-135M's eight-row step 25-35% on Zen 4,
			// BenchmarkBatchStream). q8gemvDot prefetches within its own
			// stream instead.
			if j0+q8C < n && !j.one {
				next, _, _ := p.panel(ct + 1)
				a.pf, a.pfn = uintptr(next), g.bytes()
			}
		} else {
			packPanel(ws, g, j.wq, j.sc, j.bi, n, j0, panel, sT, bT)
			a.panel, a.s, a.b = panel, ptr(sT), ptr(bT)
			if j1 := min(j0+2*q8C, n); j1 > j0+q8C {
				a.pf, a.pfn = uintptr(ptr(j.wq[(j0+q8C)*wpr:])), 4*(j1-j0-q8C)*wpr
				a.sps, a.spn = vecAddr(j.sc, (j0+q8C)*ng, (j1-j0-q8C)*ng)
				a.spb, _ = vecAddr(j.bi, (j0+q8C)*ng, (j1-j0-q8C)*ng)
			}
		}
		a.out, a.cmask = ptr(j.dst[j0:]), 1<<nc-1
		switch {
		case j.one && j.dot:
			q8gemvDot(&a)
		case j.one:
			q8gemv(&a)
		case j.dot:
			q8gemmDot(&a)
		default:
			q8gemm(&a)
		}
	}
	// The range's outputs rounded to the dtype, each row's columns in one
	// call (bf16 and float16 are rounded by the kernel).
	if kind != 'b' && kind != 'h' {
		c0, c1 := lo*q8C, min(hi*q8C, n)
		for r := range m {
			roundSlice(j.dst[r*n+c0:r*n+c1], j.round, kind)
		}
	}
}

// packArena holds the packed weights of matrices smaller than a huge page
// (a small model's: SmolLM2-135M's are 55-442 KB; the int8 panels with
// their scales and biases, and packDense's tiles), which would otherwise be
// Go heap memory on 4 KiB pages. On Zen 4 (2026-12-05,
// BenchmarkBatchStream, SmolLM2's 30 layers and head, one row on two
// threads, six alternating pairs) a step took 4.52, 4.34, 3.99, 4.09, 4.03
// and 4.07 ms with the codes there against 4.49, 4.61, 4.22, 4.16, 4.09 and
// 4.14 on heap pages.
var packArena mmap.Arena

// packedW is a quantized weight matrix (transposed: n rows of k codes)
// rearranged once into the panels of the int8 GEMM (the layout q8Transpose
// gives per call, qmm_gemm.go, with 4-bit words kept whole, which the
// kernels split), with its scales and biases transposed to [group][16
// columns] in their own storage dtype, so that matmuls of many rows skip
// the rearrangement: a copy of the weights kept beside them, of their
// bytes (rows padded to a multiple of 16).
//
// Symmetric weights keep no biases. Where every bias of the matrix is
// exactly -2^(bits-1) times its group's scale (as converted from GGUF's
// Q4_0 and Q8_0, whose codes are signed), symk holds that factor and the
// kernels make each bias from its scale, one exact float32 multiply by a
// power of two, so the products and sums are the bits the stored biases
// give while a row of decode reads a tenth fewer bytes at 4 bits.
//
// The codes, and after them the scales and biases, sit in memory advised
// for transparent huge pages (mmap.AllocHuge; matrices under 2 MiB share
// chunks of it through packArena), so that a stream through them meets a
// 4 KiB page boundary, where the hardware prefetchers stop, once per 2
// MiB. On Zen 4 (2026-12-04, BenchmarkPackedRowStream, four alternating runs) one thread
// read 20.2-22.5 GB per CPU second against 17.0-17.4 on Go heap memory and
// two 27-32 GB/s against 25-30; Llama-3.2-1B decoded at 36.7-44.7 tok/s
// (median 41.1) against 35.3-40.8 (39.3) in six alternating runs, and its
// time to first token, which includes the packing, grew by about 300 ms
// (the kernel zeroes, and may compact memory for, each huge page).
type packedW struct {
	codes          []byte    // the panels' codes, pb bytes each, from a 64-byte aligned start
	mem            *freeOnce // frees codes, sb32 and sb16 (one packArena piece): PackSlot.Free, or a cleanup once p is unreachable
	sb32           []float32 // float32 scales and biases: per panel the scales, then the biases (none when symk is set), [ng][16] each
	sb16           []uint16  // the same in float16 or bfloat16
	sdt, ssize     int       // q8gArgs.sdt, and the bytes of a scale
	symk           float32   // -2^(bits-1) when every bias is that times its scale (q8gArgs.symk), else 0
	start          int       // offset of the first panel in codes
	n, k, gs, bits int
	pb             int
}

// freeOnce frees a packed matrix's codes once, whichever of PackSlot.Free
// and the garbage collector's cleanup comes first.
type freeOnce struct {
	once sync.Once
	free func()
}

func (f *freeOnce) do() { f.once.Do(f.free) }

// panel returns panel ct's codes, scales and biases (its scales again when
// the matrix is symmetric: the kernels then take symk times them).
func (p *packedW) panel(ct int) (codes, s, b unsafe.Pointer) {
	ng := p.k / p.gs
	per := ng * q8C // scales per panel
	o, bo := ct*2*per, per
	if p.symk != 0 {
		o, bo = ct*per, 0
	}
	if p.sb16 != nil {
		return ptr(p.codes[p.start+ct*p.pb:]), ptr(p.sb16[o:]), ptr(p.sb16[o+bo:])
	}
	return ptr(p.codes[p.start+ct*p.pb:]), ptr(p.sb32[o:]), ptr(p.sb32[o+bo:])
}

// symmetricFactor returns -2^(bits-1) when every one of the n·ng biases
// equals that times its scale in float32 (so NaN never matches), else 0.
// A zero scale with a bias of either zero matches: the kernels' bias
// total starts at +0, so a product of ±0 added to it leaves the same bits.
func symmetricFactor(scales, biases Vec, n, ng, bits int) float32 {
	f := -float32(int(1) << (bits - 1))
	const chunk = 4096
	s, b := make([]float32, chunk), make([]float32, chunk)
	for off := 0; off < n*ng; off += chunk {
		c := min(chunk, n*ng-off)
		scales.load(s[:c], off)
		biases.load(b[:c], off)
		for i := range c {
			if b[i] != f*s[i] {
				return 0
			}
		}
	}
	return f
}

// bytes is the memory p holds.
func (p *packedW) bytes() int64 {
	return int64(len(p.codes)) + 4*int64(len(p.sb32)) + 2*int64(len(p.sb16))
}

// PackSlot holds the packed form of one weight matrix, made by the first
// int8 GEMM that reads the matrix through the slot (QuantizedMatmulTPacked)
// or the first reference dense matmul (DenseMatmulTPacked) and kept for the
// next; a slot never used by them stays empty.
type PackSlot struct {
	p     *packedW
	d     *densePacked     // the dense form (DenseMatmulTPacked)
	da    *denseAMX        // the dense form of the fast precision on AMX (DenseMatmulTPacked)
	tried bool             // pack or packDense ran (it may have returned nil)
	grew  func(n int64)    // told the bytes of the packed form when it is made
	rows  func(r0, r1 int) // told, while it is made, of weight rows already copied
}

// NewPackSlot returns an empty slot; grew (or nil) is told the bytes of the
// packed form when it is made, and rows (or nil), while packing runs, of
// each range of weight rows [r0, r1) whose codes, scales and biases the
// packed form holds from then on (called from the workers, concurrently:
// the caller may give those rows' pages back before the whole matrix is
// packed, so that it is never held twice).
func NewPackSlot(grew func(n int64), rows func(r0, r1 int)) *PackSlot {
	return &PackSlot{grew: grew, rows: rows}
}

// packed is the slot's packed form, nil while empty (or for a nil slot).
func (s *PackSlot) packed() *packedW {
	if s == nil {
		return nil
	}
	return s.p
}

// Free gives the memory of the slot's packed form back at once (the codes
// are a mapping of their own, which the garbage collector does not count,
// so waiting for it could hold them long after the weights went). The
// slot must not be used afterwards.
func (s *PackSlot) Free() {
	if p := s.packed(); p != nil {
		p.mem.do()
		s.p = nil
	}
	if s != nil && s.d != nil {
		s.d.mem.do()
		s.d = nil
	}
	if s != nil && s.da != nil {
		s.da.mem.do()
		s.da = nil
	}
}

// Bytes is the memory of the slot's packed form (0 while empty).
func (s *PackSlot) Bytes() int64 {
	switch {
	case s.packed() != nil:
		return s.p.bytes()
	case s != nil && s.d != nil:
		return s.d.bytes()
	case s != nil && s.da != nil:
		return s.da.bytes()
	}
	return 0
}

// get returns the packed form of wq, scales and biases, packing them on
// the first call.
func (s *PackSlot) get(wq []uint32, sc, bi Vec, n, k, gs, bits int) *packedW {
	s.packOnce(func() int64 {
		if s.p = pack(wq, sc, bi, n, k, gs, bits, s.rows); s.p != nil {
			return s.p.bytes()
		}
		return 0
	})
	return s.p
}

// packOnce runs pack (which fills one of the slot's forms and returns its
// bytes, or 0 when it packed nothing) on the slot's first use only, and
// tells grew the bytes.
func (s *PackSlot) packOnce(pack func() int64) {
	if s.tried {
		return
	}
	s.tried = true
	if n := pack(); n > 0 && s.grew != nil {
		s.grew(n)
	}
}

// PackSupported reports whether this CPU runs the int8 GEMM that reads
// packed weights (AVX-512 with VNNI).
func PackSupported() bool { return asmQ8 }

// packs reports whether [pack] takes a matmul of this shape on this CPU:
// the int8 GEMM's shapes (4- or 8-bit codes in groups of whole blocks of
// 32) on a CPU with AVX-512 VNNI.
func packs(k, gs, bits int) bool {
	return asmQ8 && (gemmQ8(k, gs, bits) || gemmDot(k, gs, bits))
}

// pack rearranges the quantized weights wq (n rows of k codes, as
// [QuantizedMatmulTVec] takes them) with their scales and biases into the
// int8 GEMM's panels. It returns nil where [packs] is false.
func pack(wq []uint32, scales, biases Vec, n, k, groupSize, bits int, done func(r0, r1 int)) *packedW {
	if !packs(k, groupSize, bits) || n <= 0 {
		return nil
	}
	checkQMMVec("pack", nil, nil, wq, scales, biases, 0, n, k, groupSize, bits)
	g := newPanelGeom(k, groupSize, bits, false)
	np, ng := (n+q8C-1)/q8C, g.ng
	p := &packedW{n: n, k: k, gs: groupSize, bits: bits, pb: g.bytes(), ssize: 4}
	p.symk = symmetricFactor(scales, biases, n, ng, bits)
	per := 2 * ng * q8C // scales and biases per panel
	if p.symk != 0 {
		per = ng * q8C
	}
	wide := true // the scales and biases kept as float32
	switch {
	case scales.F32 == nil && biases.F32 == nil && scales.F16 == biases.F16:
		wide, p.ssize, p.sdt = false, 2, 2
		if scales.F16 {
			p.sdt = 1
		}
	case scales.F32 != nil && biases.F32 != nil:
	default: // mixed storage: both as float32
		f := make([]float32, n*ng)
		scales.load(f, 0)
		scales = F32Vec(f)
		f = make([]float32, n*ng)
		biases.load(f, 0)
		biases = F32Vec(f)
	}
	// The codes, then the scales and biases, in one piece of huge-page
	// memory (see packArena).
	codeBytes := (np*p.pb + 64 + 63) &^ 63
	sbBytes := np * per * p.ssize
	raw, free := packArena.Alloc(codeBytes + sbBytes + 64)
	p.codes, p.mem = raw[:np*p.pb+64:np*p.pb+64], &freeOnce{free: free}
	runtime.AddCleanup(p, (*freeOnce).do, p.mem)
	p.start = int(uintptr(align64(p.codes)) - uintptr(ptr(p.codes)))
	sb := unsafe.Pointer(&raw[codeBytes])
	if wide {
		p.sb32 = unsafe.Slice((*float32)(sb), np*per)
	} else {
		p.sb16 = unsafe.Slice((*uint16)(sb), np*per)
	}
	parallelFor(np, 1, func(lo, hi int) {
		ws := scratchPool.Get().(*qmmScratch)
		defer scratchPool.Put(ws)
		ws.wt = grow(ws.wt, 2*g.gp*q8C)
		from := lo // the first panel not yet reported to done
		for ct := lo; ct < hi; ct++ {
			if done != nil && (ct-from == packDoneEvery) {
				done(from*q8C, ct*q8C)
				from = ct
			}
			j0 := ct * q8C
			panelCodes(ws, g, wq, n, j0, ptr(p.codes[p.start+ct*p.pb:]))
			o := ct * per
			if p.sb16 != nil {
				transposeScales(p.sb16[o:o+ng*q8C], scales.U16, n, j0, ng)
				if p.symk == 0 {
					transposeScales(p.sb16[o+ng*q8C:o+2*ng*q8C], biases.U16, n, j0, ng)
				}
			} else {
				transposeScales(p.sb32[o:o+ng*q8C], scales.F32, n, j0, ng)
				if p.symk == 0 {
					transposeScales(p.sb32[o+ng*q8C:o+2*ng*q8C], biases.F32, n, j0, ng)
				}
			}
		}
		if done != nil && from < hi {
			done(from*q8C, min(hi*q8C, n))
		}
	})
	return p
}

// packDoneEvery is how many panels pack copies between two reports to its
// done function (1024 weight rows: a few MB of a large matrix).
const packDoneEvery = 64

// transposeScales writes the scales (or biases) of weight rows j0..j0+15,
// src[row·ng + g], to dst[g·16 + row - j0], zeros for rows past n.
func transposeScales[T uint16 | float32](dst, src []T, n, j0, ng int) {
	nc := min(q8C, n-j0)
	for g := range ng {
		d := dst[g*q8C : (g+1)*q8C]
		for c := range nc {
			d[c] = src[(j0+c)*ng+g]
		}
		clear(d[nc:])
	}
}

// vecAddr returns the address of element off of v and the bytes of n
// elements from there.
func vecAddr(v Vec, off, n int) (uintptr, int) {
	if v.F32 != nil {
		return uintptr(ptr(v.F32[off:])), 4 * n
	}
	return uintptr(ptr(v.U16[off:])), 2 * n
}

// align64 returns the first 64-byte aligned address in b (which has 64
// bytes to spare).
func align64(b []byte) unsafe.Pointer {
	p := ptr(b)
	return unsafe.Add(p, (64-uintptr(p)%64)%64)
}

// q8GemmGo is the portable form of the int8 GEMM: the same arithmetic, one
// output at a time, weight rows split across the workers.
func q8GemmGo(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder) {
	s := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(s)
	ng, wpr := k/gs, WordsPerRow(k, bits)
	s.xqn, s.dx, s.xs = grow(s.xqn, m*k), grow(s.dx, m*k/32), grow(s.xs, m*ng)
	quantizeQ8(s.xqn, s.dx, x, m*k, q8Max(bits))
	groupSums(s.xs, x, m, k, gs)
	parallelFor(n, max(1, 16384/(k*m)), func(lo, hi int) {
		ws := scratchPool.Get().(*qmmScratch)
		defer scratchPool.Put(ws)
		ws.row = grow(ws.row, 2*ng)
		srow, brow := ws.row[:ng], ws.row[ng:]
		for j := lo; j < hi; j++ {
			sc.load(srow, j*ng)
			bi.load(brow, j*ng)
			row := wq[j*wpr : (j+1)*wpr]
			for r := range m {
				dst[r*n+j] = round(q8BlockDot(row, s.xqn[r*k:(r+1)*k], s.dx[r*k/32:(r+1)*k/32], s.xs[r*ng:(r+1)*ng], srow, brow, gs, bits))
			}
		}
	})
}

// q8BlockDot is one output of the int8 GEMM (unrounded): row is a weight
// row of len(xq) codes, xq and dx its row of x quantized in natural order,
// xs the group sums of x, s and b the row's scales and biases.
func q8BlockDot(row []uint32, xq []int8, dx, xs, s, b []float32, gs, bits int) float32 {
	bpg := gs / 32
	var acc float32
	for g := range len(xq) / gs {
		for t := g * bpg; t < (g+1)*bpg; t++ {
			isum := blockISum(row[t*bits:(t+1)*bits], xq[t*32:(t+1)*32], bits)
			acc = mlxmath.FMA32(float32(isum)*dx[t], s[g], acc)
		}
		acc = mlxmath.FMA32(b[g], xs[g], acc)
	}
	return acc
}

// blockISum is Σ q_i·xq_i over one block of 32 codes (ws: its bits words),
// exact in int32 for any bit width.
func blockISum(ws []uint32, xb []int8, bits int) int32 {
	var isum int32
	switch bits {
	case 4:
		for i, w := range ws[:4] {
			xx := xb[8*i : 8*i+8]
			isum += int32(w&15)*int32(xx[0]) + int32(w>>4&15)*int32(xx[1]) +
				int32(w>>8&15)*int32(xx[2]) + int32(w>>12&15)*int32(xx[3]) +
				int32(w>>16&15)*int32(xx[4]) + int32(w>>20&15)*int32(xx[5]) +
				int32(w>>24&15)*int32(xx[6]) + int32(w>>28)*int32(xx[7])
		}
	case 8:
		for i, w := range ws[:8] {
			xx := xb[4*i : 4*i+4]
			isum += int32(w&255)*int32(xx[0]) + int32(w>>8&255)*int32(xx[1]) +
				int32(w>>16&255)*int32(xx[2]) + int32(w>>24)*int32(xx[3])
		}
	default:
		for i, xv := range xb[:32] {
			isum += int32(codeAt(ws, i, bits)) * int32(xv)
		}
	}
	return isum
}

// qmmTQ8BlockRef is the reference of the int8 GEMM (the arithmetic at the
// top of this file), written as the loop it computes.
func qmmTQ8BlockRef(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder) {
	xq, dx := make([]int8, m*k), make([]float32, m*k/32)
	quantizeQ8(xq, dx, x, m*k, q8Max(bits))
	wpr, gpr := WordsPerRow(k, bits), k/gs
	for r := range m {
		for j := range n {
			row := wq[j*wpr : (j+1)*wpr]
			var acc float32
			for g := range gpr {
				for t := g * gs / 32; t < (g+1)*gs/32; t++ {
					var isum int32
					for i := t * 32; i < (t+1)*32; i++ {
						isum += int32(codeAt(row, i, bits)) * int32(xq[r*k+i])
					}
					acc = mlxmath.FMA32(float32(isum)*dx[r*k/32+t], scales[j*gpr+g], acc)
				}
				var xs float32
				for _, v := range x[r*k+g*gs : r*k+(g+1)*gs] {
					xs += v
				}
				acc = mlxmath.FMA32(biases[j*gpr+g], xs, acc)
			}
			dst[r*n+j] = round(acc)
		}
	}
}
