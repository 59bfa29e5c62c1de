package kernel

import "unsafe"

//go:generate go run qmm_avx2_gen.go -o qmm_avx2_amd64.s

// The m-blocked AVX2 kernels (qmm_avx2_amd64.s, written by qmm_avx2_gen.go)
// for two or more rows of x: the codes of a tile of eight weight rows are
// unpacked once per call into a panel, and up to four (int8) or three
// (float32) rows of x run against it at a time, each loaded code vector
// serving all of them. Every output keeps the float32 operations and order
// of the one-row kernels of qmv_avx2_amd64.s (the integer block sums are
// exact in any order), so the results are theirs bit for bit: dotF32 +
// dotBias (reference), dotQ8 + dotBias (fast, one-row form) or
// q8BlockDot (fast, the GEMM).

// avxGArgs are the arguments of the m-blocked kernels (offsets fixed in
// qmm_avx2_gen.go): panel the first tile's panel, pstr the bytes between
// tiles' panels; x row 0 of the rows of x (the int8 kernels: avxPrepQ8's
// layout; float32 kernels: natural order), xstr the bytes between rows;
// d and xs the block scales and group sums of the rows interleaved by
// avxInterleave ([block][set], [group][set] float32); s the first tile's
// staged scales (avxStage), boff the bytes from the staged scales to the
// staged biases, gstr the bytes between tiles' staged values; ngrp groups
// of upg blocks (int8) or words (float32: 4-bit 8 codes, else 4); out row
// 0's output of the first tile (eight floats per tile), ostr the bytes
// between output rows; ntile tiles; pf..pfEnd the weights of the next
// tiles, which the kernels prefetch into L2 a few lines per block (and
// leave pf past what they asked for). The float32 kernels run one chunk of
// groups per call: the res and bias sums of each tile and row (in state,
// 2·avxGR·8 floats per tile) start at zero on the first chunk (first) and
// go to out, res + bias, on the last (last). tmp is the dotQ8-order
// kernels' scratch (their bias sums).
type avxGArgs struct {
	panel unsafe.Pointer      // 0
	pstr  uintptr             // 8
	x     unsafe.Pointer      // 16
	xstr  uintptr             // 24
	d     unsafe.Pointer      // 32
	xs    unsafe.Pointer      // 40
	s     unsafe.Pointer      // 48
	boff  uintptr             // 56
	gstr  uintptr             // 64
	ngrp  int                 // 72
	upg   int                 // 80
	out   unsafe.Pointer      // 88
	ostr  uintptr             // 96
	ntile int                 // 104
	state unsafe.Pointer      // 112: float32 kernels: res and bias per tile and row between chunks
	first int                 // 120: float32 kernels: 1 on the first chunk of groups
	last  int                 // 128: float32 kernels: 1 on the last chunk
	pf    uintptr             // 136: the next weights to prefetch (the kernels advance it)
	pfEnd uintptr             // 144: their end
	_     uintptr             // 152
	tmp   [avxGR * 32]float32 // 160
}

// avxGR is the most rows of x an int8 kernel takes at once, f32Set a
// float32 kernel (qmm_avx2_gen.go's R and f32Set).
const (
	avxGR  = 4
	f32Set = 3
)

// avxPanelI4 writes the int8 kernels' panel of nblk blocks of 32 4-bit
// codes of the eight weight rows at w (wstr bytes apart): per block and
// word i, the low nibbles of the rows' word i (codes 8i, 8i+2, 8i+4, 8i+6,
// one byte each, a dword per row in the staging's lane order) at 64i, the
// high nibbles (codes 8i+1, 8i+3, 8i+5, 8i+7) at 64i+32; 256 bytes a block.
//
//go:noescape
func avxPanelI4(dst *byte, w unsafe.Pointer, wstr uintptr, nblk int)

