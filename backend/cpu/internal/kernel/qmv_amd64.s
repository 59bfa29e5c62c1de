//go:build amd64

#include "textflag.h"
#include "qmv_amd64.h"

// AVX-512 quantized matrix-vector products for one row of x (decode): each
// call runs a.ntile tiles of four consecutive weight rows, reading the
// scales and biases in their storage dtype (float32, bfloat16 or float16), and
// writes the four float32 results of a tile to a.out (qmv_amd64.go
// describes the arguments, qmvArgs). Per output the lane operations and
// their order are those of qmm_amd64.s for one row of x (per block the
// products, the sum of the two partial vectors and the scale FMA into the
// total; the bias terms in a separate accumulator over the groups in steps
// of 16; total + bias; the horizontal sum in hsum's order), so the results
// are the same bits. The four rows of a tile are read one after the other,
// each from its first block to its last (ROWPASS), so a worker's loads run
// through memory in order; x is read again for each row, from L1.
//
// Registers: DI args; SI the weights of the row in progress (the rows of a
// tile are consecutive, so a row's pass leaves SI at the next row); R8/R9
// the scales of lanes 0-7/8-15 of that row (likewise left at the next
// row's); R11 the scale (and bias) bytes of a row, R13 = 3·R11; BX x; DX
// lane scales of x (int8); AX scale steps left; CX blocks left in a step;
// R14 the prefetch pointer, a.pf bytes (a tile and more) ahead of the
// loads, one line per block (PFF32). The float32 kernels always prefetch;
// the int8 kernels come in two forms (qmvQ8PF, on by default): on the
// Intel Xeon of the first benchmarks the hardware prefetcher kept up with
// each worker's sequential run, and a PREFETCHT0 per block made six
// decode layers of int8 kernels 10-23% slower (fast decode 3% slower end to
// end), while on AMD Zen 5 the int8 kernels without it took 1.5× the CPU
// time per decode layer (7.5-9.0 against 12.2-13.6 GB of weights per CPU
// second, BenchmarkQMV layers, alternating runs) and fast decode of
// MiniCPM5-1B 1.3-1.4× the CPU time (generate, 64 tokens, alternating runs),
// and on the lent Intel Xeon of 2026-12-04 (two cores) the prefetching
// form read 2.5-3.5× the bytes per CPU second on Qwen2.5-0.5B's 8-bit
// layers and 1.1× on Llama-3.2-1B's 4-bit ones (BenchmarkQMVStream, -pf1
// against -pf0).
// Z0-Z3 totals of rows 0-3, Z4 the scale vector of the row in
// progress, Z4-Z7 the bias sums of the tile's rows, Z8-Z13 scratch, Z14-Z15
// constants of the kernel, Z16-Z23 the block of x, Y24 scratch of SCALE,
// Z25 = 0xffff0000, Z26-Z27 scratch of SCALEF16 and BIASF16, K1 the bias
// chunk mask, K2 = 0x1111 (HSUM4), K3 = 0x00ff (SCALEBF16H).

// nibble floats 0..15 (VPERMPS table of the 4-bit float32 kernel)
DATA qmvnib<>+0(SB)/4, $0x0
DATA qmvnib<>+4(SB)/4, $0x3f800000
DATA qmvnib<>+8(SB)/4, $0x40000000
DATA qmvnib<>+12(SB)/4, $0x40400000
DATA qmvnib<>+16(SB)/4, $0x40800000
DATA qmvnib<>+20(SB)/4, $0x40a00000
DATA qmvnib<>+24(SB)/4, $0x40c00000
DATA qmvnib<>+28(SB)/4, $0x40e00000
DATA qmvnib<>+32(SB)/4, $0x41000000
DATA qmvnib<>+36(SB)/4, $0x41100000
DATA qmvnib<>+40(SB)/4, $0x41200000
DATA qmvnib<>+44(SB)/4, $0x41300000
DATA qmvnib<>+48(SB)/4, $0x41400000
DATA qmvnib<>+52(SB)/4, $0x41500000
DATA qmvnib<>+56(SB)/4, $0x41600000
DATA qmvnib<>+60(SB)/4, $0x41700000
GLOBL qmvnib<>(SB), RODATA|NOPTR, $64

