package cpu

import (
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// Reshape, Transpose and Slice return views of their input's storage;
// Concatenate and Take write new storage. SliceUpdate writes in place only
// into storage that no other live array views.

// normAxis resolves a possibly negative axis of an n-dimensional array.
func normAxis(axis, n int) (int, bool) {
	if axis < 0 {
		axis += n
	}
	return axis, axis >= 0 && axis < n
}

// Reshape gives x a new shape of the same size; one dimension may be -1.
// The result views x's storage; a non-contiguous x is copied first.
func (b *Backend) Reshape(x backend.Array, shape ...int) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Reshape", traced, reshapeVJP, x) }()
	}
	a := b.use1("Reshape", x)
	var outBuf [4]int
	out := tensor.Shape(outBuf[:0])
	infer, known := -1, 1
	for i, d := range shape {
		switch {
		case d == -1 && infer < 0:
			infer = i
			out = append(out, 0)
		case d < 0:
			panic(backend.Errorf("Reshape", []backend.Array{x}, "bad target shape %v (one -1 allowed, no other negative)", shape))
		default:
			out = append(out, d)
			known *= d
		}
	}
	n := a.size()
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
	if a.strides == nil {
		return b.newArray(a.dtype, out, a.buf, a.off, nil)
	}
	return b.newArray(a.dtype, out, b.contiguousBuf(a), 0, nil)
}

// Transpose permutes the axes of x (output axis i is input axis axes[i]);
// no axes reverses them, as MLX does. The result views x's storage.
func (b *Backend) Transpose(x backend.Array, axes ...int) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Transpose", traced, transposeVJP(axes), x) }()
	}
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
	var seenBuf [8]bool
	var shapeBuf, stBuf [4]int
	seen := seenBuf[:0]
	if n > len(seenBuf) {
		seen = make([]bool, n)
	} else {
		seen = seenBuf[:n]
	}
	inSt := stridesOf(a)
	shape := tensor.Shape(shapeBuf[:0])
	st := stBuf[:0]
	for _, ax := range axes {
		ax, ok := normAxis(ax, n)
		if !ok || seen[ax] {
			panic(backend.Errorf("Transpose", []backend.Array{x}, "axes %v are not a permutation of %d axes", axes, n))
		}
		seen[ax] = true
		shape = append(shape, a.shape[ax])
		st = append(st, inSt[ax])
	}
	return b.newArray(a.dtype, shape, a.buf, a.off, normStrides(shape, st))
}

// sliceBounds resolves start and stop (negative values count from the end)
// and checks 0 <= start <= stop <= dim on every axis.
// lo and hi are appended to the given slices (pass empty ones with room).
func sliceBounds(shape tensor.Shape, start, stop, lo, hi []int) ([]int, []int, error) {
	if len(start) != len(shape) || len(stop) != len(shape) {
		return nil, nil, fmt.Errorf("start %v and stop %v need one entry per axis (%d)", slices.Clone(start), slices.Clone(stop), len(shape))
	}
	for range shape {
		lo, hi = append(lo, 0), append(hi, 0)
	}
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
// count from the end; out-of-range bounds panic (no clamping). The result
// views x's storage.
func (b *Backend) Slice(x backend.Array, start, stop []int) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Slice", traced, sliceVJP(start), x) }()
	}
	a := b.use1("Slice", x)
	var loBuf, hiBuf [4]int
	lo, hi, err := sliceBounds(a.shape, start, stop, loBuf[:0], hiBuf[:0])
	if err != nil {
		panic(backend.Errorf("Slice", []backend.Array{x}, "%v", err))
	}
	var shapeBuf [4]int
	shape := tensor.Shape(shapeBuf[:0])
	for i := range lo {
		shape = append(shape, hi[i]-lo[i])
	}
	if shape.Size() == 0 {
		return b.newArray(a.dtype, shape, a.buf, 0, nil)
	}
	st := stridesOf(a)
	return b.newArray(a.dtype, shape, a.buf, a.off+offset(lo, st), normStrides(shape, st))
}

