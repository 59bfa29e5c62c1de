// Macros shared by the one-row kernels (qmv_amd64.s) and their batched
// form (qmvb_amd64.s): the scale and bias loads of a weight row in each
// storage dtype and the horizontal sums of four totals. Scratch: Y24 (SCALE
// of float32 and bfloat16), Z25 = 0xffff0000 and K3 = 0x00ff (SCALEBF16H),
// Z26-Z27 (float16), K1 the bias chunk mask.

// Scale vector z of one row: lanes 0-7 the scale at lo, lanes 8-15 the one
// at hi (the same address when a group spans the whole block).
#define SCALEF32(lo, hi, z) \
	VBROADCASTSS lo, z \
	VBROADCASTSS hi, Y24 \
	VINSERTF64X4 $1, Y24, z, z

// bfloat16 bits shifted into the top half of each lane: the exact float32.
#define SCALEBF16(lo, hi, z) \
	VPBROADCASTW lo, z \
	VPBROADCASTW hi, Y24 \
	VINSERTI64X4 $1, Y24, z, z \
	VPSLLD $16, z, z

// Both scales of a block that spans two groups, adjacent in memory: one
// 32-bit broadcast (lo | hi<<16), lanes 0-7 shifted left by 16 (K3), then
// the low halves cleared (Z25 = 0xffff0000).
#define SCALEBF16H(lo, hi, z) \
	VPBROADCASTD lo, z \
	VPSLLD $16, z, K3, z \
	VPANDD Z25, z, z

// Bias loads of 16 groups (K1 masks the last chunk of a row; lanes past
// the groups are zero).
#define BIASF32(addr, z) \
	VMOVUPS.Z addr, K1, z

#define BIASBF16(addr, z) \
	VPMOVZXWD.Z addr, K1, z \
	VPSLLD $16, z, z

// float16 scales: the two values broadcast to the halves of a YMM register
// of halves, converted exactly by VCVTPH2PS (for two groups per block the
// two adjacent values, the same macro).
#define SCALEF16(lo, hi, z) \
	VPBROADCASTW lo, X26 \
	VPBROADCASTW hi, X27 \
	VINSERTI32X4 $1, X27, Y26, Y26 \
	VCVTPH2PS Y26, z

#define BIASF16(addr, z) \
	VMOVDQU16.Z addr, K1, Y26 \
	VCVTPH2PS Y26, z

// HSUM4R leaves in X12 the horizontal sums of a-d, each in hsum's order
// (simd_amd64.go): 256-bit halves, 128-bit halves, then (l0+l1)+(l2+l3),
// four rows at a time in the lanes of one register (Z8-Z12 scratch, K2 =
// 0x1111).
#define HSUM4R(a, b, c, d) \
	VSHUFF64X2 $0x44, b, a, Z8 \
	VSHUFF64X2 $0xEE, b, a, Z9 \
	VADDPS Z9, Z8, Z8 \
	VSHUFF64X2 $0x44, d, c, Z10 \
	VSHUFF64X2 $0xEE, d, c, Z9 \
	VADDPS Z9, Z10, Z10 \
	VSHUFF32X4 $0x88, Z10, Z8, Z11 \
	VSHUFF32X4 $0xDD, Z10, Z8, Z12 \
	VADDPS Z12, Z11, Z11 \
	VMOVSHDUP Z11, Z12 \
	VADDPS Z12, Z11, Z11 \
	VPERMILPS $0x0E, Z11, Z12 \
	VADDPS Z12, Z11, Z11 \
	VCOMPRESSPS Z11, K2, Z12