// VPSHUFB controls of the 8-bit float32 kernel: byte 1 (qmvshb1) or 2
// (qmvshb2) of each dword into its low byte, the other three bytes zero.
DATA qmvshb1<>+0(SB)/4, $0x80808001
DATA qmvshb1<>+4(SB)/4, $0x80808005
DATA qmvshb1<>+8(SB)/4, $0x80808009
DATA qmvshb1<>+12(SB)/4, $0x8080800d
DATA qmvshb1<>+16(SB)/4, $0x80808001
DATA qmvshb1<>+20(SB)/4, $0x80808005
DATA qmvshb1<>+24(SB)/4, $0x80808009
DATA qmvshb1<>+28(SB)/4, $0x8080800d
DATA qmvshb1<>+32(SB)/4, $0x80808001
DATA qmvshb1<>+36(SB)/4, $0x80808005
DATA qmvshb1<>+40(SB)/4, $0x80808009
DATA qmvshb1<>+44(SB)/4, $0x8080800d
DATA qmvshb1<>+48(SB)/4, $0x80808001
DATA qmvshb1<>+52(SB)/4, $0x80808005
DATA qmvshb1<>+56(SB)/4, $0x80808009
DATA qmvshb1<>+60(SB)/4, $0x8080800d
GLOBL qmvshb1<>(SB), RODATA|NOPTR, $64

DATA qmvshb2<>+0(SB)/4, $0x80808002
DATA qmvshb2<>+4(SB)/4, $0x80808006
DATA qmvshb2<>+8(SB)/4, $0x8080800a
DATA qmvshb2<>+12(SB)/4, $0x8080800e
DATA qmvshb2<>+16(SB)/4, $0x80808002
DATA qmvshb2<>+20(SB)/4, $0x80808006
DATA qmvshb2<>+24(SB)/4, $0x8080800a
DATA qmvshb2<>+28(SB)/4, $0x8080800e
DATA qmvshb2<>+32(SB)/4, $0x80808002
DATA qmvshb2<>+36(SB)/4, $0x80808006
DATA qmvshb2<>+40(SB)/4, $0x8080800a
DATA qmvshb2<>+44(SB)/4, $0x8080800e
DATA qmvshb2<>+48(SB)/4, $0x80808002
DATA qmvshb2<>+52(SB)/4, $0x80808006
DATA qmvshb2<>+56(SB)/4, $0x8080800a
DATA qmvshb2<>+60(SB)/4, $0x8080800e
GLOBL qmvshb2<>(SB), RODATA|NOPTR, $64

// Per-kernel constants, loads of one block of x and the step past it.
#define SETUPQ8B4 \
	MOVL $0x0f0f0f0f, AX \
	VPBROADCASTD AX, Z15

#define XLOADQ8B4 \
	VMOVDQU8 (BX), Z16 \
	VMOVDQU8 64(BX), Z17 \
	VMOVUPS (DX), Z18

#define XSTEPQ8B4 \
	ADDQ $128, BX \
	ADDQ $64, DX

#define SETUPQ8B8

#define XLOADQ8B8 \
	VMOVDQU8 (BX), Z16 \
	VMOVUPS (DX), Z18

#define XSTEPQ8B8 \
	ADDQ $64, BX \
	ADDQ $64, DX

#define SETUPF32B4 \
	VMOVUPS qmvnib<>(SB), Z15 \
	MOVL $15, AX \
	VPBROADCASTD AX, Z14

#define XLOADF32B4 \
	VMOVUPS (BX), Z16 \
	VMOVUPS 64(BX), Z17 \
	VMOVUPS 128(BX), Z18 \
	VMOVUPS 192(BX), Z19 \
	VMOVUPS 256(BX), Z20 \
	VMOVUPS 320(BX), Z21 \
	VMOVUPS 384(BX), Z22 \
	VMOVUPS 448(BX), Z23

#define XSTEPF32B4 \
	ADDQ $512, BX

#define SETUPF32B8 \
	MOVL $0xff, AX \
	VPBROADCASTD AX, Z15 \
	VMOVDQU32 qmvshb1<>(SB), Z28 \
	VMOVDQU32 qmvshb2<>(SB), Z29

#define XLOADF32B8 \
	VMOVUPS (BX), Z16 \
	VMOVUPS 64(BX), Z17 \
	VMOVUPS 128(BX), Z18 \
	VMOVUPS 192(BX), Z19

#define XSTEPF32B8 \
	ADDQ $256, BX

