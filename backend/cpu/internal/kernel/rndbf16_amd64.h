// bfloat16 rounding shared by the hand-written AVX-512 GEMMs
// (qmm_gemm_amd64.s, qmm_gemmf32_amd64.s).

// RNDBF16CONSTS loads the constants of RNDBF16 (clobbers AX): Z27 = 1,
// Z28 = 0x7FFF, Z29 = 0xFFFF0000, Z30 = 0x7FC00000.
#define RNDBF16CONSTS \
	MOVL $1, AX; \
	VPBROADCASTD AX, Z27; \
	MOVL $0x7fff, AX; \
	VPBROADCASTD AX, Z28; \
	MOVL $0xffff0000, AX; \
	VPBROADCASTD AX, Z29; \
	MOVL $0x7fc00000, AX; \
	VPBROADCASTD AX, Z30

// RNDBF16 rounds the floats of Z to bfloat16 as tensor.RoundBF16 does:
// round to nearest even on the bits, every NaN to 0x7FC00000 (Z26 and K2
// scratch, the constants of RNDBF16CONSTS).
#define RNDBF16(Z) \
	VPSRLD $16, Z, Z26; \
	VPANDD Z27, Z26, Z26; \
	VPADDD Z28, Z26, Z26; \
	VPADDD Z26, Z, Z26; \
	VPANDD Z29, Z26, Z26; \
	VCMPPS $3, Z, Z, K2; \
	VMOVDQA32 Z30, K2, Z26; \
	VMOVDQA32 Z26, Z
