//go:build amd64

package kernel

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// sdpa_avx2_amd64.s, the AVX2 forms (with FMA and F16C) of the float32
// SDPA kernels of sdpa_amd64.s, is written by sdpa_avx2_gen.go (on any
// platform; TestGenerated checks it is current). Each gives every lane the
// instructions of its AVX-512 twin in the same order, so the two paths give
// the same bits. kind is the storage of K or V: sdpaF32, sdpaBF16 or
// sdpaF16.
//
//go:generate go run sdpa_avx2_gen.go -o sdpa_avx2_amd64.s

// sdpa2KT transposes the 32 rows of a block of keys, d values each (d a
// multiple of 8; row r at src + r·stride bytes), into dst[t·32 + r].
//
//go:noescape
func sdpa2KT(dst *float32, src unsafe.Pointer, stride uintptr, d, kind int)

// sdpa2Cvt is sdpaCvt for n a multiple of 8.
//
//go:noescape
func sdpa2Cvt(dst *float32, dstride int, src unsafe.Pointer, sstride uintptr, rows, n, kind int)

// sdpa2Scores is sdpaScores: s[r·32 + j] = Σ_t q[r·d + t]·kt[t·32 + j] for
// r < rows (a multiple of 4), one fused multiply-add per t in order.
//
//go:noescape
func sdpa2Scores(s, q, kt *float32, rows, d int)

// sdpa2Softmax is sdpaSoftmax on groups of 8 rows: m, l and f must have
// room for rows rounded up to 8 (the lanes past rows get garbage).
//
//go:noescape
func sdpa2Softmax(s, m, l, f *float32, rows int)

// sdpa2PV4 is sdpaPV4's accumulation for 4 rows, dv a multiple of 8; a row
// gets the same bits from each of sdpa2PV4, sdpa2PV3, sdpa2PV2 and sdpa2PV1.
//
//go:noescape
func sdpa2PV4(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int)

// sdpa2PV3 is sdpa2PV4 for 3 rows.
//
//go:noescape
func sdpa2PV3(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int)

// sdpa2PV2 is sdpa2PV4 for 2 rows.
//
//go:noescape
func sdpa2PV2(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int)

// sdpa2PV1 is sdpa2PV4 for 1 row.
//
//go:noescape
func sdpa2PV1(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int)

// sdpa2Out is sdpaOut for n a multiple of 8.
//
//go:noescape
func sdpa2Out(dst, acc *float32, l float32, n, bf16 int)

// sdpa2Scale is sdpaScale for n a multiple of 8.
//
//go:noescape
func sdpa2Scale(dst, src *float32, scale float32, n int)

// sdpa2MergeAcc is sdpaMergeAcc for n a multiple of 8.
//
//go:noescape
func sdpa2MergeAcc(acc, c *float32, f1, f2 float32, n int)

// sdpaAVX2 is set at start-up when the CPU has AVX2, FMA and F16C (and the
// OS saves the YMM state); GODEBUG=cpu.avx2=off clears it.
var sdpaAVX2 = cpu.X86.HasAVX && cpu.X86.HasAVX2 && cpu.X86.HasFMA && hasF16C()

// sdpa2Prefetch prefetches (PREFETCHT0) the n bytes of each of rows rows at
// p + r·stride: the next blocks of keys and values, which the hardware
// prefetcher is slow to find when a decode step streams a cache that the
// matmuls have evicted.
//
//go:noescape
func sdpa2Prefetch(p unsafe.Pointer, stride uintptr, rows, n int)

// sdpaPrefetchL2 is sdpa2Prefetch by PREFETCHT1 (into L2), for the AVX-512
// kernels: on Zen 4 (2026-12-05) a block's PREFETCHT0s held the L1 miss
// buffers the kernel's own loads wait for and made a cold eight-row decode
// step's attention slower (BenchmarkSDPARowsCold ctx96/fast 44-46 -> 46-66
// µs a layer), where PREFETCHT1 made it faster (-> 32-34 with the next
// item's keys, see sdpaJob.prefetchItem).
//
//go:noescape
func sdpaPrefetchL2(p unsafe.Pointer, stride uintptr, rows, n int)

// sdpa2Deq expands rows rows of 4- or 8-bit affine-quantized values (groups
// groups of gs values per row, gs a multiple of 32; row r's codes at w +
// r·wstride bytes, its scales and biases, of storage kind, at s + r·sstride
// and b + r·bstride) to float32 at dst + r·dstride: float32(scale·code) +
// bias, the bits of quantRowsGo.
//
//go:noescape
func sdpa2Deq(dst *float32, dstride int, w unsafe.Pointer, wstride uintptr, s, b unsafe.Pointer, sstride, bstride uintptr, rows, groups, gs, bits, kind int)