// One block of one weight row at w, scale vector s, into total acc.
// int8, 4-bit: low nibbles against the even codes of x, high nibbles
// against the odd ones (permQ8), integer sums, times the lane scales of x.
#define ROWQ8B4(w, s, acc) \
	VMOVDQU32 w, Z8 \
	VPANDD Z15, Z8, Z10 \
	VPSRLW $4, Z8, Z11 \
	VPANDD Z15, Z11, Z11 \
	VPXORD Z9, Z9, Z9 \
	VPDPBUSD Z16, Z10, Z9 \
	VPDPBUSD Z17, Z11, Z9 \
	VCVTDQ2PS Z9, Z9 \
	VMULPS Z18, Z9, Z9 \
	VFMADD231PS s, Z9, acc

#define ROWQ8B8(w, s, acc) \
	VMOVDQU32 w, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPDPBUSD Z16, Z8, Z9 \
	VCVTDQ2PS Z9, Z9 \
	VMULPS Z18, Z9, Z9 \
	VFMADD231PS s, Z9, acc

// float32, 4-bit: code p of each lane (bits 4p..4p+3, VPERMPS reads the low
// four bits of the index) times x vector p, even p into Z12, odd into Z13.
// Every code but the last goes through VPERMPS (a shift and a table
// lookup; the last needs no mask): on Zen 4 this read MiniCPM5-1B's
// reference decode at 36.3-37.2 tok/s against 35.5-35.9 with the odd codes
// masked and converted (VPANDD, VCVTDQ2PS), four alternating runs
// (2026-12-04). The values are the same integers either way.
#define ROWF32B4(w, s, acc) \
	VMOVDQU32 w, Z8 \
	VPERMPS Z15, Z8, Z9 \
	VMULPS Z16, Z9, Z12 \
	VPSRLD $4, Z8, Z10 \
	VPERMPS Z15, Z10, Z9 \
	VMULPS Z17, Z9, Z13 \
	VPSRLD $8, Z8, Z10 \
	VPERMPS Z15, Z10, Z9 \
	VFMADD231PS Z18, Z9, Z12 \
	VPSRLD $12, Z8, Z10 \
	VPERMPS Z15, Z10, Z9 \
	VFMADD231PS Z19, Z9, Z13 \
	VPSRLD $16, Z8, Z10 \
	VPERMPS Z15, Z10, Z9 \
	VFMADD231PS Z20, Z9, Z12 \
	VPSRLD $20, Z8, Z10 \
	VPERMPS Z15, Z10, Z9 \
	VFMADD231PS Z21, Z9, Z13 \
	VPSRLD $24, Z8, Z10 \
	VPERMPS Z15, Z10, Z9 \
	VFMADD231PS Z22, Z9, Z12 \
	VPSRLD $28, Z8, Z10 \
	VCVTDQ2PS Z10, Z9 \
	VFMADD231PS Z23, Z9, Z13 \
	VADDPS Z13, Z12, Z12 \
	VFMADD231PS s, Z12, acc

// float32, 8-bit: byte p of each lane converted (VCVTUDQ2PS) and times x
// vector p: byte 0 masked, bytes 1 and 2 moved to the low byte by VPSHUFB
// (Z28, Z29: qmvshb1, qmvshb2), byte 3 shifted down. The shuffles run on
// the port the shifts and conversions do not: on the Intel Xeon of
// 2026-12-06 BenchmarkQMVStream qwen-0.5b (8-bit group 32, bfloat16, four
// layers, from L3) read 21.6 -> 23.9 GB per CPU second on one thread and
// 35.8 -> 42.8 GB/s on two against two shifts and masks; from memory (24
// layers, 400 MB) 14.2 and 29-30 GB/s either way. The values are the same
// integers.
#define ROWF32B8(w, s, acc) \
	VMOVDQU32 w, Z8 \
	VPANDD Z15, Z8, Z9 \
	VCVTUDQ2PS Z9, Z9 \
	VMULPS Z16, Z9, Z12 \
	VPSHUFB Z28, Z8, Z9 \
	VCVTUDQ2PS Z9, Z9 \
	VMULPS Z17, Z9, Z13 \
	VPSHUFB Z29, Z8, Z9 \
	VCVTUDQ2PS Z9, Z9 \
	VFMADD231PS Z18, Z9, Z12 \
	VPSRLD $24, Z8, Z9 \
	VCVTUDQ2PS Z9, Z9 \
	VFMADD231PS Z19, Z9, Z13 \
	VADDPS Z13, Z12, Z12 \
	VFMADD231PS s, Z12, acc