// SliceUpdate returns dst with src (converted to dst's dtype, shape padded
// with leading 1s) written at start. When no other live array views dst's
// storage (dst is the only view, was not made by Borrow, and is not src),
// the result takes over that storage and dst is released: using dst
// afterwards panics, as the contract forbids it. Otherwise dst's elements
// are copied first and dst stays valid, so a live view never changes.
func (b *Backend) SliceUpdate(dst, src backend.Array, start []int) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("SliceUpdate", traced, sliceUpdateVJP(start), dst, src) }()
	}
	d, s := b.use2("SliceUpdate", dst, src)
	return b.sliceUpdate(dst, src, d, s, start, false)
}

// SliceUpdateRows writes row r of src ([B, ...]) into dsts[r] at index
// at[r] of axis (0 on the others) for every r, each as SliceUpdate writes
// (in place where dsts[r] is its storage's only view), without an array
// for each row of src. It implements backend.RowUpdater; while gradients
// are recorded it goes row by row (backend.SliceUpdateRowsComposed).
func (b *Backend) SliceUpdateRows(dsts []backend.Array, src backend.Array, axis int, at []int) []backend.Array {
	const op = "SliceUpdateRows"
	if b.tape != nil {
		return backend.SliceUpdateRowsComposed(b, dsts, src, axis, at)
	}
	s := b.use1(op, src)
	ds := b.use(op, dsts...)
	backend.CheckSliceUpdateRows(src, len(ds), axis, at)
	for r, d := range ds { // each is consumed: one given twice would be used after its release
		if d == s || slices.Contains(ds[:r], d) {
			panic(backend.Errorf(op, append([]backend.Array{src}, dsts...), "array %d is src or given twice", r))
		}
	}
	out := make([]backend.Array, len(ds))
	if rowsInPlace(ds, s, axis, at) {
		for r := range ds {
			out[r] = dsts[r]
		}
		return out
	}
	var startBuf [4]int
	start := startBuf[:0]
	for range s.shape {
		start = append(start, 0)
	}
	st := stridesOf(s)
	row := new(Array) // one for all the rows: it escapes (f32In)
	for r, d := range ds {
		// Row r of src as an array of its own shape [1, ...], never
		// handed out (so not tracked): the storage and offset are src's.
		*row = Array{dtype: s.dtype, buf: s.buf, off: s.off + r*st[0]}
		row.shape = append(row.dims[:0:len(row.dims)], s.shape...)
		row.shape[0] = 1
		if s.strides != nil {
			row.strides = append(row.sdims[:0:len(row.sdims)], s.strides...)
		}
		start[axis] = at[r]
		out[r] = b.sliceUpdate(dsts[r], src, d, row, start, true)
	}
	return out
}

// rowsInPlace is SliceUpdateRows' common case done directly: src a
// contiguous float32-valued array, every dst a contiguous float32, bfloat16
// or float16 array that is its storage's only view, of src's row shape but
// on axis, with room at at[r] (a decode step's new keys or values into the
// rows' KV caches). Row r's elements go into ds[r] in place, converted as
// sliceUpdate converts them (kernel.Float32sToBF16 / Float32sToF16, the same
// bits), one run per index before axis, where sliceUpdate walked a view of
// each row through runs. It reports false, having written nothing, when any
// row does not qualify (then SliceUpdateRows goes row by row, which names
// what is wrong). BenchmarkSliceUpdateRows (SmolLM2's 60 appends a step,
// Zen 4, three alternating runs): eight rows 179-184 → 133-139 µs.
func rowsInPlace(ds []*Array, s *Array, axis int, at []int) bool {
	if !s.buf.values || s.strides != nil || axis == 0 {
		return false
	}
	rank := len(s.shape)
	for r, d := range ds {
		if d.strides != nil || d.buf.borrowed || d.buf.refs != 1 || d.buf == s.buf || len(d.shape) != rank || d.shape[0] != 1 ||
			at[r] < 0 || at[r] > d.shape[axis]-s.shape[axis] {
			return false
		}
		if !d.buf.values && d.dtype != tensor.BF16 && d.dtype != tensor.F16 {
			return false
		}
		for i := 1; i < rank; i++ {
			if i != axis && d.shape[i] != s.shape[i] {
				return false
			}
		}
	}
	outer, inner := 1, 1
	for i := 1; i < axis; i++ {
		outer *= s.shape[i]
	}
	for i := axis + 1; i < rank; i++ {
		inner *= s.shape[i]
	}
	L := s.shape[axis]
	n, rowLen := L*inner, outer*L*inner
	for r, d := range ds {
		src := s.buf.f32[s.off+r*rowLen : s.off+(r+1)*rowLen]
		span := d.shape[axis]
		for o := range outer {
			v := src[o*n : (o+1)*n]
			to := d.off + (o*span+at[r])*inner
			switch {
			case d.buf.values:
				copy(d.buf.f32[to:to+n], v)
			case d.dtype == tensor.BF16:
				kernel.Float32sToBF16(u16View(d.buf.raw)[to:to+n], v)
			default:
				kernel.Float32sToF16(u16View(d.buf.raw)[to:to+n], v)
			}
		}
	}
	return true
}

