//go:build amd64

#include "textflag.h"
#include "rndbf16_amd64.h"

// The int8 GEMM of qmm_gemm.go (AVX-512 with VNNI): a tile of 16 weight
// rows (output columns, one per dword lane) against the rows of x eight at
// a time, plus its two data preparations (quantizing x and transposing
// weight rows into the panel of the tile).

// QUAD multiplies one dword of panel codes (W: 4 codes of each of the 16
// columns) with the 4 matching x codes of each of the 8 rows of x
// (broadcast from the tile of x at OFF + 32·r), into the integer sums Z8-Z15.
#define QUAD(W, OFF) \
	VPDPBUSD.BCST OFF(BX), W, Z8; \
	VPDPBUSD.BCST OFF+32(BX), W, Z9; \
	VPDPBUSD.BCST OFF+64(BX), W, Z10; \
	VPDPBUSD.BCST OFF+96(BX), W, Z11; \
	VPDPBUSD.BCST OFF+128(BX), W, Z12; \
	VPDPBUSD.BCST OFF+160(BX), W, Z13; \
	VPDPBUSD.BCST OFF+192(BX), W, Z14; \
	VPDPBUSD.BCST OFF+224(BX), W, Z15

// PFGROUP prefetches a.pfg bytes (a multiple of 512) of the next panel's
// weight rows, a.pfn of them left (advancing a.pf and a.pfn in place; AX
// and R14 scratch; loop, l2loop, done and skip are the expansion's
// labels): into L1 (PREFETCHT0), or into L2 (PREFETCHT1) when a.pfl2 is
// set (gemmPFL2 says on which CPUs).
#define PFGROUP(loop, l2loop, done, skip) \
	CMPQ 120(DI), $0; \
	JLE skip; \
	MOVQ 112(DI), AX; \
	MOVQ 128(DI), R14; \
	CMPQ 184(DI), $0; \
	JNE l2loop; \
loop: \
	PREFETCHT0 (AX); \
	PREFETCHT0 64(AX); \
	PREFETCHT0 128(AX); \
	PREFETCHT0 192(AX); \
	PREFETCHT0 256(AX); \
	PREFETCHT0 320(AX); \
	PREFETCHT0 384(AX); \
	PREFETCHT0 448(AX); \
	ADDQ $512, AX; \
	SUBQ $512, R14; \
	JG loop; \
	JMP done; \
l2loop: \
	PREFETCHT1 (AX); \
	PREFETCHT1 64(AX); \
	PREFETCHT1 128(AX); \
	PREFETCHT1 192(AX); \
	PREFETCHT1 256(AX); \
	PREFETCHT1 320(AX); \
	PREFETCHT1 384(AX); \
	PREFETCHT1 448(AX); \
	ADDQ $512, AX; \
	SUBQ $512, R14; \
	JG l2loop; \
done: \
	MOVQ AX, 112(DI); \
	MOVQ 128(DI), R14; \
	SUBQ R14, 120(DI); \
skip:

// LOAD8 loads the panel registers Z16-Z23 of one block of 32 codes
// (quads 0-7) from a panel of one code per byte.
#define LOAD8 \
	VMOVDQU32 0(SI), Z16; \
	VMOVDQU32 64(SI), Z17; \
	VMOVDQU32 128(SI), Z18; \
	VMOVDQU32 192(SI), Z19; \
	VMOVDQU32 256(SI), Z20; \
	VMOVDQU32 320(SI), Z21; \
	VMOVDQU32 384(SI), Z22; \
	VMOVDQU32 448(SI), Z23

// LOADNIB loads them from a panel of whole 4-bit words (a.nib: one dword
// per column and word, pack's layout): the low nibbles of word i are quad
// 2i, the high ones quad 2i+1 (mask 0x0F in Z31).
#define LOADNIB \
	VMOVDQU32 0(SI), Z16; \
	VMOVDQU32 64(SI), Z18; \
	VMOVDQU32 128(SI), Z20; \
	VMOVDQU32 192(SI), Z22; \
	VPSRLD $4, Z16, Z17; \
	VPSRLD $4, Z18, Z19; \
	VPSRLD $4, Z20, Z21; \
	VPSRLD $4, Z22, Z23; \
	VPANDD Z31, Z16, Z16; \
	VPANDD Z31, Z17, Z17; \
	VPANDD Z31, Z18, Z18; \
	VPANDD Z31, Z19, Z19; \
	VPANDD Z31, Z20, Z20; \
	VPANDD Z31, Z21, Z21; \
	VPANDD Z31, Z22, Z22; \
	VPANDD Z31, Z23, Z23

// LOADPANEL loads the panel registers of one block from SI and advances
// SI past it: LOAD8, or LOADNIB when the panel holds whole 4-bit words
// (a.nib); lnib and ldone are the expansion's labels.
#define LOADPANEL(lnib, ldone) \
	CMPQ 160(DI), $0; \
	JNE lnib; \
	LOAD8; \
	ADDQ $512, SI; \
	JMP ldone; \
lnib: \
	LOADNIB; \
	ADDQ $256, SI; \
ldone:

// LOADS loads the 16 columns' scales (or biases) of a group into Z from
// SRC: float32, or float16 or bfloat16 widened (a.sdt 0, 1, 2: pack's
// panels keep the checkpoint's 16-bit values); l16, lbf and ldone are the
// expansion's labels.
#define LOADS(SRC, Z, l16, lbf, ldone) \
	CMPQ 168(DI), $1; \
	JEQ l16; \
	JGT lbf; \
	VMOVUPS SRC, Z; \
	JMP ldone; \
l16: \
	VCVTPH2PS SRC, Z; \
	JMP ldone; \
lbf: \
	VPMOVZXWD SRC, Z; \
	VPSLLD $16, Z, Z; \
ldone:

// LOADB loads the 16 columns' biases of a group into Z25 from (R13) as
// LOADS does, or, for a symmetric packed matrix (a.symk not 0, R13 then
// walking the scales), a.symk times its scales: exact, a power of two.
#define LOADB(l16, lbf, ldone, lasym) \
	LOADS((R13), Z25, l16, lbf, ldone); \
	CMPL 192(DI), $0; \
	JEQ lasym; \
	VMULPS.BCST 192(DI), Z25, Z25; \
lasym:

// RNDF16 rounds the floats of Z to float16 and back (to nearest even, as
// tensor.RoundF16 and vaRoundF16 do; Y26 scratch).
#define RNDF16(Z) \
	VCVTPS2PH $0, Z, Y26; \
	VCVTPH2PS Y26, Z

// ROWSETUP loads the one-row kernels' registers from a.x (BX: row 0 of
// the first tile of x, DX its block scales, R9 its group sums), a.out (R10)
// and a.cmask (K1), with the rounding constants, the nibble mask (Z31), a
// zero total (Z0), the panel (SI) and its scales (R8).
#define ROWSETUP \
	MOVQ a+0(FP), DI; \
	MOVQ 24(DI), BX; \
	MOVQ 32(DI), DX; \
	MOVQ 40(DI), R9; \
	MOVQ 48(DI), R10; \
	KMOVW 96(DI), K1; \
	RNDBF16CONSTS; \
	MOVL $0x0f0f0f0f, AX; \
	VPBROADCASTD AX, Z31; \
	VPXORD Z0, Z0, Z0; \
	MOVQ 0(DI), SI; \
	MOVQ 8(DI), R8

// ROWDOT sums the products of one block's panel registers Z16-Z23 with
// row 0 of the tile of x at BX into Z8 (16 columns): quads 0-3 in Z8 and
// 4-7 in Z9, added exactly (Z9 scratch).
#define ROWDOT \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPDPBUSD.BCST 0(BX), Z16, Z8; \
	VPDPBUSD.BCST 16(BX), Z20, Z9; \
	VPDPBUSD.BCST 4(BX), Z17, Z8; \
	VPDPBUSD.BCST 20(BX), Z21, Z9; \
	VPDPBUSD.BCST 8(BX), Z18, Z8; \
	VPDPBUSD.BCST 24(BX), Z22, Z9; \
	VPDPBUSD.BCST 12(BX), Z19, Z8; \
	VPDPBUSD.BCST 28(BX), Z23, Z9; \
	VPADDD Z9, Z8, Z8

