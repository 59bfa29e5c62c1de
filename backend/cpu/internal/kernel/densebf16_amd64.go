package kernel

import "unsafe"

// The fast precision's dense matmul on AVX512_BF16 for bfloat16 and
// float16 weights (denseBF16Z): the rows of x rounded to bfloat16 once per
// call (to nearest even), the weights read in place as bfloat16 (float16
// ones rounded to bfloat16 as they are read), and each output the sum of
// the products of the bfloat16 pairs by VDPBF16PS: sixteen float32 lanes,
// lane t adding, for each step of 32 values in order, the products of
// values 2t and 2t+1, then the lanes reduced as the denseZ kernels reduce
// theirs (zsum). VDPBF16PS does twice the multiply-adds of a float32 FMA
// per instruction: on Zen 4 (2026-12-06, from registers, one thread) 117
// GMAC/s against 58.3, and 74.5 with a float16 weight row's conversion
// every twelve. Every kernel gives an output the same bits, so a row of x
// gets them whatever m is (decode, prefill, a batch or a verify window).
// Its error is bounded by DenseFastBoundW.

// denseB8x3BF16 runs eight rows of x in bfloat16 (a.a, a.astr bytes apart)
// against three bfloat16 weight rows (a.w, a.wstr), a.n steps of 32
// values, storing output (i, c) at a.out + i·a.ostr + 4c.
//
//go:noescape
func denseB8x3BF16(a *denseArgs)

// denseB8x1BF16 is denseB8x3BF16 for one weight row.
//
//go:noescape
func denseB8x1BF16(a *denseArgs)

// denseB1x8BF16 runs one row of x in bfloat16 (a.a) against eight weight
// rows, each row's whole k before the next's, storing output c at a.out +
// 4c: denseB8x3BF16's bits.
//
//go:noescape
func denseB1x8BF16(a *denseArgs)

// denseB1x3BF16 is denseB1x8BF16 for three weight rows.
//
//go:noescape
func denseB1x3BF16(a *denseArgs)

// denseB1x1BF16 is denseB1x8BF16 for one weight row.
//
//go:noescape
func denseB1x1BF16(a *denseArgs)

// denseB8x3F16 is denseB8x3BF16 for float16 weights, each value rounded
// to bfloat16 as it is read (VCVTPH2PS, then VCVTNE2PS2BF16).
//
//go:noescape
func denseB8x3F16(a *denseArgs)

// denseB8x1F16 is denseB8x3F16 for one weight row.
//
//go:noescape
func denseB8x1F16(a *denseArgs)

// denseB1x8F16 is denseB1x8BF16 for float16 weights.
//
//go:noescape
func denseB1x8F16(a *denseArgs)

// denseB1x3F16 is denseB1x3BF16 for float16 weights.
//
//go:noescape
func denseB1x3F16(a *denseArgs)

// denseB1x1F16 is denseB1x1BF16 for float16 weights.
//
//go:noescape
func denseB1x1F16(a *denseArgs)

// Shapes of the denseB kernels (denseBCall).
const (
	db8x3 = iota
	db8x1
	db1x8
	db1x3
	db1x1
)

// denseBCall runs the denseB kernel of shape kind for float16 weights
// (f16) or bfloat16 ones, by direct calls.
func denseBCall(a *denseArgs, f16 bool, kind int) {
	if f16 {
		switch kind {
		case db8x3:
			denseB8x3F16(a)
		case db8x1:
			denseB8x1F16(a)
		case db1x8:
			denseB1x8F16(a)
		case db1x3:
			denseB1x3F16(a)
		case db1x1:
			denseB1x1F16(a)
		}
		return
	}
	switch kind {
	case db8x3:
		denseB8x3BF16(a)
	case db8x1:
		denseB8x1BF16(a)
	case db1x8:
		denseB1x8BF16(a)
	case db1x3:
		denseB1x3BF16(a)
	case db1x1:
		denseB1x1BF16(a)
	}
}

// denseBF16On switches the denseB kernels on (tests hold the denseZ ones
// to their bound with it off).
var denseBF16On = true

// denseBF16Path reports whether 16-bit weights with k values a row take
// the denseB kernels on this CPU (DenseFastBoundW).
func denseBF16Path(k int) bool { return denseBF16Takes(Vec{U16: []uint16{}}, k) }

// denseBF16Takes reports whether denseBF16Z computes the fast precision
// for weights like w with k values a row on this CPU: AVX512_BF16, 16-bit
// weights, and k a multiple of 32.
func denseBF16Takes(w Vec, k int) bool {
	return denseBF16On && denseZOn && asmBF16 && w.F32 == nil && k > 0 && k%32 == 0
}

// denseBF16Z is the fast precision on the denseB kernels (denseBF16Takes):
// x rounded to bfloat16 into a scratch, then, for fewer than eight rows
// (decode), groups of eight weight rows split across the pool, each row
// of x against the group by denseB1x8 and the n mod 8 last rows by
// denseB1x1; for eight rows or more (prefill), groups of three weight rows
// split across the pool, each worker running its groups against one block
// of rows of x at a time, eight rows by three weight rows per call
// (denseB8x3), the m mod 8 last rows by denseB1x3 and the n mod 3 last
// weight rows by denseB8x1 and denseB1x1.
func denseBF16Z(dst, x []float32, w Vec, m, n, k int) {
	ws := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(ws)
	ws.xb16 = grow(ws.xb16, m*k)
	xb := ws.xb16[:m*k]
	Float32sToBF16(xb, x[:m*k])
	base, es := denseBase(w)
	wstr := uintptr(k * es)
	row := func(j int) unsafe.Pointer { return unsafe.Add(base, j*k*es) }
	xrow := func(i int) unsafe.Pointer { return unsafe.Pointer(&xb[i*k]) }
	steps, f16 := k/32, w.F16
	// group runs the row of x at i (and the seven after it, for the
	// eight-row kernels) against the weight rows j..j+cols-1: by the kernel
	// full when they are the group's width, else by single one weight row
	// at a time.
	group := func(a *denseArgs, i, j, cols, width, full, single int) {
		a.a = xrow(i)
		if cols == width {
			a.w, a.out = row(j), unsafe.Pointer(&dst[i*n+j])
			denseBCall(a, f16, full)
			return
		}
		for c := range cols {
			a.w, a.out = row(j+c), unsafe.Pointer(&dst[i*n+j+c])
			denseBCall(a, f16, single)
		}
	}
	if m < 8 {
		parallelFor((n+7)/8, denseMinChunk(8, m, k), func(lo, hi int) {
			a := denseArgs{wstr: wstr, n: steps}
			for g := lo; g < hi; g++ {
				for i := range m {
					group(&a, i, 8*g, min(8, n-8*g), 8, db1x8, db1x1)
				}
			}
		})
		return
	}
	// A block of rows of x (bfloat16) stays in L2 while a group's three
	// weight rows stay in L1.
	mb := max(8, min(m, denseZRows/(2*k))&^7)
	parallelFor((n+2)/3, denseMinChunk(3, m, k), func(lo, hi int) {
		a := denseArgs{wstr: wstr, astr: uintptr(2 * k), ostr: uintptr(4 * n), n: steps}
		for r0 := 0; r0 < m; r0 += mb {
			r1 := min(m, r0+mb)
			for g := lo; g < hi; g++ {
				j, cols := 3*g, min(3, n-3*g)
				i := r0
				for ; i+8 <= r1; i += 8 {
					group(&a, i, j, cols, 3, db8x3, db8x1)
				}
				for ; i < r1; i++ {
					group(&a, i, j, cols, 3, db1x3, db1x1)
				}
			}
		}
	})
}