// sliceUpdate is SliceUpdate of the checked arguments d and s (dst and
// src, named in errors). With inPlace, a d that nothing else reads is
// written and returned itself (backend.RowUpdater allows it): no new array
// and no release, which were most of a decode step's cache appends on
// SmolLM2's shape at eight rows (BenchmarkSliceUpdateRows).
func (b *Backend) sliceUpdate(dst, src backend.Array, d, s *Array, start []int, inPlace bool) *Array {
	if len(s.shape) > len(d.shape) {
		panic(backend.Errorf("SliceUpdate", []backend.Array{dst, src}, "src has more dimensions than dst"))
	}
	var regionBuf, stopBuf [4]int
	region := tensor.Shape(regionBuf[:0])
	for range len(d.shape) - len(s.shape) {
		region = append(region, 1)
	}
	region = append(region, s.shape...)
	stop := stopBuf[:0]
	for i := range region {
		v := 0
		if i < len(start) {
			v = start[i] + region[i]
			if start[i] < 0 {
				v += d.shape[i]
			}
		}
		stop = append(stop, v)
	}
	var loBuf, hiBuf [4]int
	lo, _, err := sliceBounds(d.shape, start, stop, loBuf[:0], hiBuf[:0])
	if err != nil {
		panic(backend.Errorf("SliceUpdate", []backend.Array{dst, src}, "%v", err))
	}
	defer b.freeTmps()
	var out *Array
	switch {
	case inPlace && !d.buf.borrowed && d.buf.refs == 1 && d.buf != s.buf:
		out = d
	case !d.buf.borrowed && d.buf.refs == 1 && d != s:
		out = b.newArray(d.dtype, d.shape, d.buf, d.off, d.strides)
		b.life.ReleaseOne(d)
	default:
		out = b.newArray(d.dtype, d.shape, b.contiguousBuf(d), 0, nil)
	}
	if region.Size() == 0 {
		return out
	}
	st := stridesOf(out)
	at := out.off + offset(lo, st)
	if out.buf.values {
		v, o := b.f32In(s, out.dtype), out.buf.f32
		runs(region, st, at, func(d, s, n int) { copy(o[s:s+n], v[d:d+n]) })
		return out
	}
	es := out.dtype.Size()
	o := out.buf.raw
	switch {
	case s.buf.values && out.dtype == tensor.BF16:
		v, o16 := b.f32In(s, tensor.BF16), u16View(o)
		runs(region, st, at, func(d, s, n int) { kernel.Float32sToBF16(o16[s:s+n], v[d:d+n]) })
	case s.buf.values && out.dtype == tensor.F16:
		v, o16 := b.f32In(s, tensor.F16), u16View(o)
		runs(region, st, at, func(d, s, n int) { kernel.Float32sToF16(o16[s:s+n], v[d:d+n]) })
	default:
		sd := b.hostDense(s)
		if sd.DType != out.dtype {
			sd = sd.Convert(out.dtype)
		}
		runs(region, st, at, func(d, s, n int) { copy(o[s*es:(s+n)*es], sd.Data[d*es:(d+n)*es]) })
	}
	return out
}