// PFSTREAM prefetches into L2 the 256 bytes a.pfs ahead of SI in the panel
// stream (the one-row kernels' prefetch, see q8gemvDot; R12 holds a.pfs,
// R11 scratch).
#define PFSTREAM \
	LEAQ (SI)(R12*1), R11; \
	PREFETCHT1 (R11); \
	PREFETCHT1 64(R11); \
	PREFETCHT1 128(R11); \
	PREFETCHT1 192(R11)

// ROUND1 rounds Z0 to the outputs' dtype (a.bf16: 0 none, 1 bfloat16, 2
// float16); done and f16 are the expansion's labels.
#define ROUND1(done, f16) \
	CMPQ 104(DI), $1; \
	JLT done; \
	JGT f16; \
	RNDBF16(Z0); \
	JMP done; \
f16: \
	RNDF16(Z0); \
done:

// ROUND8 is ROUND1 for Z0-Z7.
#define ROUND8(done, f16) \
	CMPQ 104(DI), $1; \
	JLT done; \
	JGT f16; \
	RNDBF16(Z0); \
	RNDBF16(Z1); \
	RNDBF16(Z2); \
	RNDBF16(Z3); \
	RNDBF16(Z4); \
	RNDBF16(Z5); \
	RNDBF16(Z6); \
	RNDBF16(Z7); \
	JMP done; \
f16: \
	RNDF16(Z0); \
	RNDF16(Z1); \
	RNDF16(Z2); \
	RNDF16(Z3); \
	RNDF16(Z4); \
	RNDF16(Z5); \
	RNDF16(Z6); \
	RNDF16(Z7); \
done:

// SCALE folds the integer sum I of a block into the accumulator A:
// A = fma(float(I)·d, s, A), with d the block scale of x at OFF(DX) and s the
// group scales of the 16 columns (Z24).
#define SCALE(I, A, OFF) \
	VCVTDQ2PS I, I; \
	VMULPS.BCST OFF(DX), I, I; \
	VFMADD231PS Z24, I, A

// NIB stores the low nibbles of the bytes of Z at OFF(DI) and the high
// nibbles 64 bytes further, one code per byte (mask 0x0F in Z16).
#define NIB(Z, OFF) \
	VPANDD Z16, Z, Z17; \
	VMOVDQU32 Z17, OFF(DI); \
	VPSRLD $4, Z, Z; \
	VPANDD Z16, Z, Z; \
	VMOVDQU32 Z, OFF+64(DI)

// TRANSPOSE16 transposes the 16×16 dwords of Z0-Z15 (row r in Zr) in
// place, through Z16-Z31: 32-bit and 64-bit interleaves within 128-bit
// lanes, then two rounds of 128-bit lane shuffles.
#define TRANSPOSE16 \
VPUNPCKLDQ Z1, Z0, Z16; \
	VPUNPCKHDQ Z1, Z0, Z17; \
	VPUNPCKLDQ Z3, Z2, Z18; \
	VPUNPCKHDQ Z3, Z2, Z19; \
	VPUNPCKLDQ Z5, Z4, Z20; \
	VPUNPCKHDQ Z5, Z4, Z21; \
	VPUNPCKLDQ Z7, Z6, Z22; \
	VPUNPCKHDQ Z7, Z6, Z23; \
	VPUNPCKLDQ Z9, Z8, Z24; \
	VPUNPCKHDQ Z9, Z8, Z25; \
	VPUNPCKLDQ Z11, Z10, Z26; \
	VPUNPCKHDQ Z11, Z10, Z27; \
	VPUNPCKLDQ Z13, Z12, Z28; \
	VPUNPCKHDQ Z13, Z12, Z29; \
	VPUNPCKLDQ Z15, Z14, Z30; \
	VPUNPCKHDQ Z15, Z14, Z31; \
	VPUNPCKLQDQ Z18, Z16, Z0; \
	VPUNPCKHQDQ Z18, Z16, Z1; \
	VPUNPCKLQDQ Z19, Z17, Z2; \
	VPUNPCKHQDQ Z19, Z17, Z3; \
	VPUNPCKLQDQ Z22, Z20, Z4; \
	VPUNPCKHQDQ Z22, Z20, Z5; \
	VPUNPCKLQDQ Z23, Z21, Z6; \
	VPUNPCKHQDQ Z23, Z21, Z7; \
	VPUNPCKLQDQ Z26, Z24, Z8; \
	VPUNPCKHQDQ Z26, Z24, Z9; \
	VPUNPCKLQDQ Z27, Z25, Z10; \
	VPUNPCKHQDQ Z27, Z25, Z11; \
	VPUNPCKLQDQ Z30, Z28, Z12; \
	VPUNPCKHQDQ Z30, Z28, Z13; \
	VPUNPCKLQDQ Z31, Z29, Z14; \
	VPUNPCKHQDQ Z31, Z29, Z15; \
	VSHUFI32X4 $0x88, Z4, Z0, Z16; \
	VSHUFI32X4 $0xdd, Z4, Z0, Z20; \
	VSHUFI32X4 $0x88, Z12, Z8, Z24; \
	VSHUFI32X4 $0xdd, Z12, Z8, Z28; \
	VSHUFI32X4 $0x88, Z5, Z1, Z17; \
	VSHUFI32X4 $0xdd, Z5, Z1, Z21; \
	VSHUFI32X4 $0x88, Z13, Z9, Z25; \
	VSHUFI32X4 $0xdd, Z13, Z9, Z29; \
	VSHUFI32X4 $0x88, Z6, Z2, Z18; \
	VSHUFI32X4 $0xdd, Z6, Z2, Z22; \
	VSHUFI32X4 $0x88, Z14, Z10, Z26; \
	VSHUFI32X4 $0xdd, Z14, Z10, Z30; \
	VSHUFI32X4 $0x88, Z7, Z3, Z19; \
	VSHUFI32X4 $0xdd, Z7, Z3, Z23; \
	VSHUFI32X4 $0x88, Z15, Z11, Z27; \
	VSHUFI32X4 $0xdd, Z15, Z11, Z31; \
	VSHUFI32X4 $0x88, Z24, Z16, Z0; \
	VSHUFI32X4 $0xdd, Z24, Z16, Z8; \
	VSHUFI32X4 $0x88, Z28, Z20, Z4; \
	VSHUFI32X4 $0xdd, Z28, Z20, Z12; \
	VSHUFI32X4 $0x88, Z25, Z17, Z1; \
	VSHUFI32X4 $0xdd, Z25, Z17, Z9; \
	VSHUFI32X4 $0x88, Z29, Z21, Z5; \
	VSHUFI32X4 $0xdd, Z29, Z21, Z13; \
	VSHUFI32X4 $0x88, Z26, Z18, Z2; \
	VSHUFI32X4 $0xdd, Z26, Z18, Z10; \
	VSHUFI32X4 $0x88, Z30, Z22, Z6; \
	VSHUFI32X4 $0xdd, Z30, Z22, Z14; \
	VSHUFI32X4 $0x88, Z27, Z19, Z3; \
	VSHUFI32X4 $0xdd, Z27, Z19, Z11; \
	VSHUFI32X4 $0x88, Z31, Z23, Z7; \
	VSHUFI32X4 $0xdd, Z31, Z23, Z15

// SPF prefetches a.spn bytes of the next panel's scales (at a.sps) and
// biases (at a.spb), a line of each at a time (AX, R14, CX scratch): Go
// loads them before the next call, and missed in memory they stalled it
// (8% of a MiniCPM5-1B eight-row decode step's samples).
#define SPF(label, skip) \
	MOVQ 136(DI), AX; \
	MOVQ 144(DI), R14; \
	MOVQ 152(DI), CX; \
	TESTQ CX, CX; \
	JLE skip; \
label: \
	PREFETCHT0 (AX); \
	PREFETCHT0 (R14); \
	ADDQ $64, AX; \
	ADDQ $64, R14; \
	SUBQ $64, CX; \
	JG label; \
skip:

