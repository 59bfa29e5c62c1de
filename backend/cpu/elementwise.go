package cpu

import (
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// Binary applies op to a and b broadcast together (numpy rules). Both are
// first converted to backend.PromoteTypes(a, b) (MLX's astype, which rounds
// an integer to a narrow float); Divide promotes integers to F32 (MLX's
// at_least_float). Float arithmetic is one float32 operation rounded to the
// output dtype, as MLX's CPU kernels compute half types; F64 arrays and the
// high precision compute in float64 and round once. Integer and Bool
// arithmetic is exact with two's-complement wrap. Maximum and Minimum
// propagate NaN. Comparisons return Bool and are exact.
func (b *Backend) Binary(op backend.BinaryOp, x, y backend.Array) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record(op.String(), traced, binaryVJP(op), x, y) }()
	}
	name := op.String()
	xa, ya := b.use2(name, x, y)
	var shapeBuf [4]int
	shape, ok := broadcastInto(shapeBuf[:0], xa.shape, ya.shape)
	if !ok {
		panic(backend.Errorf(name, []backend.Array{x, y}, "shapes do not broadcast"))
	}
	if op < backend.Add || op > backend.Greater {
		panic(backend.Errorf(name, []backend.Array{x, y}, "unknown binary op %d", int(op)))
	}
	ct := backend.PromoteTypes(xa.dtype, ya.dtype)
	if op == backend.Divide {
		ct = atLeastFloat(ct)
	}
	cmp := op == backend.Equal || op == backend.Less || op == backend.Greater
	defer b.freeTmps()
	n := shape.Size()

	if isF32Family(ct) && !b.wide(ct) {
		av, bv := b.f32In(xa, ct), b.f32In(ya, ct)
		if cmp {
			res := make([]uint64, n)
			broadcast2(shape, xa.shape, ya.shape, func(k, i, j int) {
				if compareF(op, float64(av[i]), float64(bv[j])) {
					res[k] = 1
				}
			})
			return b.intsOut(tensor.Bool, shape, res)
		}
		res := b.pool.getF32(n)
		if op == backend.Add && ct == tensor.BF16 && len(av) == n && len(bv) == n {
			kernel.AddRound(res, av, bv, true) // the residual adds: sum and rounding in one pass
		} else {
			binaryF32(op, res, av, bv, shape, xa.shape, ya.shape)
			roundTo(ct, res)
		}
		return b.valuesOut(ct, shape, res)
	}

	st := [][]int{bstrides(xa.shape, shape), bstrides(ya.shape, shape)}
	if ct.IsFloat() {
		av, bv := b.f64In(xa, ct), b.f64In(ya, ct)
		if cmp {
			res := make([]uint64, n)
			walk(shape, st, func(k int, o []int) {
				if compareF(op, av[o[0]], bv[o[1]]) {
					res[k] = 1
				}
			})
			return b.intsOut(tensor.Bool, shape, res)
		}
		f := binaryF(op, b.wide(ct))
		res := make([]float64, n)
		walk(shape, st, func(k int, o []int) { res[k] = f(av[o[0]], bv[o[1]]) })
		return b.valuesF64(ct, shape, res)
	}

	av, bv := b.intsIn(xa, ct), b.intsIn(ya, ct)
	res := make([]uint64, n)
	walk(shape, st, func(k int, o []int) { res[k] = binaryInt(op, ct, av[o[0]], bv[o[1]]) })
	if cmp {
		return b.intsOut(tensor.Bool, shape, res)
	}
	return b.intsOut(ct, shape, res)
}

