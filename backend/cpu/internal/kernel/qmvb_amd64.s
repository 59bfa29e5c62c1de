//go:build amd64

#include "textflag.h"
#include "qmv_amd64.h"

// The int8 one-row kernels of qmv_amd64.s for a few rows of x at once
// (batched decode, a speculative verify window): each weight block is
// loaded and unpacked once and multiplied into R = 4 rows of x,
// each row by the instructions, in the order, of the one-row kernel, so
// every output is the bits qmvRows gives for that row of x alone
// (qmvb_amd64.go describes the arguments, qmvBArgs). One call runs a.nrow
// consecutive weight rows; a row's R results go to out, R floats per row.
//
// x is interleaved by the Go side: per weight block (64 bytes) the R rows'
// codes (128 bytes each for 4-bit weights, 64 for 8-bit) one after the
// other, then per block the R rows' lane scales (64 bytes each) in an
// array of their own, and per chunk of 16 groups the R rows' group sums.
//
// Registers: DI args; SI the weights of the row in progress; R8/R9 the
// scales of lanes 0-7/8-15 of the row (left at the next row's after the
// pass, as in qmv_amd64.s); R14 the biases of the row; R10 the bias chunk
// pointer; R11 the scale bytes of a row; R12 out; R13 rows left; BX x
// codes, then group sums; DX lane scales of x; AX scale steps left; CX
// blocks (then bias chunks) left; R15 the prefetch distance (a.pf: one
// line that far ahead of each weight block, into L2 as the one-row
// kernels' P forms prefetch: on Zen 4, 2026-12-04, MiniCPM5-1B's two- and
// four-row steps (BenchmarkBatchStream, three alternating runs) took 25-31
// and 28-33 ms against 34-36 and 36-45 with PREFETCHT0). Z0-Z3 the totals of the rows of x, Z8
// the scale vector, Z9 the weight block, Z10/Z11 its unpacked codes,
// Z12/Z13 scratch, Z15 = 0x0f bytes, Z16-Z19 the bias sums, Y24 scratch of
// SCALE, Z25 = 0xffff0000, Z26-Z27 scratch of the float16 SCALE and BIAS,
// K1 the bias chunk mask, K2 = 0x1111 (HSUM4R), K3 = 0x00ff (SCALEBF16H).

// The weight block at SI into Z10 (low nibbles) and Z11 (high nibbles),
// or as it is (8-bit) into Z10.
#define UNPACKB4 \
	VMOVDQU32 (SI), Z9 \
	VPANDD Z15, Z9, Z10 \
	VPSRLW $4, Z9, Z11 \
	VPANDD Z15, Z11, Z11

#define UNPACKB8 \
	VMOVDQU32 (SI), Z10

// One row of x against the block (ROWQ8B4 and ROWQ8B8 of qmv_amd64.s):
// xe (xo) the offset of its even (odd) codes from BX, dof of its lane
// scales from DX.
#define RB4(xe, xo, dof, acc) \
	VPXORD Z12, Z12, Z12 \
	VPDPBUSD xe(BX), Z10, Z12 \
	VPDPBUSD xo(BX), Z11, Z12 \
	VCVTDQ2PS Z12, Z12 \
	VMULPS dof(DX), Z12, Z12 \
	VFMADD231PS Z8, Z12, acc

#define RB8(xe, dof, acc) \
	VPXORD Z13, Z13, Z13 \
	VPDPBUSD xe(BX), Z10, Z13 \
	VCVTDQ2PS Z13, Z13 \
	VMULPS dof(DX), Z13, Z13 \
	VFMADD231PS Z8, Z13, acc

#define ROWSB4R4 \
	RB4(0, 64, 0, Z0) \
	RB4(128, 192, 64, Z1) \
	RB4(256, 320, 128, Z2) \
	RB4(384, 448, 192, Z3)

#define ROWSB8R4 \
	RB8(0, 0, Z0) \
	RB8(64, 64, Z1) \
	RB8(128, 128, Z2) \
	RB8(192, 192, Z3)

// Bias sums: the chunk of 16 groups' biases in Z9 times each row's group
// sums (BX), into Z16-Z19 (the one-row kernel's bias FMA).
#define BSUMR4 \
	VFMADD231PS (BX), Z9, Z16 \
	VFMADD231PS 64(BX), Z9, Z17 \
	VFMADD231PS 128(BX), Z9, Z18 \
	VFMADD231PS 192(BX), Z9, Z19

#define ZEROR4 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	VPXORD Z16, Z16, Z16 \
	VPXORD Z17, Z17, Z17 \
	VPXORD Z18, Z18, Z18 \
	VPXORD Z19, Z19, Z19

// Totals plus bias sums, summed horizontally, to out.
#define ENDR4 \
	VADDPS Z16, Z0, Z0 \
	VADDPS Z17, Z1, Z1 \
	VADDPS Z18, Z2, Z2 \
	VADDPS Z19, Z3, Z3 \
	HSUM4R(Z0, Z1, Z2, Z3) \
	VMOVUPS X12, (R12)

