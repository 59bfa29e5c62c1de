package backendtest

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// The shaping ops move values without arithmetic: every result must equal
// the reference bit for bit (the sign of zero and NaN kept), in every dtype.
var shapingTypes = []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.I32, tensor.Bool, tensor.U8}

// shapingCase runs fn for cases random cases of every shaping dtype inside Do.
func shapingCase(t *testing.T, b backend.Backend, op string, fn func(g *gen, dt tensor.DType, name string)) {
	inDo(t, b, func() {
		for _, dt := range shapingTypes {
			g := newGen(caseName(op, dt))
			for i := range cases {
				fn(g, dt, caseName(op, dt, i))
			}
		}
	})
}

func checkExact(t *testing.T, b backend.Backend, name string, got backend.Array, dt tensor.DType, want nd) {
	t.Helper()
	compare(t, name, host(t, b, got), dt, want, budget(t, "exact", dt), true, nil)
}

// Reshape to a random shape of the same size, one dimension -1 at times.
func testReshape(t *testing.T, b backend.Backend) {
	shapingCase(t, b, "reshape", func(g *gen, dt tensor.DType, name string) {
		shape := g.anyShape()
		x, xr := g.input(b, dt, shape, g.values(dt, shape.Size(), 2))
		// The new shape: the size's factors in a random order, with 1s.
		n := shape.Size()
		var dims []int
		if n == 0 {
			dims = []int{0, 1 + g.r.IntN(3)}
		} else {
			for m := n; m > 1; {
				f := 2
				for m%f != 0 {
					f++
				}
				dims = append(dims, f)
				m /= f
			}
			g.r.Shuffle(len(dims), func(i, j int) { dims[i], dims[j] = dims[j], dims[i] })
			if g.r.IntN(2) == 0 {
				dims = append(dims, 1)
			}
		}
		want := nd{tensor.Shape(dims).Clone(), xr.v}
		arg := append([]int{}, dims...)
		if len(arg) > 0 && n > 0 && g.r.IntN(2) == 0 {
			arg[g.r.IntN(len(arg))] = -1
		}
		checkExact(t, b, name, b.Reshape(x, arg...), dt, want)
	})
}

// Transpose by a random permutation of the axes.
func testTranspose(t *testing.T, b backend.Backend) {
	shapingCase(t, b, "transpose", func(g *gen, dt tensor.DType, name string) {
		shape := g.anyShape()
		x, xr := g.input(b, dt, shape, g.values(dt, shape.Size(), 2))
		perm := g.r.Perm(len(shape))
		checkExact(t, b, name, b.Transpose(x, perm...), dt, transposeND(xr, perm))
	})
}

// randomRange returns start, stop with 0 <= start <= stop <= d.
func (g *gen) randomRange(d int) (int, int) {
	a, c := g.r.IntN(d+1), g.r.IntN(d+1)
	return min(a, c), max(a, c)
}

// Slice on every axis, empty ranges included; slices of slices.
func testSlice(t *testing.T, b backend.Backend) {
	shapingCase(t, b, "slice", func(g *gen, dt tensor.DType, name string) {
		shape := g.anyShape()
		x, xr := g.input(b, dt, shape, g.values(dt, shape.Size(), 2))
		start, stop := make([]int, len(shape)), make([]int, len(shape))
		for i, d := range shape {
			start[i], stop[i] = g.randomRange(d)
		}
		checkExact(t, b, name, b.Slice(x, start, stop), dt, sliceND(xr, start, stop))
	})
}

// SliceUpdate writes src into a copy of dst at start.
func testSliceUpdate(t *testing.T, b backend.Backend) {
	shapingCase(t, b, "sliceupdate", func(g *gen, dt tensor.DType, name string) {
		shape := g.anyShape()
		dst, dr := g.input(b, dt, shape, g.values(dt, shape.Size(), 2))
		start, ss := make([]int, len(shape)), make(tensor.Shape, len(shape))
		for i, d := range shape {
			lo, hi := g.randomRange(d)
			start[i], ss[i] = lo, hi-lo
		}
		src, sr := g.input(b, dt, ss, g.values(dt, ss.Size(), 2))
		want := nd{dr.shape, append([]float64{}, dr.v...)}
		setSlice(want, start, sr)
		checkExact(t, b, name, b.SliceUpdate(dst, src, start), dt, want)
	})
}

