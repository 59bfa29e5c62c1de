//go:build amd64

package kernel

import "golang.org/x/sys/cpu"

// The assembly kernels of qmm_amd64.s: one weight row against up to four
// rows of x, in the lane layouts of permF32 and permQ8. They need AVX-512
// F/BW/DQ/VL (and VNNI for the int8 ones) and run with or without
// GOEXPERIMENT=simd.

//go:noescape
func qdotQ8B4(a *qArgs)

//go:noescape
func qdotQ8B8(a *qArgs)

//go:noescape
func qdotF32B4(a *qArgs)

//go:noescape
func qdotF32B8(a *qArgs)

//go:noescape
func dotF32Asm(a, b []float32) float32

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
	if avx512 && simdDot == nil {
		simdDot, simdAxpy = dotAsm, axpyAsm
	}
	asmQ8 = vnni
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
