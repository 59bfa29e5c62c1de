// Package kernel holds the numerical kernels of the pure-Go CPU backend: the
// fused and quantized ops of the backend contract (RMSNorm, RoPE, SDPA,
// SwiGLU, affine Quantize/Dequantize, QuantizedMatmul), written on flat
// float32 slices.
//
// # Storage and rounding
//
// Every array is passed as []float32 whatever its storage dtype: a bf16 or
// f16 value is a float32 holding that exact value. A [Rounder] rounds a
// float32 result to the storage dtype (identity for F32, tensor.RoundBF16,
// tensor.RoundF16). Kernels read inputs as given, compute in float32 (or
// float64 under [AccF64]) and pass every value MLX stores in the dtype
// through the Rounder; each kernel's doc says where that happens and which
// MLX source it follows. Explicit float32(...) conversions around products
// stop the Go compiler from fusing a*b+c into an FMA on arm64, so results
// are the same on every architecture.
//
// # Reference and fast versions
//
// Each kernel has a plain single-goroutine reference, exported with a Ref
// suffix (QuantizedMatmulTRef, SDPARef, ...), written as the loop it
// computes. The unsuffixed name is the fast version: it splits output rows
// (or, for a single row, output columns) across a persistent worker pool
// ([SetThreads]). Most fast versions perform the same float operations in
// the same order as their reference, so the results are bit-identical; the
// float32 QuantizedMatmulT and SDPA sum in their own order (partial sums,
// vector lanes) and the tests hold them to the reference and to a float64
// oracle within the rounding bound of that order. Every fast version
// computes an output row from its own input row in an order that does not
// depend on how many rows there are, so chunked and one-shot evaluation
// agree bit for bit.
//
// # Vector paths
//
// On amd64 CPUs with AVX-512 F/BW/DQ/VL, assembly kernels (qmm_amd64.s,
// selected at start-up from CPUID, with or without GOEXPERIMENT=simd) run
// the quantized matmul with transposed weights: one weight row against up
// to four rows of x per call, float32 (AccF32) or int8 with VPDPBUSD
// (AccQ8, needs AVX512-VNNI), and the dot/axpy helpers of SDPA. Built with
// GOEXPERIMENT=simd (Go 1.26 simd/archsimd), AVX-512 kernels also replace
// bf16 conversion, SwiGLU, ExpSlice and bf16 output rounding (all bit-identical
// to the scalar forms), and archsimd row kernels stand in for the
// assembly ones on AVX-512 CPUs without VNNI. Every vector path of an op
// performs the same lane operations in the same order, so the two builds
// give the same bits on one machine; the tests hold them to each other and
// to the references. On every other CPU and platform the portable loops
// run. AccQ8 is the approximate int8 mode of QuantizedMatmulT (the
// backend's "fast" precision), see qmmTQ8Ref.

// # Memory
//
// Kernels never allocate anything proportional to a weight. Per-call scratch
// is small and documented on each kernel (a few floats per output row or per
// worker). Slices too short for the given sizes are programmer errors and
// panic with a message naming the kernel and the argument; callers validate
// user input before calling.
package kernel