// backend.SliceUpdateRows (through the backend's RowUpdater where it has
// one): row r of src written into the r-th array at a random index of a
// random axis, every row exactly as SliceUpdate writes it.
func testSliceUpdateRows(t *testing.T, b backend.Backend) {
	shapingCase(t, b, "sliceupdaterows", func(g *gen, dt tensor.DType, name string) {
		B := 1 + g.r.IntN(4)
		shape := append(tensor.Shape{1}, g.shape(1+g.r.IntN(3), 1, 5)...) // each row's array
		axis := 1 + g.r.IntN(len(shape)-1)
		ss := shape.Clone() // src: B rows of a region of shape's
		ss[0] = B
		ss[axis] = 1 + g.r.IntN(shape[axis])
		src, sr := g.input(b, dt, ss, g.values(dt, ss.Size(), 2))
		dsts, wants := make([]backend.Array, B), make([]nd, B)
		at := make([]int, B)
		rowSize := ss.Size() / B
		rs := ss.Clone()
		rs[0] = 1
		for r := range B {
			d, dr := g.input(b, dt, shape, g.values(dt, shape.Size(), 2))
			dsts[r] = d
			at[r] = g.r.IntN(shape[axis] - ss[axis] + 1)
			wants[r] = nd{dr.shape, append([]float64{}, dr.v...)}
			start := make([]int, len(shape))
			start[axis] = at[r]
			setSlice(wants[r], start, nd{rs, sr.v[r*rowSize : (r+1)*rowSize]})
		}
		for r, got := range backend.SliceUpdateRows(b, dsts, src, axis, at) {
			checkExact(t, b, caseName(name, "row", r), got, dt, wants[r])
		}
	})
}

// Concatenate one to four arrays along a random axis (negative at times),
// parts of size 0 included.
func testConcatenate(t *testing.T, b backend.Backend) {
	shapingCase(t, b, "concatenate", func(g *gen, dt tensor.DType, name string) {
		shape := g.shape(1+g.r.IntN(3), 0, 4)
		axis := g.r.IntN(len(shape))
		n := 1 + g.r.IntN(4)
		xs := make([]backend.Array, n)
		parts := make([]nd, n)
		total := 0
		for i := range xs {
			s := shape.Clone()
			s[axis] = g.r.IntN(4)
			total += s[axis]
			xs[i], parts[i] = g.input(b, dt, s, g.values(dt, s.Size(), 2))
		}
		ws := shape.Clone()
		ws[axis] = total
		want := nd{ws, make([]float64, ws.Size())}
		start := make([]int, len(ws))
		for _, p := range parts {
			setSlice(want, start, p)
			start[axis] += p.shape[axis]
		}
		arg := axis
		if g.r.IntN(2) == 0 {
			arg -= len(shape)
		}
		checkExact(t, b, name, b.Concatenate(arg, xs...), dt, want)
	})
}

// Take whole slices along a random axis at int32 or uint32 indices of rank
// 0 to 2 (empty index arrays included).
func testTake(t *testing.T, b backend.Backend) {
	shapingCase(t, b, "take", func(g *gen, dt tensor.DType, name string) {
		shape := g.shape(1+g.r.IntN(3), 1, 5)
		x, xr := g.input(b, dt, shape, g.values(dt, shape.Size(), 2))
		axis := g.r.IntN(len(shape))
		is := g.shape(g.r.IntN(3), 0, 4)
		it := tensor.I32
		if g.r.IntN(2) == 0 {
			it = tensor.U32
		}
		idx, ir := g.input(b, it, is, g.ints(is.Size(), 0, shape[axis]-1))
		ws := append(append(append(tensor.Shape{}, shape[:axis]...), is...), shape[axis+1:]...)
		want := nd{ws, make([]float64, ws.Size())}
		xs := strides(shape)
		o := make([]int, len(ws))
		for k := range want.v {
			unravel(k, ws, o)
			off := 0
			for i := 0; i < axis; i++ {
				off += o[i] * xs[i]
			}
			iflat := 0
			for i := range is {
				iflat = iflat*is[i] + o[axis+i]
			}
			off += int(ir.v[iflat]) * xs[axis]
			for i := axis + 1; i < len(shape); i++ {
				off += o[len(is)+i-1] * xs[i]
			}
			want.v[k] = xr.v[off]
		}
		arg := axis
		if g.r.IntN(2) == 0 {
			arg -= len(shape)
		}
		checkExact(t, b, name, b.Take(x, idx, arg), dt, want)
	})
}
