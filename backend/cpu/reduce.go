package cpu

import (
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// lanes splits a shape around axis: element (o, j, i) of the reduction, for
// o < outer, j < n, i < inner, is at flat index (o*n + j)*inner + i.
type lanes struct{ outer, n, inner int }

func (l lanes) at(o, j, i int) int { return (o*l.n+j)*l.inner + i }

// reduction resolves axis and returns the lanes and the output shape.
func (b *Backend) reduction(op string, x backend.Array, axis int, keepDims bool) (*Array, lanes, tensor.Shape) {
	a := b.use1(op, x)
	ax, ok := normAxis(axis, len(a.shape))
	if !ok {
		panic(backend.Errorf(op, []backend.Array{x}, "axis %d out of range for %d dimensions", axis, len(a.shape)))
	}
	l := lanes{
		outer: tensor.Shape(a.shape[:ax]).Size(),
		n:     a.shape[ax],
		inner: tensor.Shape(a.shape[ax+1:]).Size(),
	}
	out := append(tensor.Shape(nil), a.shape[:ax]...)
	if keepDims {
		out = append(out, 1)
	}
	return a, l, append(out, a.shape[ax+1:]...)
}

// sumDType is the output dtype of Sum, as MLX: integers of up to 4 bytes
// sum into I32 or U32, wider ones into I64 or U64, Bool into I32.
func sumDType(dt tensor.DType) tensor.DType {
	switch {
	case dt == tensor.Bool:
		return tensor.I32
	case dt.IsFloat():
		return dt
	case isSigned(dt) && dt.Size() <= 4:
		return tensor.I32
	case isSigned(dt):
		return tensor.I64
	case dt.Size() <= 4:
		return tensor.U32
	}
	return tensor.U64
}

// Sum adds along axis, in order, in float32 for F32, F16 and BF16 (float64
// for F64 and in high precision), rounded once to x's dtype. Integer sums
// are exact with wrap in the output dtype (see sumDType).
func (b *Backend) Sum(x backend.Array, axis int, keepDims bool) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Sum", traced, sumVJP(axis, keepDims), x) }()
	}
	a, l, shape := b.reduction("Sum", x, axis, keepDims)
	dt := sumDType(a.dtype)
	m := l.outer * l.inner
	defer b.freeTmps()
	if !dt.IsFloat() {
		v := b.intsIn(a, dt)
		res := make([]uint64, m)
		for o := range l.outer {
			for i := range l.inner {
				var s uint64
				for j := range l.n {
					s += v[l.at(o, j, i)]
				}
				res[o*l.inner+i] = wrap(dt, s)
			}
		}
		return b.intsOut(dt, shape, res)
	}
	if !b.wide(dt) {
		v := b.f32In(a, dt)
		res := b.pool.getF32(m)
		for o := range l.outer {
			for i := range l.inner {
				var s float32
				for j := range l.n {
					s += v[l.at(o, j, i)]
				}
				res[o*l.inner+i] = s
			}
		}
		roundTo(dt, res)
		return b.valuesOut(dt, shape, res)
	}
	v := b.f64In(a, dt)
	res := make([]float64, m)
	for o := range l.outer {
		for i := range l.inner {
			var s float64
			for j := range l.n {
				s += v[l.at(o, j, i)]
			}
			res[o*l.inner+i] = s
		}
	}
	return b.valuesF64(dt, shape, res)
}

// Max takes the largest element along axis, in x's dtype. A NaN anywhere
// gives NaN (MLX). An empty axis panics.
func (b *Backend) Max(x backend.Array, axis int, keepDims bool) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Max", traced, maxVJP(axis, keepDims), x) }()
	}
	a, l, shape := b.reduction("Max", x, axis, keepDims)
	if l.n == 0 && l.outer*l.inner > 0 {
		panic(backend.Errorf("Max", []backend.Array{x}, "cannot reduce an empty axis"))
	}
	m := l.outer * l.inner
	defer b.freeTmps()
	switch {
	case !a.dtype.IsFloat():
		v := b.intsIn(a, a.dtype)
		res := make([]uint64, m)
		for o := range l.outer {
			for i := range l.inner {
				best := v[l.at(o, 0, i)]
				for j := 1; j < l.n; j++ {
					if e := v[l.at(o, j, i)]; intLess(a.dtype, best, e) {
						best = e
					}
				}
				res[o*l.inner+i] = best
			}
		}
		return b.intsOut(a.dtype, shape, res)
	case isF32Family(a.dtype):
		v := b.f32In(a, a.dtype)
		res := b.pool.getF32(m)
		for o := range l.outer {
			for i := range l.inner {
				res[o*l.inner+i] = maxLane(v, l, o, i)
			}
		}
		return b.valuesOut(a.dtype, shape, res)
	}
	v := b.f64In(a, a.dtype)
	res := make([]float64, m)
	for o := range l.outer {
		for i := range l.inner {
			res[o*l.inner+i] = maxLane(v, l, o, i)
		}
	}
	return b.valuesF64(a.dtype, shape, res)
}

