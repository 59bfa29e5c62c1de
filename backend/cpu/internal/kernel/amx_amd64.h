// AMX instructions (AMX-TILE, AMX-BF16) as bytes: the Go assembler has no
// mnemonics for them. Each macro is one instruction on fixed registers
// (its name says which); the encodings are GNU as's.

// LDTILECFG (AX): load the tile configuration at AX.
#define LDTILECFG_AX \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00

// STTILECFG (R13): store the thread's tile configuration at R13 (64 zero
// bytes when none is loaded).
#define STTILECFG_R13 \
	BYTE $0xc4; BYTE $0xc2; BYTE $0x79; BYTE $0x49; BYTE $0x45; BYTE $0x00

// TILEZERO tmm0-tmm3.
#define TILEZERO_T0 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0
#define TILEZERO_T1 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc8
#define TILEZERO_T2 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd0
#define TILEZERO_T3 BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd8

// TILELOADD_T4_BX_CX: tmm4 = the rows at BX, CX bytes apart.
#define TILELOADD_T4_BX_CX \
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x24; BYTE $0x0b

// TILELOADD_T5_SI_R14 (and T6, T7, T5 again at 1024, 2048, 3072 past SI):
// the rows at SI, R14 bytes apart.
#define TILELOADD_T5_SI_R14 \
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x2c; BYTE $0x36
#define TILELOADD_T6_SI1024_R14 \
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0xb4; BYTE $0x36; LONG $1024
#define TILELOADD_T7_SI2048_R14 \
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0xbc; BYTE $0x36; LONG $2048
#define TILELOADD_T5_SI3072_R14 \
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0xac; BYTE $0x36; LONG $3072

// TDPBF16PS_Tc_T4_Tb: tmm(c) += tmm4 · tmm(b), bfloat16 pairs into float32.
#define TDPBF16PS_T0_T4_T5 BYTE $0xc4; BYTE $0xe2; BYTE $0x52; BYTE $0x5c; BYTE $0xc4
#define TDPBF16PS_T1_T4_T6 BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xcc
#define TDPBF16PS_T2_T4_T7 BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xd4
#define TDPBF16PS_T3_T4_T5 BYTE $0xc4; BYTE $0xe2; BYTE $0x52; BYTE $0x5c; BYTE $0xdc

// TILESTORED tmm0-tmm3 to 0, 64, 128 and 192 past R10, R11 bytes apart.
#define TILESTORED_R10_R11_T0 \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x1a
#define TILESTORED_R10_64_R11_T1 \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x4c; BYTE $0x1a; BYTE $0x40
#define TILESTORED_R10_128_R11_T2 \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x94; BYTE $0x1a; LONG $128
#define TILESTORED_R10_192_R11_T3 \
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x9c; BYTE $0x1a; LONG $192
