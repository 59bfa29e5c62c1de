package kernel

import "unsafe"

//go:generate go run qmm_zf32_gen.go -o qmm_zf32_amd64.s

// The AVX-512 form of the float32 m-blocked kernels (qmm_zf32_amd64.s,
// written by qmm_zf32_gen.go), for AVX-512 CPUs: where qgemmF32B4/B8 hold
// one tile of eight weight rows in a YMM register against three rows of x,
// these hold a pair of tiles (sixteen weight rows) in a ZMM register
// against four rows of x, x by embedded broadcast. Every lane does the
// steps of its weight row in the one-row kernels' order (dotF32 +
// dotBias: separate multiplies and adds), so the outputs are theirs bit
// for bit, with about half the instructions per multiply-accumulate
// (BenchmarkAVX2Prefill: llama1b_up_b4g32 acc0 gemm).

// zf32Args are the kernels' arguments (offsets fixed in qmm_zf32_gen.go):
// panel the first pair's panel (avxPanelZF*), pstr the bytes between
// pairs' panels; x row 0 of the rows of x (float32, natural order), xstr
// the bytes between rows; xs their group sums interleaved by zR
// (avxInterleave); s the first tile's staged scales (avxStage), boff the
// bytes from the staged scales to the biases, gstr the bytes between
// tiles' staged values; ngrp groups of upg words; out row 0's output of
// the first pair (sixteen floats per pair), ostr the bytes between output
// rows; npair pairs; state the res and bias sums between chunks (2·zR·16
// floats per pair), zeroed on the first chunk (first) and stored to out
// as res + bias on the last (last); mask the store mask of the last pair
// (0xff when its second tile is absent, else 0xffff).
type zf32Args struct {
	panel       unsafe.Pointer // 0
	pstr        uintptr        // 8
	x           unsafe.Pointer // 16
	xstr        uintptr        // 24
	xs          unsafe.Pointer // 32
	s           unsafe.Pointer // 40
	boff        uintptr        // 48
	gstr        uintptr        // 56
	ngrp        int            // 64
	upg         int            // 72
	out         unsafe.Pointer // 80
	ostr        uintptr        // 88
	npair       int            // 96
	state       unsafe.Pointer // 104
	first, last int            // 112, 120
	mask        uintptr        // 128
}

// zR is the most rows of x a kernel takes.
const zR = 4

// avxPanelZF4 writes the panel of nblk blocks of 32 4-bit codes of the
// sixteen weight rows at w (wstr bytes apart; with one = 1 the eight rows
// of one tile, in both halves): per block, code c of the rows as float32
// (exact) at 64c, lanes 0-7 the first tile's rows in avxLanes order, lanes
// 8-15 the second's; 2048 bytes a block.
//
//go:noescape
func avxPanelZF4(dst *byte, w unsafe.Pointer, wstr uintptr, nblk int, one int)

// avxPanelZF4P is avxPanelZF4 reading packed panels (pack): lane l's
// row has word W at w + offs[l] + 64·W.
//
//go:noescape
func avxPanelZF4P(dst *byte, w unsafe.Pointer, offs *int32, nblk int)

// avxPanelZF8 is avxPanelZF4 for 8-bit codes.
//
//go:noescape
func avxPanelZF8(dst *byte, w unsafe.Pointer, wstr uintptr, nblk int, one int)

// qgemmZF32B4R1 runs one row of x against a.npair pairs of tiles of 4-bit
// weight rows (avxPanelZF4) in dotF32 + dotBias's steps (as qavxF32B4).
//
//go:noescape
func qgemmZF32B4R1(a *zf32Args)

// qgemmZF32B4R2 is qgemmZF32B4R1 for 2 rows of x.
//
//go:noescape
func qgemmZF32B4R2(a *zf32Args)

// qgemmZF32B4R3 is qgemmZF32B4R1 for 3 rows of x.
//
//go:noescape
func qgemmZF32B4R3(a *zf32Args)

// qgemmZF32B4R4 is qgemmZF32B4R1 for 4 rows of x.
//
//go:noescape
func qgemmZF32B4R4(a *zf32Args)

// qgemmZF32B8R1 runs one row of x against a.npair pairs of tiles of 8-bit
// weight rows (avxPanelZF8) in dotF32 + dotBias's steps (as qavxF32B8).
//
//go:noescape
func qgemmZF32B8R1(a *zf32Args)

// qgemmZF32B8R2 is qgemmZF32B8R1 for 2 rows of x.
//
//go:noescape
func qgemmZF32B8R2(a *zf32Args)

// qgemmZF32B8R3 is qgemmZF32B8R1 for 3 rows of x.
//
//go:noescape
func qgemmZF32B8R3(a *zf32Args)

