//go:build goexperiment.simd && amd64

package kernel

import (
	"simd/archsimd"
	"unsafe"
)

// The AVX-512 kernels (GOEXPERIMENT=simd, Go 1.26 simd/archsimd), installed
// at start-up when the CPU has AVX-512 F/CD/BW/DQ/VL. archsimd has no
// VPDPBUSD (VNNI; qmm_amd64.s uses it when the CPU has it), so the 4-bit
// int8 dot products use VPMADDUBSW (u8·i8 pairs to int16) followed by
// VPMADDWD against ones (pairs to int32), as llama.cpp does on AVX2, and
// the 8-bit ones widen to int16 first.
func init() {
	if !archsimd.X86.AVX512() {
		return
	}
	simdDotF32 = dotF32AVX512
	simdDotQ8 = dotQ8AVX512
	simdDot = dotAVX512
	simdAxpy = axpyAVX512
	simdSubScalar = subScalarAVX512
}

// subScalarAVX512 is simdSubScalar.
func subScalarAVX512(dst, a []float32, c float32) int {
	n := min(len(dst), len(a)) &^ 15
	cv := archsimd.BroadcastFloat32x16(c)
	for i := 0; i < n; i += 16 {
		ld(a[i:]).Sub(cv).Store((*[16]float32)(dst[i:]))
	}
	return n
}

// hsum adds the 16 lanes.
func hsum(v archsimd.Float32x16) float32 {
	h := v.GetLo().Add(v.GetHi())
	q := h.GetLo().Add(h.GetHi())
	var a [4]float32
	q.Store(&a)
	return (a[0] + a[1]) + (a[2] + a[3])
}

// scaleAt returns the scale vector of block b: two groups per block when a
// group spans 8 lanes (half), else the one group b>>sh.
func scaleAt(s unsafe.Pointer, b int, half bool, sh uint) archsimd.Float32x16 {
	if half {
		p := (*[2]float32)(unsafe.Add(s, 8*b))
		return archsimd.BroadcastFloat32x16(p[0]).SetHi(archsimd.BroadcastFloat32x8(p[1]))
	}
	return archsimd.BroadcastFloat32x16(*(*float32)(unsafe.Add(s, 4*(b>>sh))))
}

// ld loads 16 floats from a slice of at least 16.
func ld(s []float32) archsimd.Float32x16 { return archsimd.LoadFloat32x16((*[16]float32)(s)) }

// ldp loads 16 floats at p + 4·i bytes.
func ldp(p unsafe.Pointer, i int) archsimd.Float32x16 {
	return archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(p, 4*i)))
}

// rowCheck panics unless a row's slices hold nblk blocks of 16 lanes:
// 16·nblk words and lanes, B·nblk values of x, and the padded group arrays.
func rowCheck(row []uint32, nx, nl, ng int, l *qLayout) {
	if len(row) < 16*l.nblk || nx < l.B*l.nblk || nl < 16*l.nblk || ng < l.gpad {
		panic("kernel: qmm vector kernel: row slices too short")
	}
}

// biasDot is Σ b·xs over the padded group arrays (multiples of 16, zero
// past the groups) as a vector of partial sums.
func biasDot(bi, xs unsafe.Pointer, gpad int) archsimd.Float32x16 {
	var acc archsimd.Float32x16
	for i := 0; i < gpad; i += 16 {
		acc = ldp(bi, i).MulAdd(ldp(xs, i), acc)
	}
	return acc
}

// dotF32AVX512: see simdDotF32. Lane l of block b holds codes cpl·l + p
// (p = 0..cpl-1) of the block's 16 words; xp holds x in the same order.
func dotF32AVX512(row []uint32, xp, xs, s, bi []float32, l *qLayout) float32 {
	rowCheck(row, len(xp), l.nblk*16, min(len(xs), len(s), len(bi)), l)
	nblk, half, sh := l.nblk, l.half, l.sh
	pw, px, ps := ptr(row), ptr(xp), ptr(s)
	acc1 := biasDot(ptr(bi), ptr(xs), l.gpad)
	var acc0 archsimd.Float32x16
	if l.bits == 4 {
		m := archsimd.BroadcastUint32x16(15)
		for b := range nblk {
			w := archsimd.LoadUint32x16((*[16]uint32)(unsafe.Add(pw, 64*b)))
			x := unsafe.Add(px, 512*b)
			a0 := w.And(m).ConvertToFloat32().Mul(ldp(x, 0))
			a1 := w.ShiftAllRight(4).And(m).ConvertToFloat32().Mul(ldp(x, 16))
			a0 = w.ShiftAllRight(8).And(m).ConvertToFloat32().MulAdd(ldp(x, 32), a0)
			a1 = w.ShiftAllRight(12).And(m).ConvertToFloat32().MulAdd(ldp(x, 48), a1)
			a0 = w.ShiftAllRight(16).And(m).ConvertToFloat32().MulAdd(ldp(x, 64), a0)
			a1 = w.ShiftAllRight(20).And(m).ConvertToFloat32().MulAdd(ldp(x, 80), a1)
			a0 = w.ShiftAllRight(24).And(m).ConvertToFloat32().MulAdd(ldp(x, 96), a0)
			a1 = w.ShiftAllRight(28).ConvertToFloat32().MulAdd(ldp(x, 112), a1)
			acc0 = a0.Add(a1).MulAdd(scaleAt(ps, b, half, sh), acc0)
		}
		return hsum(acc0.Add(acc1))
	}
	m := archsimd.BroadcastUint32x16(255)
	for b := range nblk {
		w := archsimd.LoadUint32x16((*[16]uint32)(unsafe.Add(pw, 64*b)))
		x := unsafe.Add(px, 256*b)
		a0 := w.And(m).ConvertToFloat32().Mul(ldp(x, 0))
		a1 := w.ShiftAllRight(8).And(m).ConvertToFloat32().Mul(ldp(x, 16))
		a0 = w.ShiftAllRight(16).And(m).ConvertToFloat32().MulAdd(ldp(x, 32), a0)
		a1 = w.ShiftAllRight(24).ConvertToFloat32().MulAdd(ldp(x, 48), a1)
		acc0 = a0.Add(a1).MulAdd(scaleAt(ps, b, half, sh), acc0)
	}
	return hsum(acc0.Add(acc1))
}

