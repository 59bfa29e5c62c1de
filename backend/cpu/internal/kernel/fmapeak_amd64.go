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
