package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// iota6 is [[0 1 2] [3 4 5]].
func iota6(b *Backend, dt tensor.DType) backend.Array {
	return arr(b, dt, tensor.Shape{2, 3}, 0, 1, 2, 3, 4, 5)
}

func TestReshape(t *testing.T) {
	cases := []struct {
		shape []int
		want  tensor.Shape
	}{
		{[]int{3, 2}, tensor.Shape{3, 2}},
		{[]int{-1}, tensor.Shape{6}},
		{[]int{1, -1, 2}, tensor.Shape{1, 3, 2}},
	}
	for _, c := range cases {
		t.Run(name(c.shape), func(t *testing.T) {
			b := open(t)
			check(t, b, b.Reshape(iota6(b, tensor.F32), c.shape...), tensor.F32, c.want, 0, 1, 2, 3, 4, 5)
		})
	}
	for _, bad := range [][]int{{4, 2}, {-1, -1}, {-2, 3}, {4, -1}} {
		t.Run(name("bad", bad), func(t *testing.T) {
			b := open(t)
			opPanic(t, func() { b.Reshape(iota6(b, tensor.F32), bad...) })
		})
	}
}

func TestTranspose(t *testing.T) {
	b := open(t)
	// [[0 1 2] [3 4 5]]ᵀ = [[0 3] [1 4] [2 5]]
	check(t, b, b.Transpose(iota6(b, tensor.BF16)), tensor.BF16, tensor.Shape{3, 2}, 0, 3, 1, 4, 2, 5)
	check(t, b, b.Transpose(iota6(b, tensor.I32), 1, 0), tensor.I32, tensor.Shape{3, 2}, 0, 3, 1, 4, 2, 5)
	// [1,2,3] → axes (1, 0, 2) keeps the last axis: [2,1,3] with the same order
	x := b.Reshape(iota6(b, tensor.F32), 1, 2, 3)
	check(t, b, b.Transpose(x, 1, 0, 2), tensor.F32, tensor.Shape{2, 1, 3}, 0, 1, 2, 3, 4, 5)
	// [2,1,3] with axes (2, 0, 1) → [3,2,1]: out[k,i,0] = x[i,0,k]
	y := b.Reshape(iota6(b, tensor.F32), 2, 1, 3)
	check(t, b, b.Transpose(y, -1, 0, 1), tensor.F32, tensor.Shape{3, 2, 1}, 0, 3, 1, 4, 2, 5)
	opPanic(t, func() { b.Transpose(iota6(b, tensor.F32), 0, 0) })
	opPanic(t, func() { b.Transpose(iota6(b, tensor.F32), 0) })
}

func TestSlice(t *testing.T) {
	cases := []struct {
		start, stop []int
		shape       tensor.Shape
		want        []float64
	}{
		{[]int{0, 1}, []int{2, 3}, tensor.Shape{2, 2}, []float64{1, 2, 4, 5}},
		{[]int{1, 0}, []int{2, 3}, tensor.Shape{1, 3}, []float64{3, 4, 5}},
		{[]int{0, -1}, []int{2, 3}, tensor.Shape{2, 1}, []float64{2, 5}},
		{[]int{0, 1}, []int{2, 1}, tensor.Shape{2, 0}, nil},
	}
	for _, c := range cases {
		t.Run(name(c.start, c.stop), func(t *testing.T) {
			b := open(t)
			check(t, b, b.Slice(iota6(b, tensor.F16), c.start, c.stop), tensor.F16, c.shape, c.want...)
		})
	}
	b := open(t)
	opPanic(t, func() { b.Slice(iota6(b, tensor.F32), []int{0, 2}, []int{2, 4}) })
	opPanic(t, func() { b.Slice(iota6(b, tensor.F32), []int{0}, []int{2}) })
}

func TestSliceUpdate(t *testing.T) {
	b := open(t)
	dst := iota6(b, tensor.BF16)
	before := b.Stats()
	// write [[9] [8]] (f32, converted to bf16) into column 1
	src := arr(b, tensor.F32, tensor.Shape{2, 1}, 9, 8)
	out := b.SliceUpdate(dst, src, []int{0, 1})
	check(t, b, out, tensor.BF16, tensor.Shape{2, 3}, 0, 9, 2, 3, 8, 5)
	// dst was owned: its storage moved to out and dst is released.
	if !dst.(*Array).released() {
		t.Errorf("owned dst not released after SliceUpdate, want its storage reused")
	}
	if got := b.Stats(); got.LiveBytes != before.LiveBytes+8 {
		t.Errorf("live bytes: got %d, want %d (only src's 8 bytes added)", got.LiveBytes, before.LiveBytes+8)
	}
	opPanic(t, func() { b.Unary(backend.Exp, dst) })
	// src of lower rank broadcasts with leading 1s; negative start counts from the end
	out2 := b.SliceUpdate(out, arr(b, tensor.BF16, tensor.Shape{2}, 7, 7), []int{-1, 1})
	check(t, b, out2, tensor.BF16, tensor.Shape{2, 3}, 0, 9, 2, 3, 7, 7)
	opPanic(t, func() { b.SliceUpdate(out2, arr(b, tensor.BF16, tensor.Shape{2}, 1, 1), []int{0, 2}) })
}

