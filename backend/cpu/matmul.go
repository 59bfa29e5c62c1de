package cpu

import (
	"slices"
	"sync"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// Matmul multiplies the last two axes of a [..., M, K] and b [..., K, N],
// broadcasting the batch axes (mx.matmul). A 1-D a is a row [1, K] and a 1-D
// b a column [K, 1], and that axis is dropped from the result. Both inputs
// are converted to their promoted dtype, which must be a float type. Each
// output is Σ_k a[m,k]·b[k,n] accumulated in order over k in float32
// (float64 for F64 and in high precision) and rounded once to the dtype.
// Output rows are split across the backend's worker goroutines; the result
// is identical to the single-goroutine matmulRef. A b that is the
// transposed view of a row-major matrix W (Matmul(x, Transpose(W)), as
// nn.Dense and the tied head compute) is read in place (matmulNT), in the
// same order, without materialising Wᵀ; in Precision "fast" that product
// may fuse and reorder its sums, and take 16-bit weights and x in bfloat16
// on AVX512_BF16 (kernel.DenseFastBoundW).
func (b *Backend) Matmul(x, y backend.Array) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Matmul", traced, matmulVJP, x, y) }()
	}
	xa, ya := b.use2("Matmul", x, y)
	p, err := planMatmul(xa, ya)
	if err != "" {
		panic(backend.Errorf("Matmul", []backend.Array{x, y}, "%s", err))
	}
	defer b.freeTmps()
	if b.wide(p.dt) {
		dst := make([]float64, p.outShape.Size())
		matmulPar(dst, b.f64In(xa, p.dt), b.f64In(ya, p.dt), p, b.threads)
		return b.valuesF64(p.dt, p.outShape, dst)
	}
	dst := b.pool.getF32(p.outShape.Size())
	if w, ok := b.transposedRows(ya, p); ok {
		matmulNT(dst, b.f32In(xa, p.dt), w, b.denseSlot(ya, w, p.n, p.k), p, b.fast)
	} else {
		matmulNN(dst, b.f32In(xa, p.dt), b.f32In(ya, p.dt), p)
	}
	roundTo(p.dt, dst)
	return b.valuesOut(p.dt, p.outShape, dst)
}

// transposedRows reports whether y is a 2-D [K, N] transposed view of a
// row-major [N, K] matrix W (nn.Dense's Matmul(x, Transpose(W))) whose
// values are exact in the compute dtype, and returns W's storage as a
// kernel.Vec (float32 values, or bf16/f16 bits read in place).
func (b *Backend) transposedRows(y *Array, p mmPlan) (kernel.Vec, bool) {
	if len(y.shape) != 2 || y.strides == nil || y.strides[0] != 1 || y.strides[1] != p.k || !exactIn(y.dtype, p.dt) {
		return kernel.Vec{}, false
	}
	n := p.k * p.n
	switch {
	case y.buf.values:
		return kernel.F32Vec(y.buf.f32[y.off : y.off+n]), true
	case y.dtype == tensor.BF16:
		return kernel.BF16Vec(u16View(y.buf.raw)[y.off : y.off+n]), true
	case y.dtype == tensor.F16:
		return kernel.F16Vec(u16View(y.buf.raw)[y.off : y.off+n]), true
	}
	return kernel.Vec{}, false
}

// matmulNT computes what matmulPar computes for b = Wᵀ, W [n, k] row-major
// in w: dst[i, j] = Σ_l a[i, l]·W[j, l], without materialising Wᵀ, on
// kernel.DenseMatmulT (vector kernels where the CPU has them, split across
// the kernel package's worker pool; W read in place, or from its packed
// copy in slot when not nil: kernel.DenseMatmulTPacked). In the reference
// precision (fast false) every output is accumulated in order over l in
// float32, a separate multiply and add per term: the same float32
// operations in the same order as matmulRef, so the same bits. With fast
// true (Precision "fast") the sums may be fused and reordered, within
// kernel.DenseFastBoundW. The rows of a are the batches' rows (b is not
// batched, so they are contiguous).
func matmulNT(dst, a []float32, w kernel.Vec, slot *kernel.PackSlot, p mmPlan, fast bool) {
	rows := p.batch.Size() * p.m
	if rows == 0 || p.n == 0 {
		return
	}
	for bi, ab := range p.aBatch {
		if ab != bi { // never for a 2-D b; kept so a future caller cannot misread a
			x := make([]float32, rows*p.k)
			for r := range rows {
				copy(x[r*p.k:(r+1)*p.k], a[p.aBatch[r/p.m]*p.aMatrix+(r%p.m)*p.k:][:p.k])
			}
			a = x
			break
		}
	}
	kernel.DenseMatmulTPacked(dst, a, w, slot, rows, p.n, p.k, fast)
}

