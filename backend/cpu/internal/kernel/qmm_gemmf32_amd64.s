//go:build amd64

#include "textflag.h"
#include "rndbf16_amd64.h"

// The float32 GEMM of qmm_gemmf32.go (AVX-512): a run of weight rows
// against a tile of 8 rows of x over a chunk of blocks, the unpacked
// weight block shared by the 8 rows. Every row of x goes through the lane
// operations of qdotF32B4 / qdotF32B8 (qmm_amd64.s) in their order: per
// block two partial products (VMULPS, then alternating VFMADD231PS), their
// sum, one VFMADD231PS with the block's scales into the accumulator; at the
// end the bias terms (16 lanes of Σ b·xs, in steps of 16 groups), the
// accumulator plus the bias lanes and the horizontal sum of HSUM
// (qmm_amd64.s): the same additions of the same pairs of values (floating
// additions commute), done for the 8 rows together. Between
// chunks the 8 accumulators of a weight row are kept in memory (512 bytes
// per row), which changes no operation.
//
// Registers: DI args; R10 weight row, R12 scale row, R9 accumulators, R13
// outputs of the row, DX rows left, R11 scale offset of lanes 8-15; in the
// block loop SI weights, R8 scales, BX x, CX blocks left; Z0-Z7 the
// accumulators of x rows 0-7, Z8 the weight words, Z13 the scales, Z16-Z23
// the unpacked codes, Z10-Z11 and Z24-Z25 the partial products.

// nibble floats 0..15 (the VPERMPS table of the 4-bit kernel)
DATA nibf32<>+0(SB)/4, $0x0
DATA nibf32<>+4(SB)/4, $0x3f800000
DATA nibf32<>+8(SB)/4, $0x40000000
DATA nibf32<>+12(SB)/4, $0x40400000
DATA nibf32<>+16(SB)/4, $0x40800000
DATA nibf32<>+20(SB)/4, $0x40a00000
DATA nibf32<>+24(SB)/4, $0x40c00000
DATA nibf32<>+28(SB)/4, $0x40e00000
DATA nibf32<>+32(SB)/4, $0x41000000
DATA nibf32<>+36(SB)/4, $0x41100000
DATA nibf32<>+40(SB)/4, $0x41200000
DATA nibf32<>+44(SB)/4, $0x41300000
DATA nibf32<>+48(SB)/4, $0x41400000
DATA nibf32<>+52(SB)/4, $0x41500000
DATA nibf32<>+56(SB)/4, $0x41600000
DATA nibf32<>+60(SB)/4, $0x41700000
GLOBL nibf32<>(SB), RODATA|NOPTR, $64

// SCALES loads the scales of the block: lanes 0-7 from (R8), lanes 8-15
// from (R8)(R11*1).
#define SCALES \
	VBROADCASTSS (R8), Z13; \
	VBROADCASTSS (R8)(R11*1), Y14; \
	VINSERTF64X4 $1, Y14, Z13, Z13

// The parts of each kernel: SETUP its constants, UNPACK the codes of one
// block of the weight row at SI into the float32 vectors Z16-Z23 (code p of
// each lane in Z16+p), ROW(OFF, P, Q, ACC) one x row's products of the
// block (its x block at OFF(BX)), even p into P, odd into Q, their sum
// added with the block's scales Z13 into ACC. Rows alternate between
// Z10/Z11 and Z24/Z25.

// 4-bit: VPERMPS of the nibble table reads the low four bits of the index.
#define SETUPB4 \
	VMOVUPS nibf32<>(SB), Z15

#define UNPACKB4 \
	VMOVDQU32 (SI), Z8 \
	VPERMPS Z15, Z8, Z16 \
	VPSRLD $4, Z8, Z9 \
	VPERMPS Z15, Z9, Z17 \
	VPSRLD $8, Z8, Z9 \
	VPERMPS Z15, Z9, Z18 \
	VPSRLD $12, Z8, Z9 \
	VPERMPS Z15, Z9, Z19 \
	VPSRLD $16, Z8, Z9 \
	VPERMPS Z15, Z9, Z20 \
	VPSRLD $20, Z8, Z9 \
	VPERMPS Z15, Z9, Z21 \
	VPSRLD $24, Z8, Z9 \
	VPERMPS Z15, Z9, Z22 \
	VPSRLD $28, Z8, Z9 \
	VPERMPS Z15, Z9, Z23

#define ROWB4(OFF, P, Q, ACC) \
	VMULPS OFF(BX), Z16, P \
	VMULPS OFF+64(BX), Z17, Q \
	VFMADD231PS OFF+128(BX), Z18, P \
	VFMADD231PS OFF+192(BX), Z19, Q \
	VFMADD231PS OFF+256(BX), Z20, P \
	VFMADD231PS OFF+320(BX), Z21, Q \
	VFMADD231PS OFF+384(BX), Z22, P \
	VFMADD231PS OFF+448(BX), Z23, Q \
	VADDPS Q, P, P \
	VFMADD231PS Z13, P, ACC

