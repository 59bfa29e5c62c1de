//go:build amd64

#include "textflag.h"
#include "amx_amd64.h"

// func amxDenseBF16(a *amxDenseArgs)
//
// Four panels of sixteen weight columns (64 columns, dense_amx.go's
// layout: per step of 32 values the four panels' 1 KB tiles side by side)
// against a.rows rows of x in bfloat16 (a.x, a.xstr bytes apart), over
// a.steps steps: per step tmm4 = the rows' 32 values, tmm5-tmm7 the
// panels' tiles (16 rows of pairs of values, 16 columns each), and
// TDPBF16PS into the accumulators tmm0-tmm3; then the accumulators go to
// a.out (row i at a.out + i·a.ostr, panel p at 64·p bytes into it). The
// tile configuration a.cfg (the rows of x) is loaded when the thread's
// differs (LDTILECFG costs about 150 cycles; STTILECFG 10-30) and left
// loaded: the tiles are this kernel's alone. Each step prefetches the
// tiles two steps (8 KB) ahead into L1: a decode step's tile loads come
// from memory, and without it one row of x read SmolLM2-360M's packed
// float16 weights at 13-15 GB/s on two threads against 15-17 with it
// (BenchmarkDenseStream, noisy; into L2 instead, the same).
// Registers: DI args, BX x, CX its stride, SI the panels, R14 64, R8 steps
// left, R10 out, R11 its stride, R13 the frame's 64-byte aligned scratch.
TEXT ·amxDenseBF16(SB), 0, $128-8
	MOVQ a+0(FP), DI
	LEAQ 63(SP), R13
	ANDQ $-64, R13
	STTILECFG_R13
	MOVQ 0(DI), AX
	VMOVDQU64 (R13), Z0
	VPCMPEQQ (AX), Z0, K1
	KORTESTB K1, K1
	JCS cfgok
	LDTILECFG_AX

cfgok:
	VZEROUPPER
	TILEZERO_T0
	TILEZERO_T1
	TILEZERO_T2
	TILEZERO_T3
	MOVQ 8(DI), BX
	MOVQ 16(DI), CX
	MOVQ 24(DI), SI
	MOVQ 32(DI), R8
	MOVQ $64, R14

step:
	// the panels' tiles two steps ahead into L1, a line at a time
	LEAQ 8192(SI), AX
	PREFETCHT0 0(AX)
	PREFETCHT0 64(AX)
	PREFETCHT0 128(AX)
	PREFETCHT0 192(AX)
	PREFETCHT0 256(AX)
	PREFETCHT0 320(AX)
	PREFETCHT0 384(AX)
	PREFETCHT0 448(AX)
	PREFETCHT0 512(AX)
	PREFETCHT0 576(AX)
	PREFETCHT0 640(AX)
	PREFETCHT0 704(AX)
	PREFETCHT0 768(AX)
	PREFETCHT0 832(AX)
	PREFETCHT0 896(AX)
	PREFETCHT0 960(AX)
	PREFETCHT0 1024(AX)
	PREFETCHT0 1088(AX)
	PREFETCHT0 1152(AX)
	PREFETCHT0 1216(AX)
	PREFETCHT0 1280(AX)
	PREFETCHT0 1344(AX)
	PREFETCHT0 1408(AX)
	PREFETCHT0 1472(AX)
	PREFETCHT0 1536(AX)
	PREFETCHT0 1600(AX)
	PREFETCHT0 1664(AX)
	PREFETCHT0 1728(AX)
	PREFETCHT0 1792(AX)
	PREFETCHT0 1856(AX)
	PREFETCHT0 1920(AX)
	PREFETCHT0 1984(AX)
	PREFETCHT0 2048(AX)
	PREFETCHT0 2112(AX)
	PREFETCHT0 2176(AX)
	PREFETCHT0 2240(AX)
	PREFETCHT0 2304(AX)
	PREFETCHT0 2368(AX)
	PREFETCHT0 2432(AX)
	PREFETCHT0 2496(AX)
	PREFETCHT0 2560(AX)
	PREFETCHT0 2624(AX)
	PREFETCHT0 2688(AX)
	PREFETCHT0 2752(AX)
	PREFETCHT0 2816(AX)
	PREFETCHT0 2880(AX)
	PREFETCHT0 2944(AX)
	PREFETCHT0 3008(AX)
	PREFETCHT0 3072(AX)
	PREFETCHT0 3136(AX)
	PREFETCHT0 3200(AX)
	PREFETCHT0 3264(AX)
	PREFETCHT0 3328(AX)
	PREFETCHT0 3392(AX)
	PREFETCHT0 3456(AX)
	PREFETCHT0 3520(AX)
	PREFETCHT0 3584(AX)
	PREFETCHT0 3648(AX)
	PREFETCHT0 3712(AX)
	PREFETCHT0 3776(AX)
	PREFETCHT0 3840(AX)
	PREFETCHT0 3904(AX)
	PREFETCHT0 3968(AX)
	PREFETCHT0 4032(AX)


	TILELOADD_T4_BX_CX
	TILELOADD_T5_SI_R14
	TILELOADD_T6_SI1024_R14
	TILELOADD_T7_SI2048_R14
	TDPBF16PS_T0_T4_T5
	TDPBF16PS_T1_T4_T6
	TDPBF16PS_T2_T4_T7
	TILELOADD_T5_SI3072_R14
	TDPBF16PS_T3_T4_T5
	ADDQ $64, BX
	ADDQ $4096, SI
	DECQ R8
	JNZ step

	MOVQ 40(DI), R10
	MOVQ 48(DI), R11
	TILESTORED_R10_R11_T0
	TILESTORED_R10_64_R11_T1
	TILESTORED_R10_128_R11_T2
	TILESTORED_R10_192_R11_T3
	RET
