//go:build amd64

#include "textflag.h"
#include "rndbf16_amd64.h"

// func lloydRows(a *lloydArgs)
//
// Per row r and chunk m of 16 codes: the 2·bits bytes of the chunk
// (masked load: nothing past them is read), each code's two bytes moved
// into its dword lane (VPERMB with a.idx), shifted right by its bit offset
// (a.shift) and masked to bits; the centroid of each (VPERMPS on the table
// of up to 16), times the row's float16 scale of its group of 32 (exact
// in float32), rounded to bfloat16 when a.bf16 is 1 (RNDBF16:
// tensor.RoundBF16's bits).
TEXT ·lloydRows(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	RNDBF16CONSTS
	MOVQ 72(DI), AX
	VMOVUPS (AX), Z20
	MOVQ 80(DI), AX
	VMOVDQU8 (AX), Z21
	MOVQ 88(DI), AX
	VMOVDQU32 (AX), Z22
	MOVQ 64(DI), CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	VPBROADCASTD AX, Z23
	// K1: the 2·bits bytes of a chunk; R12: their count
	MOVQ CX, R12
	SHLQ $1, R12
	MOVQ $1, AX
	SHLQ CX, AX
	SHLQ CX, AX
	DECQ AX
	KMOVQ AX, K1
	MOVQ 0(DI), R8
	MOVQ 16(DI), R9
	MOVQ 32(DI), R10
	MOVQ 48(DI), R11
	MOVQ 56(DI), R13
	SHRQ $4, R13
lr_row:
	MOVQ R8, BX
	MOVQ R9, SI
	MOVQ R10, DX
	MOVQ R13, R14
lr_chunk:
	VMOVDQU8.Z (SI), K1, Z0
	VPERMB Z0, Z21, Z1
	VPSRLVD Z22, Z1, Z1
	VPANDD Z23, Z1, Z1
	VPERMPS Z20, Z1, Z2
	// the scale of this chunk's group of 32: chunk parity selects it
	MOVWLZX (DX), AX
	VMOVD AX, X3
	VCVTPH2PS X3, X3
	VBROADCASTSS X3, Z3
	VMULPS Z3, Z2, Z2
	CMPQ 96(DI), $0
	JEQ lr_store
	RNDBF16(Z2)
lr_store:
	VMOVUPS Z2, (BX)
	ADDQ $64, BX
	ADDQ R12, SI
	// next group every second chunk
	MOVQ R13, AX
	SUBQ R14, AX
	ANDQ $1, AX
	SHLQ $1, AX
	ADDQ AX, DX
	DECQ R14
	JNZ lr_chunk
	MOVQ 8(DI), AX
	SHLQ $2, AX
	ADDQ AX, R8
	ADDQ 24(DI), R9
	ADDQ 40(DI), R10
	DECQ R11
	JNZ lr_row
	VZEROUPPER
	RET

// func keyRows8(a *keyArgs)
//
// Per row r and chunk of 16 signed 8-bit codes: sign-extended, converted
// to float32, plus the group's float16 zero point, times its float16
// scale (each rounded to float32), rounded to bfloat16 when a.bf16 is 1.
TEXT ·keyRows8(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), DI
	RNDBF16CONSTS
	MOVQ 0(DI), R8
	MOVQ 16(DI), R9
	MOVQ 32(DI), R10
	MOVQ 40(DI), R11
	MOVQ 64(DI), R12
	MOVQ 72(DI), R13
	SHRQ $4, R13
kr_row:
	MOVQ R8, BX
	MOVQ R9, SI
	MOVQ R10, DX
	MOVQ R11, CX
	MOVQ R13, R14
kr_chunk:
	MOVWLZX (DX), AX
	VMOVD AX, X3
	VCVTPH2PS X3, X3
	VBROADCASTSS X3, Z3
	MOVWLZX (CX), AX
	VMOVD AX, X4
	VCVTPH2PS X4, X4
	VBROADCASTSS X4, Z4
	VPMOVSXBD (SI), Z0
	VCVTDQ2PS Z0, Z0
	VADDPS Z4, Z0, Z0
	VMULPS Z3, Z0, Z0
	CMPQ 80(DI), $0
	JEQ kr_store
	RNDBF16(Z0)
kr_store:
	VMOVUPS Z0, (BX)
	ADDQ $64, BX
	ADDQ $16, SI
	MOVQ R13, AX
	SUBQ R14, AX
	ANDQ $1, AX
	SHLQ $1, AX
	ADDQ AX, DX
	ADDQ AX, CX
	DECQ R14
	JNZ kr_chunk
	MOVQ 8(DI), AX
	SHLQ $2, AX
	ADDQ AX, R8
	ADDQ 24(DI), R9
	ADDQ 48(DI), R10
	ADDQ 56(DI), R11
	DECQ R12
	JNZ kr_row
	VZEROUPPER
	RET