// HSUM4 is HSUM4R (qmv_amd64.h) of the four totals.
#define HSUM4 HSUM4R(Z0, Z1, Z2, Z3)

// The prefetch of a block: one line a.pf bytes ahead (the float32 kernels
// and the int8 kernels of the P suffix), or none (the int8 kernels without
// it). PREFETCHT1, into L2: on Zen 4 (2026-12-04, mlxgo generate of the
// synthetic MiniCPM5-1B, 128 tokens, three alternating rounds) fast decode
// read 33.6-37.4 tok/s against 30.2-35.2 with PREFETCHT0, reference
// 29.5-30.6 against 25.1-28.1 (a PREFETCHT0 holds one of the core's few
// L1 miss buffers until its line arrives).
#define PFF32 \
	PREFETCHT1 (R14) \
	ADDQ $64, R14

#define PFQ8

// ROWPASS runs the blocks of one row of the tile into total acc, in memory
// order: SI the row's weights, R8 its scales (both left at the next row's),
// x read again from its start; PF per block (PFF32 or nothing).
#define ROWPASS(XLOAD, ROW, XSTEP, SCALE, PF, acc, lstep, lblk) \
	MOVQ 96(DI), R9 \
	ADDQ R8, R9 \
	MOVQ 24(DI), BX \
	MOVQ 32(DI), DX \
	VPXORD acc, acc, acc \
	MOVQ 64(DI), AX \
lstep: \
	SCALE((R8), (R9), Z4) \
	MOVQ 72(DI), CX \
lblk: \
	PF \
	XLOAD \
	ROW((SI), Z4, acc) \
	ADDQ $64, SI \
	XSTEP \
	DECQ CX \
	JNZ lblk \
	ADDQ 104(DI), R8 \
	ADDQ 104(DI), R9 \
	DECQ AX \
	JNZ lstep

// QMV is the body of a kernel: SETUP, XLOAD, ROW and XSTEP of its bits
// and precision, SCALE, BIAS and BSTEP (bytes per 16 values) of the scale
// dtype. The four rows of a tile are read one after the other (one
// sequential stream per worker, which the hardware prefetcher follows; four
// interleaved row streams ran at half the bandwidth), x again for each row
// from L1.
#define QMV(SETUP, XLOAD, ROW, XSTEP, SCALE, BIAS, BSTEP, PF) \
	MOVQ a+0(FP), DI \
	MOVQ 0(DI), SI \
	MOVQ 8(DI), R8 \
	MOVQ 88(DI), R11 \
	LEAQ (R11)(R11*2), R13 \
	MOVQ 128(DI), R14 \
	ADDQ SI, R14 \
	MOVL $0x1111, AX \
	KMOVW AX, K2 \
	MOVL $0x00ff, AX \
	KMOVW AX, K3 \
	MOVL $0xffff0000, AX \
	VPBROADCASTD AX, Z25 \
	SETUP \
	CMPQ 56(DI), $0 \
	JEQ done \
tile: \
	ROWPASS(XLOAD, ROW, XSTEP, SCALE, PF, Z0, step0, blk0) \
	ROWPASS(XLOAD, ROW, XSTEP, SCALE, PF, Z1, step1, blk1) \
	ROWPASS(XLOAD, ROW, XSTEP, SCALE, PF, Z2, step2, blk2) \
	ROWPASS(XLOAD, ROW, XSTEP, SCALE, PF, Z3, step3, blk3) \
	MOVQ 16(DI), AX \
	MOVQ 40(DI), BX \
	MOVQ 112(DI), CX \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	MOVL $0xffff, DX \
	KMOVW DX, K1 \
bloop: \
	CMPQ CX, $1 \
	JNE bbody \
	KMOVW 120(DI), K1 \