// maxLane is the NaN-propagating maximum of one lane.
func maxLane[T float32 | float64](v []T, l lanes, o, i int) T {
	best := T(math.Inf(-1))
	if l.inner == 1 {
		for _, e := range v[o*l.n : (o+1)*l.n] {
			if e != e {
				return e
			}
			if e > best {
				best = e
			}
		}
		return best
	}
	for j := range l.n {
		e := v[l.at(o, j, i)]
		if e != e {
			return e
		}
		if e > best {
			best = e
		}
	}
	return best
}

// Argmax returns the uint32 index of the largest element along axis. Ties
// go to the smallest index; for floats the first NaN wins, as mx.argmax
// gives. An empty axis panics.
func (b *Backend) Argmax(x backend.Array, axis int, keepDims bool) backend.Array {
	a, l, shape := b.reduction("Argmax", x, axis, keepDims)
	if l.n == 0 && l.outer*l.inner > 0 {
		panic(backend.Errorf("Argmax", []backend.Array{x}, "cannot reduce an empty axis"))
	}
	m := l.outer * l.inner
	res := make([]uint64, m)
	defer b.freeTmps()
	switch {
	case isF32Family(a.dtype) && l.inner == 1: // rows of consecutive values
		// A batch's rows of logits: a row to a worker when they are long.
		v := b.f32In(a, a.dtype)
		kernel.ParallelFor(l.outer, max(1, minParallelWork/max(l.n, 1)), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				res[o] = uint64(kernel.ArgmaxRow(v[o*l.n : (o+1)*l.n]))
			}
		})
	case isF32Family(a.dtype):
		argmaxF(b.f32In(a, a.dtype), l, res)
	case a.dtype.IsFloat():
		argmaxF(b.f64In(a, a.dtype), l, res)
	default:
		v := b.intsIn(a, a.dtype)
		for o := range l.outer {
			for i := range l.inner {
				best, at := v[l.at(o, 0, i)], 0
				for j := 1; j < l.n; j++ {
					if e := v[l.at(o, j, i)]; intLess(a.dtype, best, e) {
						best, at = e, j
					}
				}
				res[o*l.inner+i] = uint64(at)
			}
		}
	}
	return b.intsOut(tensor.U32, shape, res)
}

// argmaxF writes the argmax of every lane of v to res.
func argmaxF[T float32 | float64](v []T, l lanes, res []uint64) {
	for o := range l.outer {
		for i := range l.inner {
			best, at := v[l.at(o, 0, i)], 0
			for j := 1; j < l.n && best == best; j++ {
				if e := v[l.at(o, j, i)]; e != e || e > best {
					best, at = e, j
				}
			}
			res[o*l.inner+i] = uint64(at)
		}
	}
}

