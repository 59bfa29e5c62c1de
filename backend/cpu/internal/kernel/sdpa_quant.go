package kernel

import "unsafe"

// QuantKV holds the keys or the values of [SDPAKV] in MLX's affine
// quantization along each row (what mx.quantize makes of a [b, hk, s, n]
// array, mlx_lm's QuantizedKVCache): the Bits-bit codes of row (batch bi,
// KV head h, position j) are the n·Bits/32 words of W from word
// bi·BStride + h·HStride + j·RowStride, packed LSB first (pack.go); group g
// of the row (values g·GroupSize ... (g+1)·GroupSize−1) has the scale
// Scales.Vec.At(Scales.row(bi, h, j) + g) and likewise the bias. The value
// of code c is, in float32,
//
//	w = float32(s·c) + b      (the product rounded, then the sum rounded)
//
// the weight QuantizedMatmulN expands for its float32 accumulator, without
// the rounding to the scales' dtype of mx.dequantize. SDPAKV reads these
// rows in place, converting one block of sdpaBK rows at a time into its
// scratch, never the whole window.
type QuantKV struct {
	W                           []uint32
	BStride, HStride, RowStride int // in words
	Scales, Biases              KV  // [b, hk, s, n/GroupSize], read in place in their dtype
	GroupSize, Bits             int
}

// wrow returns the word offset of row (bi, h, j).
func (q *QuantKV) wrow(bi, h, j int) int { return bi*q.BStride + h*q.HStride + j*q.RowStride }

// checkQuantKV panics unless q holds b·hk rows of s positions of n
// quantized values.
func checkQuantKV(kernel, name string, q *QuantKV, b, hk, s, n int) {
	checkQuant(kernel, n, q.GroupSize, q.Bits)
	wpr := WordsPerRow(n, q.Bits)
	if !(q.BStride >= 0 && q.HStride >= 0 && q.RowStride >= wpr) {
		check(false, kernel, "%s codes strides batch=%d head=%d row=%d, want >= 0, >= 0 and >= the row's %d words", name, q.BStride, q.HStride, q.RowStride, wpr)
	}
	if b > 0 {
		need(kernel, name+" codes", len(q.W), q.wrow(b-1, hk-1, s-1)+wpr)
	}
	checkKV(kernel, name+" scales", &q.Scales, b, hk, s, n/q.GroupSize)
	checkKV(kernel, name+" biases", &q.Biases, b, hk, s, n/q.GroupSize)
}

// quantRowsGo writes rows rows of n values of q from position j0 of (bi, h)
// to dst (row r at r·dstride): the portable form of quantRows, and its
// definition.
func quantRowsGo(dst []float32, dstride int, q *QuantKV, bi, h, j0, rows, n int) {
	var codes [128]float32 // a group (GroupSize <= 128)
	gs, bits := q.GroupSize, q.Bits
	wpg := WordsPerRow(gs, bits)
	for r := range rows {
		wo := q.wrow(bi, h, j0+r)
		so, bo := q.Scales.row(bi, h, j0+r), q.Biases.row(bi, h, j0+r)
		for g := range n / gs {
			decodeGroup(codes[:], q.W[wo+g*wpg:], gs, bits)
			s, b := q.Scales.Vec.At(so+g), q.Biases.Vec.At(bo+g)
			out := dst[r*dstride+g*gs:][:gs]
			for i, c := range codes[:gs] {
				out[i] = float32(s*c) + b
			}
		}
	}
}

// quantRowsAsm reports whether quantRows runs q in assembly: 4- or 8-bit
// codes, scales and biases of one storage kind, on a CPU with AVX2.
func quantRowsAsm(q *QuantKV) bool {
	return sdpaAVX2 && (q.Bits == 4 || q.Bits == 8) && sdpaKind(q.Scales.Vec) == sdpaKind(q.Biases.Vec)
}

// quantRows is quantRowsGo, in assembly where quantRowsAsm allows (the
// same bits: a multiply and an add per value, each rounded).
func quantRows(dst []float32, dstride int, q *QuantKV, bi, h, j0, rows, n int) {
	if rows <= 0 {
		return
	}
	if !quantRowsAsm(q) {
		quantRowsGo(dst, dstride, q, bi, h, j0, rows, n)
		return
	}
	_ = dst[(rows-1)*dstride+n-1]
	s, b := &q.Scales, &q.Biases
	es := uintptr(sdpaElemSize(s.Vec))
	sdpa2Deq(&dst[0], dstride, unsafe.Pointer(&q.W[q.wrow(bi, h, j0)]), uintptr(q.RowStride)*4,
		sdpaVecPtr(s.Vec, s.row(bi, h, j0)), sdpaVecPtr(b.Vec, b.row(bi, h, j0)), uintptr(s.RowStride)*es, uintptr(b.RowStride)*es,
		rows, n/q.GroupSize, q.GroupSize, q.Bits, sdpaKind(s.Vec))
}