bbody: \
	VMOVUPS (BX), Z8 \
	BIAS((AX), Z9) \
	VFMADD231PS Z8, Z9, Z4 \
	BIAS((AX)(R11*1), Z10) \
	VFMADD231PS Z8, Z10, Z5 \
	BIAS((AX)(R11*2), Z11) \
	VFMADD231PS Z8, Z11, Z6 \
	BIAS((AX)(R13*1), Z12) \
	VFMADD231PS Z8, Z12, Z7 \
	ADDQ $64, BX \
	ADDQ BSTEP, AX \
	DECQ CX \
	JNZ bloop \
	MOVQ 16(DI), AX \
	LEAQ (AX)(R11*4), AX \
	MOVQ AX, 16(DI) \
	VADDPS Z4, Z0, Z0 \
	VADDPS Z5, Z1, Z1 \
	VADDPS Z6, Z2, Z2 \
	VADDPS Z7, Z3, Z3 \
	HSUM4 \
	MOVQ 48(DI), AX \
	VMOVUPS X12, (AX) \
	ADDQ $16, 48(DI) \
	DECQ 56(DI) \
	JNZ tile \
done: \
	VZEROUPPER \
	RET

// func qmvQ8B4F32(a *qmvArgs)
TEXT ·qmvQ8B4F32(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEF32, BIASF32, $64, PFQ8)

// func qmvQ8B4BF16(a *qmvArgs)
TEXT ·qmvQ8B4BF16(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEBF16, BIASBF16, $32, PFQ8)

// func qmvQ8B4BF16H(a *qmvArgs)
TEXT ·qmvQ8B4BF16H(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEBF16H, BIASBF16, $32, PFQ8)

// func qmvQ8B8F32(a *qmvArgs)
TEXT ·qmvQ8B8F32(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEF32, BIASF32, $64, PFQ8)

// func qmvQ8B8BF16(a *qmvArgs)
TEXT ·qmvQ8B8BF16(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEBF16, BIASBF16, $32, PFQ8)

// func qmvQ8B8BF16H(a *qmvArgs)
TEXT ·qmvQ8B8BF16H(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEBF16H, BIASBF16, $32, PFQ8)

// The int8 kernels with the prefetch of the float32 ones (qmvQ8PF).

// func qmvQ8B4F32P(a *qmvArgs)
TEXT ·qmvQ8B4F32P(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEF32, BIASF32, $64, PFF32)

// func qmvQ8B4BF16P(a *qmvArgs)
TEXT ·qmvQ8B4BF16P(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEBF16, BIASBF16, $32, PFF32)

// func qmvQ8B4BF16HP(a *qmvArgs)
TEXT ·qmvQ8B4BF16HP(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEBF16H, BIASBF16, $32, PFF32)

// func qmvQ8B8F32P(a *qmvArgs)
TEXT ·qmvQ8B8F32P(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEF32, BIASF32, $64, PFF32)

// func qmvQ8B8BF16P(a *qmvArgs)
TEXT ·qmvQ8B8BF16P(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEBF16, BIASBF16, $32, PFF32)

// func qmvQ8B8BF16HP(a *qmvArgs)
TEXT ·qmvQ8B8BF16HP(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEBF16H, BIASBF16, $32, PFF32)

// func qmvF32B4F32(a *qmvArgs)
TEXT ·qmvF32B4F32(SB), NOSPLIT, $0-8
	QMV(SETUPF32B4, XLOADF32B4, ROWF32B4, XSTEPF32B4, SCALEF32, BIASF32, $64, PFF32)

// func qmvF32B4BF16(a *qmvArgs)
TEXT ·qmvF32B4BF16(SB), NOSPLIT, $0-8
	QMV(SETUPF32B4, XLOADF32B4, ROWF32B4, XSTEPF32B4, SCALEBF16, BIASBF16, $32, PFF32)

// func qmvF32B4BF16H(a *qmvArgs)
TEXT ·qmvF32B4BF16H(SB), NOSPLIT, $0-8
	QMV(SETUPF32B4, XLOADF32B4, ROWF32B4, XSTEPF32B4, SCALEBF16H, BIASBF16, $32, PFF32)

// func qmvF32B8F32(a *qmvArgs)
TEXT ·qmvF32B8F32(SB), NOSPLIT, $0-8
	QMV(SETUPF32B8, XLOADF32B8, ROWF32B8, XSTEPF32B8, SCALEF32, BIASF32, $64, PFF32)

// func qmvF32B8BF16(a *qmvArgs)
TEXT ·qmvF32B8BF16(SB), NOSPLIT, $0-8
	QMV(SETUPF32B8, XLOADF32B8, ROWF32B8, XSTEPF32B8, SCALEBF16, BIASBF16, $32, PFF32)

// func qmvF32B8BF16H(a *qmvArgs)
TEXT ·qmvF32B8BF16H(SB), NOSPLIT, $0-8
	QMV(SETUPF32B8, XLOADF32B8, ROWF32B8, XSTEPF32B8, SCALEBF16H, BIASBF16, $32, PFF32)