// avxPanelS8 is the int8 kernels' 8-bit panel (qgemmG8B8R*, qgemmQ8B8R*):
// per block and word i (codes 4i..4i+3), the rows' word with each code c
// as the signed byte c - 128 (a dword per row) at 32i; 256 bytes a block.
//
//go:noescape
func avxPanelS8(dst *byte, w unsafe.Pointer, wstr uintptr, nblk int)

// avxPanelF4 writes the float32 kernels' panel of nblk blocks of 32 4-bit
// codes of the eight weight rows at w (wstr bytes apart): per block, code
// c of the eight rows as float32 (exact) in the staging's lane order at
// 32c; 1024 bytes a block.
//
//go:noescape
func avxPanelF4(dst *byte, w unsafe.Pointer, wstr uintptr, nblk int)

// avxPanelF8 is avxPanelF4 for 8-bit codes.
//
//go:noescape
func avxPanelF8(dst *byte, w unsafe.Pointer, wstr uintptr, nblk int)

// The kernels, by bits and rows of x (1 to 4): for a.ntile tiles of eight
// weight rows, the outputs of the rows of x against them.
//
// qgemmG8B*R*: q8BlockDot's steps, per block acc = fma(float(I)·d, s, acc)
// (the exact integer block sum I from the int8 panel and x codes), per
// group acc = fma(b, xs, acc), as qavxG8B4/8.
//
// qgemmQ8B*R*: dotQ8 + dotBias's steps, per block a += d·float(I), per
// group res += s·a and bias += b·xs, out = res + bias, as qavxQ8B4/8.
//
// qgemmF32B*R* (1 to 3 rows of x, float32 in natural order, xstr bytes
// apart; the group sums interleaved by three): dotF32 + dotBias's steps,
// per group and row four partial sums a_j += c_j·x_j + c_{j+4}·x_{j+4}
// (4-bit; 8-bit a_j += c_j·x_j) word by word, then s·((a0+a1)+(a2+a3))
// summed over the groups, Σ b·xs apart, added last, as qavxF32B4/8; one
// register per partial sum, a lane per weight row.

// qgemmG8B4R1 runs one row of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B4).
//
//go:noescape
func qgemmG8B4R1(a *avxGArgs)

// qgemmG8B4R2 runs 2 rows of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B4).
//
//go:noescape
func qgemmG8B4R2(a *avxGArgs)

// qgemmG8B4R3 runs 3 rows of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B4).
//
//go:noescape
func qgemmG8B4R3(a *avxGArgs)

// qgemmG8B4R4 runs 4 rows of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B4).
//
//go:noescape
func qgemmG8B4R4(a *avxGArgs)

// qgemmG8B8R1 runs one row of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B8).
//
//go:noescape
func qgemmG8B8R1(a *avxGArgs)

// qgemmG8B8R2 runs 2 rows of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B8).
//
//go:noescape
func qgemmG8B8R2(a *avxGArgs)

// qgemmG8B8R3 runs 3 rows of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B8).
//
//go:noescape
func qgemmG8B8R3(a *avxGArgs)

// qgemmG8B8R4 runs 4 rows of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in the int8 GEMM's steps
// (q8BlockDot, as qavxG8B8).
//
//go:noescape
func qgemmG8B8R4(a *avxGArgs)

// qgemmQ8B4R1 runs one row of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in dotQ8 + dotBias's
// steps (as qavxQ8B4).
//
//go:noescape
func qgemmQ8B4R1(a *avxGArgs)

// qgemmQ8B4R2 runs 2 rows of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in dotQ8 + dotBias's
// steps (as qavxQ8B4).
//
//go:noescape
func qgemmQ8B4R2(a *avxGArgs)

// qgemmQ8B4R3 runs 3 rows of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in dotQ8 + dotBias's
// steps (as qavxQ8B4).
//
//go:noescape
func qgemmQ8B4R3(a *avxGArgs)

// qgemmQ8B4R4 runs 4 rows of x (int8, avxPrepQ8's layout) against a.ntile
// tiles of 4-bit weight rows (avxPanelI4) in dotQ8 + dotBias's
// steps (as qavxQ8B4).
//
//go:noescape
func qgemmQ8B4R4(a *avxGArgs)

