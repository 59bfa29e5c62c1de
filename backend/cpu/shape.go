package cpu

import (
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Every shaping op copies into fresh storage (no op returns a view), so
// that SliceUpdate can reuse the storage of its dst.

// normAxis resolves a possibly negative axis of an n-dimensional array.
func normAxis(axis, n int) (int, bool) {
	if axis < 0 {
		axis += n
	}
	return axis, axis >= 0 && axis < n
}

// copyRegion copies one element of es bytes for every index i of shape:
// dst[i·dSt] ← src[i·sSt] (strides in elements; dst and src start at the
// region's first element). Trailing axes contiguous in both are copied as
// one block.
func copyRegion(dst []byte, dSt []int, src []byte, sSt []int, shape tensor.Shape, es int) {
	if shape.Size() == 0 {
		return
	}
	t, block := len(shape), 1
	for t > 0 && dSt[t-1] == block && sSt[t-1] == block {
		t--
		block *= shape[t]
	}
	nb := block * es
	if t == 0 {
		copy(dst[:nb], src[:nb])
		return
	}
	outer := shape[:t]
	idx := make([]int, t)
	do, so := 0, 0
	for range outer.Size() {
		copy(dst[do*es:do*es+nb], src[so*es:so*es+nb])
		for ax := t - 1; ax >= 0; ax-- {
			idx[ax]++
			do += dSt[ax]
			so += sSt[ax]
			if idx[ax] < outer[ax] {
				break
			}
			do -= dSt[ax] * outer[ax]
			so -= sSt[ax] * outer[ax]
			idx[ax] = 0
		}
	}
}

// Reshape gives x a new shape of the same size; one dimension may be -1.
func (b *Backend) Reshape(x backend.Array, shape ...int) backend.Array {
	a := b.use1("Reshape", x)
	out := make(tensor.Shape, len(shape))
	infer, known := -1, 1
	for i, d := range shape {
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 0:
			panic(backend.Errorf("Reshape", []backend.Array{x}, "bad target shape %v (one -1 allowed, no other negative)", shape))
		default:
			out[i] = d
			known *= d
		}
	}
	n := a.shape.Size()
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			panic(backend.Errorf("Reshape", []backend.Array{x}, "cannot infer -1 in %v for %d elements", shape, n))
		}
		out[infer] = n / known
		known *= out[infer]
	}
	if known != n {
		panic(backend.Errorf("Reshape", []backend.Array{x}, "target shape %v has %d elements, want %d", shape, known, n))
	}
	d := a.data.Clone()
	d.Shape = out
	return b.dense(d)
}

// Transpose permutes the axes of x (output axis i is input axis axes[i]);
// no axes reverses them, as MLX does.
func (b *Backend) Transpose(x backend.Array, axes ...int) backend.Array {
	a := b.use1("Transpose", x)
	n := len(a.shape)
	if len(axes) == 0 {
		for i := n - 1; i >= 0; i-- {
			axes = append(axes, i)
		}
	}
	if len(axes) != n {
		panic(backend.Errorf("Transpose", []backend.Array{x}, "axes %v for %d dimensions", axes, n))
	}
	seen := make([]bool, n)
	inSt := strides(a.shape)
	shape := make(tensor.Shape, n)
	srcSt := make([]int, n)
	for i, ax := range axes {
		ax, ok := normAxis(ax, n)
		if !ok || seen[ax] {
			panic(backend.Errorf("Transpose", []backend.Array{x}, "axes %v are not a permutation of %d axes", axes, n))
		}
		seen[ax] = true
		shape[i] = a.shape[ax]
		srcSt[i] = inSt[ax]
	}
	out := tensor.New(a.dtype, shape)
	copyRegion(out.Data, strides(shape), a.data.Data, srcSt, shape, a.dtype.Size())
	return b.dense(out)
}

// sliceBounds resolves start and stop (negative values count from the end)
// and checks 0 <= start <= stop <= dim on every axis.
func sliceBounds(shape tensor.Shape, start, stop []int) (lo, hi []int, err error) {
	if len(start) != len(shape) || len(stop) != len(shape) {
		return nil, nil, fmt.Errorf("start %v and stop %v need one entry per axis (%d)", start, stop, len(shape))
	}
	lo, hi = make([]int, len(shape)), make([]int, len(shape))
	for i, d := range shape {
		lo[i], hi[i] = start[i], stop[i]
		if lo[i] < 0 {
			lo[i] += d
		}
		if hi[i] < 0 {
			hi[i] += d
		}
		if lo[i] < 0 || lo[i] > hi[i] || hi[i] > d {
			return nil, nil, fmt.Errorf("axis %d: range [%d:%d] outside [0:%d]", i, start[i], stop[i], d)
		}
	}
	return lo, hi, nil
}

// offset is the flat element index of idx in an array with strides st.
func offset(idx, st []int) int {
	o := 0
	for i := range idx {
		o += idx[i] * st[i]
	}
	return o
}

// Slice takes x[start[i]:stop[i]] on every axis (step 1). Negative bounds
// count from the end; out-of-range bounds panic (no clamping).
func (b *Backend) Slice(x backend.Array, start, stop []int) backend.Array {
	a := b.use1("Slice", x)
	lo, hi, err := sliceBounds(a.shape, start, stop)
	if err != nil {
		panic(backend.Errorf("Slice", []backend.Array{x}, "%v", err))
	}
	shape := make(tensor.Shape, len(lo))
	for i := range lo {
		shape[i] = hi[i] - lo[i]
	}
	out := tensor.New(a.dtype, shape)
	es := a.dtype.Size()
	inSt := strides(a.shape)
	if shape.Size() > 0 {
		copyRegion(out.Data, strides(shape), a.data.Data[offset(lo, inSt)*es:], inSt, shape, es)
	}
	return b.dense(out)
}

