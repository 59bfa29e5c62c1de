//go:build amd64

#include "textflag.h"

// AVX-512 quantized dot products of one weight row against up to four rows
// of x (qArgs in qmm_t.go describes the arguments). Every x row goes
// through the same instructions in the same order whatever the number of
// rows, and in the order of the archsimd kernels (simd_amd64.go), so the
// results are the same bits on every vector path.
//
// Registers: DI args; SI weights; BX x; DX lane scales of x (int8); R8
// scales of W (R11: offset of the scale of lanes 8-15); CX blocks left; R9
// rows of x; R10/R12 x row stride ·1/·3; AX/R13 lane-scale row stride
// ·1/·3; Z0-Z3 accumulate rows 0-3. Each loop prefetches the weights 256
// bytes ahead. The four kernels are one macro, QDOT (prologue, per-block
// unpack, one row-body per x row, bias terms and horizontal sums), with
// the unpacking and row-body of their bits and precision.

// nibble floats 0..15 (VPERMPS table of the 4-bit float32 kernel)
DATA nibf<>+0(SB)/4, $0x0
DATA nibf<>+4(SB)/4, $0x3f800000
DATA nibf<>+8(SB)/4, $0x40000000
DATA nibf<>+12(SB)/4, $0x40400000
DATA nibf<>+16(SB)/4, $0x40800000
DATA nibf<>+20(SB)/4, $0x40a00000
DATA nibf<>+24(SB)/4, $0x40c00000
DATA nibf<>+28(SB)/4, $0x40e00000
DATA nibf<>+32(SB)/4, $0x41000000
DATA nibf<>+36(SB)/4, $0x41100000
DATA nibf<>+40(SB)/4, $0x41200000
DATA nibf<>+44(SB)/4, $0x41300000
DATA nibf<>+48(SB)/4, $0x41400000
DATA nibf<>+52(SB)/4, $0x41500000
DATA nibf<>+56(SB)/4, $0x41600000
DATA nibf<>+60(SB)/4, $0x41700000
GLOBL nibf<>(SB), RODATA|NOPTR, $64

// HSUM stores the sum of the 16 lanes of z at off(DI): 256-bit halves, then
// 128-bit halves, then (l0+l1)+(l2+l3), as hsum in simd_amd64.go.
#define HSUM(z, y, x, off) \
	VEXTRACTF64X4 $1, z, Y15 \
	VADDPS Y15, y, y \
	VEXTRACTF128 $1, y, X15 \
	VADDPS X15, x, x \
	VMOVSHDUP x, X15 \
	VADDPS X15, x, x \
	VMOVHLPS x, X15, X15 \
	VADDSS X15, x, x \
	VMOVSS x, off(DI)

// The parts of each kernel: SETUP its constants, UNPACK the codes of one
// block of the weight row at SI into float32 or int8 vectors, ROW(X, L,
// ACC) one x row's products of the block (X the row's x block, L its lane
// scales, int8 only) added with the block's scales Z13 into ACC.

// int8, 4-bit: low nibbles (Z11) against the even codes of x, high
// nibbles (Z12) against the odd ones (permQ8), integer sums, times the lane
// scales of x.
#define SETUPQ8B4 \
	MOVL $0x0f0f0f0f, R11 \
	VPBROADCASTD R11, Z9

#define UNPACKQ8B4 \
	VMOVDQU32 (SI), Z8 \
	VPANDD Z9, Z8, Z11 \
	VPSRLW $4, Z8, Z12 \
	VPANDD Z9, Z12, Z12

#define ROWQ8B4(X, L, ACC) \
	VPXORD Z10, Z10, Z10 \
	VPDPBUSD X, Z11, Z10 \
	VPDPBUSD 64 X, Z12, Z10 \
	VCVTDQ2PS Z10, Z10 \
	VMULPS L, Z10, Z10 \
	VFMADD231PS Z13, Z10, ACC

// int8, 8-bit: the codes (Z11) against the codes of x.
#define SETUPQ8B8

#define UNPACKQ8B8 \
	VMOVDQU32 (SI), Z11

#define ROWQ8B8(X, L, ACC) \
	VPXORD Z10, Z10, Z10 \
	VPDPBUSD X, Z11, Z10 \
	VCVTDQ2PS Z10, Z10 \
	VMULPS L, Z10, Z10 \
	VFMADD231PS Z13, Z10, ACC

// float32, 4-bit: code p of each lane (bits 4p..4p+3, VPERMPS of the
// nibble table reads the low four bits of the index) in Z16+p, times x
// vector p, even p into Z10, odd into Z11, then their sum.
#define SETUPF32B4 \
	VMOVUPS nibf<>(SB), Z15