// binaryF32 computes dst[k] = op(a[i], b[j]) in float32 (one operation, not
// yet rounded to the dtype) for every element k of shape, a and b read as
// shapes as and bs broadcast to it. Same shapes and a broadcast scalar take
// plain loops.
func binaryF32(op backend.BinaryOp, dst, a, b []float32, shape, as, bs tensor.Shape) {
	n := len(dst)
	switch {
	case len(a) == n && len(b) == n:
		binaryLoop(op, dst, a, b, 1, 1)
		return
	case len(a) == n && len(b) == 1:
		binaryLoop(op, dst, a, b, 1, 0)
		return
	case len(a) == 1 && len(b) == n:
		binaryLoop(op, dst, a, b, 0, 1)
		return
	}
	if binaryRows(op, dst, a, b, shape, as, bs) {
		return
	}
	f := binaryF(op, false)
	broadcast2(shape, as, bs, func(k, i, j int) { dst[k] = float32(f(float64(a[i]), float64(b[j]))) })
}

// binaryRows is binaryF32 for shapes whose trailing axes (the inner block)
// each input reads either in order or as one broadcast value, as a row
// minus its own scalar (logits [B, V] - logsumexp [B, 1]) or a batch plus
// a shared vector: binaryLoop per inner block, the outer axes walked. It
// reports false (and does nothing) where the inner block is under
// minBinaryRow elements.
func binaryRows(op backend.BinaryOp, dst, a, b []float32, shape, as, bs tensor.Shape) bool {
	sa, sb := bstrides(as, shape), bstrides(bs, shape)
	inner, ka, kb := 1, -1, -1 // ka, kb: 1 the input is read in order over the block, 0 broadcast
	ax := len(shape)
	for ; ax > 0; ax-- {
		d := shape[ax-1]
		if d == 1 {
			continue
		}
		ca, cb := runKind(sa[ax-1], inner), runKind(sb[ax-1], inner)
		if ca < 0 || cb < 0 || (ka >= 0 && ca != ka) || (kb >= 0 && cb != kb) {
			break
		}
		ka, kb = ca, cb
		inner *= d
	}
	if inner < minBinaryRow {
		return false
	}
	outer := shape[:ax].Size()
	if outer < 2 || outer*inner < 2*minParallelWork {
		walk(shape[:ax], [][]int{sa[:ax], sb[:ax]}, func(k int, o []int) {
			binaryLoop(op, dst[k*inner:(k+1)*inner], a[o[0]:], b[o[1]:], ka, kb)
		})
		return true
	}
	// Long blocks (a batch's rows of logits minus their logsumexp) on the
	// workers: the blocks' input offsets first, then the blocks in parallel.
	offs := make([]int, 2*outer)
	walk(shape[:ax], [][]int{sa[:ax], sb[:ax]}, func(k int, o []int) { copy(offs[2*k:], o) })
	kernel.ParallelFor(outer, max(1, minParallelWork/inner), func(lo, hi int) {
		for k := lo; k < hi; k++ {
			binaryLoop(op, dst[k*inner:(k+1)*inner], a[offs[2*k]:], b[offs[2*k+1]:], ka, kb)
		}
	})
	return true
}

// minBinaryRow is the smallest inner block binaryRows takes.
const minBinaryRow = 16

// runKind is 1 when stride st continues a run of inner elements read in
// order, 0 when it broadcasts (st 0), else -1.
func runKind(st, inner int) int {
	switch st {
	case inner:
		return 1
	case 0:
		return 0
	}
	return -1
}

// binaryLoop is binaryF32 over len(dst) elements, a and b read with strides
// sa and sb (0 or 1).
func binaryLoop(op backend.BinaryOp, dst, a, b []float32, sa, sb int) {
	if binaryFast(op, dst, a, b, sa, sb) {
		return
	}
	i, j := 0, 0
	switch op {
	case backend.Add:
		for k := range dst {
			dst[k] = a[i] + b[j]
			i, j = i+sa, j+sb
		}
	case backend.Subtract:
		for k := range dst {
			dst[k] = a[i] - b[j]
			i, j = i+sa, j+sb
		}
	case backend.Multiply:
		for k := range dst {
			dst[k] = a[i] * b[j]
			i, j = i+sa, j+sb
		}
	case backend.Divide:
		for k := range dst {
			dst[k] = a[i] / b[j]
			i, j = i+sa, j+sb
		}
	case backend.Maximum:
		for k := range dst {
			x, y := a[i], b[j]
			if x != x || x > y {
				dst[k] = x
			} else {
				dst[k] = y
			}
			i, j = i+sa, j+sb
		}
	default: // Minimum
		for k := range dst {
			x, y := a[i], b[j]
			if x != x || x < y {
				dst[k] = x
			} else {
				dst[k] = y
			}
			i, j = i+sa, j+sb
		}
	}
}

