//go:build amd64

package kernel

import (
	"encoding/binary"
	"os"

	"golang.org/x/sys/cpu"
)

// The assembly kernels of qmm_amd64.s: one weight row against up to four
// rows of x, in the lane layouts of permF32 and permQ8. They need AVX-512
// F/BW/DQ/VL (and VNNI for the int8 ones) and run with or without
// GOEXPERIMENT=simd.

// qdotQ8B4 writes to a.out[r], for each of the a.mr rows r of x (1 to 4),
// Σ_g s_g·Σ_t d_t·Σ(q·xq) + b_g·xs_g over one 4-bit weight row (a.nblk
// blocks of 16 words) against x quantized to int8 in permQ8's layout: per
// block the integer lane sums (VPDPBUSD) times the lane scales of x and the
// block's group scales, the bias terms, then hsum. simdDotQ8 (dotQ8AVX512)
// is its twin, the same bits; qmmTQ8Ref the plain loop.
//
//go:noescape
func qdotQ8B4(a *qArgs)

// qdotQ8B8 is qdotQ8B4 for 8-bit weights.
//
//go:noescape
func qdotQ8B8(a *qArgs)

// qdotF32B4 writes to a.out[r], for each of the a.mr rows r of x (1 to 4),
// Σ_g s_g·Σ(q·x) + b_g·xs_g over one 4-bit weight row (a.nblk blocks of 16
// words) against float32 x in permF32's layout: per block the codes
// unpacked to float32, two partial products per lane, their sum times the
// block's group scales into the total; the bias terms, then hsum.
// simdDotF32 (dotF32AVX512) is its twin, the same bits;
// QuantizedMatmulTRef the plain loop.
//
//go:noescape
func qdotF32B4(a *qArgs)

// qdotF32B8 is qdotF32B4 for 8-bit weights.
//
//go:noescape
func qdotF32B8(a *qArgs)

// dotF32Asm returns Σ a_i·b_i over len(a) values in dotAVX512's order (its
// twin, the same bits): two 16-lane FMA accumulators over 32 values, one
// more block of 16, hsum, then the tail. len(b) >= len(a).
//
//go:noescape
func dotF32Asm(a, b []float32) float32

// axpyF32Asm sets y += a·x over len(y) values in axpyAVX512's order (its
// twin, the same bits): 16-lane FMAs, then the tail with a separate
// multiply and add. len(x) >= len(y).
//
//go:noescape
func axpyF32Asm(y []float32, a float32, x []float32)

// dotAsm is dotAVX512 in assembly (the same bits), for builds without
// GOEXPERIMENT=simd.
func dotAsm(a, b []float32) float32 { return dotF32Asm(a, b[:len(a)]) }

// axpyAsm is axpyAVX512 in assembly (the same bits).
func axpyAsm(y []float32, a float32, x []float32) { axpyF32Asm(y, a, x[:len(y)]) }

// x86Features reports AVX-512 F/BW/DQ/VL with the OS saving the opmask and
// ZMM state, and AVX512-VNNI on top of it. x/sys/cpu sets its AVX-512 flags
// only when the OS saves that state (XCR0's SSE, AVX, opmask and both ZMM
// bits; on darwin, which enables it lazily, a sysctl).
func x86Features() (avx512, vnni bool) {
	x := &cpu.X86
	avx512 = x.HasAVX512F && x.HasAVX512BW && x.HasAVX512DQ && x.HasAVX512VL
	return avx512, avx512 && x.HasAVX512VNNI
}

// installAsm records the assembly kernels the CPU supports.
func installAsm() {
	avx512, vnni := x86Features()
	asmF32 = avx512
	gsumAVX2 = hasAVX2()
	if avx512 && simdDot == nil {
		simdDot, simdAxpy = dotAsm, axpyAsm
	}
	asmQ8 = vnni
	asmBF16 = avx512 && cpu.X86.HasAVX512BF16
	asmAMXBF16 = avx512 && cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 && os.Getenv("MLXGO_NO_AMX") == "" && amxPermit()
	if amdZen5OrLater() {
		gemmPFL2 = 0
	}
	if vendor, _ := x86Family(); vendor == "GenuineIntel" {
		gemvPF, densePF = 4096, 4096
	}
}

// amdZen5OrLater reports an AMD CPU of family 1Ah (Zen 5) or later.
func amdZen5OrLater() bool {
	vendor, family := x86Family()
	return vendor == "AuthenticAMD" && family >= 0x1a
}

// x86Family is CPUID leaf 0's vendor string and leaf 1's family (base
// plus extended, as Linux's "cpu family").
func x86Family() (vendor string, family uint32) {
	_, b, c, d := cpuid(0)
	vendor = string(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, b), d), c))
	a, _, _, _ := cpuid(1)
	family = a >> 8 & 0xf
	if family == 0xf {
		family += a >> 20 & 0xff
	}
	return vendor, family
}

// asmDot runs the assembly kernel of bits and precision on a.
func asmDot(a *qArgs, bits int, q8 bool) {
	switch {
	case q8 && bits == 4:
		qdotQ8B4(a)
	case q8:
		qdotQ8B8(a)
	case bits == 4:
		qdotF32B4(a)
	default:
		qdotF32B8(a)
	}
}
