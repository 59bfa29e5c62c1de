//go:build amd64

package kernel

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

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

func xgetbv0() (eax uint32)

// x86Features reports AVX-512 F/BW/DQ/VL with the OS saving the vector
// state, and AVX512-VNNI on top of it.
func x86Features() (avx512, vnni bool) {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false, false
	}
	_, _, c1, _ := cpuid(1, 0)
	const osxsave = 1 << 27
	if c1&osxsave == 0 {
		return false, false
	}
	// XCR0: SSE, AVX, opmask, ZMM0-15 upper halves, ZMM16-31.
	if xgetbv0()&0xe6 != 0xe6 {
		return false, false
	}
	_, b7, c7, _ := cpuid(7, 0)
	const f, dq, bw, vl = 1 << 16, 1 << 17, 1 << 30, 1 << 31
	avx512 = b7&(f|dq|bw|vl) == f|dq|bw|vl
	return avx512, avx512 && c7&(1<<11) != 0
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