// binaryFast is binaryLoop's hot cases: a sum of two runs (the residual
// adds, vector code in kernel.AddRound) and a run minus one value (logits
// minus their logsumexp, a loop the compiler keeps free of bounds checks).
// It reports false for the rest.
func binaryFast(op backend.BinaryOp, dst, a, b []float32, sa, sb int) bool {
	n := len(dst)
	switch {
	case op == backend.Add && sa == 1 && sb == 1:
		kernel.AddRound(dst, a[:n], b[:n], false)
	case op == backend.Subtract && sa == 1 && sb == 0:
		kernel.SubScalar(dst, a, b[0])
	default:
		return false
	}
	return true
}

// broadcast2 calls fn(k, i, j) for every element k of shape out (row-major)
// with i and j the flat indices of the elements of arrays of shapes as and
// bs that broadcast to it.
func broadcast2(out, as, bs tensor.Shape, fn func(k, i, j int)) {
	walk(out, [][]int{bstrides(as, out), bstrides(bs, out)}, func(k int, o []int) { fn(k, o[0], o[1]) })
}

func compareF(op backend.BinaryOp, x, y float64) bool {
	switch op {
	case backend.Equal:
		return x == y
	case backend.Less:
		return x < y
	}
	return x > y
}

// binaryF returns op on float values already in the compute dtype: one
// float32 operation, or a float64 one when wide.
func binaryF(op backend.BinaryOp, wide bool) func(x, y float64) float64 {
	switch op {
	case backend.Maximum:
		return func(x, y float64) float64 {
			if x != x || x > y {
				return x
			}
			return y
		}
	case backend.Minimum:
		return func(x, y float64) float64 {
			if x != x || x < y {
				return x
			}
			return y
		}
	}
	if wide {
		switch op {
		case backend.Add:
			return func(x, y float64) float64 { return x + y }
		case backend.Subtract:
			return func(x, y float64) float64 { return x - y }
		case backend.Multiply:
			return func(x, y float64) float64 { return x * y }
		}
		return func(x, y float64) float64 { return x / y }
	}
	switch op {
	case backend.Add:
		return func(x, y float64) float64 { return float64(float32(x) + float32(y)) }
	case backend.Subtract:
		return func(x, y float64) float64 { return float64(float32(x) - float32(y)) }
	case backend.Multiply:
		return func(x, y float64) float64 { return float64(float32(x) * float32(y)) }
	}
	return func(x, y float64) float64 { return float64(float32(x) / float32(y)) }
}

// binaryInt applies op to two values of integer (or Bool) dtype dt; for
// comparisons the result is 0 or 1.
func binaryInt(op backend.BinaryOp, dt tensor.DType, x, y uint64) uint64 {
	b2u := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case backend.Add:
		return wrap(dt, x+y)
	case backend.Subtract:
		return wrap(dt, x-y)
	case backend.Multiply:
		return wrap(dt, x*y)
	case backend.Maximum:
		if intLess(dt, x, y) {
			return y
		}
		return x
	case backend.Minimum:
		if intLess(dt, y, x) {
			return y
		}
		return x
	case backend.Equal:
		return b2u(x == y)
	case backend.Less:
		return b2u(intLess(dt, x, y))
	case backend.Greater:
		return b2u(intLess(dt, y, x))
	}
	panic("unreachable: divide on integers is promoted to float")
}

// unaryDType is the output dtype of op on dt, as MLX: Negative, Abs and
// Square keep dt; the other ops promote integers and Bool to F32.
func unaryDType(op backend.UnaryOp, dt tensor.DType) tensor.DType {
	switch op {
	case backend.Negative, backend.Abs, backend.Square:
		return dt
	}
	return atLeastFloat(dt)
}