// The kernels with float16 scales and biases (F16, and F16H for two groups
// per block), the int8 ones also with the prefetch (P).

// func qmvQ8B4F16(a *qmvArgs)
TEXT ·qmvQ8B4F16(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEF16, BIASF16, $32, PFQ8)

// func qmvQ8B4F16P(a *qmvArgs)
TEXT ·qmvQ8B4F16P(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEF16, BIASF16, $32, PFF32)

// func qmvQ8B4F16H(a *qmvArgs)
TEXT ·qmvQ8B4F16H(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEF16, BIASF16, $32, PFQ8)

// func qmvQ8B4F16HP(a *qmvArgs)
TEXT ·qmvQ8B4F16HP(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B4, XLOADQ8B4, ROWQ8B4, XSTEPQ8B4, SCALEF16, BIASF16, $32, PFF32)

// func qmvQ8B8F16(a *qmvArgs)
TEXT ·qmvQ8B8F16(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEF16, BIASF16, $32, PFQ8)

// func qmvQ8B8F16P(a *qmvArgs)
TEXT ·qmvQ8B8F16P(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEF16, BIASF16, $32, PFF32)

// func qmvQ8B8F16H(a *qmvArgs)
TEXT ·qmvQ8B8F16H(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEF16, BIASF16, $32, PFQ8)

// func qmvQ8B8F16HP(a *qmvArgs)
TEXT ·qmvQ8B8F16HP(SB), NOSPLIT, $0-8
	QMV(SETUPQ8B8, XLOADQ8B8, ROWQ8B8, XSTEPQ8B8, SCALEF16, BIASF16, $32, PFF32)

// func qmvF32B4F16(a *qmvArgs)
TEXT ·qmvF32B4F16(SB), NOSPLIT, $0-8
	QMV(SETUPF32B4, XLOADF32B4, ROWF32B4, XSTEPF32B4, SCALEF16, BIASF16, $32, PFF32)

// func qmvF32B4F16H(a *qmvArgs)
TEXT ·qmvF32B4F16H(SB), NOSPLIT, $0-8
	QMV(SETUPF32B4, XLOADF32B4, ROWF32B4, XSTEPF32B4, SCALEF16, BIASF16, $32, PFF32)

// func qmvF32B8F16(a *qmvArgs)
TEXT ·qmvF32B8F16(SB), NOSPLIT, $0-8
	QMV(SETUPF32B8, XLOADF32B8, ROWF32B8, XSTEPF32B8, SCALEF16, BIASF16, $32, PFF32)

// func qmvF32B8F16H(a *qmvArgs)
TEXT ·qmvF32B8F16H(SB), NOSPLIT, $0-8
	QMV(SETUPF32B8, XLOADF32B8, ROWF32B8, XSTEPF32B8, SCALEF16, BIASF16, $32, PFF32)

// The rearrangements of x for the kernels above, bit for bit those of
// groupSums, permF32, quantizeQ8 and permQ8 (qmm_t.go) for one row.

// gather indices 0, 1, ..., 15
DATA qmviota<>+0(SB)/4, $0
DATA qmviota<>+4(SB)/4, $1
DATA qmviota<>+8(SB)/4, $2
DATA qmviota<>+12(SB)/4, $3
DATA qmviota<>+16(SB)/4, $4
DATA qmviota<>+20(SB)/4, $5
DATA qmviota<>+24(SB)/4, $6
DATA qmviota<>+28(SB)/4, $7
DATA qmviota<>+32(SB)/4, $8
DATA qmviota<>+36(SB)/4, $9
DATA qmviota<>+40(SB)/4, $10
DATA qmviota<>+44(SB)/4, $11
DATA qmviota<>+48(SB)/4, $12
DATA qmviota<>+52(SB)/4, $13
DATA qmviota<>+56(SB)/4, $14
DATA qmviota<>+60(SB)/4, $15
GLOBL qmviota<>(SB), RODATA|NOPTR, $64