// LogSumExp is log(Σ exp(x - m)) + m along axis with m the lane maximum
// (NaN-propagating), as MLX's CPU kernel (mlx/backend/cpu/logsumexp.cpp):
// float32 with MLX's CPU exp (float64 with math.Exp for F64 and in high
// precision), rounded once to x's dtype (F32 for integer x). A lane whose
// maximum is ±Inf gives that maximum. An empty axis panics.
func (b *Backend) LogSumExp(x backend.Array, axis int, keepDims bool) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("LogSumExp", traced, logSumExpVJP(axis, keepDims), x) }()
	}
	a, l, shape := b.reduction("LogSumExp", x, axis, keepDims)
	if l.n == 0 {
		panic(backend.Errorf("LogSumExp", []backend.Array{x}, "cannot reduce an empty axis"))
	}
	dt := atLeastFloat(a.dtype)
	defer b.freeTmps()
	if b.wide(dt) {
		v := b.f64In(a, dt)
		res := make([]float64, l.outer*l.inner)
		for o := range l.outer {
			for i := range l.inner {
				m := maxLane(v, l, o, i)
				r := m
				if !math.IsInf(m, 0) {
					var s float64
					for j := range l.n {
						s += math.Exp(v[l.at(o, j, i)] - m)
					}
					r = math.Log(s) + m
				}
				res[o*l.inner+i] = r
			}
		}
		return b.valuesF64(dt, shape, res)
	}
	v := b.f32In(a, dt)
	res := b.pool.getF32(l.outer * l.inner)
	if l.inner == 1 && len(res) >= 4 {
		// Four or more rows of consecutive values (a batch's rows of
		// logits), in groups of up to four (kernel.LogSumExpRows), the
		// groups to the workers when the rows are long (fewer rows go
		// a row to a worker, below).
		groups := (len(res) + 3) / 4
		kernel.ParallelFor(groups, max(1, minParallelWork/(4*l.n)), func(lo, hi int) {
			r0, r1 := 4*lo, min(len(res), 4*hi)
			kernel.LogSumExpRows(res[r0:r1], v[r0*l.n:r1*l.n], l.n)
		})
		roundTo(dt, res)
		return b.valuesOut(dt, shape, res)
	}
	// Each lane's sum is the same in any split: the lanes go to the
	// workers when they are long.
	kernel.ParallelFor(len(res), max(1, minParallelWork/l.n), func(lo, hi int) {
		var buf [512]float32 // exps in batches (vector exp), summed in order
		for x := lo; x < hi; x++ {
			if l.inner == 1 { // a row of consecutive values
				res[x] = kernel.LogSumExpRow(v[x*l.n : (x+1)*l.n])
				continue
			}
			o, i := x/l.inner, x%l.inner
			m := maxLane(v, l, o, i)
			r := m
			if !math.IsInf(float64(m), 0) {
				var s float32
				for j0 := 0; j0 < l.n; j0 += len(buf) {
					c := buf[:min(len(buf), l.n-j0)]
					for j := range c {
						c[j] = v[l.at(o, j0+j, i)] - m
					}
					kernel.ExpSlice(c, c)
					for _, e := range c {
						s += e
					}
				}
				r = float32(math.Log(float64(s))) + m
			}
			res[x] = r
		}
	})
	roundTo(dt, res)
	return b.valuesOut(dt, shape, res)
}

// minParallelWork is about the fewest elements a reduction or elementwise
// loop hands to each worker: below it, waking one costs more than it saves.
const minParallelWork = 16384

// Softmax along axis, output in x's dtype (F32 for integer x, as MLX). It
// follows MLX's CPU kernel (mlx/backend/cpu/softmax.cpp): m = max,
// e_j = exp(x_j - m) with MLX's CPU exp (kernel.ExpMLX), s = Σ e_j in order,
// out_j = e_j · (1/s). F32 inputs, and F16 and BF16 with precise, compute in
// float32 and round the output once. F16 and BF16 without precise compute
// in the dtype itself, as MLX does: every x_j - m, e_j, partial sum, 1/s
// and product is rounded to the dtype. F64 and the high precision compute
// in float64 with math.Exp and round once (high ignores precise).
func (b *Backend) Softmax(x backend.Array, axis int, precise bool) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Softmax", traced, softmaxVJP(axis), x) }()
	}
	a, l, _ := b.reduction("Softmax", x, axis, true)
	dt := atLeastFloat(a.dtype)
	defer b.freeTmps()
	if b.wide(dt) {
		v := b.f64In(a, dt)
		res := make([]float64, len(v))
		for o := range l.outer {
			for i := range l.inner {
				m := maxLane(v, l, o, i)
				var s float64
				for j := range l.n {
					e := math.Exp(v[l.at(o, j, i)] - m)
					res[l.at(o, j, i)] = e
					s += e
				}
				inv := 1 / s
				for j := range l.n {
					res[l.at(o, j, i)] *= inv
				}
			}
		}
		return b.valuesF64(dt, a.shape, res)
	}
	v := b.f32In(a, dt)
	res := b.pool.getF32(len(v))
	// r rounds to the accumulation dtype: identity in float32.
	r := rounder(dt)
	if precise {
		r = kernel.Identity
	}
	buf := b.scratchF32(512) // exps in batches (vector exp), summed in order
	for o := range l.outer {
		for i := range l.inner {
			m := maxLane(v, l, o, i)
			var s float32
			for j0 := 0; j0 < l.n; j0 += len(buf) {
				c := buf[:min(len(buf), l.n-j0)]
				for j := range c {
					c[j] = r(v[l.at(o, j0+j, i)] - m)
				}
				kernel.ExpSlice(c, c)
				for j, e := range c {
					e = r(e)
					res[l.at(o, j0+j, i)] = e
					s = r(s + e)
				}
			}
			inv := r(1 / s)
			for j := range l.n {
				res[l.at(o, j, i)] *= inv
			}
		}
	}
	roundTo(dt, res)
	return b.valuesOut(dt, a.shape, res)
}