// matmulNN computes what matmulPar computes in float32, the same
// operations in the same order for every output (so the same bits), one
// batch's matrices at a time on kernel.MatmulNN (the dense reference
// kernels where the CPU has them, split across the kernel package's worker
// pool).
func matmulNN(dst, a, b []float32, p mmPlan) {
	for bi := range p.batch.Size() {
		kernel.MatmulNN(dst[bi*p.m*p.n:(bi+1)*p.m*p.n], a[p.aBatch[bi]*p.aMatrix:][:p.aMatrix],
			b[p.bBatch[bi]*p.bMatrix:][:p.bMatrix], p.m, p.n, p.k)
	}
}

// mmPlan is the shape bookkeeping of one Matmul.
type mmPlan struct {
	dt               tensor.DType
	m, k, n          int
	batch            tensor.Shape // broadcast batch shape
	aBatch, bBatch   []int        // matrix index of each output batch in a and b
	outShape         tensor.Shape
	aMatrix, bMatrix int // elements per matrix
}

func planMatmul(a, b *Array) (mmPlan, string) {
	var p mmPlan
	p.dt = backend.PromoteTypes(a.dtype, b.dtype)
	if !p.dt.IsFloat() {
		return p, "only float dtypes are supported"
	}
	as, bs := a.shape.Clone(), b.shape.Clone()
	if len(as) == 0 || len(bs) == 0 {
		return p, "scalars cannot be multiplied as matrices"
	}
	rowA, colB := len(as) == 1, len(bs) == 1
	if rowA {
		as = tensor.Shape{1, as[0]}
	}
	if colB {
		bs = tensor.Shape{bs[0], 1}
	}
	p.m, p.k, p.n = as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	if bs[len(bs)-2] != p.k {
		return p, "inner dimensions differ"
	}
	ab, bb := as[:len(as)-2], bs[:len(bs)-2]
	batch, ok := broadcastShapes(ab, bb)
	if !ok {
		return p, "batch dimensions do not broadcast"
	}
	p.batch = batch
	p.aMatrix, p.bMatrix = p.m*p.k, p.k*p.n
	nb := batch.Size()
	p.aBatch, p.bBatch = make([]int, nb), make([]int, nb)
	st := [][]int{bstrides(ab, batch), bstrides(bb, batch)}
	walk(batch, st, func(i int, o []int) { p.aBatch[i], p.bBatch[i] = o[0], o[1] })
	out := slices.Clone(batch)
	if !rowA {
		out = append(out, p.m)
	}
	if !colB {
		out = append(out, p.n)
	}
	p.outShape = out
	return p, ""
}

// matmulRef is the plain loop: for every batch, row m and column n,
// dst = Σ_k a[m,k]·b[k,n] accumulated in order in T.
func matmulRef[T float32 | float64](dst, a, b []T, p mmPlan) {
	for bi := range p.batch.Size() {
		am := a[p.aBatch[bi]*p.aMatrix:]
		bm := b[p.bBatch[bi]*p.bMatrix:]
		dm := dst[bi*p.m*p.n:]
		for i := range p.m {
			for j := range p.n {
				var s T
				for l := range p.k {
					s += T(am[i*p.k+l] * bm[l*p.n+j])
				}
				dm[i*p.n+j] = s
			}
		}
	}
}

// matmulPar computes the same sums as matmulRef, in the same order for every
// output element, with output rows (over all batches) split across up to
// threads goroutines. Each row is accumulated k-outer, n-inner, so that b
// is read along its rows.
func matmulPar[T float32 | float64](dst, a, b []T, p mmPlan, threads int) {
	rows := p.batch.Size() * p.m
	if rows == 0 || p.n == 0 {
		return
	}
	work := func(lo, hi int) {
		for r := lo; r < hi; r++ {
			bi, i := r/p.m, r%p.m
			arow := a[p.aBatch[bi]*p.aMatrix+i*p.k:][:p.k]
			bm := b[p.bBatch[bi]*p.bMatrix:]
			drow := dst[r*p.n:][:p.n]
			clear(drow)
			for l, av := range arow {
				brow := bm[l*p.n:][:p.n]
				for j, bv := range brow {
					drow[j] += T(av * bv) // explicit conversion: no FMA
				}
			}
		}
	}
	// At least ~64k multiply-adds per goroutine.
	minRows := max(1, 65536/max(1, p.k*p.n))
	workers := min(threads, (rows+minRows-1)/minRows)
	if workers <= 1 {
		work(0, rows)
		return
	}
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*rows/workers, (w+1)*rows/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(lo, hi)
		}()
	}
	wg.Wait()
}