// 8-bit: byte p of each lane (Z9 = 0xff).
#define SETUPB8 \
	MOVL $0xff, AX \
	VPBROADCASTD AX, Z9

#define UNPACKB8 \
	VMOVDQU32 (SI), Z8 \
	VPANDD Z9, Z8, Z16 \
	VCVTUDQ2PS Z16, Z16 \
	VPSRLD $8, Z8, Z17 \
	VPANDD Z9, Z17, Z17 \
	VCVTUDQ2PS Z17, Z17 \
	VPSRLD $16, Z8, Z18 \
	VPANDD Z9, Z18, Z18 \
	VCVTUDQ2PS Z18, Z18 \
	VPSRLD $24, Z8, Z19 \
	VCVTUDQ2PS Z19, Z19

#define ROWB8(OFF, P, Q, ACC) \
	VMULPS OFF(BX), Z16, P \
	VMULPS OFF+64(BX), Z17, Q \
	VFMADD231PS OFF+128(BX), Z18, P \
	VFMADD231PS OFF+192(BX), Z19, Q \
	VADDPS Q, P, P \
	VFMADD231PS Z13, P, ACC

// F32GEMM is the body of a kernel: SETUP, UNPACK and ROW of its bits, RS
// the bytes of one row's x block. Per weight row (DX of them): the 8
// accumulators loaded from R9 (or zeroed on the first chunk), the blocks
// of the chunk (unpack, scales, ROW for x rows 0-7), then either the
// accumulators stored back to R9 or, on the last chunk (fin), the bias
// lanes Σ b·xs of the 8 rows (Z16-Z23, 16 groups a step) added, the
// horizontal sums of the 8 rows at once, each the tree of HSUM (256-bit
// halves of row pairs; 128-bit halves, rows 0-3 in Z22 and 4-7 in Z23;
// lanes 0+1 and 2+3, then their sum: row r < 4 in lane 0 of 128-bit lane r
// of Z25, row r+4 in lane 1), rounded to bfloat16 when a.bf16 is set, and
// stored to the 8 output rows.
#define F32GEMM(SETUP, UNPACK, ROW, RS) \
	MOVQ a+0(FP), DI \
	MOVQ 0(DI), R10 \
	MOVQ 16(DI), R12 \
	MOVQ 40(DI), R9 \
	MOVQ 128(DI), R13 \
	MOVQ 48(DI), DX \
	MOVQ 80(DI), R11 \
	SETUP \
	RNDBF16CONSTS \
	TESTQ DX, DX \
	JZ done \
row: \
	CMPQ 64(DI), $0 \
	JNE zero \
	VMOVUPS 0(R9), Z0 \
	VMOVUPS 64(R9), Z1 \
	VMOVUPS 128(R9), Z2 \
	VMOVUPS 192(R9), Z3 \
	VMOVUPS 256(R9), Z4 \
	VMOVUPS 320(R9), Z5 \
	VMOVUPS 384(R9), Z6 \
	VMOVUPS 448(R9), Z7 \
	JMP blocks \
zero: \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
blocks: \
	MOVQ R10, SI \
	MOVQ R12, R8 \
	MOVQ 32(DI), BX \
	MOVQ 56(DI), CX \
	PCALIGN $32 \
blk: \
	UNPACK \
	SCALES \
	ROW(0, Z10, Z11, Z0) \
	ROW(RS, Z24, Z25, Z1) \
	ROW(2*RS, Z10, Z11, Z2) \
	ROW(3*RS, Z24, Z25, Z3) \
	ROW(4*RS, Z10, Z11, Z4) \
	ROW(5*RS, Z24, Z25, Z5) \
	ROW(6*RS, Z10, Z11, Z6) \
	ROW(7*RS, Z24, Z25, Z7) \
	ADDQ $64, SI \
	ADDQ $8*RS, BX \
	ADDQ 88(DI), R8 \
	DECQ CX \
	JNZ blk \
	CMPQ 72(DI), $0 \
	JNE fin \
	VMOVUPS Z0, 0(R9) \
	VMOVUPS Z1, 64(R9) \
	VMOVUPS Z2, 128(R9) \
	VMOVUPS Z3, 192(R9) \
	VMOVUPS Z4, 256(R9) \
	VMOVUPS Z5, 320(R9) \
	VMOVUPS Z6, 384(R9) \
	VMOVUPS Z7, 448(R9) \
	JMP next \