#define UNPACKF32B4 \
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

#define ROWF32B4(X, L, ACC) \
	VMULPS X, Z16, Z10 \
	VMULPS 64 X, Z17, Z11 \
	VFMADD231PS 128 X, Z18, Z10 \
	VFMADD231PS 192 X, Z19, Z11 \
	VFMADD231PS 256 X, Z20, Z10 \
	VFMADD231PS 320 X, Z21, Z11 \
	VFMADD231PS 384 X, Z22, Z10 \
	VFMADD231PS 448 X, Z23, Z11 \
	VADDPS Z11, Z10, Z10 \
	VFMADD231PS Z13, Z10, ACC

// float32, 8-bit: byte p of each lane in Z16+p, times x vector p, even p
// into Z10, odd into Z11, then their sum.
#define SETUPF32B8 \
	MOVL $0xff, R11 \
	VPBROADCASTD R11, Z9

#define UNPACKF32B8 \
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

#define ROWF32B8(X, L, ACC) \
	VMULPS X, Z16, Z10 \
	VMULPS 64 X, Z17, Z11 \
	VFMADD231PS 128 X, Z18, Z10 \
	VFMADD231PS 192 X, Z19, Z11 \
	VADDPS Z11, Z10, Z10 \
	VFMADD231PS Z13, Z10, ACC

// QDOT is the body of a kernel: SETUP, UNPACK and ROW of its bits and
// precision, XSTEP and DSTEP the bytes of x and of the lane scales of x per
// block. Per block: the codes unpacked once, the scales of lanes 0-7 and
// 8-15 into Z13, one ROW per row of x (R9 of them, 1 to 4). Then the bias
// terms Σ b·xs per row (Z4-Z7, lane-wise FMAs in steps of 16 groups), added
// to the totals, and the horizontal sums into a.out.
#define QDOT(SETUP, UNPACK, ROW, XSTEP, DSTEP) \
	MOVQ a+0(FP), DI \
	MOVQ 0(DI), SI \
	MOVQ 8(DI), R8 \
	MOVQ 24(DI), BX \
	MOVQ 32(DI), R10 \
	LEAQ (R10)(R10*2), R12 \
	MOVQ 40(DI), DX \
	MOVQ 48(DI), AX \
	LEAQ (AX)(AX*2), R13 \
	MOVQ 72(DI), CX \
	MOVQ 88(DI), R9 \
	VPXORD Z0, Z0, Z0 \
	VPXORD Z1, Z1, Z1 \
	VPXORD Z2, Z2, Z2 \
	VPXORD Z3, Z3, Z3 \
	SETUP \
	MOVQ 112(DI), R11 \
	TESTQ CX, CX \
	JZ done \
	PCALIGN $64 \
loop: \
	PREFETCHT0 256(SI) \
	UNPACK \
	VBROADCASTSS (R8), Z13 \
	VBROADCASTSS (R8)(R11*1), Y14 \
	VINSERTF64X4 $1, Y14, Z13, Z13 \
	ROW((BX), (DX), Z0) \
	CMPQ R9, $1 \
	JEQ next \
	ROW((BX)(R10*1), (DX)(AX*1), Z1) \
	CMPQ R9, $2 \
	JEQ next \
	ROW((BX)(R10*2), (DX)(AX*2), Z2) \
	CMPQ R9, $3 \
	JEQ next \
	ROW((BX)(R12*1), (DX)(R13*1), Z3) \
next: \
	ADDQ $64, SI \
	ADDQ XSTEP, BX \
	ADDQ DSTEP, DX \
	ADDQ 120(DI), R8 \
	DECQ CX \
	JNZ loop \
done: \
	MOVQ 16(DI), SI \
	MOVQ 56(DI), BX \
	MOVQ 64(DI), R10 \
	LEAQ (BX)(R10*1), R11 \
	LEAQ (R11)(R10*1), R12 \
	LEAQ (R12)(R10*1), R13 \
	MOVQ 80(DI), CX \
	XORQ DX, DX \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
bloop: \
	VMOVUPS (SI)(DX*1), Z8 \
	VFMADD231PS (BX)(DX*1), Z8, Z4 \
	CMPQ R9, $1 \
	JEQ bnext \
	VFMADD231PS (R11)(DX*1), Z8, Z5 \
	CMPQ R9, $2 \
	JEQ bnext \
	VFMADD231PS (R12)(DX*1), Z8, Z6 \
	CMPQ R9, $3 \
	JEQ bnext \
	VFMADD231PS (R13)(DX*1), Z8, Z7 \
