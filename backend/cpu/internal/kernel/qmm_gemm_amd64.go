//go:build amd64

package kernel

import "unsafe"

// The GEMM kernels of qmm_gemm_amd64.s (int8, AVX-512 F/BW/DQ/VL and VNNI,
// used when asmQ8 is set; qmm_gemm.go describes the layouts) and
// qmm_gemmf32_amd64.s (float32, AVX-512, asmF32), with the AVX-512
// preparations of x of qmm_gemm_amd64.s (asmF32).

// q8gemm runs every tile of 8 rows of x (a.mt tiles) against one panel of
// 16 weight rows: per group, per block of 32 codes, the 16·8 integer sums
// (VPDPBUSD), each folded into its output's accumulator as fma(float(I)·d,
// s, acc); per group fma(b, xs, acc); the outputs (a.cmask columns, a.mlast
// rows of the last tile) stored, rounded to bfloat16 when a.bf16 is 1;
// meanwhile a.pfn bytes at a.pf (the next panel's weights) are prefetched.
// q8BlockDot is one output of it, the same bits (qmmTQ8BlockRef the plain
// loop).
//
//go:noescape
func q8gemm(a *q8gArgs)

// q8gemmDot is q8gemm in the one-row order for groups of one block (a.bpg
// = 1, gemmDot): per group total += s·(d·I), two roundings, the bias terms
// Σ b·xs in a total of their own added last; each output the bits of
// dotQ8 + dotBias for its row of x (the AVX2 kernels' one-row order).
//
//go:noescape
func q8gemmDot(a *q8gArgs)

// q8gemvDot is q8gemmDot for the first row of the first tile of x alone
// (the same bits for that row): an eighth of the multiply-adds per
// weight byte, for decode through packed panels.
//
//go:noescape
func q8gemvDot(a *q8gArgs)

// q8gemv is q8gemm for the first row of the first tile of x alone (the
// same bits for that row), for decode through packed panels of the shapes
// outside gemmDot.
//
//go:noescape
func q8gemv(a *q8gArgs)

// cpuid is the CPUID instruction for leaf (subleaf 0): EAX, EBX, ECX, EDX.
func cpuid(leaf uint32) (a, b, c, d uint32)

// q8Quant is quantizeQ8Scalar (qmax 127) for nb blocks of 32 values at x,
// the same bits: block i's 32 codes to xq + i·xqStep bytes (in the order
// 0, 2, 4, 6, 1, 3, 5, 7 of each 8 when perm, for 4-bit weights), its scale
// to d + i·dStep bytes.
//
//go:noescape
func q8Quant(x *float32, xq *int8, d *float32, nb int, xqStep, dStep uintptr, perm bool)

// q8Transpose transposes 16 rows of dwords (row r at src + r·stride) in
// nchunk chunks of 16 columns: column c of chunk i goes to dst + (16i +
// c)·64 bytes, one dword per row. With nib the dwords are 4-bit weight
// words and each column is split into its low nibbles (dst + (16i +
// c)·128) and high nibbles (64 bytes further), one code per byte.
//
//go:noescape
func q8Transpose(dst, src unsafe.Pointer, stride uintptr, nchunk int, nib bool)

// f32gemmB4 runs a.nrow 4-bit weight rows against the tile of 8 rows of x
// over a chunk of a.nblk blocks, each output in the lane operations and
// order of qdotF32B4 (the same bits): per block the codes unpacked once,
// then per row of x two partial products, their sum times the block's
// scales into the row's accumulator. The accumulators start at zero
// (a.first) or from a.acc, and go back to a.acc, or on the last chunk
// (a.last) get the bias terms and the horizontal sum and are stored at
// a.out, rounded to bfloat16 when a.bf16 is 1.
//
//go:noescape
func f32gemmB4(a *f32gArgs)

// f32gemmB8 is f32gemmB4 for 8-bit weights (qdotF32B8's operations).
//
//go:noescape
func f32gemmB8(a *f32gArgs)

// gsum16 is groupSumsFlat's loop for nset sets of 16 consecutive groups of
// gs floats (gs a multiple of 16), the same bits: dst[g] = Σ x[g·gs + i]
// for i = 0..gs-1, added in order, lane g of a set summing group g.
//
//go:noescape
func gsum16(dst, x *float32, gs, nset int)

// gsum8 is gsum16 with AVX2 for sets of 8 groups (gs a multiple of 8),
// the same bits.
//
//go:noescape
func gsum8(dst, x *float32, gs, nset int)

// permF32Asm is permF32's loop for nblk blocks of 16·32/bits floats (bits 4
// or 8): block i of src, read consecutively, goes to dst + i·dstStep bytes
// with code cpl·l + p of lane l at p·16 + l (cpl = 32/bits).
//
//go:noescape
func permF32Asm(dst, src *float32, nblk int, dstStep uintptr, bits int)

// permQ8Asm is permQ8's loop for nblk blocks of 16·32/bits codes (bits 4
// or 8), the same bytes: 4-bit blocks of 128 codes get their even codes
// then their odd ones, 8-bit blocks are copied; dxl gets the 16 lane scales
// of each block (the scale in dx of the x block each lane reads).
//
//go:noescape
func permQ8Asm(dst, src *int8, dxl, dx *float32, nblk, bits int)