// qgemmZF32B4R1X is qgemmZF32B4R1 fused (qmm_zf32_gen.go's kernel says
// how): the same bits where every product of a code and a value of x is
// exact (avxExactX), which holds for float16 and bfloat16 x; avxGemmZ
// takes the fused forms then.
//
//go:noescape
func qgemmZF32B4R1X(a *zf32Args)

// qgemmZF32B4R2X is qgemmZF32B4R1X for 2 rows of x.
//
//go:noescape
func qgemmZF32B4R2X(a *zf32Args)

// qgemmZF32B4R3X is qgemmZF32B4R1X for 3 rows of x.
//
//go:noescape
func qgemmZF32B4R3X(a *zf32Args)

// qgemmZF32B4R4X is qgemmZF32B4R1X for 4 rows of x.
//
//go:noescape
func qgemmZF32B4R4X(a *zf32Args)

// qgemmZF32B8R1X is qgemmZF32B8R1 fused: the same bits where every
// product of an 8-bit code and a value of x is exact (avxExactX8).
//
//go:noescape
func qgemmZF32B8R1X(a *zf32Args)

// qgemmZF32B8R2X is qgemmZF32B8R1X for 2 rows of x.
//
//go:noescape
func qgemmZF32B8R2X(a *zf32Args)

// qgemmZF32B8R3X is qgemmZF32B8R1X for 3 rows of x.
//
//go:noescape
func qgemmZF32B8R3X(a *zf32Args)

// qgemmZF32B8R4X is qgemmZF32B8R1X for 4 rows of x.
//
//go:noescape
func qgemmZF32B8R4X(a *zf32Args)

// qgemmZF32B8R4 is qgemmZF32B8R1 for 4 rows of x.
//
//go:noescape
func qgemmZF32B8R4(a *zf32Args)

// zf32On switches the AVX-512 kernels on (tests and benchmarks compare
// with the AVX2 ones).
var zf32On = true

// zf32Take reports whether the float32 m-blocked kernels of bits take
// their AVX-512 form: 4- and 8-bit weights on CPUs with AVX-512 (asmF32).
func zf32Take(bits int) bool {
	return zf32On && asmF32 && (bits == 4 || bits == 8)
}

// avxGemmZ is avxGemm's float32 form with the AVX-512 kernels: it builds
// the panels of tiles t0..t1-1 in pairs (the last alone when their number
// is odd) and runs every row of x against them, up to zR rows at a time,
// in chunks of groups (avxGemmChunk codes), then rounds the outputs. The
// staged values in row must extend 8·gpad floats past the biases (the
// absent second tile of an odd last pair reads them; its lanes are never
// stored).
func avxGemmZ(g *avxGemmJob, ws *avxState, t0, t1 int, row []float32) {
	build, kern := avxPanelZF4, &[zR]func(*zf32Args){qgemmZF32B4R1, qgemmZF32B4R2, qgemmZF32B4R3, qgemmZF32B4R4}
	switch {
	case g.bits == 8 && g.fused:
		build, kern = avxPanelZF8, &[zR]func(*zf32Args){qgemmZF32B8R1X, qgemmZF32B8R2X, qgemmZF32B8R3X, qgemmZF32B8R4X}
	case g.bits == 8:
		build, kern = avxPanelZF8, &[zR]func(*zf32Args){qgemmZF32B8R1, qgemmZF32B8R2, qgemmZF32B8R3, qgemmZF32B8R4}
	case g.fused:
		kern = &[zR]func(*zf32Args){qgemmZF32B4R1X, qgemmZF32B4R2X, qgemmZF32B4R3X, qgemmZF32B4R4X}
	}
	nb, n, m, gpr := g.k/32, g.n, g.m, g.gpr
	nt := t1 - t0
	np := (nt + 1) / 2
	pstr := nb * 2048
	ws.panel = grow(ws.panel, np*pstr+64)
	panel := align64(ws.panel)
	check((g.pk != nil || len(g.wq) >= 8*t1*g.wpr) && len(row) >= 2*8*nt*g.gpad+8*g.gpad, "QuantizedMatmulT", "AVX-512 GEMM: weights or staged values too short")
	for p := range np {
		t := t0 + 2*p
		dst := (*byte)(unsafe.Add(panel, p*pstr))
		if g.pk != nil {
			w, offs := g.pk.tileOffsets(t, t+1 == t1)
			avxPanelZF4P(dst, w, &offs[0], nb)
			continue
		}
		build(dst, ptr(g.wq[8*t*g.wpr:]), uintptr(4*g.wpr), nb, boolInt(t+1 == t1))
	}
	a := zf32Args{
		pstr: uintptr(pstr), xstr: g.xstr, boff: uintptr(4 * 8 * nt * g.gpad), gstr: uintptr(4 * 8 * g.gpad),
		upg: g.upg, ostr: uintptr(4 * n), npair: np, mask: 0xffff,
	}
	if nt%2 == 1 {
		a.mask = 0xff
	}
	cg := max(1, min(gpr, avxGemmChunk/g.gs))
	ws.state = grow(ws.state, np*2*zR*16)
	a.state = ptr(ws.state)
	gb := g.gs / 32 * 2048 // panel bytes per group
	for r0 := 0; r0 < m; r0 += zR {
		rr := min(zR, m-r0)
		a.out = ptr(g.dst[r0*n+8*t0:])
		for g0 := 0; g0 < gpr; g0 += cg {
			g1 := min(g0+cg, gpr)
			a.panel = unsafe.Add(panel, g0*gb)
			a.s = ptr(row[8*g0:])
			a.xs = ptr(g.s.gxs[r0*gpr+g0*zR:])
			a.ngrp = g1 - g0
			a.x = unsafe.Add(g.x, 4*(r0*g.k+g0*g.gs))
			a.first, a.last = boolInt(g0 == 0), boolInt(g1 == gpr)
			kern[rr-1](&a)
		}
	}
	for r := range m {
		roundSlice(g.dst[r*n+8*t0:r*n+8*t1], g.round, g.rk)
	}
}