// func qmvSums(xs, x *float32, ng, gs int)
// xs[g] = Σ x[g·gs+i] for i = 0..gs-1 in order, in float32, sixteen groups
// at a time (lane g gathers its group's elements one by one); xs gets
// ng rounded up to 16 values, zero past ng.
TEXT ·qmvSums(SB), NOSPLIT, $0-32
	MOVQ xs+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ ng+16(FP), CX
	MOVQ gs+24(FP), DX
	VPBROADCASTD DX, Z1
	VPMULLD qmviota<>(SB), Z1, Z1 // lane g reads element g·gs
	MOVQ DX, R9
	SHLQ $6, R9 // bytes of 16 groups
	TESTQ CX, CX
	JLE sdone
sgroups:
	MOVL $0xffff, AX
	CMPQ CX, $16
	JGE sfull
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
sfull:
	KMOVW AX, K2
	VPXORD Z0, Z0, Z0
	MOVQ SI, R8
	MOVQ DX, BX
selem:
	KMOVW K2, K1
	VPXORD Z2, Z2, Z2
	VGATHERDPS (R8)(Z1*4), K1, Z2
	VADDPS Z2, Z0, Z0
	ADDQ $4, R8
	DECQ BX
	JNZ selem
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ R9, SI
	SUBQ $16, CX
	JGT sgroups
sdone:
	VZEROUPPER
	RET

// func qmvPermF32(xp, x *float32, nblk, cpl int)
// permF32 for one row of nblk blocks of 16·cpl values: vector p of a block
// gathers elements cpl·l + p (l = 0..15).
TEXT ·qmvPermF32(SB), NOSPLIT, $0-32
	MOVQ xp+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ nblk+16(FP), CX
	MOVQ cpl+24(FP), DX
	VPBROADCASTD DX, Z1
	VPMULLD qmviota<>(SB), Z1, Z1
	TESTQ CX, CX
	JLE pdone
pblk:
	MOVQ DX, BX
	MOVQ SI, R8
pvec:
	KXNORW K1, K1, K1
	VGATHERDPS (R8)(Z1*4), K1, Z2
	VMOVUPS Z2, (DI)
	ADDQ $64, DI
	ADDQ $4, R8
	DECQ BX
	JNZ pvec
	MOVQ DX, AX
	SHLQ $6, AX
	ADDQ AX, SI // 16·cpl floats
	DECQ CX
	JNZ pblk
pdone:
	VZEROUPPER
	RET

// QUANT32 quantizes the 32 floats at SI as quantizeQ8 does (qmax 127):
// amax = max|x| (NaN ignored), d = amax/127 to X6, codes rint(x·(127/amax))
// clamped to ±127, NaN to 0, as int32 in Z0 (codes 0-15) and Z1 (16-31).
// Z28 = 127, Z29 = -127, Z30 = abs mask, Z31 = 0.
#define QUANT32 \
	VMOVUPS (SI), Z0 \
	VMOVUPS 64(SI), Z1 \
	VANDPS Z30, Z0, Z2 \
	VANDPS Z30, Z1, Z3 \
	VMAXPS Z31, Z2, Z4 \
	VMAXPS Z4, Z3, Z4 \
	VEXTRACTF64X4 $1, Z4, Y5 \
	VMAXPS Y5, Y4, Y4 \
	VEXTRACTF128 $1, Y4, X5 \
	VMAXPS X5, X4, X4 \
	VPERMILPS $0x4E, X4, X5 \
	VMAXPS X5, X4, X4 \
	VPERMILPS $0xB1, X4, X5 \
	VMAXPS X5, X4, X4 \
	VDIVSS X28, X4, X6 \
	VDIVSS X4, X28, X7 \
	VBROADCASTSS X7, Z7 \
	VMULPS Z7, Z0, Z0 \
	VMULPS Z7, Z1, Z1 \
	VRNDSCALEPS $0, Z0, Z0 \
	VRNDSCALEPS $0, Z1, Z1 \
	VCMPPS $3, Z0, Z0, K1 \
	VCMPPS $3, Z1, Z1, K2 \
	VMOVAPS Z31, K1, Z0 \
	VMOVAPS Z31, K2, Z1 \
	VMINPS Z28, Z0, Z0 \
	VMINPS Z28, Z1, Z1 \
	VMAXPS Z29, Z0, Z0 \
	VMAXPS Z29, Z1, Z1 \
	VCVTPS2DQ Z0, Z0 \
	VCVTPS2DQ Z1, Z1 \
	ADDQ $128, SI

