package kernel

import (
	"runtime"
	"unsafe"
)

// The fast precision's dense matmul on AMX-BF16 (asmAMXBF16: Intel Xeons
// since Sapphire Rapids). 16-bit weights are packed once, rounded to
// bfloat16 (float16 ones to nearest even, as the denseB kernels round them
// as they read), into the tile layout below; each call rounds the rows of
// x to bfloat16 and runs TDPBF16PS, which adds the exact products of
// bfloat16 pairs into float32 accumulators, one per output, a step of 32
// values of k at a time. Intel does not spell out the order and rounding
// of those additions, and no plain loop tried (in order, pairs first,
// exact blocks of 2 to 32 products rounded once, to nearest or toward
// zero) gave its bits on every output, so the tests hold it to the float64
// sum within DenseFastBoundW instead. Every output is computed alone from
// its own row of x and W, so a row gets the same bits whatever m is
// (decode, prefill, a batch, a verify window), which the tests check. A tile product does 16·16·32
// multiply-adds: from L2, one core ran 935 G a second in a throwaway C
// probe (Xeon, 2026-12-06) against about 125 G for VDPBF16PS, and one row
// of x read the packed weights at 170 GB/s, so decode is left to the
// memory's pace and prefill to everything around the matmul.
//
// Layout (denseAMX.v): the n output columns in groups of 64 (the last one
// padded with zero columns), each group's k values in steps of 32, each
// step four panels of sixteen columns, 1 KB each: 16 rows of pairs of
// values, row i holding values 2i and 2i+1 of the step for columns 0-15
// side by side (the B operand of TDPBF16PS). Value l of column j sits at
// ((g·steps + s)·4 + p)·512 + i·32 + c·2 + h with g = j/64, p = j%64/16,
// c = j%16, s = l/32, i = l%32/2, h = l%2: a group is one sequential
// stream.

// amxCols is the output columns of one kernel call; amxRows the rows of x.
const (
	amxCols = 64
	amxRows = 16
)

// denseAMX is a matrix of n rows of k values packed for amxDenseBF16.
type denseAMX struct {
	v    []uint16  // bfloat16 bits in the layout above
	mem  *freeOnce // frees v's memory (packArena)
	n, k int
}

// bytes is the memory p holds.
func (p *denseAMX) bytes() int64 { return 2 * int64(len(p.v)) }

// amxDenseArgs are amxDenseBF16's arguments (offsets fixed in
// dense_amx_amd64.s).
type amxDenseArgs struct {
	cfg   unsafe.Pointer // 0: the tile configuration (amxCfgs)
	x     unsafe.Pointer // 8: the first row of x, bfloat16
	xstr  uintptr        // 16: bytes between rows of x
	w     unsafe.Pointer // 24: the group's first step
	steps int            // 32: k/32
	out   unsafe.Pointer // 40: output row 0, column 0 of the group (float32)
	ostr  uintptr        // 48: bytes between output rows
}

// amxCfgs[m] is the tile configuration for m rows of x (1 to 16): palette
// 1; tmm0-tmm3 the accumulators and tmm4 x, m rows of 64 bytes; tmm5-tmm7
// the panels' tiles, 16 rows of 64 bytes.
var amxCfgs = func() (c [amxRows + 1][64]byte) {
	for m := 1; m <= amxRows; m++ {
		c[m][0] = 1
		for t := range 8 {
			c[m][16+2*t] = 64
			c[m][48+t] = byte(m)
			if t >= 5 {
				c[m][48+t] = 16
			}
		}
	}
	return c
}()

// denseAMXTakes reports whether the fast precision's packed dense matmul
// runs on AMX for weights like w with k values a row: the CPU has AMX-BF16
// (granted by the kernel), the weights are 16-bit and k is a multiple of 32.
func denseAMXTakes(w Vec, k int) bool {
	return asmAMXBF16 && w.F32 == nil && w.U16 != nil && k > 0 && k%32 == 0
}