// func q8gemm(a *q8gArgs)
//
// For each tile of 8 rows of x: Z0-Z7 accumulate the 16 outputs of rows
// 0-7 over the groups; per block of 32 codes the 8 panel registers Z16-Z23
// (quads 0-7) are loaded once and multiplied with every row. Registers: DI
// args, SI panel, R8 scales, R13 biases, BX x, DX block scales of x, R9
// group sums of x, R10 output row 0, R11 output row stride, R12 tiles left,
// CX groups left, AX blocks left in the group.
TEXT ·q8gemm(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	MOVQ 24(DI), BX
	MOVQ 32(DI), DX
	MOVQ 40(DI), R9
	MOVQ 48(DI), R10
	MOVQ 56(DI), R11
	MOVQ 80(DI), R12
	KMOVW 96(DI), K1
	RNDBF16CONSTS
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z31
	SPF(spf, spfdone)
	TESTQ R12, R12
	JZ done

tile:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ 0(DI), SI
	MOVQ 8(DI), R8
	MOVQ 16(DI), R13
	MOVQ 64(DI), CX

group:
	PFGROUP(pfl, pfl2, pfdone, nopf)

	LOADS((R8), Z24, s16a, sbfa, sdonea)
	MOVQ 72(DI), AX
	PCALIGN $32

block:
	LOADPANEL(blocknib, blockquads)
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	QUAD(Z16, 0)
	QUAD(Z17, 4)
	QUAD(Z18, 8)
	QUAD(Z19, 12)
	QUAD(Z20, 16)
	QUAD(Z21, 20)
	QUAD(Z22, 24)
	QUAD(Z23, 28)
	SCALE(Z8, Z0, 0)
	SCALE(Z9, Z1, 4)
	SCALE(Z10, Z2, 8)
	SCALE(Z11, Z3, 12)
	SCALE(Z12, Z4, 16)
	SCALE(Z13, Z5, 20)
	SCALE(Z14, Z6, 24)
	SCALE(Z15, Z7, 28)
	ADDQ $256, BX
	ADDQ $32, DX
	DECQ AX
	JNZ block

	// bias term of the group: A = fma(b, Σx, A)
	LOADB(s16b, sbfb, sdoneb, sasymb)
	VFMADD231PS.BCST 0(R9), Z25, Z0
	VFMADD231PS.BCST 4(R9), Z25, Z1
	VFMADD231PS.BCST 8(R9), Z25, Z2
	VFMADD231PS.BCST 12(R9), Z25, Z3
	VFMADD231PS.BCST 16(R9), Z25, Z4
	VFMADD231PS.BCST 20(R9), Z25, Z5
	VFMADD231PS.BCST 24(R9), Z25, Z6
	VFMADD231PS.BCST 28(R9), Z25, Z7
	ADDQ 176(DI), R8
	ADDQ 176(DI), R13
	ADDQ $32, R9
	DECQ CX
	JNZ group

	ROUND8(store, storef16)
	// 8 rows, or the rows of x left in the last tile
	MOVQ $8, AX
	CMPQ R12, $1
	JNE rows
	MOVQ 88(DI), AX

rows:
	MOVQ R10, CX
	VMOVUPS Z0, K1, (CX)
	DECQ AX
	JZ stored
	ADDQ R11, CX
	VMOVUPS Z1, K1, (CX)
	DECQ AX
	JZ stored
	ADDQ R11, CX
	VMOVUPS Z2, K1, (CX)
	DECQ AX
	JZ stored
	ADDQ R11, CX
	VMOVUPS Z3, K1, (CX)
	DECQ AX
	JZ stored
	ADDQ R11, CX
	VMOVUPS Z4, K1, (CX)
	DECQ AX
	JZ stored
	ADDQ R11, CX
	VMOVUPS Z5, K1, (CX)
	DECQ AX
	JZ stored
	ADDQ R11, CX
	VMOVUPS Z6, K1, (CX)
	DECQ AX
	JZ stored
	ADDQ R11, CX
	VMOVUPS Z7, K1, (CX)

stored:
	LEAQ (R10)(R11*8), R10
	DECQ R12
	JNZ tile

done:
	VZEROUPPER
	RET


// DOTSCALE folds the integer sum I of a block (groups of one block) into
// the total A in the one-row order (dotQ8 + dotBias, the AVX2 kernels):
// a = float(I)·d, with d the block scale of x at OFF(DX), then A = A +
// s·a, two roundings, with s the group scales of the 16 columns (Z24).
// The one-row kernels add a to a zero first: 0 + a is a except for a = -0,
// and s·(±0) added to A gives the same A (A is never -0: it starts at +0
// and a sum is -0 only when both terms are).
#define DOTSCALE(I, A, OFF) \
	VCVTDQ2PS I, I; \
	VMULPS.BCST OFF(DX), I, I; \
	VMULPS Z24, I, I; \
	VADDPS I, A, A

// DOTBIAS adds b·xs of one row (its group sum broadcast from OFF(R9)) to
// the bias total B, two roundings (dotBias), T scratch; Z25 holds the
// group biases of the 16 columns.
#define DOTBIAS(B, T, OFF) \
	VMULPS.BCST OFF(R9), Z25, T; \
	VADDPS T, B, B

// func q8gemmDot(a *q8gArgs)
//
// q8gemm in the order of the one-row int8 kernels for 4-bit weights in
// groups of one block (a.bpg = 1): per tile of 8 rows of x, Z0-Z7 the
// totals Σ s·(d·I) over the groups (the same panel loads and integer sums
// as q8gemm), then Z8-Z15 the bias totals Σ b·xs in a second pass over the
// groups, and per row total + bias, rounded to bfloat16 when a.bf16 is 1.
// Registers as in q8gemm.
TEXT ·q8gemmDot(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	MOVQ 24(DI), BX
	MOVQ 32(DI), DX
	MOVQ 40(DI), R9
	MOVQ 48(DI), R10
	MOVQ 56(DI), R11
	MOVQ 80(DI), R12
	KMOVW 96(DI), K1
	RNDBF16CONSTS
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z31
	SPF(dspf, dspfdone)
	TESTQ R12, R12
	JZ ddone

dtile:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ 0(DI), SI
	MOVQ 8(DI), R8
	MOVQ 64(DI), CX

dgroup:
	PFGROUP(dpfl, dpfl2, dpfdone, dnopf)

	LOADS((R8), Z24, ds16a, dsbfa, dsdonea)
	LOADPANEL(dnib, dquads)
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	QUAD(Z16, 0)
	QUAD(Z17, 4)
	QUAD(Z18, 8)
	QUAD(Z19, 12)
	QUAD(Z20, 16)
	QUAD(Z21, 20)
	QUAD(Z22, 24)
	QUAD(Z23, 28)
	DOTSCALE(Z8, Z0, 0)
	DOTSCALE(Z9, Z1, 4)
	DOTSCALE(Z10, Z2, 8)
	DOTSCALE(Z11, Z3, 12)
	DOTSCALE(Z12, Z4, 16)
	DOTSCALE(Z13, Z5, 20)
	DOTSCALE(Z14, Z6, 24)
	DOTSCALE(Z15, Z7, 28)
	ADDQ $256, BX
	ADDQ $32, DX
	ADDQ 176(DI), R8
	DECQ CX
	JNZ dgroup

	// bias totals over the groups, then total + bias
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	MOVQ 16(DI), R13
	MOVQ 64(DI), CX

dbias:
	LOADB(ds16b, dsbfb, dsdoneb, dasymb)
	DOTBIAS(Z8, Z16, 0)
	DOTBIAS(Z9, Z17, 4)
	DOTBIAS(Z10, Z18, 8)
	DOTBIAS(Z11, Z19, 12)
	DOTBIAS(Z12, Z20, 16)
	DOTBIAS(Z13, Z21, 20)
	DOTBIAS(Z14, Z22, 24)
	DOTBIAS(Z15, Z23, 28)
	ADDQ 176(DI), R13
	ADDQ $32, R9
	DECQ CX
	JNZ dbias
	VADDPS Z8, Z0, Z0
	VADDPS Z9, Z1, Z1
	VADDPS Z10, Z2, Z2
	VADDPS Z11, Z3, Z3
	VADDPS Z12, Z4, Z4
	VADDPS Z13, Z5, Z5
	VADDPS Z14, Z6, Z6
	VADDPS Z15, Z7, Z7

	ROUND8(dstore, dstoref16)
	// 8 rows, or the rows of x left in the last tile
	MOVQ $8, AX
	CMPQ R12, $1
	JNE drows
	MOVQ 88(DI), AX

drows:
	MOVQ R10, CX
	VMOVUPS Z0, K1, (CX)
	DECQ AX
	JZ dstored
	ADDQ R11, CX
	VMOVUPS Z1, K1, (CX)
	DECQ AX
	JZ dstored
	ADDQ R11, CX
	VMOVUPS Z2, K1, (CX)
	DECQ AX
	JZ dstored
	ADDQ R11, CX
	VMOVUPS Z3, K1, (CX)
	DECQ AX
	JZ dstored
	ADDQ R11, CX
	VMOVUPS Z4, K1, (CX)
	DECQ AX
	JZ dstored
	ADDQ R11, CX
	VMOVUPS Z5, K1, (CX)
	DECQ AX
	JZ dstored
	ADDQ R11, CX
	VMOVUPS Z6, K1, (CX)
	DECQ AX
	JZ dstored
	ADDQ R11, CX
	VMOVUPS Z7, K1, (CX)

dstored:
	LEAQ (R10)(R11*8), R10
	DECQ R12
	JNZ dtile

ddone:
	VZEROUPPER
	RET

// func q8gemvDot(a *q8gArgs)
//
// q8gemmDot for one row of x (row 0 of the first tile; a.mt and a.mlast
// are ignored): per group the integer sums of the 16 columns in two
// accumulators (Z8 quads 0-3 and Z9 quads 4-7, added exactly), folded into
// the total Z0 as DOTSCALE does, then the bias total Z10 as DOTBIAS does,
// so each output gets the bits q8gemmDot gives its row. One row needs an
// eighth of the multiply-adds per weight byte, so decode through packed
// panels reads the weights at the memory's pace. It prefetches into L2
// the codes a.pfs bytes ahead in its own stream (gemvPF: four groups, 1
// KB, or sixteen on Intel), which runs on into the next panel (packed
// panels follow each other), and not a.pf's next panel: on Zen 4
// (2026-12-04, BenchmarkPackedRowStream, eight alternating runs) 1 KB
// ahead read 24-39 GB/s on two threads (median 32) against 21-35 (27)
// with the next panel prefetched, and 15-20 GB per CPU second on one
// against 14-17; Llama-3.2-1B decoded at 32-43 tok/s (median 33.5)
// against 29-36 (30.8). Registers as in q8gemm, R12 a.pfs.
TEXT ·q8gemvDot(SB), NOSPLIT, $0-8
	ROWSETUP
	MOVQ 200(DI), R12
	MOVQ 64(DI), CX
	TESTQ CX, CX
	JZ vbiasdone

vgroup:
	PFSTREAM

	LOADS((R8), Z24, vs16a, vsbfa, vsdonea)
	LOADPANEL(vnib, vquads)
	ROWDOT
	DOTSCALE(Z8, Z0, 0)
	ADDQ $256, BX
	ADDQ $32, DX
	ADDQ 176(DI), R8
	DECQ CX
	JNZ vgroup

	// the bias total over the groups, then total + bias
	VPXORD Z10, Z10, Z10
	MOVQ 16(DI), R13
	MOVQ 64(DI), CX

vbias:
	LOADB(vs16b, vsbfb, vsdoneb, vasymb)
	DOTBIAS(Z10, Z11, 0)
	ADDQ 176(DI), R13
	ADDQ $32, R9
	DECQ CX
	JNZ vbias
	VADDPS Z10, Z0, Z0

vbiasdone:
	ROUND1(vstore, vstoref16)
	VMOVUPS Z0, K1, (R10)
	VZEROUPPER
	RET

// func q8gemv(a *q8gArgs)
//
// q8gemm for one row of x (row 0 of the first tile; a.mt and a.mlast are
// ignored): per block the integer sums of the 16 columns in two
// accumulators (Z8 quads 0-3 and Z9 quads 4-7, added exactly), folded into
// the total Z0 as SCALE does, and per group the bias term by the same FMA,
// so each output gets the bits q8gemm gives its row. Decode through packed
// panels of the shapes gemmQ8 takes outside gemmDot (8-bit weights, 4-bit
// in groups of 64 and more); it prefetches as q8gemvDot does. Registers as
// in q8gemm, R12 a.pfs.
TEXT ·q8gemv(SB), NOSPLIT, $0-8
	ROWSETUP
	MOVQ 200(DI), R12
	MOVQ 16(DI), R13
	MOVQ 64(DI), CX
	TESTQ CX, CX
	JZ gvdone

gvgroup:
	LOADS((R8), Z24, gvs16a, gvsbfa, gvsdonea)
	MOVQ 72(DI), AX

gvblock:
	// a.pfs ahead: a block's 256 bytes of 4-bit words or 512 of 8-bit codes
	PFSTREAM
	CMPQ 160(DI), $0
	JNE gvpfnib
	PREFETCHT1 256(R11)
	PREFETCHT1 320(R11)
	PREFETCHT1 384(R11)
	PREFETCHT1 448(R11)

gvpfnib:
	LOADPANEL(gvnib, gvquads)
	ROWDOT
	SCALE(Z8, Z0, 0)
	ADDQ $256, BX
	ADDQ $32, DX
	DECQ AX
	JNZ gvblock

	LOADB(gvs16b, gvsbfb, gvsdoneb, gvasymb)
	VFMADD231PS.BCST 0(R9), Z25, Z0
	ADDQ 176(DI), R8
	ADDQ 176(DI), R13
	ADDQ $32, R9
	DECQ CX
	JNZ gvgroup

gvdone:
	ROUND1(gvstore, gvstoref16)
	VMOVUPS Z0, K1, (R10)
	VZEROUPPER
	RET

// q8perm puts the int32 codes of each 8 in the order 0, 2, 4, 6, 1, 3, 5, 7
// (the low then the high nibbles of a 4-bit weight word).
DATA q8perm<>+0(SB)/4, $0
DATA q8perm<>+4(SB)/4, $2
DATA q8perm<>+8(SB)/4, $4
DATA q8perm<>+12(SB)/4, $6
DATA q8perm<>+16(SB)/4, $1
DATA q8perm<>+20(SB)/4, $3
DATA q8perm<>+24(SB)/4, $5
DATA q8perm<>+28(SB)/4, $7
DATA q8perm<>+32(SB)/4, $8
DATA q8perm<>+36(SB)/4, $10
DATA q8perm<>+40(SB)/4, $12
DATA q8perm<>+44(SB)/4, $14
DATA q8perm<>+48(SB)/4, $9
DATA q8perm<>+52(SB)/4, $11
DATA q8perm<>+56(SB)/4, $13
DATA q8perm<>+60(SB)/4, $15
GLOBL q8perm<>(SB), RODATA|NOPTR, $64

// QAMAX sets Z of one block of 32 values at OFF(SI) to the lanes' maxima
// of their absolute values and zero (NaN skipped, as qloop's amax; Z0 and
// Z1 scratch, Z27 zero).
#define QAMAX(OFF, Z) \
	VPANDD OFF(SI), Z31, Z0; \
	VPANDD OFF+64(SI), Z31, Z1; \
	VMAXPS Z27, Z0, Z; \
	VMAXPS Z, Z1, Z

// QPAIR sets D to the lane-wise maximum of A and B after the 128-bit lane
// shuffles I1 and I2 of OP (one level of qgroup's maxima tree; Z0 and Z1
// scratch).
#define QPAIR(OP, I1, I2, A, B, D) \
	OP $I1, B, A, Z0; \
	OP $I2, B, A, Z1; \
	VMAXPS Z1, Z0, D

// QCODES writes the codes of the block of 32 values at OFF(SI) to DI
// (advancing DI by R8), its inverse scale broadcast from INV(SP): as qloop
// does from its VBROADCASTSS on; skip is the expansion's label.
#define QCODES(OFF, INV, skip) \
	VBROADCASTSS INV(SP), Z7; \
	VMULPS OFF(SI), Z7, Z0; \
	VMULPS OFF+64(SI), Z7, Z1; \
	VCMPPS $0, Z0, Z0, K1; \
	VCMPPS $0, Z1, Z1, K2; \
	VMINPS Z30, Z0, Z0; \
	VMAXPS Z29, Z0, Z0; \
	VMINPS Z30, Z1, Z1; \
	VMAXPS Z29, Z1, Z1; \
	VCVTPS2DQ.Z Z0, K1, Z0; \
	VCVTPS2DQ.Z Z1, K2, Z1; \
	TESTQ R10, R10; \
	JZ skip; \
	VPERMD Z0, Z28, Z0; \
	VPERMD Z1, Z28, Z1; \
skip: \
	VPMOVDB Z0, (DI); \
	VPMOVDB Z1, 16(DI); \
	ADDQ R8, DI

// func q8Quant(x *float32, xq *int8, d *float32, nb int, xqStep, dStep uintptr, perm bool)
//
// quantizeQ8 for nb blocks of 32 values at x (qmax 127): block i's codes go
// to xq + i·xqStep (permuted by q8perm when perm), its scale to d + i·dStep.
// amax skips NaN (VMAXPS returns its second operand, the running maximum,
// when the first is NaN); codes are clamped in float32 (rint and a clamp to
// integers commute), NaN products are zeroed by mask, and VCVTPS2DQ rounds
// to nearest even (MXCSR default), as rint32 does. Sixteen blocks at a
// time (qgroup) take their maxima in one vector (a tree of lane-wise
// maxima over the blocks' vectors: exact, NaN-free by then, so the order
// does not matter) and their scales and inverses in two divisions, the
// same per lane as qloop's scalar ones; the blocks left take qloop (on
// SmolLM2's eight-row decode step the block-at-a-time loop, a serial chain
// of reductions and two divisions per block, was 3.5% of the CPU time).
// Frame: the group's scales (0(SP)) and inverse scales (64(SP)), lane
// 4·(b mod 4) + b/4 for block b (the tree's order).
TEXT ·q8Quant(SB), NOSPLIT, $128-49
	MOVQ x+0(FP), SI
	MOVQ xq+8(FP), DI
	MOVQ d+16(FP), DX
	MOVQ nb+24(FP), CX
	MOVQ xqStep+32(FP), R8
	MOVQ dStep+40(FP), R9
	MOVBLZX perm+48(FP), R10
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z31
	MOVL $0x42fe0000, AX // 127
	VPBROADCASTD AX, Z30
	MOVL $0xc2fe0000, AX // -127
	VPBROADCASTD AX, Z29
	VMOVDQU32 q8perm<>(SB), Z28
	CMPQ CX, $16
	JLT qtail
	VPXORD Z27, Z27, Z27

qgroup:
	QAMAX(0, Z8)
	QAMAX(128, Z9)
	QAMAX(256, Z10)
	QAMAX(384, Z11)
	QAMAX(512, Z12)
	QAMAX(640, Z13)
	QAMAX(768, Z14)
	QAMAX(896, Z15)
	QAMAX(1024, Z16)
	QAMAX(1152, Z17)
	QAMAX(1280, Z18)
	QAMAX(1408, Z19)
	QAMAX(1536, Z20)
	QAMAX(1664, Z21)
	QAMAX(1792, Z22)
	QAMAX(1920, Z23)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z8, Z9, Z8)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z10, Z11, Z9)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z12, Z13, Z10)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z14, Z15, Z11)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z16, Z17, Z12)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z18, Z19, Z13)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z20, Z21, Z14)
	QPAIR(VSHUFF64X2, 0x44, 0xEE, Z22, Z23, Z15)
	QPAIR(VSHUFF32X4, 0x88, 0xDD, Z8, Z9, Z8)
	QPAIR(VSHUFF32X4, 0x88, 0xDD, Z10, Z11, Z9)
	QPAIR(VSHUFF32X4, 0x88, 0xDD, Z12, Z13, Z10)
	QPAIR(VSHUFF32X4, 0x88, 0xDD, Z14, Z15, Z11)
	QPAIR(VSHUFPS, 0x44, 0xEE, Z8, Z9, Z8)
	QPAIR(VSHUFPS, 0x44, 0xEE, Z10, Z11, Z9)
	QPAIR(VSHUFPS, 0x88, 0xDD, Z8, Z9, Z8)
	VDIVPS Z30, Z8, Z0
	VDIVPS Z8, Z30, Z1
	VCMPPS $4, Z27, Z8, K1
	VMOVAPS.Z Z1, K1, Z1
	VMOVUPS Z0, (SP)
	VMOVUPS Z1, 64(SP)
	MOVL 0(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 16(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 32(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 48(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 4(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 20(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 36(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 52(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 8(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 24(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 40(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 56(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 12(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 28(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 44(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	MOVL 60(SP), AX
	MOVL AX, (DX)
	ADDQ R9, DX
	QCODES(0, 64, qg0)
	QCODES(128, 80, qg1)
	QCODES(256, 96, qg2)
	QCODES(384, 112, qg3)
	QCODES(512, 68, qg4)
	QCODES(640, 84, qg5)
	QCODES(768, 100, qg6)
	QCODES(896, 116, qg7)
	QCODES(1024, 72, qg8)
	QCODES(1152, 88, qg9)
	QCODES(1280, 104, qg10)
	QCODES(1408, 120, qg11)
	QCODES(1536, 76, qg12)
	QCODES(1664, 92, qg13)
	QCODES(1792, 108, qg14)
	QCODES(1920, 124, qg15)
	ADDQ $2048, SI
	SUBQ $16, CX
	CMPQ CX, $16
	JGE qgroup

qtail:
	// qloop's scalar constants (the group's registers overlap them)
	VPXORD X9, X9, X9
	MOVL $0x42fe0000, AX
	VMOVD AX, X10
	TESTQ CX, CX
	JZ qdone

qloop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z31, Z0, Z2
	VPANDD Z31, Z1, Z3
	VPXORD Z4, Z4, Z4
	VMAXPS Z4, Z2, Z4
	VMAXPS Z4, Z3, Z4
	VEXTRACTF64X4 $1, Z4, Y5
	VMAXPS Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VMOVSHDUP X4, X5
	VMAXSS X5, X4, X4
	VDIVSS X10, X4, X6
	VMOVSS X6, (DX)
	VDIVSS X4, X10, X7
	VCMPSS $4, X9, X4, X8
	VANDPS X8, X7, X7
	VBROADCASTSS X7, Z7
	VMULPS Z7, Z0, Z0
	VMULPS Z7, Z1, Z1
	VCMPPS $0, Z0, Z0, K1
	VCMPPS $0, Z1, Z1, K2
	VMINPS Z30, Z0, Z0
	VMAXPS Z29, Z0, Z0
	VMINPS Z30, Z1, Z1
	VMAXPS Z29, Z1, Z1
	VCVTPS2DQ.Z Z0, K1, Z0
	VCVTPS2DQ.Z Z1, K2, Z1
	TESTQ R10, R10
	JZ qstore
	VPERMD Z0, Z28, Z0
	VPERMD Z1, Z28, Z1

qstore:
	VPMOVDB Z0, (DI)
	VPMOVDB Z1, 16(DI)
	ADDQ $128, SI
	ADDQ R8, DI
	ADDQ R9, DX
	DECQ CX
	JNZ qloop

qdone:
	VZEROUPPER
	RET

// func q8Transpose(dst, src unsafe.Pointer, stride uintptr, nchunk int, nib bool)
//
// Transposes 16 rows of dwords (row r at src + r·stride, each prefetched
// 512 bytes ahead) in chunks of 16 columns: column c of chunk i (16 dwords, one per row) goes to dst +
// (16i + c)·64. With nib the dwords are 4-bit weight words and each column
// is split into its low nibbles (dst + (16i + c)·128) and high nibbles (64
// bytes further), one byte per code.
TEXT ·q8Transpose(SB), NOSPLIT, $0-33
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), R9
	MOVQ nchunk+24(FP), CX
	MOVBLZX nib+32(FP), R10
	TESTQ CX, CX
	JZ tdone

tloop:
	MOVQ SI, AX
	VMOVDQU32 (AX), Z0
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z1
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z2
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z3
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z4
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z5
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z6
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z7
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z8
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z9
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z10
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z11
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z12
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z13
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z14
	PREFETCHT0 512(AX)
	ADDQ R9, AX
	VMOVDQU32 (AX), Z15
	PREFETCHT0 512(AX)
	TRANSPOSE16
	TESTQ R10, R10
	JNZ tnib
	VMOVDQU32 Z0, 0(DI)
	VMOVDQU32 Z1, 64(DI)
	VMOVDQU32 Z2, 128(DI)
	VMOVDQU32 Z3, 192(DI)
	VMOVDQU32 Z4, 256(DI)
	VMOVDQU32 Z5, 320(DI)
	VMOVDQU32 Z6, 384(DI)
	VMOVDQU32 Z7, 448(DI)
	VMOVDQU32 Z8, 512(DI)
	VMOVDQU32 Z9, 576(DI)
	VMOVDQU32 Z10, 640(DI)
	VMOVDQU32 Z11, 704(DI)
	VMOVDQU32 Z12, 768(DI)
	VMOVDQU32 Z13, 832(DI)
	VMOVDQU32 Z14, 896(DI)
	VMOVDQU32 Z15, 960(DI)
	ADDQ $1024, DI
	JMP tnext

tnib:
	MOVL $0x0f0f0f0f, AX
	VPBROADCASTD AX, Z16
	NIB(Z0, 0)
	NIB(Z1, 128)
	NIB(Z2, 256)
	NIB(Z3, 384)
	NIB(Z4, 512)
	NIB(Z5, 640)
	NIB(Z6, 768)
	NIB(Z7, 896)
	NIB(Z8, 1024)
	NIB(Z9, 1152)
	NIB(Z10, 1280)
	NIB(Z11, 1408)
	NIB(Z12, 1536)
	NIB(Z13, 1664)
	NIB(Z14, 1792)
	NIB(Z15, 1920)
	ADDQ $2048, DI

tnext:
	ADDQ $64, SI
	DECQ CX
	JNZ tloop

tdone:
	VZEROUPPER
	RET

// func gsum16(dst, x *float32, gs, nset int)
//
// groupSums for nset sets of 16 consecutive groups of gs floats (gs a
// multiple of 16): lane i of a set sums group i sequentially, as the scalar
// loop does; 16 values of each of the 16 groups are transposed so that
// value e of every group lands in one register, then added in order. The
// partial sums wait at dst between chunks of 16 values.
TEXT ·gsum16(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gs+16(FP), R9
	MOVQ nset+24(FP), R10
	SHLQ $2, R9
	TESTQ R10, R10
	JZ gdone

gset:
	MOVQ SI, R8
	MOVQ R9, CX
	SHRQ $6, CX
	VPXORD Z16, Z16, Z16
	VMOVUPS Z16, (DI)

gchunk:
	MOVQ R8, AX
	VMOVUPS (AX), Z0
	ADDQ R9, AX
	VMOVUPS (AX), Z1
	ADDQ R9, AX
	VMOVUPS (AX), Z2
	ADDQ R9, AX
	VMOVUPS (AX), Z3
	ADDQ R9, AX
	VMOVUPS (AX), Z4
	ADDQ R9, AX
	VMOVUPS (AX), Z5
	ADDQ R9, AX
	VMOVUPS (AX), Z6
	ADDQ R9, AX
	VMOVUPS (AX), Z7
	ADDQ R9, AX
	VMOVUPS (AX), Z8
	ADDQ R9, AX
	VMOVUPS (AX), Z9
	ADDQ R9, AX
	VMOVUPS (AX), Z10
	ADDQ R9, AX
	VMOVUPS (AX), Z11
	ADDQ R9, AX
	VMOVUPS (AX), Z12
	ADDQ R9, AX
	VMOVUPS (AX), Z13
	ADDQ R9, AX
	VMOVUPS (AX), Z14
	ADDQ R9, AX
	VMOVUPS (AX), Z15
	TRANSPOSE16
	VMOVUPS (DI), Z16
	VADDPS Z0, Z16, Z16
	VADDPS Z1, Z16, Z16
	VADDPS Z2, Z16, Z16
	VADDPS Z3, Z16, Z16
	VADDPS Z4, Z16, Z16
	VADDPS Z5, Z16, Z16
	VADDPS Z6, Z16, Z16
	VADDPS Z7, Z16, Z16
	VADDPS Z8, Z16, Z16
	VADDPS Z9, Z16, Z16
	VADDPS Z10, Z16, Z16
	VADDPS Z11, Z16, Z16
	VADDPS Z12, Z16, Z16
	VADDPS Z13, Z16, Z16
	VADDPS Z14, Z16, Z16
	VADDPS Z15, Z16, Z16
	VMOVUPS Z16, (DI)
	ADDQ $64, R8
	DECQ CX
	JNZ gchunk
	ADDQ $64, DI
	MOVQ R9, AX
	SHLQ $4, AX
	ADDQ AX, SI
	DECQ R10
	JNZ gset

gdone:
	VZEROUPPER
	RET

DATA pf4a0<>+0(SB)/4, $0
DATA pf4a0<>+4(SB)/4, $8
DATA pf4a0<>+8(SB)/4, $16
DATA pf4a0<>+12(SB)/4, $24
DATA pf4a0<>+16(SB)/4, $1
DATA pf4a0<>+20(SB)/4, $9
DATA pf4a0<>+24(SB)/4, $17
DATA pf4a0<>+28(SB)/4, $25
DATA pf4a0<>+32(SB)/4, $2
DATA pf4a0<>+36(SB)/4, $10
DATA pf4a0<>+40(SB)/4, $18
DATA pf4a0<>+44(SB)/4, $26
DATA pf4a0<>+48(SB)/4, $3
DATA pf4a0<>+52(SB)/4, $11
DATA pf4a0<>+56(SB)/4, $19
DATA pf4a0<>+60(SB)/4, $27
GLOBL pf4a0<>(SB), RODATA|NOPTR, $64
DATA pf4a1<>+0(SB)/4, $4
DATA pf4a1<>+4(SB)/4, $12
DATA pf4a1<>+8(SB)/4, $20
DATA pf4a1<>+12(SB)/4, $28
DATA pf4a1<>+16(SB)/4, $5
DATA pf4a1<>+20(SB)/4, $13
DATA pf4a1<>+24(SB)/4, $21
DATA pf4a1<>+28(SB)/4, $29
DATA pf4a1<>+32(SB)/4, $6
DATA pf4a1<>+36(SB)/4, $14
DATA pf4a1<>+40(SB)/4, $22
DATA pf4a1<>+44(SB)/4, $30
DATA pf4a1<>+48(SB)/4, $7
DATA pf4a1<>+52(SB)/4, $15
DATA pf4a1<>+56(SB)/4, $23
DATA pf4a1<>+60(SB)/4, $31
GLOBL pf4a1<>(SB), RODATA|NOPTR, $64
DATA pf4b0<>+0(SB)/4, $0
DATA pf4b0<>+4(SB)/4, $1
DATA pf4b0<>+8(SB)/4, $2
DATA pf4b0<>+12(SB)/4, $3
DATA pf4b0<>+16(SB)/4, $16
DATA pf4b0<>+20(SB)/4, $17
DATA pf4b0<>+24(SB)/4, $18
DATA pf4b0<>+28(SB)/4, $19
DATA pf4b0<>+32(SB)/4, $4
DATA pf4b0<>+36(SB)/4, $5
DATA pf4b0<>+40(SB)/4, $6
DATA pf4b0<>+44(SB)/4, $7
DATA pf4b0<>+48(SB)/4, $20
DATA pf4b0<>+52(SB)/4, $21
DATA pf4b0<>+56(SB)/4, $22
DATA pf4b0<>+60(SB)/4, $23
GLOBL pf4b0<>(SB), RODATA|NOPTR, $64
DATA pf4b1<>+0(SB)/4, $8
DATA pf4b1<>+4(SB)/4, $9
DATA pf4b1<>+8(SB)/4, $10
DATA pf4b1<>+12(SB)/4, $11
DATA pf4b1<>+16(SB)/4, $24
DATA pf4b1<>+20(SB)/4, $25
DATA pf4b1<>+24(SB)/4, $26
DATA pf4b1<>+28(SB)/4, $27
DATA pf4b1<>+32(SB)/4, $12
DATA pf4b1<>+36(SB)/4, $13
DATA pf4b1<>+40(SB)/4, $14
DATA pf4b1<>+44(SB)/4, $15
DATA pf4b1<>+48(SB)/4, $28
DATA pf4b1<>+52(SB)/4, $29
DATA pf4b1<>+56(SB)/4, $30
DATA pf4b1<>+60(SB)/4, $31
GLOBL pf4b1<>(SB), RODATA|NOPTR, $64
DATA pf4c0<>+0(SB)/4, $0
DATA pf4c0<>+4(SB)/4, $1
DATA pf4c0<>+8(SB)/4, $2
DATA pf4c0<>+12(SB)/4, $3
DATA pf4c0<>+16(SB)/4, $4
DATA pf4c0<>+20(SB)/4, $5
DATA pf4c0<>+24(SB)/4, $6
DATA pf4c0<>+28(SB)/4, $7
DATA pf4c0<>+32(SB)/4, $16
DATA pf4c0<>+36(SB)/4, $17
DATA pf4c0<>+40(SB)/4, $18
DATA pf4c0<>+44(SB)/4, $19
DATA pf4c0<>+48(SB)/4, $20
DATA pf4c0<>+52(SB)/4, $21
DATA pf4c0<>+56(SB)/4, $22
DATA pf4c0<>+60(SB)/4, $23
GLOBL pf4c0<>(SB), RODATA|NOPTR, $64
DATA pf4c1<>+0(SB)/4, $8
DATA pf4c1<>+4(SB)/4, $9
DATA pf4c1<>+8(SB)/4, $10
DATA pf4c1<>+12(SB)/4, $11
DATA pf4c1<>+16(SB)/4, $12
DATA pf4c1<>+20(SB)/4, $13
DATA pf4c1<>+24(SB)/4, $14
DATA pf4c1<>+28(SB)/4, $15
DATA pf4c1<>+32(SB)/4, $24
DATA pf4c1<>+36(SB)/4, $25
DATA pf4c1<>+40(SB)/4, $26
DATA pf4c1<>+44(SB)/4, $27
DATA pf4c1<>+48(SB)/4, $28
DATA pf4c1<>+52(SB)/4, $29
DATA pf4c1<>+56(SB)/4, $30
DATA pf4c1<>+60(SB)/4, $31
GLOBL pf4c1<>(SB), RODATA|NOPTR, $64
DATA pf8a0<>+0(SB)/4, $0
DATA pf8a0<>+4(SB)/4, $4
DATA pf8a0<>+8(SB)/4, $8
DATA pf8a0<>+12(SB)/4, $12
DATA pf8a0<>+16(SB)/4, $16
DATA pf8a0<>+20(SB)/4, $20
DATA pf8a0<>+24(SB)/4, $24
DATA pf8a0<>+28(SB)/4, $28
DATA pf8a0<>+32(SB)/4, $1
DATA pf8a0<>+36(SB)/4, $5
DATA pf8a0<>+40(SB)/4, $9
DATA pf8a0<>+44(SB)/4, $13
DATA pf8a0<>+48(SB)/4, $17
DATA pf8a0<>+52(SB)/4, $21
DATA pf8a0<>+56(SB)/4, $25
DATA pf8a0<>+60(SB)/4, $29
GLOBL pf8a0<>(SB), RODATA|NOPTR, $64
DATA pf8a1<>+0(SB)/4, $2
DATA pf8a1<>+4(SB)/4, $6
DATA pf8a1<>+8(SB)/4, $10
DATA pf8a1<>+12(SB)/4, $14
DATA pf8a1<>+16(SB)/4, $18
DATA pf8a1<>+20(SB)/4, $22
DATA pf8a1<>+24(SB)/4, $26
DATA pf8a1<>+28(SB)/4, $30
DATA pf8a1<>+32(SB)/4, $3
DATA pf8a1<>+36(SB)/4, $7
DATA pf8a1<>+40(SB)/4, $11
DATA pf8a1<>+44(SB)/4, $15
DATA pf8a1<>+48(SB)/4, $19
DATA pf8a1<>+52(SB)/4, $23
DATA pf8a1<>+56(SB)/4, $27
DATA pf8a1<>+60(SB)/4, $31
GLOBL pf8a1<>(SB), RODATA|NOPTR, $64


// func permF32Asm(dst, src *float32, nblk int, dstStep uintptr, bits int)
//
// permF32 for nblk blocks of 16·32/bits floats: block i of src (read
// consecutively) goes to dst + i·dstStep bytes in the lane layout (position p
// of lane l at p·16 + l), by two (8-bit) or three (4-bit) rounds of
// two-register permutes (VPERMI2PS) with the tables above.
TEXT ·permF32Asm(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nblk+16(FP), CX
	MOVQ dstStep+24(FP), R8
	MOVQ bits+32(FP), AX
	VMOVDQU32 pf4a0<>(SB), Z24
	VMOVDQU32 pf4a1<>(SB), Z25
	VMOVDQU32 pf4b0<>(SB), Z26
	VMOVDQU32 pf4b1<>(SB), Z27
	VMOVDQU32 pf4c0<>(SB), Z28
	VMOVDQU32 pf4c1<>(SB), Z29
	VMOVDQU32 pf8a0<>(SB), Z30
	VMOVDQU32 pf8a1<>(SB), Z31
	TESTQ CX, CX
	JZ pdone
	CMPQ AX, $4
	JNE p8

p4:
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VMOVUPS 256(SI), Z4
	VMOVUPS 320(SI), Z5
	VMOVUPS 384(SI), Z6
	VMOVUPS 448(SI), Z7
	VMOVDQA32 Z24, Z8
	VPERMI2PS Z1, Z0, Z8
	VMOVDQA32 Z25, Z9
	VPERMI2PS Z1, Z0, Z9
	VMOVDQA32 Z24, Z10
	VPERMI2PS Z3, Z2, Z10
	VMOVDQA32 Z25, Z11
	VPERMI2PS Z3, Z2, Z11
	VMOVDQA32 Z24, Z12
	VPERMI2PS Z5, Z4, Z12
	VMOVDQA32 Z25, Z13
	VPERMI2PS Z5, Z4, Z13
	VMOVDQA32 Z24, Z14
	VPERMI2PS Z7, Z6, Z14
	VMOVDQA32 Z25, Z15
	VPERMI2PS Z7, Z6, Z15
	VMOVDQA32 Z26, Z16
	VPERMI2PS Z10, Z8, Z16
	VMOVDQA32 Z27, Z17
	VPERMI2PS Z10, Z8, Z17
	VMOVDQA32 Z26, Z18
	VPERMI2PS Z11, Z9, Z18
	VMOVDQA32 Z27, Z19
	VPERMI2PS Z11, Z9, Z19
	VMOVDQA32 Z26, Z20
	VPERMI2PS Z14, Z12, Z20
	VMOVDQA32 Z27, Z21
	VPERMI2PS Z14, Z12, Z21
	VMOVDQA32 Z26, Z22
	VPERMI2PS Z15, Z13, Z22
	VMOVDQA32 Z27, Z23
	VPERMI2PS Z15, Z13, Z23
	VMOVDQA32 Z28, Z0
	VPERMI2PS Z20, Z16, Z0
	VMOVDQA32 Z29, Z1
	VPERMI2PS Z20, Z16, Z1
	VMOVDQA32 Z28, Z2
	VPERMI2PS Z21, Z17, Z2
	VMOVDQA32 Z29, Z3
	VPERMI2PS Z21, Z17, Z3
	VMOVDQA32 Z28, Z4
	VPERMI2PS Z22, Z18, Z4
	VMOVDQA32 Z29, Z5
	VPERMI2PS Z22, Z18, Z5
	VMOVDQA32 Z28, Z6
	VPERMI2PS Z23, Z19, Z6
	VMOVDQA32 Z29, Z7
	VPERMI2PS Z23, Z19, Z7
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, 256(DI)
	VMOVUPS Z5, 320(DI)
	VMOVUPS Z6, 384(DI)
	VMOVUPS Z7, 448(DI)
	ADDQ $512, SI
	ADDQ R8, DI
	DECQ CX
	JNZ p4
	JMP pdone

p8:
	VMOVUPS 0(SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVUPS 128(SI), Z2
	VMOVUPS 192(SI), Z3
	VMOVDQA32 Z30, Z8
	VPERMI2PS Z1, Z0, Z8
	VMOVDQA32 Z31, Z9
	VPERMI2PS Z1, Z0, Z9
	VMOVDQA32 Z30, Z10
	VPERMI2PS Z3, Z2, Z10
	VMOVDQA32 Z31, Z11
	VPERMI2PS Z3, Z2, Z11
	VMOVDQA32 Z28, Z0
	VPERMI2PS Z10, Z8, Z0
	VMOVDQA32 Z29, Z1
	VPERMI2PS Z10, Z8, Z1
	VMOVDQA32 Z28, Z2
	VPERMI2PS Z11, Z9, Z2
	VMOVDQA32 Z29, Z3
	VPERMI2PS Z11, Z9, Z3
	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ $256, SI
	ADDQ R8, DI
	DECQ CX
	JNZ p8

pdone:
	VZEROUPPER
	RET

// dxl4 and dxl8: the x block each lane of a 4-bit (8 codes a lane) or 8-bit
// (4 codes a lane) vector block reads, as dword indices into its block scales.
DATA dxl4<>+0(SB)/4, $0
DATA dxl4<>+4(SB)/4, $0
DATA dxl4<>+8(SB)/4, $0
DATA dxl4<>+12(SB)/4, $0
DATA dxl4<>+16(SB)/4, $1
DATA dxl4<>+20(SB)/4, $1
DATA dxl4<>+24(SB)/4, $1
DATA dxl4<>+28(SB)/4, $1
DATA dxl4<>+32(SB)/4, $2
DATA dxl4<>+36(SB)/4, $2
DATA dxl4<>+40(SB)/4, $2
DATA dxl4<>+44(SB)/4, $2
DATA dxl4<>+48(SB)/4, $3
DATA dxl4<>+52(SB)/4, $3
DATA dxl4<>+56(SB)/4, $3
DATA dxl4<>+60(SB)/4, $3
GLOBL dxl4<>(SB), RODATA|NOPTR, $64
DATA dxl8<>+0(SB)/4, $0
DATA dxl8<>+4(SB)/4, $0
DATA dxl8<>+8(SB)/4, $0
DATA dxl8<>+12(SB)/4, $0
DATA dxl8<>+16(SB)/4, $0
DATA dxl8<>+20(SB)/4, $0
DATA dxl8<>+24(SB)/4, $0
DATA dxl8<>+28(SB)/4, $0
DATA dxl8<>+32(SB)/4, $1
DATA dxl8<>+36(SB)/4, $1
DATA dxl8<>+40(SB)/4, $1
DATA dxl8<>+44(SB)/4, $1
DATA dxl8<>+48(SB)/4, $1
DATA dxl8<>+52(SB)/4, $1
DATA dxl8<>+56(SB)/4, $1
DATA dxl8<>+60(SB)/4, $1
GLOBL dxl8<>(SB), RODATA|NOPTR, $64

// func permQ8Asm(dst, src *int8, dxl, dx *float32, nblk, bits int)
//
// permQ8 for nblk vector blocks: 4-bit blocks of 128 codes get their even
// codes (VPMOVWB of the words) then their odd codes (of the words shifted
// right by 8); 8-bit blocks of 64 are copied. dxl gets the 16 lane scales
// of each block (VPERMD of its 4 or 2 block scales).
TEXT ·permQ8Asm(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ dxl+16(FP), R8
	MOVQ dx+24(FP), R9
	MOVQ nblk+32(FP), CX
	MOVQ bits+40(FP), AX
	TESTQ CX, CX
	JZ qpdone
	CMPQ AX, $4
	JNE qp8
	VMOVDQU32 dxl4<>(SB), Z8

qp4:
	VMOVDQU8 (SI), Z0
	VMOVDQU8 64(SI), Z1
	VPSRLW $8, Z0, Z2
	VPSRLW $8, Z1, Z3
	VPMOVWB Z0, (DI)
	VPMOVWB Z1, 32(DI)
	VPMOVWB Z2, 64(DI)
	VPMOVWB Z3, 96(DI)
	VMOVDQU (R9), X4
	VPERMD Z4, Z8, Z4
	VMOVDQU32 Z4, (R8)
	ADDQ $128, SI
	ADDQ $128, DI
	ADDQ $16, R9
	ADDQ $64, R8
	DECQ CX
	JNZ qp4
	JMP qpdone

qp8:
	VMOVDQU32 dxl8<>(SB), Z8

qp8loop:
	VMOVDQU8 (SI), Z0
	VMOVDQU8 Z0, (DI)
	VMOVQ (R9), X4
	VPERMD Z4, Z8, Z4
	VMOVDQU32 Z4, (R8)
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $8, R9
	ADDQ $64, R8
	DECQ CX
	JNZ qp8loop

qpdone:
	VZEROUPPER
	RET

// func gsum8(dst, x *float32, gs, nset int)
//
// gsum16 with AVX2, for nset sets of 8 consecutive groups of gs floats (gs
// a multiple of 8): 8 values of each of the 8 groups are transposed (the
// unpack, shuffle, lane-permute steps) so that value e of every group lands
// in one register, then added in order to the sums, lane i of the set
// summing group i sequentially as the scalar loop does.
TEXT ·gsum8(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ gs+16(FP), R9
	MOVQ nset+24(FP), R10
	SHLQ $2, R9 // bytes per group
	TESTQ R10, R10
	JZ g8done

g8set:
	MOVQ SI, R8
	MOVQ R9, CX
	SHRQ $5, CX // chunks of 8 values per group
	VXORPS Y8, Y8, Y8

g8chunk:
	MOVQ R8, AX
	VMOVUPS (AX), Y0
	ADDQ R9, AX
	VMOVUPS (AX), Y1
	ADDQ R9, AX
	VMOVUPS (AX), Y2
	ADDQ R9, AX
	VMOVUPS (AX), Y3
	ADDQ R9, AX
	VMOVUPS (AX), Y4
	ADDQ R9, AX
	VMOVUPS (AX), Y5
	ADDQ R9, AX
	VMOVUPS (AX), Y6
	ADDQ R9, AX
	VMOVUPS (AX), Y7
	// Rows a..h (the groups) of 8 values: pairs interleaved ...
	VUNPCKLPS Y1, Y0, Y9  // a0 b0 a1 b1 | a4 b4 a5 b5
	VUNPCKHPS Y1, Y0, Y10 // a2 b2 a3 b3 | a6 b6 a7 b7
	VUNPCKLPS Y3, Y2, Y0  // c0 d0 c1 d1 | ...
	VUNPCKHPS Y3, Y2, Y1
	VUNPCKLPS Y5, Y4, Y2  // e0 f0 e1 f1 | ...
	VUNPCKHPS Y5, Y4, Y3
	VUNPCKLPS Y7, Y6, Y4  // g0 h0 g1 h1 | ...
	VUNPCKHPS Y7, Y6, Y5
	// ... then quads (a b c d and e f g h of one value, per lane half) ...
	VSHUFPS $0x44, Y0, Y9, Y6   // a0 b0 c0 d0 | a4 b4 c4 d4
	VSHUFPS $0xEE, Y0, Y9, Y7   // a1 b1 c1 d1 | a5 ...
	VSHUFPS $0x44, Y1, Y10, Y11 // a2 ... | a6 ...
	VSHUFPS $0xEE, Y1, Y10, Y12 // a3 ... | a7 ...
	VSHUFPS $0x44, Y4, Y2, Y13  // e0 f0 g0 h0 | e4 ...
	VSHUFPS $0xEE, Y4, Y2, Y14  // e1 ... | e5 ...
	VSHUFPS $0x44, Y5, Y3, Y15  // e2 ... | e6 ...
	VSHUFPS $0xEE, Y5, Y3, Y9   // e3 ... | e7 ...
	// ... and the halves joined: value e of all eight groups, e = 0..7.
	VPERM2F128 $0x20, Y13, Y6, Y0
	VADDPS Y0, Y8, Y8
	VPERM2F128 $0x20, Y14, Y7, Y0
	VADDPS Y0, Y8, Y8
	VPERM2F128 $0x20, Y15, Y11, Y0
	VADDPS Y0, Y8, Y8
	VPERM2F128 $0x20, Y9, Y12, Y0
	VADDPS Y0, Y8, Y8
	VPERM2F128 $0x31, Y13, Y6, Y0
	VADDPS Y0, Y8, Y8
	VPERM2F128 $0x31, Y14, Y7, Y0
	VADDPS Y0, Y8, Y8
	VPERM2F128 $0x31, Y15, Y11, Y0
	VADDPS Y0, Y8, Y8
	VPERM2F128 $0x31, Y9, Y12, Y0
	VADDPS Y0, Y8, Y8
	ADDQ $32, R8
	DECQ CX
	JNZ g8chunk

	VMOVUPS Y8, (DI)
	ADDQ $32, DI
	LEAQ (SI)(R9*8), SI
	DECQ R10
	JNZ g8set

g8done:
	VZEROUPPER
	RET

// func cpuid(leaf uint32) (a, b, c, d uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	XORL CX, CX
	CPUID
	MOVL AX, a+8(FP)
	MOVL BX, b+12(FP)
	MOVL CX, c+16(FP)
	MOVL DX, d+20(FP)
	RET