// QMVB is the body of a kernel: R rows of x (ZERO, ROWS, BSUM, END of R = 4;
// XSTR and DSTR the bytes of a block of x codes and of lane scales, the
// latter also those of a chunk of group sums; OSTR = 4R, of a row's results),
// UNPACK of the bits, SCALE, BIAS and BSTEP (bytes per 16 values) of the
// scale dtype.
#define QMVB(ZERO, UNPACK, ROWS, BSUM, END, XSTR, DSTR, OSTR, SCALE, BIAS, BSTEP) \
	MOVQ a+0(FP), DI \
	MOVQ 0(DI), SI \
	MOVQ 8(DI), R8 \
	MOVQ 16(DI), R14 \
	MOVQ 48(DI), R12 \
	MOVQ 88(DI), R11 \
	MOVL $0x1111, AX \
	KMOVW AX, K2 \
	MOVL $0x00ff, AX \
	KMOVW AX, K3 \
	MOVL $0xffff0000, AX \
	VPBROADCASTD AX, Z25 \
	MOVL $0x0f0f0f0f, AX \
	VPBROADCASTD AX, Z15 \
	MOVQ 128(DI), R15 \
	MOVQ 56(DI), R13 \
	TESTQ R13, R13 \
	JEQ done \
row: \
	ZERO \
	MOVQ 96(DI), R9 \
	ADDQ R8, R9 \
	MOVQ 24(DI), BX \
	MOVQ 32(DI), DX \
	MOVQ 64(DI), AX \
step: \
	SCALE((R8), (R9), Z8) \
	MOVQ 72(DI), CX \
blk: \
	PREFETCHT1 (SI)(R15*1) \
	UNPACK \
	ROWS \
	ADDQ $64, SI \
	ADDQ XSTR, BX \
	ADDQ DSTR, DX \
	DECQ CX \
	JNZ blk \
	ADDQ 104(DI), R8 \
	ADDQ 104(DI), R9 \
	DECQ AX \
	JNZ step \
	MOVQ 40(DI), BX \
	MOVQ R14, R10 \
	MOVQ 112(DI), CX \
	MOVL $0xffff, DX \
	KMOVW DX, K1 \
bloop: \
	CMPQ CX, $1 \
	JNE bbody \
	KMOVW 120(DI), K1 \
bbody: \
	BIAS((R10), Z9) \
	BSUM \
	ADDQ DSTR, BX \
	ADDQ BSTEP, R10 \
	DECQ CX \
	JNZ bloop \
	END \
	ADDQ R11, R14 \
	ADDQ OSTR, R12 \
	DECQ R13 \
	JNZ row \
done: \
	VZEROUPPER \
	RET

// func qmvbQ8B4F32R4(a *qmvBArgs)
TEXT ·qmvbQ8B4F32R4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB4, ROWSB4R4, BSUMR4, ENDR4, $512, $256, $16, SCALEF32, BIASF32, $64)

// func qmvbQ8B4BF16R4(a *qmvBArgs)
TEXT ·qmvbQ8B4BF16R4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB4, ROWSB4R4, BSUMR4, ENDR4, $512, $256, $16, SCALEBF16, BIASBF16, $32)

// func qmvbQ8B4BF16HR4(a *qmvBArgs)
TEXT ·qmvbQ8B4BF16HR4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB4, ROWSB4R4, BSUMR4, ENDR4, $512, $256, $16, SCALEBF16H, BIASBF16, $32)

// func qmvbQ8B8F32R4(a *qmvBArgs)
TEXT ·qmvbQ8B8F32R4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB8, ROWSB8R4, BSUMR4, ENDR4, $256, $256, $16, SCALEF32, BIASF32, $64)

// func qmvbQ8B8BF16R4(a *qmvBArgs)
TEXT ·qmvbQ8B8BF16R4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB8, ROWSB8R4, BSUMR4, ENDR4, $256, $256, $16, SCALEBF16, BIASBF16, $32)

// func qmvbQ8B8BF16HR4(a *qmvBArgs)
TEXT ·qmvbQ8B8BF16HR4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB8, ROWSB8R4, BSUMR4, ENDR4, $256, $256, $16, SCALEBF16H, BIASBF16, $32)

// func qmvbQ8B4F16R4(a *qmvBArgs)
TEXT ·qmvbQ8B4F16R4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB4, ROWSB4R4, BSUMR4, ENDR4, $512, $256, $16, SCALEF16, BIASF16, $32)

// func qmvbQ8B8F16R4(a *qmvBArgs)
TEXT ·qmvbQ8B8F16R4(SB), NOSPLIT, $0-8
	QMVB(ZEROR4, UNPACKB8, ROWSB8R4, BSUMR4, ENDR4, $256, $256, $16, SCALEF16, BIASF16, $32)