// qgemmQ8B8R1 runs one row of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in dotQ8 + dotBias's
// steps (as qavxQ8B8).
//
//go:noescape
func qgemmQ8B8R1(a *avxGArgs)

// qgemmQ8B8R2 runs 2 rows of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in dotQ8 + dotBias's
// steps (as qavxQ8B8).
//
//go:noescape
func qgemmQ8B8R2(a *avxGArgs)

// qgemmQ8B8R3 runs 3 rows of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in dotQ8 + dotBias's
// steps (as qavxQ8B8).
//
//go:noescape
func qgemmQ8B8R3(a *avxGArgs)

// qgemmQ8B8R4 runs 4 rows of x (int8, avxLayS8's layout) against a.ntile
// tiles of 8-bit weight rows (avxPanelS8) in dotQ8 + dotBias's
// steps (as qavxQ8B8).
//
//go:noescape
func qgemmQ8B8R4(a *avxGArgs)

// qgemmQ8G1B4R1 is qgemmQ8B4R1 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B4R1(a *avxGArgs)

// qgemmQ8G1B4R2 is qgemmQ8B4R2 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B4R2(a *avxGArgs)

// qgemmQ8G1B4R3 is qgemmQ8B4R3 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B4R3(a *avxGArgs)

// qgemmQ8G1B4R4 is qgemmQ8B4R4 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B4R4(a *avxGArgs)

// qgemmQ8G1B8R1 is qgemmQ8B8R1 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B8R1(a *avxGArgs)

// qgemmQ8G1B8R2 is qgemmQ8B8R2 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B8R2(a *avxGArgs)

// qgemmQ8G1B8R3 is qgemmQ8B8R3 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B8R3(a *avxGArgs)

// qgemmQ8G1B8R4 is qgemmQ8B8R4 for groups of one block (group size
// 32): the same bits, a = d·I set at once.
//
//go:noescape
func qgemmQ8G1B8R4(a *avxGArgs)

// qgemmF32B4R1 runs one row of x (float32) against a.ntile tiles of
// 4-bit weight rows (avxPanelF4) in dotF32 + dotBias's steps (as
// qavxF32B4).
//
//go:noescape
func qgemmF32B4R1(a *avxGArgs)

// qgemmF32B4R2 runs 2 rows of x (float32) against a.ntile tiles of
// 4-bit weight rows (avxPanelF4) in dotF32 + dotBias's steps (as
// qavxF32B4).
//
//go:noescape
func qgemmF32B4R2(a *avxGArgs)

// qgemmF32B4R3 runs 3 rows of x (float32) against a.ntile tiles of
// 4-bit weight rows (avxPanelF4) in dotF32 + dotBias's steps (as
// qavxF32B4).
//
//go:noescape
func qgemmF32B4R3(a *avxGArgs)

// qgemmF32B8R1 runs one row of x (float32) against a.ntile tiles of
// 8-bit weight rows (avxPanelF8) in dotF32 + dotBias's steps (as
// qavxF32B8).
//
//go:noescape
func qgemmF32B8R1(a *avxGArgs)

// qgemmF32B8R2 runs 2 rows of x (float32) against a.ntile tiles of
// 8-bit weight rows (avxPanelF8) in dotF32 + dotBias's steps (as
// qavxF32B8).
//
//go:noescape
func qgemmF32B8R2(a *avxGArgs)

// qgemmF32B8R3 runs 3 rows of x (float32) against a.ntile tiles of
// 8-bit weight rows (avxPanelF8) in dotF32 + dotBias's steps (as
// qavxF32B8).
//
//go:noescape
func qgemmF32B8R3(a *avxGArgs)

// avxGemmOn switches the m-blocked kernels on (tests and benchmarks
// compare with the one-row kernels).
var avxGemmOn = true

// avxGemmOddRows is the fewest rows of x for which the widths 2, 3, 5 and
// 6 take the m-blocked kernels: their panels are built in Go, at a few
// nanoseconds a code, which only many rows of x repay (tests lower it).
var avxGemmOddRows = 64

