//go:build !amd64

package kernel

import "unsafe"

// No SDPA assembly on this platform: asmF32 is false, so these are never
// called.

func sdpaKT(dst *float32, src unsafe.Pointer, stride uintptr, d, kind int) { panic(sdpaNoAsm) }

func sdpaCvt(dst *float32, dstride int, src unsafe.Pointer, sstride uintptr, rows, n, kind int) {
	panic(sdpaNoAsm)
}

func sdpaScores(s, q, kt *float32, rows, d int) { panic(sdpaNoAsm) }

func sdpaScores3(s, q, kt *float32, d int) { panic(sdpaNoAsm) }

func sdpaScoresBF64(s *float32, q *uint16, k unsafe.Pointer, kstride uintptr, rows int, scale float32) {
	panic(sdpaNoAsm)
}

func sdpaScoresBF128(s *float32, q *uint16, k unsafe.Pointer, kstride uintptr, rows int, scale float32) {
	panic(sdpaNoAsm)
}

func sdpaScoresF64(s, q *float32, k unsafe.Pointer, kstride uintptr, rows int) { panic(sdpaNoAsm) }

func sdpaScoresF128(s, q *float32, k unsafe.Pointer, kstride uintptr, rows int) { panic(sdpaNoAsm) }

func sdpaSoftmax(s, m, l, f *float32, rows int) { panic(sdpaNoAsm) }

func sdpaPV4(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	panic(sdpaNoAsm)
}

func sdpaExp(dst, src *float32, n int) { panic(sdpaNoAsm) }

func sdpaPV1(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	panic(sdpaNoAsm)
}

func sdpaPV512(rows, kind int, acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	panic(sdpaNoAsm)
}

const sdpaHaveAsm = false

const sdpaNoAsm = "kernel: no SDPA assembly on this platform"

func sdpaOut(dst, acc *float32, l float32, n, bf16 int) { panic(sdpaNoAsm) }

func sdpaScale(dst, src *float32, scale float32, n int) { panic(sdpaNoAsm) }

func sdpaMergeAcc(acc, c *float32, f1, f2 float32, n int) { panic(sdpaNoAsm) }

// No AVX2 SDPA kernels either: sdpaAVX2 stays false.
var sdpaAVX2 = false

func sdpa2KT(dst *float32, src unsafe.Pointer, stride uintptr, d, kind int) { panic(sdpaNoAsm) }

func sdpa2Cvt(dst *float32, dstride int, src unsafe.Pointer, sstride uintptr, rows, n, kind int) {
	panic(sdpaNoAsm)
}

func sdpa2Scores(s, q, kt *float32, rows, d int) { panic(sdpaNoAsm) }

func sdpa2Softmax(s, m, l, f *float32, rows int) { panic(sdpaNoAsm) }

func sdpa2PV4(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	panic(sdpaNoAsm)
}

func sdpa2PV3(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	panic(sdpaNoAsm)
}

func sdpa2PV2(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	panic(sdpaNoAsm)
}

func sdpa2PV1(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int) {
	panic(sdpaNoAsm)
}

func sdpa2Out(dst, acc *float32, l float32, n, bf16 int) { panic(sdpaNoAsm) }

func sdpa2Scale(dst, src *float32, scale float32, n int) { panic(sdpaNoAsm) }

func sdpa2MergeAcc(acc, c *float32, f1, f2 float32, n int) { panic(sdpaNoAsm) }

func sdpa2Prefetch(p unsafe.Pointer, stride uintptr, rows, n int) { panic(sdpaNoAsm) }

func sdpaPrefetchL2(p unsafe.Pointer, stride uintptr, rows, n int) { panic(sdpaNoAsm) }

func sdpa2Deq(dst *float32, dstride int, w unsafe.Pointer, wstride uintptr, s, b unsafe.Pointer, sstride, bstride uintptr, rows, groups, gs, bits, kind int) {
	panic(sdpaNoAsm)
}

func sdpaQ8KT(dst *int32, src unsafe.Pointer, stride uintptr, d, xor int) { panic(sdpaNoAsm) }

func sdpaQ8GT(dst, src *float32, n, gpr int) { panic(sdpaNoAsm) }

func sdpaQ8Scores(a *q8ScoreArgs) { panic(sdpaNoAsm) }

func sdpaQPV8(a *qpvArgs) { panic(sdpaNoAsm) }

var lloydAsm = false

func lloydRows(a *lloydArgs) { panic(sdpaNoAsm) }

func keyRows8(a *keyArgs) { panic(sdpaNoAsm) }