// packDenseAMX rearranges the n×k 16-bit weights w into denseAMX's layout
// (in packArena's huge pages), or returns nil where denseAMXTakes is
// false. done (or nil) is told of each range of weight rows [r0, r1)
// copied, from the workers.
func packDenseAMX(w Vec, n, k int, done func(r0, r1 int)) *denseAMX {
	if n <= 0 || !denseAMXTakes(w, k) {
		return nil
	}
	need("packDenseAMX", "w", w.Len(), n*k)
	ng, steps := (n+amxCols-1)/amxCols, k/32
	raw, free := packArena.Alloc(2 * ng * amxCols * k)
	p := &denseAMX{mem: &freeOnce{free: free}, n: n, k: k}
	p.v = unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), ng*amxCols*k)
	runtime.AddCleanup(p, (*freeOnce).do, p.mem)
	parallelFor(ng, 1, func(lo, hi int) {
		f := make([]float32, k)
		b := make([]uint16, k)
		for g := lo; g < hi; g++ {
			for col := range amxCols {
				j := g*amxCols + col
				if j < n {
					src := w.U16[j*k : (j+1)*k]
					if w.F16 {
						f16ToFloat32s(f, src)
						float32sToBF16(b, f)
						src = b
					}
					amxScatter(p.v, src, g, col, steps)
				} else {
					clear(b)
					amxScatter(p.v, b, g, col, steps)
				}
			}
			if done != nil {
				done(g*amxCols, min(n, (g+1)*amxCols))
			}
		}
	})
	return p
}

// amxScatter writes the k bfloat16 values of column col of group g into
// the layout.
func amxScatter(v, row []uint16, g, col, steps int) {
	p, c := col/16, col%16
	for s := range steps {
		tile := v[((g*steps+s)*4+p)*512:]
		for i := range 16 {
			tile[i*32+c*2] = row[32*s+2*i]
			tile[i*32+c*2+1] = row[32*s+2*i+1]
		}
	}
}

// denseAMXRun sets dst[i·n+j] (m rows) to the products of the rows of x
// with the packed weights p: x rounded to bfloat16 once, then the groups
// of 64 columns split across the pool, each worker running its groups
// against blocks of sixteen rows of x (a group's tiles stay in L2 from one
// block to the next). A partial last group's outputs go through a scratch.
func denseAMXRun(dst, x []float32, p *denseAMX, m int) {
	n, k := p.n, p.k
	ws := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(ws)
	ws.xb16 = grow(ws.xb16, m*k)
	xb := ws.xb16[:m*k]
	Float32sToBF16(xb, x[:m*k])
	ng, steps := (n+amxCols-1)/amxCols, k/32
	parallelFor(ng, max(1, (1<<16)/(amxCols*m*k)), func(lo, hi int) {
		var tmp [amxRows * amxCols]float32
		a := amxDenseArgs{xstr: uintptr(2 * k), steps: steps}
		for g := lo; g < hi; g++ {
			a.w = unsafe.Pointer(&p.v[g*amxCols*k])
			c0 := g * amxCols
			cols := min(amxCols, n-c0)
			for r0 := 0; r0 < m; r0 += amxRows {
				rows := min(amxRows, m-r0)
				a.cfg = unsafe.Pointer(&amxCfgs[rows])
				a.x = unsafe.Pointer(&xb[r0*k])
				if cols == amxCols {
					a.out, a.ostr = unsafe.Pointer(&dst[r0*n+c0]), uintptr(4*n)
					amxDenseBF16(&a)
					continue
				}
				a.out, a.ostr = unsafe.Pointer(&tmp[0]), 4*amxCols
				amxDenseBF16(&a)
				for r := range rows {
					copy(dst[(r0+r)*n+c0:(r0+r)*n+c0+cols], tmp[r*amxCols:r*amxCols+cols])
				}
			}
		}
	})
}