// avxGemmMinRows is the fewest rows of x for which the 4- and 8-bit
// weights take the m-blocked kernels. Building a panel costs more than the
// one-row kernels' second pass over a tile still in cache: per CPU-second
// on MiniCPM5-1B's up (4-bit) and gate (8-bit) projections, one thread,
// the one-row kernels against the m-blocked ones read 10.2/8.9 and 10.1/6.5
// GMAC (reference), 31.6/35.6 and 20.8/15.0 (fast) at two rows; 9.6/12.1,
// 11.8/12.9, 37.5/43.6 and 24.7/23.6 at four; the m-blocked ones ahead from
// there (BenchmarkAVX2Prefill with MLXGO_BENCH_ROWS). In a two-row batched
// decode step the panels took 58% of the samples. Tests lower it.
var avxGemmMinRows = 4

// avxGemmPanelBytes bounds the panels a worker builds per chunk of tiles
// (they stay in L2 while every row of x runs against them).
const avxGemmPanelBytes = 256 << 10

// avxGemmKind returns the m-blocked kernels (by rows of x - 1), panel
// builder and panel bytes per block of 32 codes for a combination, or nil:
// 4- and 8-bit weights in the three forms (gemm: the int8 GEMM; q8: dotQ8,
// with kernels of their own for groups of one block; else dotF32), the
// widths 2, 3, 5 and 6 in the last two through the 8-bit kernels.
func avxGemmKind(bits, gs int, q8, gemm bool) (*[avxGR]func(*avxGArgs), func(*byte, unsafe.Pointer, uintptr, int), int) {
	switch {
	case bits == 4 && q8 && !gemm && gs == 32:
		return &[avxGR]func(*avxGArgs){qgemmQ8G1B4R1, qgemmQ8G1B4R2, qgemmQ8G1B4R3, qgemmQ8G1B4R4}, avxPanelI4, 256
	case bits == 8 && q8 && !gemm && gs == 32:
		return &[avxGR]func(*avxGArgs){qgemmQ8G1B8R1, qgemmQ8G1B8R2, qgemmQ8G1B8R3, qgemmQ8G1B8R4}, avxPanelS8, 256
	case bits == 4 && gemm:
		return &[avxGR]func(*avxGArgs){qgemmG8B4R1, qgemmG8B4R2, qgemmG8B4R3, qgemmG8B4R4}, avxPanelI4, 256
	case bits == 8 && gemm:
		return &[avxGR]func(*avxGArgs){qgemmG8B8R1, qgemmG8B8R2, qgemmG8B8R3, qgemmG8B8R4}, avxPanelS8, 256
	case bits == 4 && q8:
		return &[avxGR]func(*avxGArgs){qgemmQ8B4R1, qgemmQ8B4R2, qgemmQ8B4R3, qgemmQ8B4R4}, avxPanelI4, 256
	case bits == 8 && q8:
		return &[avxGR]func(*avxGArgs){qgemmQ8B8R1, qgemmQ8B8R2, qgemmQ8B8R3, qgemmQ8B8R4}, avxPanelS8, 256
	case bits == 4:
		return &[avxGR]func(*avxGArgs){qgemmF32B4R1, qgemmF32B4R2, qgemmF32B4R3}, avxPanelF4, 1024
	case bits == 8:
		return &[avxGR]func(*avxGArgs){qgemmF32B8R1, qgemmF32B8R2, qgemmF32B8R3}, avxPanelF8, 1024
	case !validBits(bits):
	case q8 && !gemm:
		return &[avxGR]func(*avxGArgs){qgemmQ8B8R1, qgemmQ8B8R2, qgemmQ8B8R3, qgemmQ8B8R4}, avxPanelOdd(bits, true), 256
	case !q8:
		return &[avxGR]func(*avxGArgs){qgemmF32B8R1, qgemmF32B8R2, qgemmF32B8R3}, avxPanelOdd(bits, false), 1024
	}
	return nil, nil, 0
}

