package kernel

import (
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run dense_gen.go -o dense_amd64.s

// denseArgs are the arguments of the dense kernels (field offsets fixed in
// dense_gen.go): w the first weight row and wstr the bytes between weight
// rows; a the first row of x (float32) and astr the bytes between its rows;
// p the panel (written by densePack, read by denseRef1..4); out the
// accumulators of denseRef1..4 (sixteen float32 a row, rows contiguous), or
// the first output of denseRefV and denseFast with ostr the bytes between
// their output rows; n the values of k (denseRef1..4) or the blocks of
// eight values (the others), or the values of k (denseZ); pf the bytes
// from each weight row to the row the one-row denseZ kernels prefetch.
type denseArgs struct {
	w    unsafe.Pointer // 0
	wstr uintptr        // 8
	a    unsafe.Pointer // 16
	astr uintptr        // 24
	p    unsafe.Pointer // 32
	out  unsafe.Pointer // 40
	ostr uintptr        // 48
	n    int            // 56
	pf   uintptr        // 64
}

// densePackF32 writes, for a.n blocks of eight values of eight consecutive
// float32 weight rows (a.w, a.wstr), value l of row r to a.p + 64·l + 4·r:
// the rows transposed in registers, exactly.
//
//go:noescape
func densePackF32(a *denseArgs)

// densePackBF16 is densePackF32 for bfloat16 weight rows (widened exactly).
//
//go:noescape
func densePackBF16(a *denseArgs)

// densePackF16 is densePackF32 for float16 weight rows (VCVTPH2PS, exact).
//
//go:noescape
func densePackF16(a *denseArgs)

// denseRef1 adds, for l < a.n in order, x[l]·panel[l][c] to the sixteen
// accumulators a.out[c], x the row at a.a and panel[l] the sixteen float32
// at a.p + 64·l: a float32 multiply, then a float32 add, per lane and step
// (the reference loop's operations, so its bits).
//
//go:noescape
func denseRef1(a *denseArgs)

// denseRef2 is denseRef1 for two rows of x (a.astr bytes apart) and two
// rows of accumulators (64 bytes apart).
//
//go:noescape
func denseRef2(a *denseArgs)

// denseRef3 is denseRef2 for three rows.
//
//go:noescape
func denseRef3(a *denseArgs)

// denseRef4 is denseRef2 for four rows.
//
//go:noescape
func denseRef4(a *denseArgs)

// denseRef5 is denseRef2 for five rows.
//
//go:noescape
func denseRef5(a *denseArgs)

// denseRef6 is denseRef2 for six rows (a.astr bytes apart, the sixth at
// five strides).
//
//go:noescape
func denseRef6(a *denseArgs)

// denseRefZ1 is denseRef1 in AVX-512 (denseRefZ2..8 take two to eight
// rows of x): the sixteen panel columns in one ZMM register, x broadcast
// from memory into the multiply; the same multiply, then add, per lane and
// step, so the same bits.
//
//go:noescape
func denseRefZ1(a *denseArgs)

// denseRefZ2 is denseRefZ1 for 2 rows of x.
//
//go:noescape
func denseRefZ2(a *denseArgs)

// denseRefZ3 is denseRefZ1 for 3 rows of x.
//
//go:noescape
func denseRefZ3(a *denseArgs)

// denseRefZ4 is denseRefZ1 for 4 rows of x.
//
//go:noescape
func denseRefZ4(a *denseArgs)

// denseRefZ5 is denseRefZ1 for 5 rows of x.
//
//go:noescape
func denseRefZ5(a *denseArgs)

// denseRefZ6 is denseRefZ1 for 6 rows of x.
//
//go:noescape
func denseRefZ6(a *denseArgs)

// denseRefZ7 is denseRefZ1 for 7 rows of x.
//
//go:noescape
func denseRefZ7(a *denseArgs)

// denseRefZ8 is denseRefZ1 for 8 rows of x.
//
//go:noescape
func denseRefZ8(a *denseArgs)

// denseRefZV1BF16 writes to a.out[c], c < 16, the in-order float32 sum (a
// multiply, then an add, per term) of x[l]·W[c][l] over a.n blocks of
// sixteen values, x the row at a.a and W sixteen bfloat16 rows from a.w,
// a.wstr bytes apart, read in place: denseRefV1BF16 in AVX-512, each
// block of sixteen values of sixteen rows transposed in registers at 16
// bits, one output per lane; the next tile of sixteen rows is prefetched.
//
//go:noescape
func denseRefZV1BF16(a *denseArgs)

// denseRefZV1F16 is denseRefZV1BF16 for float16 weights.
//
//go:noescape
func denseRefZV1F16(a *denseArgs)

// denseRefP1BF16 writes, for a.wstr packed tiles of sixteen bfloat16 weight
// rows from a.w (densePacked's layout, a.n values each), the sixteen
// in-order float32 sums of x[l]·W[r][l] (a multiply, then an add, per
// term; x at a.a) to a.out, sixteen floats a tile: denseRefZV1BF16's
// outputs, one value of the sixteen rows a load.
//
//go:noescape
func denseRefP1BF16(a *denseArgs)

// denseRefP1F16 is denseRefP1BF16 for float16 weights.
//
//go:noescape
func denseRefP1F16(a *denseArgs)

// densePackP16 writes densePacked's layout of one tile of sixteen 16-bit
// weight rows (a.w row 0, a.wstr bytes apart) for a.n blocks of sixteen
// values to a.p: value l of the sixteen rows at a.p + 32·l (the bits
// moved, transposed in registers).
//
//go:noescape
func densePackP16(a *denseArgs)

// densePackTile writes the packed tile of the sixteen weight rows at w (k
// values each) to tile for the values below 16·(k/16), and returns how
// many values per row it wrote.
func densePackTile(tile, w []uint16, k int) int {
	nb := k / 16
	if nb == 0 {
		return 0
	}
	_ = w[15*k+16*nb-1]
	_ = tile[16*16*nb-1]
	a := denseArgs{w: unsafe.Pointer(&w[0]), wstr: uintptr(2 * k), p: unsafe.Pointer(&tile[0]), n: nb}
	densePackP16(&a)
	return 16 * nb
}

// denseRefZW1 is denseRefZ1 for two sixteen-column panels at once (a.p
// and a.p + a.pf), thirty-two accumulators a row of x (128 bytes apart;
// denseRefZW2..8 take two to eight rows): x broadcast once for both
// multiplies, the same multiply, then add, per lane and step, so the same
// bits.
//
//go:noescape
func denseRefZW1(a *denseArgs)

// denseRefZW2 is denseRefZW1 for 2 rows of x.
//
//go:noescape
func denseRefZW2(a *denseArgs)

// denseRefZW3 is denseRefZW1 for 3 rows of x.
//
//go:noescape
func denseRefZW3(a *denseArgs)

// denseRefZW4 is denseRefZW1 for 4 rows of x.
//
//go:noescape
func denseRefZW4(a *denseArgs)

// denseRefZW5 is denseRefZW1 for 5 rows of x.
//
//go:noescape
func denseRefZW5(a *denseArgs)

// denseRefZW6 is denseRefZW1 for 6 rows of x.
//
//go:noescape
func denseRefZW6(a *denseArgs)

// denseRefZW7 is denseRefZW1 for 7 rows of x.
//
//go:noescape
func denseRefZW7(a *denseArgs)

// denseRefZW8 is denseRefZW1 for 8 rows of x.
//
//go:noescape
func denseRefZW8(a *denseArgs)

// denseRefWRows runs denseRefZW<n> (n 1 to 8).
func denseRefWRows(a *denseArgs, n int) {
	switch n {
	case 1:
		denseRefZW1(a)
	case 2:
		denseRefZW2(a)
	case 3:
		denseRefZW3(a)
	case 4:
		denseRefZW4(a)
	case 5:
		denseRefZW5(a)
	case 6:
		denseRefZW6(a)
	case 7:
		denseRefZW7(a)
	default:
		denseRefZW8(a)
	}
}

// denseRefStep is the rows of x one reference kernel call takes: eight on
// the AVX-512 kernels, six on the AVX2 ones.
func denseRefStep() int {
	if denseZOn {
		return 8
	}
	return 6
}

// denseRefRows runs the reference kernel for n (1 to denseRefStep()) rows
// of x.
func denseRefRows(a *denseArgs, n int) {
	if denseZOn {
		switch n {
		case 1:
			denseRefZ1(a)
		case 2:
			denseRefZ2(a)
		case 3:
			denseRefZ3(a)
		case 4:
			denseRefZ4(a)
		case 5:
			denseRefZ5(a)
		case 6:
			denseRefZ6(a)
		case 7:
			denseRefZ7(a)
		default:
			denseRefZ8(a)
		}
		return
	}
	switch n {
	case 1:
		denseRef1(a)
	case 2:
		denseRef2(a)
	case 3:
		denseRef3(a)
	case 4:
		denseRef4(a)
	case 5:
		denseRef5(a)
	default:
		denseRef6(a)
	}
}

// denseFast1F32 writes to a.out[c], c < 4, the dot product of the row of x
// at a.a with float32 weight row c (a.w + c·a.wstr) over a.n blocks of
// eight values: eight FMA partial sums (values ≡ lane mod 8), added in a
// tree.
//
//go:noescape
func denseFast1F32(a *denseArgs)

// denseFast2F32 is denseFast1F32 for two rows of x (a.astr bytes apart),
// writing the second row's four outputs a.ostr bytes after the first's.
//
//go:noescape
func denseFast2F32(a *denseArgs)

// denseFast1BF16 is denseFast1F32 for bfloat16 weights.
//
//go:noescape
func denseFast1BF16(a *denseArgs)

// denseFast2BF16 is denseFast2F32 for bfloat16 weights.
//
//go:noescape
func denseFast2BF16(a *denseArgs)

// denseFast1F16 is denseFast1F32 for float16 weights (F16C).
//
//go:noescape
func denseFast1F16(a *denseArgs)

// denseFast2F16 is denseFast2F32 for float16 weights (F16C).
//
//go:noescape
func denseFast2F16(a *denseArgs)

// denseFast4x3F32 writes to a.out + i·a.ostr + 4·c, i < 4, c < 3, the
// dot product of row i of x (a.a + i·a.astr) with float32 weight row c
// (a.w + c·a.wstr) over a.n blocks of eight values, each output in
// denseFast1F32's order (the same bits): the prefill kernel, twelve FMAs a
// step against three weight loads.
//
//go:noescape
func denseFast4x3F32(a *denseArgs)

// denseFast4x3BF16 is denseFast4x3F32 for bfloat16 weights.
//
//go:noescape
func denseFast4x3BF16(a *denseArgs)

// denseFast4x3F16 is denseFast4x3F32 for float16 weights (F16C).
//
//go:noescape
func denseFast4x3F16(a *denseArgs)

// The denseZ<r>x<c><dt> kernels (r rows of x against c weight rows read
// in place, of dtype dt) write to a.out + i·a.ostr + 4·c the fast-precision dot
// product of x row i (a.a + i·a.astr, float32) with weight row c (a.w +
// c·a.wstr) over a.n values: AVX-512, sixteen values a step, lane t of one
// accumulator per output summing the products of the values ≡ t mod 16 by
// FMA in order (the last a.n mod 16 in a masked step that reads nothing
// past the row), then reduced the same way in every kernel (dense_gen.go's
// zsum): y_t = z_t + z_(t+8), ((y0+y1)+(y2+y3)) + ((y4+y5)+(y6+y7)). An
// output's bits thus depend on neither the kernel nor the number of rows
// of x. The one-row kernels prefetch, in address order, the weights from
// a.pf bytes past the first row (the next group of rows).

// denseZ1x8F32 is the denseZ kernel for 1 row of x by 8 float32 weight rows
// (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x8F32(a *denseArgs)

// denseZ1x6F32 is the denseZ kernel for 1 row of x by 6 float32 weight rows
// (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x6F32(a *denseArgs)

// denseZ1x1F32 is the denseZ kernel for 1 row of x by 1 float32 weight row
// (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x1F32(a *denseArgs)

// denseZ4x6F32 is the denseZ kernel for 4 rows of x by 6 float32 weight
// rowsNone.
//
//go:noescape
func denseZ4x6F32(a *denseArgs)

// denseZ4x1F32 is the denseZ kernel for 4 rows of x by 1 float32 weight
// rowNone.
//
//go:noescape
func denseZ4x1F32(a *denseArgs)

// denseZ1x8BF16 is the denseZ kernel for 1 row of x by 8 bfloat16 weight
// rows (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x8BF16(a *denseArgs)

// denseZ1x6BF16 is the denseZ kernel for 1 row of x by 6 bfloat16 weight
// rows (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x6BF16(a *denseArgs)

// denseZ1x1BF16 is the denseZ kernel for 1 row of x by 1 bfloat16 weight
// row (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x1BF16(a *denseArgs)

// denseZ4x6BF16 is the denseZ kernel for 4 rows of x by 6 bfloat16 weight
// rowsNone.
//
//go:noescape
func denseZ4x6BF16(a *denseArgs)

// denseZ4x1BF16 is the denseZ kernel for 4 rows of x by 1 bfloat16 weight
// rowNone.
//
//go:noescape
func denseZ4x1BF16(a *denseArgs)

// denseZ1x8F16 is the denseZ kernel for 1 row of x by 8 float16 weight rows
// (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x8F16(a *denseArgs)

// denseZ1x6F16 is the denseZ kernel for 1 row of x by 6 float16 weight rows
// (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x6F16(a *denseArgs)

// denseZ1x1F16 is the denseZ kernel for 1 row of x by 1 float16 weight row
// (prefetching the group a.pf bytes on).
//
//go:noescape
func denseZ1x1F16(a *denseArgs)

// denseZ4x6F16 is the denseZ kernel for 4 rows of x by 6 float16 weight
// rowsNone.
//
//go:noescape
func denseZ4x6F16(a *denseArgs)

// denseZ4x1F16 is the denseZ kernel for 4 rows of x by 1 float16 weight
// rowNone.
//
//go:noescape
func denseZ4x1F16(a *denseArgs)

// The denseZ kernel shapes (rows of x × weight rows), denseZCall's kind.
const (
	dz1x8 = iota
	dz1x6
	dz1x1
	dz4x6
	dz4x1
)

// denseZCall runs the denseZ kernel of shape kind and weight dtype dt (0
// float32, 1 bfloat16, 2 float16), by direct calls (a function value would
// move a to the heap).
func denseZCall(a *denseArgs, dt, kind int) {
	switch dt*8 + kind {
	case dz1x8:
		denseZ1x8F32(a)
	case dz1x6:
		denseZ1x6F32(a)
	case dz1x1:
		denseZ1x1F32(a)
	case dz4x6:
		denseZ4x6F32(a)
	case dz4x1:
		denseZ4x1F32(a)
	case 8 + dz1x8:
		denseZ1x8BF16(a)
	case 8 + dz1x6:
		denseZ1x6BF16(a)
	case 8 + dz1x1:
		denseZ1x1BF16(a)
	case 8 + dz4x6:
		denseZ4x6BF16(a)
	case 8 + dz4x1:
		denseZ4x1BF16(a)
	case 16 + dz1x8:
		denseZ1x8F16(a)
	case 16 + dz1x6:
		denseZ1x6F16(a)
	case 16 + dz1x1:
		denseZ1x1F16(a)
	case 16 + dz4x6:
		denseZ4x6F16(a)
	case 16 + dz4x1:
		denseZ4x1F16(a)
	}
}

// denseDtype returns w's dtype as the kernels number it: 0 float32, 1
// bfloat16, 2 float16.
func denseDtype(w Vec) int {
	switch {
	case w.F32 != nil:
		return 0
	case w.F16:
		return 2
	}
	return 1
}

// denseZRows is the budget, in bytes of float32 x, of one block of rows of
// x that the GEMM form of denseFastZ runs against each group of weight
// rows (it stays in the 1 MiB L2 of Zen 5 and most AVX-512 cores while
// the group's rows stay in L1).
const denseZRows = 256 << 10

// denseFastZ is the fast precision on the AVX-512 kernels. Fewer than four
// rows of x (decode): groups of eight weight rows split across the pool,
// each row of x against the group by denseZ1x8 (which prefetches the next
// group), the n mod 8 last rows one at a time. Four or more rows (prefill):
// groups of six weight rows split across the pool; each worker runs its
// groups against one block of rows of x (denseZRows) at a time, four rows
// of x by six weight rows per call (denseZ4x6), the m mod 4 and n mod 6
// leftovers by the 1x6, 4x1 and 1x1 kernels. Every kernel gives an output
// the same bits, so a row of x gets them whatever m is. (On Zen 5, one
// thread, 3x8 tiles ran as fast as 4x6 at 512x960x2560 and up to 20%
// slower at 64x2048x8192, 6x4 tiles 10-30% slower at both, and the one-row
// kernels' prefetch added to the 4x6 and 4x1 ones 10% slower at
// 64x2048x8192: BenchmarkDense CPU time, 2026-12-02.)
func denseFastZ(dst, x []float32, w Vec, m, n, k int) {
	base, es := denseBase(w)
	dt := denseDtype(w)
	wstr := uintptr(k * es)
	row := func(j int) unsafe.Pointer { return unsafe.Add(base, j*k*es) }
	if m < 4 {
		parallelFor((n+7)/8, denseMinChunk(8, m, k), func(lo, hi int) {
			a := denseArgs{wstr: wstr, n: k}
			for g := lo; g < hi; g++ {
				j := 8 * g
				cols := min(8, n-j)
				for i := range m {
					a.a = unsafe.Pointer(&x[i*k])
					if cols == 8 {
						a.w, a.out, a.pf = row(j), unsafe.Pointer(&dst[i*n+j]), 8*wstr
						denseZCall(&a, dt, dz1x8)
						continue
					}
					for c := range cols {
						a.w, a.out, a.pf = row(j+c), unsafe.Pointer(&dst[i*n+j+c]), wstr
						denseZCall(&a, dt, dz1x1)
					}
				}
			}
		})
		return
	}
	mb := max(4, min(m, denseZRows/(4*k))&^3)
	parallelFor((n+5)/6, denseMinChunk(6, m, k), func(lo, hi int) {
		a := denseArgs{wstr: wstr, astr: uintptr(4 * k), ostr: uintptr(4 * n), n: k}
		var ws *qmmScratch
		if dt != 0 && min(m, mb) >= densePackRows {
			ws = scratchPool.Get().(*qmmScratch)
			defer scratchPool.Put(ws)
			ws.wt = grow(ws.wt, 6*k)
		}
		gdt := dt
		for r0 := 0; r0 < m; r0 += mb {
			r1 := min(m, r0+mb)
			for g := lo; g < hi; g++ {
				j := 6 * g
				cols := min(6, n-j)
				// The group's weight rows, in place or widened to float32
				// once for the block's rows (densePackRows).
				row, dt := row, gdt
				if ws != nil && r1-r0 >= densePackRows {
					w.load(ws.wt[:cols*k], j*k)
					j0 := j
					row = func(j int) unsafe.Pointer { return unsafe.Pointer(&ws.wt[(j-j0)*k]) }
					dt, a.wstr = 0, uintptr(4*k)
				} else {
					a.wstr = wstr
				}
				for i := r0; i < r1; i += 4 {
					switch four := i+4 <= r1; {
					case cols == 6 && four:
						a.w, a.a, a.out = row(j), unsafe.Pointer(&x[i*k]), unsafe.Pointer(&dst[i*n+j])
						denseZCall(&a, dt, dz4x6)
					case cols == 6:
						for r := i; r < r1; r++ {
							a.w, a.a, a.out, a.pf = row(j), unsafe.Pointer(&x[r*k]), unsafe.Pointer(&dst[r*n+j]), 6*wstr
							denseZCall(&a, dt, dz1x6)
						}
					case four:
						for c := range cols {
							a.w, a.a, a.out = row(j+c), unsafe.Pointer(&x[i*k]), unsafe.Pointer(&dst[i*n+j+c])
							denseZCall(&a, dt, dz4x1)
						}
					default:
						for c := range cols {
							for r := i; r < r1; r++ {
								a.w, a.a, a.out, a.pf = row(j+c), unsafe.Pointer(&x[r*k]), unsafe.Pointer(&dst[r*n+j+c]), wstr
								denseZCall(&a, dt, dz1x1)
							}
						}
					}
				}
			}
		}
	})
}

// denseAVX is set when the CPU has AVX2 and FMA; denseF16 when it also has
// F16C. denseOn switches the kernels on (tests compare with them off).
var denseAVX, denseF16, denseOn = false, false, true

// denseZOn is set on CPUs with AVX-512 F/BW/DQ/VL (x86Features): the fast
// precision then runs the denseZ kernels (tests switch it off to hold the
// AVX2 ones to their bound too).
var denseZOn = false

func init() {
	denseAVX = cpu.X86.HasAVX && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	denseF16 = denseAVX && hasF16C()
	denseZOn, _ = x86Features()
	denseZOn = denseZOn && denseF16
	if vendor, _ := x86Family(); vendor == "AuthenticAMD" {
		densePackRows = math.MaxInt
	}
}

// denseCovers reports whether the AVX2 kernels take weights like w on
// this CPU.
func denseCovers(w Vec) bool {
	return denseOn && denseAVX && (w.F32 != nil || !w.F16 || denseF16)
}

const (
	denseKC = 256 // values of k per panel (16 KiB of float32)
	denseRB = 64  // rows of x per accumulator block
	// denseRefRB is denseRefPanel's block of rows of x: each panel is
	// packed once per block, so larger blocks pack less (64 rows spent 8%
	// of a 511-token reference prefill of SmolLM2-360M f16 packing); its
	// x rows of one panel (1 KiB each) stay in L2.
	denseRefRB = 256
)

// denseAsm runs DenseMatmulT on the AVX2 kernels, reporting false when
// they do not cover the CPU or the dtype.
func denseAsm(dst, x []float32, w Vec, m, n, k int, fast bool) bool {
	if !denseCovers(w) {
		return false
	}
	if fast && denseBF16Takes(w, k) {
		denseBF16Z(dst, x, w, m, n, k)
	} else if fast && denseZOn {
		denseFastZ(dst, x, w, m, n, k)
	} else if fast {
		denseFastAVX(dst, x, w, m, n, k)
	} else {
		denseRefAVX(dst, x, w, nil, m, n, k)
	}
	return true
}

// densePackable reports whether packDense takes weights like w: 16-bit
// values on a CPU with the AVX-512 reference kernels.
func densePackable(w Vec) bool { return denseOn && denseZOn && w.F32 == nil && w.U16 != nil }

// denseRefPacked is the reference precision on packed weights p: one row
// of x through denseRefP1 (the tiles split across the pool, each
// participant's share one sequential stream; a partial last tile through a
// copy of its outputs), more rows through denseRefAVX's panels, converted
// from the packed tiles.
func denseRefPacked(dst, x []float32, p *densePacked, m int) {
	n, k := p.n, p.k
	if m > 1 {
		denseRefAVX(dst, x, Vec{}, p, m, n, k)
		return
	}
	full := n / 16
	parallelFor(p.tiles(), denseMinChunk(16, 1, k), func(lo, hi int) {
		a := denseArgs{a: unsafe.Pointer(&x[0]), n: k, pf: densePF}
		if f := min(hi, full); f > lo {
			a.w, a.wstr, a.out = unsafe.Pointer(&p.v.U16[16*lo*k]), uintptr(f-lo), unsafe.Pointer(&dst[16*lo])
			denseRefP1(&a, p.v.F16)
		}
		if hi > full {
			var out [16]float32
			a.w, a.wstr, a.out = unsafe.Pointer(&p.v.U16[16*full*k]), 1, unsafe.Pointer(&out[0])
			denseRefP1(&a, p.v.F16)
			copy(dst[16*full:n], out[:])
		}
	})
}

// denseRefP1 calls denseRefP1F16 or denseRefP1BF16.
func denseRefP1(a *denseArgs, f16 bool) {
	if f16 {
		denseRefP1F16(a)
	} else {
		denseRefP1BF16(a)
	}
}

// densePF is how far ahead in its stream of packed tiles denseRefP1
// prefetches (denseArgs.pf): 4 KB on Intel CPUs (installAsm), where
// SmolLM2-360M f16's reference decode went from 25.8-28.3 tok/s without
// to 37.4-38.6 (Xeon with a 300 MiB L3, 2026-12-06, mlxgo generate, 128
// tokens, three alternating runs; PREFETCHT0 at 4 KB 33.7-35.5, at 8 KB
// 35.5-40.1); none elsewhere (on Zen 4 it read 90-94% of the bandwidth
// without, 2026-12-05).
var densePF uintptr

// denseBase returns the address of w's first value and its bytes per value.
func denseBase(w Vec) (unsafe.Pointer, int) {
	if w.F32 != nil {
		return unsafe.Pointer(unsafe.SliceData(w.F32)), 4
	}
	return unsafe.Pointer(unsafe.SliceData(w.U16)), 2
}

// densePack packs value l0..l0+kc of weight rows j0..j0+cols into panel
// (panel[l][c] at 16·l + c; columns past cols zero): sixteen rows by the
// assembly in blocks of eight values, the rest (the k mod 8 tail, or a
// last tile of fewer than sixteen rows) converted one value at a time; or,
// from packed weights pk (not nil: w unused), the tile's values converted
// as they lie.
func densePack(panel []float32, w Vec, pk *densePacked, j0, cols, l0, kc, k int) {
	if pk != nil {
		pk.v.load(panel[:16*kc], 16*(j0*k/16+l0))
		return
	}
	nb := 0
	if cols == 16 {
		nb = kc / 8
		base, es := denseBase(w)
		var a denseArgs
		a.wstr = uintptr(k * es)
		a.n = nb
		if nb > 0 {
			for h := range 2 {
				a.w = unsafe.Add(base, ((j0+8*h)*k+l0)*es)
				a.p = unsafe.Pointer(&panel[8*h])
				switch { // direct calls: a function value would move a (and the panel) to the heap
				case w.F32 != nil:
					densePackF32(&a)
				case w.F16:
					densePackF16(&a)
				default:
					densePackBF16(&a)
				}
			}
		}
	}
	for l := 8 * nb; l < kc; l++ {
		pr := panel[16*l : 16*l+16]
		for c := range 16 {
			if c < cols {
				pr[c] = w.At((j0+c)*k + l0 + l)
			} else {
				pr[c] = 0
			}
		}
	}
}

// denseRefAVX is the reference precision on the AVX2 kernels, tiles of
// sixteen weight rows split across the pool: one or two rows of x run
// denseRefFew on the full tiles, everything else denseRefPanel. On AVX-512
// CPUs three or more rows of x take denseRefPanelW, tiles of thirty-two
// (at 512x960x2560 and 64x2048x8192, f16, one thread: 10-25% less CPU
// time than sixteen-column tiles of denseRefZ8).
func denseRefAVX(dst, x []float32, w Vec, pk *densePacked, m, n, k int) {
	if denseZOn && m > 2 {
		parallelFor((n+31)/32, denseMinChunk(32, m, k), func(lo, hi int) {
			denseRefPanelW(dst, x, w, pk, m, n, k, lo, hi)
		})
		return
	}
	tiles := (n + 15) / 16
	parallelFor(tiles, denseMinChunk(16, m, k), func(lo, hi int) {
		if m <= 2 && pk == nil {
			full := max(lo, min(hi, n/16))
			for t := lo; t < full; t++ {
				denseRefFew(dst, x, w, m, n, k, 16*t)
			}
			lo = full
		}
		if lo < hi {
			denseRefPanel(dst, x, w, pk, m, n, k, lo, hi)
		}
	})
}

// denseRefPanelW is denseRefPanel on the AVX-512 kernels for three or
// more rows of x, tiles lo..hi-1 of thirty-two weight rows (two panels of
// sixteen columns, the second all zero past n): eight rows of x per
// denseRefZW call, every output the in-order loop's.
func denseRefPanelW(dst, x []float32, w Vec, pk *densePacked, m, n, k, lo, hi int) {
	var panel [2 * denseKC * 16]float32
	var acc [denseRefRB * 32]float32
	a := denseArgs{astr: uintptr(4 * k), pf: uintptr(4 * denseKC * 16)}
	for t := lo; t < hi; t++ {
		j0 := 32 * t
		cols := min(32, n-j0)
		for r0 := 0; r0 < m; r0 += denseRefRB {
			rows := min(denseRefRB, m-r0)
			clear(acc[:rows*32])
			for l0 := 0; l0 < k; l0 += denseKC {
				kc := min(denseKC, k-l0)
				densePack(panel[:denseKC*16], w, pk, j0, min(16, cols), l0, kc, k)
				if cols > 16 {
					densePack(panel[denseKC*16:], w, pk, j0+16, cols-16, l0, kc, k)
				} else {
					clear(panel[denseKC*16 : denseKC*16+16*kc])
				}
				a.p = unsafe.Pointer(&panel[0])
				a.n = kc
				for i := 0; i < rows; i += 8 {
					a.a = unsafe.Pointer(&x[(r0+i)*k+l0])
					a.out = unsafe.Pointer(&acc[32*i])
					denseRefWRows(&a, min(8, rows-i))
				}
			}
			for i := range rows {
				copy(dst[(r0+i)*n+j0:(r0+i)*n+j0+cols], acc[32*i:32*i+cols])
			}
		}
	}
}

// denseRefPanel runs tiles lo..hi-1 of sixteen weight rows: per tile and
// block of up to denseRefRB rows of x the accumulators start at +0, and each
// panel of denseKC values (densePack) adds its terms in order, up to six
// rows of x at a time (denseRef1..6), or eight on AVX-512 CPUs
// (denseRefZ1..8), so every output is the in-order loop's.
func denseRefPanel(dst, x []float32, w Vec, pk *densePacked, m, n, k, lo, hi int) {
	var panel [denseKC * 16]float32
	var acc [denseRefRB * 16]float32
	var a denseArgs
	a.astr = uintptr(4 * k)
	step := denseRefStep()
	for t := lo; t < hi; t++ {
		j0 := 16 * t
		cols := min(16, n-j0)
		for r0 := 0; r0 < m; r0 += denseRefRB {
			rows := min(denseRefRB, m-r0)
			clear(acc[:rows*16])
			for l0 := 0; l0 < k; l0 += denseKC {
				kc := min(denseKC, k-l0)
				densePack(panel[:], w, pk, j0, cols, l0, kc, k)
				a.p = unsafe.Pointer(&panel[0])
				a.n = kc
				for i := 0; i < rows; i += step {
					a.a = unsafe.Pointer(&x[(r0+i)*k+l0])
					a.out = unsafe.Pointer(&acc[16*i])
					denseRefRows(&a, min(step, rows-i))
				}
			}
			for i := range rows {
				copy(dst[(r0+i)*n+j0:(r0+i)*n+j0+cols], acc[16*i:16*i+cols])
			}
		}
	}
}

// denseRefFew is denseRefAVX's tile of sixteen weight rows from j0 for one
// or two rows of x: the kernel reads the rows in place (no panel) for the
// k/8 blocks of eight values (one row of 16-bit weights on AVX-512: the
// k/16 blocks of sixteen, denseRefZV1) and writes the sums to dst; the
// last terms are then added in order, a separate multiply and add each.
func denseRefFew(dst, x []float32, w Vec, m, n, k, j0 int) {
	base, es := denseBase(w)
	var a denseArgs
	a.w = unsafe.Add(base, j0*k*es)
	a.wstr = uintptr(k * es)
	a.a = unsafe.Pointer(&x[0])
	a.astr = uintptr(4 * k)
	a.out = unsafe.Pointer(&dst[j0])
	a.ostr = uintptr(4 * n)
	a.n = k / 8
	done := 8 * (k / 8)
	switch {
	case denseZOn && m == 1 && w.F32 == nil:
		a.n, done = k/16, 16*(k/16)
		if w.F16 {
			denseRefZV1F16(&a)
		} else {
			denseRefZV1BF16(&a)
		}
	case w.F32 != nil && m == 2:
		denseRefV2F32(&a)
	case w.F32 != nil:
		denseRefV1F32(&a)
	case w.F16 && m == 2:
		denseRefV2F16(&a)
	case w.F16:
		denseRefV1F16(&a)
	case m == 2:
		denseRefV2BF16(&a)
	default:
		denseRefV1BF16(&a)
	}
	for l := done; l < k; l++ {
		for i := range m {
			xv := x[i*k+l]
			d := dst[i*n+j0 : i*n+j0+16]
			for c := range d {
				d[c] += float32(xv * w.At((j0+c)*k+l)) // explicit conversion: no FMA
			}
		}
	}
}

// denseRefV1F32 writes to a.out[c], c < 16, the in-order float32 sum
// (a multiply, then an add, per term) of x[l]·W[c][l] over a.n blocks of
// eight values, x the row at a.a and W sixteen float32 rows from a.w,
// a.wstr bytes apart, read in place: each block of eight values of eight
// rows is transposed in registers, one output per lane.
//
//go:noescape
func denseRefV1F32(a *denseArgs)

// denseRefV2F32 is denseRefV1F32 for two rows of x (a.astr bytes apart),
// the second row's sixteen outputs a.ostr bytes after the first's.
//
//go:noescape
func denseRefV2F32(a *denseArgs)

// denseRefV1BF16 is denseRefV1F32 for bfloat16 weights.
//
//go:noescape
func denseRefV1BF16(a *denseArgs)

// denseRefV2BF16 is denseRefV2F32 for bfloat16 weights.
//
//go:noescape
func denseRefV2BF16(a *denseArgs)

// denseRefV1F16 is denseRefV1F32 for float16 weights (F16C).
//
//go:noescape
func denseRefV1F16(a *denseArgs)

// denseRefV2F16 is denseRefV2F32 for float16 weights (F16C).
//
//go:noescape
func denseRefV2F16(a *denseArgs)

// denseFastAVX is the fast precision on the AVX2 kernels: per unit of
// twelve weight rows (split across the pool), four rows of x at a time
// against three weight rows (denseFast4x3), the rows of x left over one or
// two at a time against four weight rows (denseFast1/2), the k mod 8 tail
// terms added after the kernels' sums; the n mod 4 last weight rows run a
// plain loop. Every kernel sums an output in the same order, so a row of x
// gets the same bits alone (decode) as among others (prefill, a verify
// window). Against denseFast2 alone, SmolLM2-360M f16's fast prefill of
// 511 tokens read 109/127/123 -> 162/141/161 tok/s (alternating runs, Zen
// 3, 2 threads).
func denseFastAVX(dst, x []float32, w Vec, m, n, k int) {
	base, es := denseBase(w)
	nb := k / 8
	k8 := 8 * nb
	dt := 0 // 0 float32, 1 bfloat16, 2 float16
	switch {
	case w.F32 != nil:
	case w.F16:
		dt = 2
	default:
		dt = 1
	}
	// The kernels take the first nc columns, in units of twelve (four
	// groups of three for denseFast4x3, three of four for denseFast1/2).
	nc := 4 * (n / 4)
	units := (nc + 11) / 12
	parallelFor(units, denseMinChunk(12, m, k), func(lo, hi int) {
		var a denseArgs
		a.wstr = uintptr(k * es)
		a.astr = uintptr(4 * k)
		a.ostr = uintptr(4 * n)
		a.n = nb
		for r0 := 0; r0 < m; r0 += denseRB {
			rows := min(denseRB, m-r0)
			quads := rows &^ 3 // rows taken four at a time by denseFast4x3
			for u := lo; u < hi; u++ {
				j0, j1 := 12*u, min(12*u+12, nc)
				for i := r0; i < r0+quads; i += 4 {
					j := j0
					for ; j+3 <= j1; j += 3 {
						a.w = unsafe.Add(base, j*k*es)
						a.a = unsafe.Pointer(&x[i*k])
						a.out = unsafe.Pointer(&dst[i*n+j])
						denseFast4x3Call(&a, dt)
					}
					if j < j1 { // one or two columns left: their group of four again (the same bits)
						a.w = unsafe.Add(base, (j1-4)*k*es)
						for r := i; r < i+4; r += 2 {
							a.a = unsafe.Pointer(&x[r*k])
							a.out = unsafe.Pointer(&dst[r*n+j1-4])
							denseFastCall(&a, dt, true)
						}
					}
				}
				for j := j0; j < j1; j += 4 {
					a.w = unsafe.Add(base, j*k*es)
					for i := r0 + quads; i < r0+rows; i += 2 {
						a.a = unsafe.Pointer(&x[i*k])
						a.out = unsafe.Pointer(&dst[i*n+j])
						denseFastCall(&a, dt, i+1 < r0+rows)
					}
				}
				if k8 < k { // the last k mod 8 values, in order
					for i := r0; i < r0+rows; i++ {
						for j := j0; j < j1; j++ {
							s := dst[i*n+j]
							for l := k8; l < k; l++ {
								s += x[i*k+l] * w.At(j*k+l)
							}
							dst[i*n+j] = s
						}
					}
				}
			}
		}
	})
	for j := nc; j < n; j++ {
		for i := range m {
			var s float32
			for l := range k {
				s += x[i*k+l] * w.At(j*k+l)
			}
			dst[i*n+j] = s
		}
	}
}

// denseFast4x3Call runs denseFast4x3 of weight dtype dt (0 float32, 1
// bfloat16, 2 float16).
func denseFast4x3Call(a *denseArgs, dt int) {
	switch dt {
	case 0:
		denseFast4x3F32(a)
	case 1:
		denseFast4x3BF16(a)
	default:
		denseFast4x3F16(a)
	}
}

// denseFastCall runs the fast kernel of weight dtype dt (0 float32, 1
// bfloat16, 2 float16) on one or two rows of x, by direct calls (a function
// value would move a to the heap).
func denseFastCall(a *denseArgs, dt int, two bool) {
	switch {
	case dt == 0 && two:
		denseFast2F32(a)
	case dt == 0:
		denseFast1F32(a)
	case dt == 1 && two:
		denseFast2BF16(a)
	case dt == 1:
		denseFast1BF16(a)
	case two:
		denseFast2F16(a)
	default:
		denseFast1F16(a)
	}
}

// denseNNAsm sets dst[i·n+j] = Σ_l a[i·k+l]·b[l·n+j] for a [m, k] and b
// [k, n] row-major float32, accumulated in order over l in float32, a
// separate multiply and add per term (the plain k-outer loop's bits), on
// the reference kernels: per tile of sixteen columns of b (zero past n) and
// block of up to denseRB rows of a, panels of denseKC rows of b copied as
// they stand, added in order by denseRef1..4. It reports false when the
// kernels do not cover the CPU.
func denseNNAsm(dst, a, b []float32, m, n, k int) bool {
	if !denseOn || !denseAVX {
		return false
	}
	tiles, blocks := (n+15)/16, (m+denseRB-1)/denseRB
	parallelFor(tiles*blocks, max(1, 65536/max(1, 16*denseRB*k)), func(lo, hi int) {
		var panel [denseKC * 16]float32
		var acc [denseRB * 16]float32
		var d denseArgs
		d.astr = uintptr(4 * k)
		for u := lo; u < hi; u++ {
			j0, r0 := 16*(u%tiles), denseRB*(u/tiles)
			cols, rows := min(16, n-j0), min(denseRB, m-r0)
			clear(acc[:rows*16])
			for l0 := 0; l0 < k; l0 += denseKC {
				kc := min(denseKC, k-l0)
				for l := range kc {
					pr := panel[16*l : 16*l+16]
					copy(pr, b[(l0+l)*n+j0:(l0+l)*n+j0+cols])
					clear(pr[cols:])
				}
				d.p = unsafe.Pointer(&panel[0])
				d.n = kc
				for i := 0; i < rows; i += 4 {
					d.a = unsafe.Pointer(&a[(r0+i)*k+l0])
					d.out = unsafe.Pointer(&acc[16*i])
					switch min(4, rows-i) {
					case 1:
						denseRef1(&d)
					case 2:
						denseRef2(&d)
					case 3:
						denseRef3(&d)
					default:
						denseRef4(&d)
					}
				}
			}
			for i := range rows {
				copy(dst[(r0+i)*n+j0:(r0+i)*n+j0+cols], acc[16*i:16*i+cols])
			}
		}
	})
	return true
}