// Concatenate joins xs along axis. Their dtypes are promoted together;
// every other dimension must agree. The result holds float32 values when
// every input does (F32 always), raw bytes otherwise (a bf16 KV cache grown
// by concatenation stays bf16).
func (b *Backend) Concatenate(axis int, xs ...backend.Array) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Concatenate", traced, concatenateVJP(axis), xs...) }()
	}
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
	values := true
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
		values = values && a.buf.values
	}
	defer b.freeTmps()
	outSt := strides(shape)
	at := 0
	if dt == tensor.F32 || (values && isF32Family(dt)) {
		out := b.pool.getF32(shape.Size())
		for _, a := range as {
			v := b.f32In(a, dt)
			runs(a.shape, outSt, at*outSt[ax], func(d, s, n int) { copy(out[s:s+n], v[d:d+n]) })
			at += a.shape[ax]
		}
		return b.valuesOut(dt, shape, out)
	}
	es := dt.Size()
	out := b.pool.getRaw(shape.Size()*es, false)
	for _, a := range as {
		src := b.hostDense(a)
		if src.DType != dt {
			src = src.Convert(dt)
		}
		runs(a.shape, outSt, at*outSt[ax], func(d, s, n int) { copy(out[s*es:(s+n)*es], src.Data[d*es:(d+n)*es]) })
		at += a.shape[ax]
	}
	return b.newArray(dt, shape, b.rawBuf(out, false), 0, nil)
}

// Take gathers whole slices of x along axis at integer indices of any shape
// and integer dtype: the result's shape is x's with axis replaced by the
// indices' shape. Negative indices count from the end (as MLX's gather);
// out-of-range indices panic. Works for every dtype, packed uint32
// quantized weights included (a quantized embedding takes rows of W,
// Scales and Biases).
func (b *Backend) Take(x, indices backend.Array, axis int) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Take", traced, takeVJP(axis), x, indices) }()
	}
	a, ia := b.use2("Take", x, indices)
	ax, ok := normAxis(axis, len(a.shape))
	if !ok {
		panic(backend.Errorf("Take", []backend.Array{x, indices}, "axis %d out of range for %d dimensions", axis, len(a.shape)))
	}
	if ia.dtype.IsFloat() || ia.dtype == tensor.Bool {
		panic(backend.Errorf("Take", []backend.Array{x, indices}, "indices must have an integer dtype"))
	}
	dim := a.shape[ax]
	idx := b.intsIn(ia, ia.dtype)
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
			panic(backend.Errorf("Take", []backend.Array{x, indices}, "index %d (at %d) out of range for axis %d of size %d", int64(u), i, ax, dim))
		}
		pos[i] = int(v)
	}
	var shapeBuf [4]int
	shape := append(append(append(tensor.Shape(shapeBuf[:0]), a.shape[:ax]...), ia.shape...), a.shape[ax+1:]...)
	inner := tensor.Shape(a.shape[ax+1:]).Size()
	outer := tensor.Shape(a.shape[:ax]).Size()
	if a.buf.values {
		defer b.freeTmps()
		src := b.f32In(a, a.dtype)
		out := b.pool.getF32(shape.Size())
		gather(out, src, pos, outer, dim, inner)
		return b.valuesOut(a.dtype, shape, out)
	}
	es := a.dtype.Size()
	src := b.hostDense(a).Data
	out := b.pool.getRaw(shape.Size()*es, false)
	gather(out, src, pos, outer, dim, inner*es)
	return b.newArray(a.dtype, shape, b.rawBuf(out, false), 0, nil)
}

// gather copies, for every outer index o and position p of pos, the inner
// elements of src at (o, p) to dst in order.
func gather[T any](dst, src []T, pos []int, outer, dim, inner int) {
	k := 0
	for o := range outer {
		base := o * dim * inner
		for _, p := range pos {
			copy(dst[k:k+inner], src[base+p*inner:base+(p+1)*inner])
			k += inner
		}
	}
}