bnext: \
	ADDQ $64, DX \
	SUBQ $16, CX \
	JGT bloop \
	VADDPS Z4, Z0, Z0 \
	VADDPS Z5, Z1, Z1 \
	VADDPS Z6, Z2, Z2 \
	VADDPS Z7, Z3, Z3 \
	HSUM(Z0, Y0, X0, 96) \
	HSUM(Z1, Y1, X1, 100) \
	HSUM(Z2, Y2, X2, 104) \
	HSUM(Z3, Y3, X3, 108) \
	VZEROUPPER \
	RET

// func qdotQ8B4(a *qArgs)
TEXT ·qdotQ8B4(SB), NOSPLIT, $0-8
	QDOT(SETUPQ8B4, UNPACKQ8B4, ROWQ8B4, $128, $64)

// func qdotQ8B8(a *qArgs)
TEXT ·qdotQ8B8(SB), NOSPLIT, $0-8
	QDOT(SETUPQ8B8, UNPACKQ8B8, ROWQ8B8, $64, $64)

// func qdotF32B4(a *qArgs)
TEXT ·qdotF32B4(SB), NOSPLIT, $0-8
	QDOT(SETUPF32B4, UNPACKF32B4, ROWF32B4, $512, $0)

// func qdotF32B8(a *qArgs)
TEXT ·qdotF32B8(SB), NOSPLIT, $0-8
	QDOT(SETUPF32B8, UNPACKF32B8, ROWF32B8, $256, $0)

// func dotF32Asm(a, b []float32) float32: dotAVX512's order (two 16-lane
// FMA accumulators over 32 values, one more block of 16 into the first,
// hsum, then the tail with separate multiply and add). len(b) >= len(a).
TEXT ·dotF32Asm(SB), NOSPLIT, $0-52
	MOVQ a_base+0(FP), SI
	MOVQ a_len+8(FP), CX
	MOVQ b_base+24(FP), DI
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	XORQ AX, AX
d32:
	LEAQ 32(AX), DX
	CMPQ DX, CX
	JGT d16
	VMOVUPS (SI)(AX*4), Z2
	VFMADD231PS (DI)(AX*4), Z2, Z0
	VMOVUPS 64(SI)(AX*4), Z3
	VFMADD231PS 64(DI)(AX*4), Z3, Z1
	MOVQ DX, AX
	JMP d32
d16:
	LEAQ 16(AX), DX
	CMPQ DX, CX
	JGT dsum
	VMOVUPS (SI)(AX*4), Z2
	VFMADD231PS (DI)(AX*4), Z2, Z0
	MOVQ DX, AX
dsum:
	VADDPS Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y15
	VADDPS Y15, Y0, Y0
	VEXTRACTF128 $1, Y0, X15
	VADDPS X15, X0, X0
	VMOVSHDUP X0, X15
	VADDPS X15, X0, X0
	VMOVHLPS X0, X15, X15
	VADDSS X15, X0, X0
dtail:
	CMPQ AX, CX
	JGE ddone
	VMOVSS (SI)(AX*4), X1
	VMULSS (DI)(AX*4), X1, X1
	VADDSS X1, X0, X0
	INCQ AX
	JMP dtail
ddone:
	VMOVSS X0, ret+48(FP)
	VZEROUPPER
	RET

// func axpyF32Asm(y []float32, a float32, x []float32): y += a·x, in
// axpyAVX512's order (16-lane FMAs, then the tail with separate multiply
// and add). len(x) >= len(y).
TEXT ·axpyF32Asm(SB), NOSPLIT, $0-56
	MOVQ y_base+0(FP), DI
	MOVQ y_len+8(FP), CX
	VBROADCASTSS a+24(FP), Z0
	MOVQ x_base+32(FP), SI
	XORQ AX, AX
a16:
	LEAQ 16(AX), DX
	CMPQ DX, CX
	JGT atail
	VMOVUPS (DI)(AX*4), Z1
	VFMADD231PS (SI)(AX*4), Z0, Z1
	VMOVUPS Z1, (DI)(AX*4)
	MOVQ DX, AX
	JMP a16
atail:
	CMPQ AX, CX
	JGE adone
	VMOVSS (SI)(AX*4), X1
	VMULSS X0, X1, X1
	VADDSS (DI)(AX*4), X1, X1
	VMOVSS X1, (DI)(AX*4)
	INCQ AX
	JMP atail
adone:
	VZEROUPPER
	RET