// avxPanelOdd returns the panel builder of the widths 2, 3, 5 and 6, in
// Go: with s8 avxPanelS8's layout (the codes as c - 128, for the 8-bit
// int8 kernels, which then serve these widths: the integer block sums are
// exact in any order), else avxPanelF8's (the codes as float32; the
// generic loop of dotF32 is the 8-bit loop's steps on chunks of four).
func avxPanelOdd(bits int, s8 bool) func(*byte, unsafe.Pointer, uintptr, int) {
	return func(dst *byte, w unsafe.Pointer, wstr uintptr, nb int) {
		wpr := int(wstr / 4)
		var rows [8][]uint32
		for r := range rows {
			rows[r] = unsafe.Slice((*uint32)(unsafe.Add(w, uintptr(r)*wstr)), wpr)
		}
		blk := 1024
		if s8 {
			blk = 256
		}
		out := unsafe.Slice(dst, nb*blk)
		var c [8][32]uint8
		for b := range nb {
			for r := range 8 {
				for i := range 32 {
					c[r][i] = uint8(codeAt(rows[r], 32*b+i, bits))
				}
			}
			o := out[b*blk : (b+1)*blk]
			if s8 {
				for v := range 8 { // codes 4v..4v+3, lanes in avxLanes order
					for l, r := range avxLanes {
						for i := range 4 {
							o[32*v+4*l+i] = c[r][4*v+i] ^ 0x80
						}
					}
				}
				continue
			}
			f := unsafe.Slice((*float32)(unsafe.Pointer(&o[0])), 256)
			for i := range 32 { // code i of the rows as float32, lanes in avxLanes order
				for l, r := range avxLanes {
					f[8*i+l] = float32(c[r][i])
				}
			}
		}
	}
}

// avxGemm is the m-blocked form of avxRun's tiles t0..t1-1 (eight weight
// rows each, scales and biases already staged in row, nv floats each): it
// builds the tiles' panels in ws.panel and runs every row of x against
// them, up to avxGR rows at a time, then rounds the outputs. The kernels
// prefetch the weights of tiles t1..t2-1, which the caller runs next. g.s holds x's
// preparations (avxPrepQ8's layouts, and in gd and gxs the block scales
// and group sums interleaved by avxInterleave). The float32 kernels go through the groups in chunks of
// about avxGemmChunk codes, whose x stays in L1 across the tiles.
func avxGemm(g *avxGemmJob, ws *avxState, t0, t1, t2 int, row []float32, nv int) {
	if g.z {
		avxGemmZ(g, ws, t0, t1, row)
		return
	}
	kern, build, blk := g.kern, g.build, g.blk
	nb, n, m, gpr := g.k/32, g.n, g.m, g.gpr
	pstr := nb * blk
	ws.panel = grow(ws.panel, (t1-t0)*pstr+64)
	panel := align64(ws.panel)
	wq := g.wq
	check(len(wq) >= 8*t1*g.wpr, "QuantizedMatmulT", "AVX2 GEMM: weights too short")
	for t := t0; t < t1; t++ {
		build((*byte)(unsafe.Add(panel, (t-t0)*pstr)), ptr(wq[8*t*g.wpr:]), uintptr(4*g.wpr), nb)
	}
	j0, j1 := 8*t0, 8*t1
	a := avxGArgs{
		panel: panel, pstr: uintptr(pstr), xstr: g.xstr,
		s: ptr(row), boff: uintptr(4 * nv), gstr: uintptr(4 * 8 * g.gpad),
		ngrp: gpr, upg: g.upg, ostr: uintptr(4 * n), ntile: t1 - t0, first: 1, last: 1,
	}
	if t2 > t1 {
		next := wq[8*t1*g.wpr : 8*t2*g.wpr]
		a.pf = uintptr(ptr(next))
		a.pfEnd = a.pf + uintptr(4*len(next))
		// Their scales and biases (a quarter of the weights' bytes at
		// 4-bit group 32 in float16), which avxStage reads first.
		vecPrefetch(g.sc, 8*t1*gpr, 8*(t2-t1)*gpr)
		vecPrefetch(g.bi, 8*t1*gpr, 8*(t2-t1)*gpr)
	}
	cg := gpr // groups per call
	if g.f32 {
		cg = max(1, min(gpr, avxGemmChunk/g.gs))
		ws.state = grow(ws.state, (t1-t0)*2*avxGR*8)
		a.state = ptr(ws.state)
	}
	gb := g.gs / 32 * blk // panel bytes per group
	for r0 := 0; r0 < m; r0 += g.set {
		rr := min(g.set, m-r0)
		a.out = ptr(g.dst[r0*n+j0:])
		if len(g.s.gd) > 0 {
			a.d = ptr(g.s.gd[r0*nb:])
		}
		for g0 := 0; g0 < gpr; g0 += cg {
			g1 := min(g0+cg, gpr)
			a.panel = unsafe.Add(panel, g0*gb)
			a.s = ptr(row[8*g0:])
			a.xs = ptr(g.s.gxs[r0*gpr+g0*g.set:])
			a.ngrp = g1 - g0
			if g.f32 {
				a.x = unsafe.Add(g.x, 4*(r0*g.k+g0*g.gs))
				a.first, a.last = boolInt(g0 == 0), boolInt(g1 == gpr)
			} else {
				a.x = unsafe.Add(g.x, uintptr(r0)*g.xstr)
			}
			kern[rr-1](&a)
		}
	}
	for r := range m {
		roundSlice(g.dst[r*n+j0:r*n+j1], g.round, g.rk)
	}
}