// TestSliceUpdateRows holds SliceUpdateRows (backend.RowUpdater) to its
// composed definition, value for value: rows of a batch (a decode step's
// new keys, float32 values of each dtype, a strided view included) written
// into caches of zeros (raw storage) or of values, owned (written in
// place and returned itself) or with a live view (copied: the view keeps
// its values), on the slot axis and on the head axis.
func TestSliceUpdateRows(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, c := range []struct {
			name    string
			axis    int
			at      []int
			strided bool // src is a transposed view
			zeros   bool // the caches are Zeros (raw storage), else values
			shared  bool // a view of row 1's cache is live
			l       int  // positions a row (1 when 0)
			direct  bool // rowsInPlace writes every row (else the rows go one by one)
			host    bool // src is FromHost's (raw storage for 16-bit dtypes), else an op's result
		}{
			{name: "slots", axis: 2, at: []int{0, 3, 5}, zeros: true, direct: true},
			{name: "slots-values", axis: 2, at: []int{6, 0, 2}, direct: true},
			{name: "slots-strided", axis: 2, at: []int{1, 1, 4}, strided: true, zeros: true, l: 2},
			{name: "slots-host-src", axis: 2, at: []int{3, 1, 0}, zeros: true, host: true},
			{name: "slots-shared", axis: 2, at: []int{2, 7, 0}, zeros: true, shared: true},
			{name: "slots-prefill", axis: 2, at: []int{0, 5, 2}, zeros: true, l: 3, direct: true},
			{name: "slots-prefill-values", axis: 2, at: []int{4, 0, 1}, l: 4, direct: true},
			{name: "slots-to-the-end", axis: 2, at: []int{7, 6, 5}, zeros: true, l: 1, direct: true},
			{name: "heads", axis: 1, at: []int{0, 1, 1}, zeros: true},
		} {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				b := open(t)
				const B, H, D, S = 3, 2, 4, 8
				L := max(c.l, 1)
				var src backend.Array
				if c.strided {
					src = b.Transpose(randArray(b, 3, dt, B, L, H, D), 0, 2, 1, 3)
				} else {
					src = randArray(b, 3, dt, B, H, L, D)
				}
				if !c.host && !c.strided {
					// An op's result, as a model's keys and values are:
					// float32 values rounded to dt.
					src = b.AsType(randArray(b, 3, tensor.F32, B, H, L, D), dt)
				}
				if c.axis == 1 {
					src = b.Slice(src, []int{0, 0, 0, 0}, []int{B, 1, L, D})
				}
				caches := func(seed uint64) []backend.Array {
					out := make([]backend.Array, B)
					for r := range out {
						if c.zeros {
							out[r] = b.Zeros(tensor.Shape{1, H, S, D}, dt)
						} else {
							out[r] = randArray(b, seed+uint64(r), dt, 1, H, S, D)
						}
					}
					return out
				}
				got, composed := caches(10), caches(10)
				var view backend.Array
				var viewWant []float64
				if c.shared {
					view = b.Slice(got[1], []int{0, 0, 0, 0}, []int{1, H, S, D})
					viewWant = vals(t, b, view)
				}
				oldRow0, oldRow1 := got[0], got[1]
				want := c.direct || c.host && dt == tensor.F32 // FromHost keeps float32 as values
				if direct := rowsInPlaceFits(t, b, got, src, c.axis, c.at); direct != want {
					t.Errorf("rowsInPlace takes these rows: %v, want %v", direct, want)
				}
				got = b.SliceUpdateRows(got, src, c.axis, c.at)
				composed = backend.SliceUpdateRowsComposed(b, composed, src, c.axis, c.at)
				for r := range B {
					g, w := vals(t, b, got[r]), vals(t, b, composed[r])
					for i := range w {
						if math.Float64bits(g[i]) != math.Float64bits(w[i]) {
							t.Fatalf("row %d element %d: %v, composed %v", r, i, g[i], w[i])
						}
					}
				}
				if got[0] != oldRow0 || oldRow0.(*Array).released() {
					t.Errorf("row 0's owned cache came back as another array (or released), want it written in place and returned")
				}
				if c.shared && got[1] == oldRow1 {
					t.Errorf("row 1's cache, viewed elsewhere, was written in place, want a copy")
				}
				if c.shared {
					if g := vals(t, b, view); !slices.Equal(g, viewWant) {
						t.Errorf("a live view of row 1's cache changed: %v, was %v", g, viewWant)
					}
				}
			})
		}
	}
	b := open(t)
	src := b.Zeros(tensor.Shape{2, 1, 1, 4}, tensor.F32)
	dsts := func() []backend.Array {
		return []backend.Array{b.Zeros(tensor.Shape{1, 1, 4, 4}, tensor.F32), b.Zeros(tensor.Shape{1, 1, 4, 4}, tensor.F32)}
	}
	opPanic(t, func() { b.SliceUpdateRows(dsts()[:1], src, 2, []int{0}) }) // one array for two rows
	opPanic(t, func() { b.SliceUpdateRows(dsts(), src, 2, []int{0}) })     // one position
	opPanic(t, func() { b.SliceUpdateRows(dsts(), src, 4, []int{0, 0}) })  // no axis 4
	opPanic(t, func() { b.SliceUpdateRows(dsts(), src, 2, []int{0, 4}) })  // past the end
	twice := dsts()
	opPanic(t, func() { b.SliceUpdateRows([]backend.Array{twice[0], twice[0]}, src, 2, []int{0, 1}) }) // one array twice
}

