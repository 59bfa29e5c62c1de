//go:build amd64

package kernel

// fmaPeak runs n iterations of twelve independent float32 VFMADD231PS on
// ZMM registers (192 multiply-adds an iteration) and nothing else: the
// AVX-512 FMA rate of a core, the arithmetic limit that the float32
// kernels (the reference precision's quantized GEMMs, the dense GEMMs)
// are measured against (BenchmarkFMAPeak). Requires AVX-512F.
//
//go:noescape
func fmaPeak(n int)

// fmaPeakAVX2 is fmaPeak on YMM registers (twelve chains, 96
// multiply-adds an iteration): the float32 FMA rate of a core without
// AVX-512. Requires AVX2 and FMA.
//
//go:noescape
func fmaPeakAVX2(n int)

// maddPeakAVX2 runs n iterations of eight independent VPMADDUBSW + VPADDW
// pairs on YMM registers (256 int8 multiply-adds an iteration), the inner
// step of the AVX2 int8 kernels (qmv_avx2_gen.go, qmm_avx2_gen.go) with
// nothing else: their arithmetic limit on a core without VNNI. Requires
// AVX2.
//
//go:noescape
func maddPeakAVX2(n int)

// mulAddPeakAVX2 runs n iterations of twelve VMULPS + VADDPS pairs on YMM
// registers (six add chains, each product independent: 96 multiply-adds
// an iteration), the reference precision's separate multiply and add with
// nothing else: the arithmetic limit of its float32 kernels (no FMA, for
// the portable loops' bits). Requires AVX2.
//
//go:noescape
func mulAddPeakAVX2(n int)