// SliceUpdate returns dst with src (converted to dst's dtype, shape padded
// with leading 1s) written at start. When dst owns its storage (it was not
// made by Borrow) and src is not dst, the result takes over that storage
// and dst is released: using dst afterwards panics, as the contract
// forbids it. Otherwise dst is copied and stays valid.
func (b *Backend) SliceUpdate(dst, src backend.Array, start []int) backend.Array {
	args := []backend.Array{dst, src}
	as := b.use("SliceUpdate", args...)
	d, s := as[0], as[1]
	if len(s.shape) > len(d.shape) {
		panic(backend.Errorf("SliceUpdate", args, "src has more dimensions than dst"))
	}
	region := make(tensor.Shape, len(d.shape))
	for i := range region {
		region[i] = 1
	}
	copy(region[len(d.shape)-len(s.shape):], s.shape)
	stop := make([]int, len(region))
	for i := range stop {
		if i < len(start) {
			stop[i] = start[i] + region[i]
			if start[i] < 0 {
				stop[i] += d.shape[i]
			}
		}
	}
	lo, _, err := sliceBounds(d.shape, start, stop)
	if err != nil {
		panic(backend.Errorf("SliceUpdate", args, "%v", err))
	}
	sd := converted(s, d.dtype)
	var out *tensor.Dense
	if !d.borrowed && d != s {
		out = d.data
		b.release(d)
	} else {
		out = d.data.Clone()
	}
	es := d.dtype.Size()
	outSt := strides(d.shape)
	if region.Size() > 0 {
		copyRegion(out.Data[offset(lo, outSt)*es:], outSt, sd.Data, strides(region), region, es)
	}
	return b.dense(out)
}

// Concatenate joins xs along axis. Their dtypes are promoted together;
// every other dimension must agree.
func (b *Backend) Concatenate(axis int, xs ...backend.Array) backend.Array {
	as := b.use("Concatenate", xs...)
	if len(as) == 0 {
		panic(&backend.OpError{Op: "Concatenate", Err: fmt.Errorf("no arrays")})
	}
	n := len(as[0].shape)
	ax, ok := normAxis(axis, n)
	if !ok {
		panic(backend.Errorf("Concatenate", xs, "axis %d out of range for %d dimensions", axis, n))
	}
	shape := as[0].shape.Clone()
	shape[ax] = 0
	dt := as[0].dtype
	for _, a := range as {
		if len(a.shape) != n {
			panic(backend.Errorf("Concatenate", xs, "dimension counts differ"))
		}
		for i := range a.shape {
			if i != ax && a.shape[i] != shape[i] {
				panic(backend.Errorf("Concatenate", xs, "axis %d differs (%d vs %d)", i, a.shape[i], shape[i]))
			}
		}
		shape[ax] += a.shape[ax]
		dt = backend.PromoteTypes(dt, a.dtype)
	}
	out := tensor.New(dt, shape)
	es := dt.Size()
	outSt := strides(shape)
	at := 0
	for _, a := range as {
		if a.shape.Size() > 0 {
			copyRegion(out.Data[at*outSt[ax]*es:], outSt, converted(a, dt).Data, strides(a.shape), a.shape, es)
		}
		at += a.shape[ax]
	}
	return b.dense(out)
}

// Take gathers whole slices of x along axis at integer indices of any shape
// and integer dtype: the result's shape is x's with axis replaced by the
// indices' shape. Negative indices count from the end (as MLX's gather);
// out-of-range indices panic. Works for every dtype, packed uint32
// quantized weights included (a quantized embedding takes rows of W,
// Scales and Biases).
func (b *Backend) Take(x, indices backend.Array, axis int) backend.Array {
	args := []backend.Array{x, indices}
	as := b.use("Take", args...)
	a, ia := as[0], as[1]
	ax, ok := normAxis(axis, len(a.shape))
	if !ok {
		panic(backend.Errorf("Take", args, "axis %d out of range for %d dimensions", axis, len(a.shape)))
	}
	if ia.dtype.IsFloat() || ia.dtype == tensor.Bool {
		panic(backend.Errorf("Take", args, "indices must have an integer dtype"))
	}
	dim := a.shape[ax]
	idx := intsAs(ia, ia.dtype)
	pos := make([]int, len(idx))
	for i, u := range idx {
		v := int64(u)
		if !isSigned(ia.dtype) && u > uint64(dim) {
			v = int64(dim) // out of range either way
		}
		if v < 0 {
			v += int64(dim)
		}
		if v < 0 || v >= int64(dim) {
			panic(backend.Errorf("Take", args, "index %d (at %d) out of range for axis %d of size %d", int64(u), i, ax, dim))
		}
		pos[i] = int(v)
	}
	shape := slices.Concat(a.shape[:ax], ia.shape, a.shape[ax+1:])
	out := tensor.New(a.dtype, shape)
	es := a.dtype.Size()
	inner := tensor.Shape(a.shape[ax+1:]).Size() * es
	outer := tensor.Shape(a.shape[:ax]).Size()
	src := a.data.Data
	k := 0
	for o := range outer {
		base := o * dim * inner
		for _, p := range pos {
			copy(out.Data[k:k+inner], src[base+p*inner:base+(p+1)*inner])
			k += inner
		}
	}
	return b.dense(out)
}