func TestConcatenate(t *testing.T) {
	b := open(t)
	x := iota6(b, tensor.F32)
	y := arr(b, tensor.BF16, tensor.Shape{2, 1}, 6, 7)
	check(t, b, b.Concatenate(1, x, y), tensor.F32, tensor.Shape{2, 4}, 0, 1, 2, 6, 3, 4, 5, 7)
	check(t, b, b.Concatenate(-2, x, x), tensor.F32, tensor.Shape{4, 3}, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5)
	opPanic(t, func() { b.Concatenate(0, x, y) })
	opPanic(t, func() { b.Concatenate(0) })
}

func TestTake(t *testing.T) {
	cases := []struct {
		dt    tensor.DType
		idxDT tensor.DType
		idxSh tensor.Shape
		idx   []float64
		axis  int
		shape tensor.Shape
		want  []float64
	}{
		// rows 1, 0, 1 of [[0 1 2] [3 4 5]]
		{tensor.F32, tensor.I32, tensor.Shape{3}, []float64{1, 0, 1}, 0, tensor.Shape{3, 3}, []float64{3, 4, 5, 0, 1, 2, 3, 4, 5}},
		// 2-D indices along axis 1: [[2 0] [1 1]] → shape [2, 2, 2]; out[i,j,k] = x[i, idx[j,k]]
		{tensor.BF16, tensor.U32, tensor.Shape{2, 2}, []float64{2, 0, 1, 1}, 1, tensor.Shape{2, 2, 2}, []float64{2, 0, 1, 1, 5, 3, 4, 4}},
		// negative index counts from the end
		{tensor.I32, tensor.I64, tensor.Shape{1}, []float64{-1}, -1, tensor.Shape{2, 1}, []float64{2, 5}},
		// packed quantized rows are uint32
		{tensor.U32, tensor.U8, tensor.Shape{1}, []float64{1}, 0, tensor.Shape{1, 3}, []float64{3, 4, 5}},
		// a scalar index removes the axis
		{tensor.F32, tensor.I32, tensor.Shape{}, []float64{0}, 0, tensor.Shape{3}, []float64{0, 1, 2}},
	}
	for _, c := range cases {
		t.Run(name(c.dt, c.idxDT, c.idxSh, c.axis), func(t *testing.T) {
			b := open(t)
			out := b.Take(iota6(b, c.dt), arr(b, c.idxDT, c.idxSh, c.idx...), c.axis)
			check(t, b, out, c.dt, c.shape, c.want...)
		})
	}
	b := open(t)
	opPanic(t, func() { b.Take(iota6(b, tensor.F32), arr(b, tensor.I32, tensor.Shape{1}, 2), 0) })
	opPanic(t, func() { b.Take(iota6(b, tensor.F32), arr(b, tensor.F32, tensor.Shape{1}, 0), 0) })
}

// rowsInPlaceFits reports whether rowsInPlace would write dsts itself,
// without writing: on copies of the rows' arrays' headers and storage.
func rowsInPlaceFits(t *testing.T, b *Backend, dsts []backend.Array, src backend.Array, axis int, at []int) bool {
	t.Helper()
	s := src.(*Array)
	ds := make([]*Array, len(dsts))
	for r, d := range dsts {
		c := *d.(*Array)
		buf := *c.buf
		buf.f32, buf.raw = slices.Clone(buf.f32), slices.Clone(buf.raw)
		c.buf = &buf
		ds[r] = &c
	}
	return rowsInPlace(ds, s, axis, at)
}
