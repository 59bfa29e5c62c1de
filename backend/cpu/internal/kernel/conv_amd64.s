//go:build amd64

#include "textflag.h"

// Constants of the bf16 rounding: u + 0x7FFF + ((u >> 16) & 1), NaN to 0x7FC0.
DATA convOne<>+0(SB)/4, $0x00000001
GLOBL convOne<>(SB), RODATA|NOPTR, $4
DATA convHalf<>+0(SB)/4, $0x00007FFF
GLOBL convHalf<>(SB), RODATA|NOPTR, $4
DATA convNaN16<>+0(SB)/4, $0x00007FC0
GLOBL convNaN16<>(SB), RODATA|NOPTR, $4
DATA convNaN32<>+0(SB)/4, $0x7FC00000
GLOBL convNaN32<>(SB), RODATA|NOPTR, $4
DATA convHigh<>+0(SB)/4, $0xFFFF0000
GLOBL convHigh<>(SB), RODATA|NOPTR, $4

// ROUNDBF16X2 rounds the 16 floats of Y0 and Y1 to bfloat16 (round to
// nearest even on the raw bits, NaN to the canonical bf16 NaN), results in
// Y2 and Y3 (Y4, Y5 scratch; Y12-Y15 hold convOne, convHalf, convNaN32
// and convHigh).
#define ROUNDBF16X2 \
	VPSRLD    $16, Y0, Y2; \
	VPSRLD    $16, Y1, Y3; \
	VPAND     Y12, Y2, Y2; \
	VPAND     Y12, Y3, Y3; \
	VPADDD    Y13, Y2, Y2; \
	VPADDD    Y13, Y3, Y3; \
	VPADDD    Y0, Y2, Y2; \
	VPADDD    Y1, Y3, Y3; \
	VPAND     Y15, Y2, Y2; \
	VPAND     Y15, Y3, Y3; \
	VCMPPS    $3, Y0, Y0, Y4; \
	VCMPPS    $3, Y1, Y1, Y5; \
	VPBLENDVB Y4, Y14, Y2, Y2; \
	VPBLENDVB Y5, Y14, Y3, Y3

// func convBF16ToF32(dst *float32, src *uint16, n int)
TEXT ·convBF16ToF32(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   b2fdone

b2floop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       b2floop

b2fdone:
	VZEROUPPER
	RET

// func convF32ToBF16(dst *uint16, src *float32, n int)
TEXT ·convF32ToBF16(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	SHRQ         $4, CX
	JZ           f2bdone
	VPBROADCASTD convOne<>(SB), Y13
	VPBROADCASTD convHalf<>(SB), Y14
	VPBROADCASTD convNaN16<>(SB), Y15

f2bloop:
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	VPSRLD    $16, Y0, Y2
	VPSRLD    $16, Y1, Y3
	VPAND     Y13, Y2, Y2
	VPAND     Y13, Y3, Y3
	VPADDD    Y14, Y2, Y2
	VPADDD    Y14, Y3, Y3
	VPADDD    Y0, Y2, Y2
	VPADDD    Y1, Y3, Y3
	VPSRLD    $16, Y2, Y2
	VPSRLD    $16, Y3, Y3
	VCMPPS    $3, Y0, Y0, Y4
	VCMPPS    $3, Y1, Y1, Y5
	VPBLENDVB Y4, Y15, Y2, Y2
	VPBLENDVB Y5, Y15, Y3, Y3
	VPACKUSDW Y3, Y2, Y2
	VPERMQ    $0xD8, Y2, Y2
	VMOVDQU   Y2, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       f2bloop

f2bdone:
	VZEROUPPER
	RET

// func convRoundBF16(v *float32, n int)
TEXT ·convRoundBF16(SB), NOSPLIT, $0-16
	MOVQ         v+0(FP), SI
	MOVQ         n+8(FP), CX
	SHRQ         $4, CX
	JZ           rbdone
	VPBROADCASTD convOne<>(SB), Y12
	VPBROADCASTD convHalf<>(SB), Y13
	VPBROADCASTD convNaN32<>(SB), Y14
	VPBROADCASTD convHigh<>(SB), Y15

rbloop:
	VMOVDQU   (SI), Y0
	VMOVDQU   32(SI), Y1
	ROUNDBF16X2
	VMOVDQU   Y2, (SI)
	VMOVDQU   Y3, 32(SI)
	ADDQ      $64, SI
	DECQ      CX
	JNZ       rbloop

rbdone:
	VZEROUPPER
	RET

// func convAdd(dst, a, b *float32, n, bf16 int)
TEXT ·convAdd(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         a+8(FP), SI
	MOVQ         b+16(FP), DX
	MOVQ         n+24(FP), CX
	MOVQ         bf16+32(FP), AX
	SHRQ         $4, CX
	JZ           addone
	TESTQ        AX, AX
	JNZ          addbf

addloop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VADDPS  (DX), Y0, Y0
	VADDPS  32(DX), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	DECQ    CX
	JNZ     addloop
	JMP     addone

addbf:
	VPBROADCASTD convOne<>(SB), Y12
	VPBROADCASTD convHalf<>(SB), Y13
	VPBROADCASTD convNaN32<>(SB), Y14
	VPBROADCASTD convHigh<>(SB), Y15

addbfloop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VADDPS    (DX), Y0, Y0
	VADDPS    32(DX), Y1, Y1
	ROUNDBF16X2
	VMOVDQU   Y2, (DI)
	VMOVDQU   Y3, 32(DI)
	ADDQ      $64, SI
	ADDQ      $64, DX
	ADDQ      $64, DI
	DECQ      CX
	JNZ       addbfloop

addone:
	VZEROUPPER
	RET
