#include "textflag.h"

// func sumLines(p *uint64, lines int) uint64
//
// The 64-bit sum of lines·8 words at p, a 64-byte line per step, with a
// PREFETCHT0 2 KiB ahead (as the decode kernels prefetch) and
// four independent SSE2 accumulators.
TEXT ·sumLines(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ lines+8(FP), CX
	PXOR X0, X0
	PXOR X1, X1
	PXOR X2, X2
	PXOR X3, X3
	TESTQ CX, CX
	JZ   done

loop:
	PREFETCHT0 2048(SI)
	MOVOU 0(SI), X4
	PADDQ X4, X0
	MOVOU 16(SI), X5
	PADDQ X5, X1
	MOVOU 32(SI), X6
	PADDQ X6, X2
	MOVOU 48(SI), X7
	PADDQ X7, X3
	ADDQ  $64, SI
	DECQ  CX
	JNZ   loop

done:
	PADDQ X1, X0
	PADDQ X3, X2
	PADDQ X2, X0
	MOVQ  X0, AX
	PSRLDQ $8, X0
	MOVQ  X0, BX
	ADDQ  BX, AX
	MOVQ  AX, ret+16(FP)
	RET