// Unary applies op elementwise. The output has x's dtype, except that the
// transcendental ops (all but Negative, Abs and Square) give F32 for integer
// and Bool x, as MLX does. Each value is computed in float32 and rounded to
// the output dtype, as MLX computes half types in float; Log, Sqrt, Rsqrt,
// Tanh, Sin and Cos are evaluated in float64 and rounded to float32 first.
// Exp is MLX's CPU exp (kernel.ExpMLX, a Cephes polynomial, not correctly
// rounded). Sigmoid is MLX's CPU kernel (kernel.SigmoidMLX): e = T(exp(|x|)),
// y = 1/(1+e), then y for x < 0 and 1-y otherwise, in float32, rounded to T.
// SiLU is MLX's nn.silu, T(x · sigmoid(x)) with the sigmoid already in T.
// F64 arrays and the high precision evaluate everything in float64 with
// math.Exp and round once. Negative of a Bool array panics (MLX rejects it).
func (b *Backend) Unary(op backend.UnaryOp, x backend.Array) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record(op.String(), traced, unaryVJP(op), x) }()
	}
	name := op.String()
	a := b.use1(name, x)
	if op < backend.Exp || op > backend.Cos {
		panic(backend.Errorf(name, []backend.Array{x}, "unknown unary op %d", int(op)))
	}
	dt := unaryDType(op, a.dtype)
	defer b.freeTmps()
	if !dt.IsFloat() {
		if op == backend.Negative && dt == tensor.Bool {
			panic(backend.Errorf(name, []backend.Array{x}, "not defined for Bool (use Equal with false)"))
		}
		v := b.intsIn(a, dt)
		for i, u := range v {
			switch op {
			case backend.Negative:
				v[i] = wrap(dt, -u)
			case backend.Abs:
				if isSigned(dt) && int64(u) < 0 {
					v[i] = wrap(dt, -u)
				}
			case backend.Square:
				v[i] = wrap(dt, u*u)
			}
		}
		return b.intsOut(dt, a.shape, v)
	}
	if isF32Family(dt) && !b.wide(dt) {
		v := b.f32In(a, dt)
		res := b.pool.getF32(len(v))
		if op == backend.Exp {
			kernel.ExpSlice(res, v)
		} else {
			f := unaryF(op, dt, false)
			for i, u := range v {
				res[i] = float32(f(float64(u)))
			}
		}
		roundTo(dt, res)
		return b.valuesOut(dt, a.shape, res)
	}
	v := b.f64In(a, dt)
	res := make([]float64, len(v))
	f := unaryF(op, dt, b.wide(dt))
	for i, u := range v {
		res[i] = f(u)
	}
	return b.valuesF64(dt, a.shape, res)
}

// unaryF returns op on a value of float dtype dt. Unless wide, the result
// is a float32 value (packF64 then rounds it to dt).
func unaryF(op backend.UnaryOp, dt tensor.DType, wide bool) func(float64) float64 {
	f32 := func(f func(float64) float64) func(float64) float64 {
		if wide {
			return f
		}
		return func(x float64) float64 { return float64(float32(f(x))) }
	}
	switch op {
	case backend.Exp:
		if wide {
			return math.Exp
		}
		return func(x float64) float64 { return float64(kernel.ExpMLX(float32(x))) }
	case backend.Log:
		return f32(math.Log)
	case backend.Negative:
		return func(x float64) float64 { return -x }
	case backend.Abs:
		return math.Abs
	case backend.Sqrt:
		return f32(math.Sqrt)
	case backend.Rsqrt:
		return f32(func(x float64) float64 { return 1 / math.Sqrt(x) })
	case backend.Square:
		return f32(func(x float64) float64 { return x * x })
	case backend.Tanh:
		return f32(math.Tanh)
	case backend.Sin:
		return f32(math.Sin)
	case backend.Cos:
		return f32(math.Cos)
	case backend.Sigmoid:
		if wide {
			return sigmoid64
		}
		round := rounder(dt)
		return func(x float64) float64 { return float64(kernel.SigmoidMLX(float32(x), round)) }
	case backend.SiLU:
		if wide {
			return func(x float64) float64 { return x * sigmoid64(x) }
		}
		round := rounder(dt)
		return func(x float64) float64 {
			return float64(float32(x) * kernel.SigmoidMLX(float32(x), round))
		}
	}
	panic("unreachable: unknown unary op")
}