#define QCONST \
	MOVL $0x42fe0000, AX \
	VPBROADCASTD AX, Z28 \
	MOVL $0xc2fe0000, AX \
	VPBROADCASTD AX, Z29 \
	MOVL $0x7fffffff, AX \
	VPBROADCASTD AX, Z30 \
	VPXORD Z31, Z31, Z31

// func qmvQuantQ8B8(xq *int8, dxl, x *float32, nq int)
// quantizeQ8 and permQ8 for one row of nq blocks of 32 with 8-bit weights:
// codes in natural order, each block's d repeated for its 8 lanes.
TEXT ·qmvQuantQ8B8(SB), NOSPLIT, $0-32
	MOVQ xq+0(FP), DI
	MOVQ dxl+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ nq+24(FP), CX
	QCONST
	TESTQ CX, CX
	JLE q8done
q8blk:
	QUANT32
	VPMOVDB Z0, X0
	VPMOVDB Z1, X1
	VMOVDQU X0, (DI)
	VMOVDQU X1, 16(DI)
	VBROADCASTSS X6, Y6
	VMOVUPS Y6, (DX)
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ q8blk
q8done:
	VZEROUPPER
	RET

// even and odd dword indices of two registers (VPERMI2D)
DATA qmvevod<>+0(SB)/4, $0
DATA qmvevod<>+4(SB)/4, $2
DATA qmvevod<>+8(SB)/4, $4
DATA qmvevod<>+12(SB)/4, $6
DATA qmvevod<>+16(SB)/4, $8
DATA qmvevod<>+20(SB)/4, $10
DATA qmvevod<>+24(SB)/4, $12
DATA qmvevod<>+28(SB)/4, $14
DATA qmvevod<>+32(SB)/4, $16
DATA qmvevod<>+36(SB)/4, $18
DATA qmvevod<>+40(SB)/4, $20
DATA qmvevod<>+44(SB)/4, $22
DATA qmvevod<>+48(SB)/4, $24
DATA qmvevod<>+52(SB)/4, $26
DATA qmvevod<>+56(SB)/4, $28
DATA qmvevod<>+60(SB)/4, $30
DATA qmvevod<>+64(SB)/4, $1
DATA qmvevod<>+68(SB)/4, $3
DATA qmvevod<>+72(SB)/4, $5
DATA qmvevod<>+76(SB)/4, $7
DATA qmvevod<>+80(SB)/4, $9
DATA qmvevod<>+84(SB)/4, $11
DATA qmvevod<>+88(SB)/4, $13
DATA qmvevod<>+92(SB)/4, $15
DATA qmvevod<>+96(SB)/4, $17
DATA qmvevod<>+100(SB)/4, $19
DATA qmvevod<>+104(SB)/4, $21
DATA qmvevod<>+108(SB)/4, $23
DATA qmvevod<>+112(SB)/4, $25
DATA qmvevod<>+116(SB)/4, $27
DATA qmvevod<>+120(SB)/4, $29
DATA qmvevod<>+124(SB)/4, $31
GLOBL qmvevod<>(SB), RODATA|NOPTR, $128

// func qmvQuantQ8B4(xq *int8, dxl, x *float32, nq int)
// quantizeQ8 and permQ8 for one row of nq blocks of 32 (nq a multiple of
// 4) with 4-bit weights: per 128 codes the 64 even codes, then the 64 odd
// ones; each block's d repeated for its 4 lanes.
TEXT ·qmvQuantQ8B4(SB), NOSPLIT, $0-32
	MOVQ xq+0(FP), DI
	MOVQ dxl+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ nq+24(FP), CX
	QCONST
	VMOVDQU32 qmvevod<>+0(SB), Z26
	VMOVDQU32 qmvevod<>+64(SB), Z27
	SHRQ $2, CX
	JZ q4done
q4blk:
	MOVQ $4, BX
q4sub:
	QUANT32
	VMOVDQA32 Z26, Z2
	VPERMI2D Z1, Z0, Z2
	VMOVDQA32 Z27, Z3
	VPERMI2D Z1, Z0, Z3
	VPMOVDB Z2, X2
	VPMOVDB Z3, X3
	VMOVDQU X2, (DI)
	VMOVDQU X3, 64(DI)
	VBROADCASTSS X6, X6
	VMOVUPS X6, (DX)
	ADDQ $16, DI
	ADDQ $16, DX
	DECQ BX
	JNZ q4sub
	ADDQ $64, DI
	DECQ CX
	JNZ q4blk
q4done:
	VZEROUPPER
	RET