// dotQ8AVX512: see simdDotQ8. 4-bit: a 64-byte block holds 128 codes, the
// low nibbles (even codes) against xq[0:64] and the high nibbles against
// xq[64:128]; int32 lane l sums codes 8l..8l+7. 8-bit: 64 codes per block,
// lane l sums codes 4l..4l+3. Each lane is then scaled by its x block's
// scale (dxl) and its group's scale.
func dotQ8AVX512(row []uint32, xq []int8, dxl, xs, s, bi []float32, l *qLayout) float32 {
	rowCheck(row, len(xq), len(dxl), min(len(xs), len(s), len(bi)), l)
	nblk, half, sh := l.nblk, l.half, l.sh
	pw, px, pd, ps := ptr(row), ptr(xq), ptr(dxl), ptr(s)
	acc1 := biasDot(ptr(bi), ptr(xs), l.gpad)
	var acc0 archsimd.Float32x16
	ones := archsimd.BroadcastInt16x32(1)
	if l.bits == 4 {
		m := archsimd.BroadcastUint8x64(15)
		for b := range nblk {
			w := archsimd.LoadUint8x64((*[64]uint8)(unsafe.Add(pw, 64*b)))
			lo := w.And(m)
			hi := w.AsUint16x32().ShiftAllRight(4).AsUint8x64().And(m)
			xl := archsimd.LoadInt8x64((*[64]int8)(unsafe.Add(px, 128*b)))
			xh := archsimd.LoadInt8x64((*[64]int8)(unsafe.Add(px, 128*b+64)))
			p := lo.DotProductPairsSaturated(xl).Add(hi.DotProductPairsSaturated(xh))
			f := p.DotProductPairs(ones).ConvertToFloat32().Mul(ldp(pd, 16*b))
			acc0 = f.MulAdd(scaleAt(ps, b, half, sh), acc0)
		}
		return hsum(acc0.Add(acc1))
	}
	// 8-bit codes times x up to ±127 overflow VPMADDUBSW's int16 pairs, so
	// the bytes are widened to int16 (even and odd bytes apart) and
	// multiplied with VPMADDWD: lane l still sums codes 4l..4l+3, exactly.
	ff := archsimd.BroadcastUint16x32(0xFF)
	for b := range nblk {
		w := archsimd.LoadUint16x32((*[32]uint16)(unsafe.Add(pw, 64*b)))
		x := archsimd.LoadInt16x32((*[32]int16)(unsafe.Add(px, 64*b)))
		we, wo := w.And(ff).AsInt16x32(), w.ShiftAllRight(8).AsInt16x32()
		xe, xo := x.ShiftAllLeft(8).ShiftAllRight(8), x.ShiftAllRight(8)
		p := we.DotProductPairs(xe).Add(wo.DotProductPairs(xo))
		f := p.ConvertToFloat32().Mul(ldp(pd, 16*b))
		acc0 = f.MulAdd(scaleAt(ps, b, half, sh), acc0)
	}
	return hsum(acc0.Add(acc1))
}

// dotAVX512 is Σ a_i·b_i over len(a) values (16 lanes, then the tail).
func dotAVX512(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1 archsimd.Float32x16
	i := 0
	for ; i+32 <= n; i += 32 {
		s0 = ld(a[i:i+16]).MulAdd(ld(b[i:i+16]), s0)
		s1 = ld(a[i+16:i+32]).MulAdd(ld(b[i+16:i+32]), s1)
	}
	for ; i+16 <= n; i += 16 {
		s0 = ld(a[i:i+16]).MulAdd(ld(b[i:i+16]), s0)
	}
	s := hsum(s0.Add(s1))
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// axpyAVX512 is y += a·x.
func axpyAVX512(y []float32, a float32, x []float32) {
	n := len(y)
	x = x[:n]
	av := archsimd.BroadcastFloat32x16(a)
	i := 0
	for ; i+16 <= n; i += 16 {
		ld(x[i:i+16]).MulAdd(av, ld(y[i:i+16])).Store((*[16]float32)(y[i : i+16]))
	}
	for ; i < n; i++ {
		y[i] += a * x[i]
	}
}