// sigmoid64 is 1/(1+exp(-x)) in float64, in the same overflow-free form.
func sigmoid64(x float64) float64 {
	y := 1 / (1 + math.Exp(math.Abs(x)))
	if x < 0 {
		return y
	}
	return 1 - y
}

// AsType converts x to dt as MLX's astype: floats round to nearest even
// (f16 and bf16 through float32), floats to integers truncate toward zero
// (saturating, NaN to 0), integers wrap, anything nonzero becomes true.
func (b *Backend) AsType(x backend.Array, dt tensor.DType) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("AsType", traced, asTypeVJP, x) }()
	}
	a := b.use1("AsType", x)
	if dt.Size() == 0 {
		panic(backend.Errorf("AsType", []backend.Array{x}, "invalid target dtype %v", dt))
	}
	switch {
	case a.dtype == dt || (a.buf.values && exactIn(a.dtype, dt)):
		return b.newArray(dt, a.shape, a.buf, a.off, a.strides)
	case isF32Family(dt) && (a.buf.values || isF32Family(a.dtype)):
		defer b.freeTmps()
		out := b.pool.getF32(a.size())
		b.fillF32(out, a, dt)
		return b.valuesOut(dt, a.shape, out)
	}
	return b.denseOut(b.hostDense(a).Convert(dt))
}

// Where picks a where cond is true and b elsewhere, with cond, a and b
// broadcast together. cond of another dtype is converted to Bool (nonzero
// is true); a and b are converted to their promoted dtype.
func (b *Backend) Where(cond, x, y backend.Array) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Where", traced, whereVJP, cond, x, y) }()
	}
	ca, xa, ya := b.use3("Where", cond, x, y)
	shape, ok := broadcastShapes(ca.shape, xa.shape, ya.shape)
	if !ok {
		panic(backend.Errorf("Where", []backend.Array{cond, x, y}, "shapes do not broadcast"))
	}
	dt := backend.PromoteTypes(xa.dtype, ya.dtype)
	c := b.hostDense(ca)
	if c.DType != tensor.Bool {
		c = c.Convert(tensor.Bool)
	}
	st := [][]int{bstrides(ca.shape, shape), bstrides(xa.shape, shape), bstrides(ya.shape, shape)}
	defer b.freeTmps()
	if dt == tensor.F32 || (isF32Family(dt) && xa.buf.values && ya.buf.values) {
		xv, yv := b.f32In(xa, dt), b.f32In(ya, dt)
		out := b.pool.getF32(shape.Size())
		walk(shape, st, func(k int, o []int) {
			if c.Data[o[0]] != 0 {
				out[k] = xv[o[1]]
			} else {
				out[k] = yv[o[2]]
			}
		})
		return b.valuesOut(dt, shape, out)
	}
	xd, yd := b.hostDense(xa), b.hostDense(ya)
	if xd.DType != dt {
		xd = xd.Convert(dt)
	}
	if yd.DType != dt {
		yd = yd.Convert(dt)
	}
	es := dt.Size()
	out := b.pool.getRaw(shape.Size()*es, false)
	walk(shape, st, func(k int, o []int) {
		src, at := yd.Data, o[2]
		if c.Data[o[0]] != 0 {
			src, at = xd.Data, o[1]
		}
		copy(out[k*es:(k+1)*es], src[at*es:(at+1)*es])
	})
	return b.newArray(dt, shape, b.rawBuf(out, false), 0, nil)
}