// boolInt is 1 for true, 0 for false.
func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// avxGemmChunk is about how many codes of a row of x the float32 kernels
// take per call (the chunk's panel of a tile, 32 KiB, and x stay in L1).
const avxGemmChunk = 256

// avxGemmJob is what avxGemm needs of the call.
type avxGemmJob struct {
	kern                         *[avxGR]func(*avxGArgs)
	build                        func(*byte, unsafe.Pointer, uintptr, int)
	blk                          int // panel bytes per block of 32 codes
	dst                          []float32
	wq                           []uint32
	sc, bi                       Vec // the scales and biases (prefetched a chunk ahead)
	s                            *avxState
	x                            unsafe.Pointer
	xstr                         uintptr
	m, n, k, wpr, gpr, gpad, upg int
	gs                           int
	set                          int      // rows of x per call (and of the interleaved group sums)
	f32                          bool     // the float32 kernels (chunks of groups)
	z                            bool     // the float32 kernels' AVX-512 form (avxGemmZ)
	bits                         int      // (avxGemmZ) the weights' width
	pk                           *packedW // (avxGemmZ) the packed panels the weights are read from, or nil: wq
	fused                        bool     // (avxGemmZ) the fused kernels: every code·x product is exact
	round                        Rounder
	rk                           byte
}

// avxInterleave writes the group sums of x (s.xs, gpr per row) and, for
// the int8 kernels, the block scales (s.dx, k/32 per row) of every set
// rows interleaved, [group][set] and [block][set], into s.gxs and s.gd (the
// lanes of the missing rows of the last set are zero).
func avxInterleave(s *avxState, m, k, gpr, set int, q8 bool) {
	mr := (m + set - 1) / set * set
	s.gxs = grow(s.gxs, mr*gpr)
	clear(s.gxs[m*gpr:])
	for r := range m {
		base := r / set * set * gpr
		for g, v := range s.xs[r*gpr : (r+1)*gpr] {
			s.gxs[base+g*set+r%set] = v
		}
	}
	s.gd = s.gd[:0]
	if !q8 {
		return
	}
	nb := k / 32
	s.gd = grow(s.gd, mr*nb)
	clear(s.gd[m*nb:])
	for r := range m {
		base := r / set * set * nb
		for t, v := range s.dx[r*nb : (r+1)*nb] {
			s.gd[base+t*set+r%set] = v
		}
	}
}