// tileOffsets returns, for the pair of tiles of eight rows t and t+1 (with
// one, tile t twice) in avxPanelZF4's lane order, the codes of the packed
// panel holding tile t and each lane's row's offset from them.
func (p *packedW) tileOffsets(t int, one bool) (unsafe.Pointer, [16]int32) {
	c0 := 8 * t / q8C
	var offs [16]int32
	for l := range 16 {
		r := avxLanes[l&7]
		if l >= 8 && !one {
			r += 8
		}
		j := 8*t + r
		offs[l] = int32((j/q8C-c0)*p.pb + 4*(j%q8C))
	}
	return unsafe.Pointer(&p.codes[p.start+c0*p.pb]), offs
}

// stagePacked writes what avxStage writes for the scales (bias false) or
// biases of tiles t0..t0+nt-1 from packed panels: per tile, group g's
// eight values in avxLanes order at 8·g, gpad groups a tile (the groups
// past ng zero); ts is scratch of ng·16 floats.
func (p *packedW) stagePacked(dst []float32, t0, nt, gpad int, bias bool, ts []float32) {
	ng := p.k / p.gs
	for t := t0; t < t0+nt; t++ {
		c, h := 8*t/q8C, 8*t%q8C
		p.panelFloats(c, bias, ts)
		out := dst[(t-t0)*8*gpad : (t-t0+1)*8*gpad]
		for g := range ng {
			for l, r := range avxLanes {
				out[8*g+l] = ts[g*q8C+h+r]
			}
		}
		clear(out[8*ng:])
	}
}

// avxStageZBF16 writes, for nt tiles of eight bfloat16 rows from src (rows
// rstr bytes apart, tiles eight rows apart; each tile's output dstr bytes
// after the previous one's), n32 blocks of 32 groups of the tile's rows as
// avxStage lays them out (group g's eight values, widened exactly, at
// dst + 32·g bytes in avxLanes order): per block one 64-byte load per row,
// the even and odd groups widened, a 16x16 transpose of dwords. It reads
// nothing past a row's n32·32 groups.
//
//go:noescape
func avxStageZBF16(dst *float32, src unsafe.Pointer, rstr uintptr, n32, nt int, dstr uintptr)

// avxStageZF16 is avxStageZBF16 for float16 rows (VCVTPH2PS, exact).
//
//go:noescape
func avxStageZF16(dst *float32, src unsafe.Pointer, rstr uintptr, n32, nt int, dstr uintptr)

// zStageOn switches avxStageZ on (tests compare with it off).
var zStageOn = true

// avxStageZ stages the first 32·(gpr/32) groups of the tiles' rows (v's
// bfloat16 or float16 values from weight row row0, gpr groups a row; the
// tiles' outputs 8·gpad floats apart) with the AVX-512 transposes, about
// half the instructions per value of avxStageBlocks', reporting how many
// groups it staged: 0 without AVX-512, for float32 values or fewer than 32
// groups a row. avxStage stages the rest.
func avxStageZ(dst []float32, v Vec, row0, tiles, gpr, gpad int) int {
	if !zStageOn || !asmF32 || v.F32 != nil || gpr < 32 || tiles == 0 {
		return 0
	}
	n32 := gpr / 32
	base := row0 * gpr
	check(len(dst) >= tiles*8*gpad && v.Len() >= base+8*tiles*gpr, "QuantizedMatmulT", "avxStageZ: slices too short")
	if v.F16 {
		avxStageZF16(&dst[0], unsafe.Pointer(&v.U16[base]), uintptr(2*gpr), n32, tiles, uintptr(4*8*gpad))
	} else {
		avxStageZBF16(&dst[0], unsafe.Pointer(&v.U16[base]), uintptr(2*gpr), n32, tiles, uintptr(4*8*gpad))
	}
	return 32 * n32
}