fin: \
	MOVQ 48(DI), AX \
	SUBQ DX, AX \
	IMULQ 24(DI), AX \
	ADDQ 96(DI), AX \
	MOVQ 104(DI), BX \
	MOVQ 112(DI), R8 \
	LEAQ (R8)(R8*2), CX \
	LEAQ (BX)(R8*4), SI \
	MOVQ 120(DI), R11 \
	VPXORD Z16, Z16, Z16 \
	VPXORD Z17, Z17, Z17 \
	VPXORD Z18, Z18, Z18 \
	VPXORD Z19, Z19, Z19 \
	VPXORD Z20, Z20, Z20 \
	VPXORD Z21, Z21, Z21 \
	VPXORD Z22, Z22, Z22 \
	VPXORD Z23, Z23, Z23 \
bias: \
	VMOVUPS (AX), Z8 \
	VFMADD231PS (BX), Z8, Z16 \
	VFMADD231PS (BX)(R8*1), Z8, Z17 \
	VFMADD231PS (BX)(R8*2), Z8, Z18 \
	VFMADD231PS (BX)(CX*1), Z8, Z19 \
	VFMADD231PS (SI), Z8, Z20 \
	VFMADD231PS (SI)(R8*1), Z8, Z21 \
	VFMADD231PS (SI)(R8*2), Z8, Z22 \
	VFMADD231PS (SI)(CX*1), Z8, Z23 \
	ADDQ $64, AX \
	ADDQ $64, BX \
	ADDQ $64, SI \
	SUBQ $16, R11 \
	JGT bias \
	VADDPS Z16, Z0, Z0 \
	VADDPS Z17, Z1, Z1 \
	VADDPS Z18, Z2, Z2 \
	VADDPS Z19, Z3, Z3 \
	VADDPS Z20, Z4, Z4 \
	VADDPS Z21, Z5, Z5 \
	VADDPS Z22, Z6, Z6 \
	VADDPS Z23, Z7, Z7 \
	VSHUFF64X2 $0x44, Z1, Z0, Z20 \
	VSHUFF64X2 $0xee, Z1, Z0, Z21 \
	VADDPS Z21, Z20, Z16 \
	VSHUFF64X2 $0x44, Z3, Z2, Z20 \
	VSHUFF64X2 $0xee, Z3, Z2, Z21 \
	VADDPS Z21, Z20, Z17 \
	VSHUFF64X2 $0x44, Z5, Z4, Z20 \
	VSHUFF64X2 $0xee, Z5, Z4, Z21 \
	VADDPS Z21, Z20, Z18 \
	VSHUFF64X2 $0x44, Z7, Z6, Z20 \
	VSHUFF64X2 $0xee, Z7, Z6, Z21 \
	VADDPS Z21, Z20, Z19 \
	VSHUFF32X4 $0x88, Z17, Z16, Z20 \
	VSHUFF32X4 $0xdd, Z17, Z16, Z21 \
	VADDPS Z21, Z20, Z22 \
	VSHUFF32X4 $0x88, Z19, Z18, Z20 \
	VSHUFF32X4 $0xdd, Z19, Z18, Z21 \
	VADDPS Z21, Z20, Z23 \
	VSHUFPS $0x88, Z23, Z22, Z20 \
	VSHUFPS $0xdd, Z23, Z22, Z21 \
	VADDPS Z21, Z20, Z24 \
	VSHUFPS $0x88, Z24, Z24, Z20 \
	VSHUFPS $0xdd, Z24, Z24, Z21 \
	VADDPS Z21, Z20, Z25 \
	CMPQ 144(DI), $0 \
	JEQ store \
	RNDBF16(Z25) \
store: \
	MOVQ R13, AX \
	MOVQ 136(DI), BX \
	LEAQ (BX)(BX*2), CX \
	LEAQ (AX)(BX*4), SI \
	VMOVSS X25, (AX) \
	VEXTRACTPS $1, X25, (SI) \
	VEXTRACTF32X4 $1, Z25, X20 \
	VMOVSS X20, (AX)(BX*1) \
	VEXTRACTPS $1, X20, (SI)(BX*1) \
	VEXTRACTF32X4 $2, Z25, X20 \
	VMOVSS X20, (AX)(BX*2) \
	VEXTRACTPS $1, X20, (SI)(BX*2) \
	VEXTRACTF32X4 $3, Z25, X20 \
	VMOVSS X20, (AX)(CX*1) \
	VEXTRACTPS $1, X20, (SI)(CX*1) \
	MOVQ 80(DI), R11 \
	ADDQ $4, R13 \
next: \
	ADDQ $512, R9 \
	ADDQ 8(DI), R10 \
	ADDQ 24(DI), R12 \
	DECQ DX \
	JNZ row \
done: \
	VZEROUPPER \
	RET

// func f32gemmB4(a *f32gArgs)
TEXT ·f32gemmB4(SB), NOSPLIT, $0-8
	F32GEMM(SETUPB4, UNPACKB4, ROWB4, 512)

// func f32gemmB8(a *f32gArgs)
TEXT ·f32gemmB8(SB), NOSPLIT, $0-8
	F32GEMM(SETUPB8, UNPACKB8, ROWB8, 256)
