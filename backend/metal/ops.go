//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Recording an op: an entry point checks here() (else it hands itself to
// the MLX thread with away and returns what that gives), describes the op in
// b.call with begin and the op's parameters, and calls exec with the input
// arrays. exec checks them, records the op and reads the result's shape and
// dtype in one cgo call (mlxgo_op), and adopts the result. Nothing on that
// path allocates but the Array itself: arguments stay on the caller's stack
// (error paths clone them before they escape into an *OpError).

// away runs fn (the caller's own op, called again) on the MLX thread and
// returns its result, or panics as do does when the backend is closed.
func (b *Backend) away(op string, fn func() backend.Array) backend.Array {
	var out backend.Array
	b.do(op, func() { out = fn() })
	return out
}

// begin starts describing op code in b.call and returns it. MLX thread only.
func (b *Backend) begin(code C.int) *C.mlxgo_call {
	c := b.call
	c.op = code
	return c
}

// exec records the op described in b.call on args (which it checks) and
// returns its result. MLX checks shapes and dtypes as the op is recorded, so
// a bad call panics here with MLX's message, as an *OpError naming op.
func (b *Backend) exec(op string, args ...backend.Array) *Array {
	c := b.call
	if len(args) > len(b.args.s) {
		c.args = b.args.reserve(len(args))
	}
	hs := b.args.s
	for i := range args {
		hs[i] = b.arg(op, args, i).h
	}
	c.nargs = C.size_t(len(args))
	b.ops++
	if C.mlxgo_op(C.uintptr_t(uintptr(unsafe.Pointer(c)))) != 0 {
		panic(b.opError(op, slices.Clone(args)))
	}
	return b.adopt(op, c.res, int(c.ndim), &c.shape, c.dtype, false, args)
}

// ints writes xs into v (one of b.call's int lists) and their count into
// b.call.n. More than MLXGO_MAX_DIMS entries panic with an *OpError.
func (b *Backend) ints(op string, v *[C.MLXGO_MAX_DIMS]C.int, xs []int) {
	if len(xs) > len(v) {
		panic(&backend.OpError{Op: op, Err: fmt.Errorf("%d dimensions or axes, at most %d", len(xs), len(v))})
	}
	for i, x := range xs {
		v[i] = C.int(x)
	}
	b.call.n = C.size_t(len(xs))
}

var binaryCodes = [...]C.int{
	backend.Add: C.MLXGO_OP_ADD, backend.Subtract: C.MLXGO_OP_SUBTRACT, backend.Multiply: C.MLXGO_OP_MULTIPLY,
	backend.Divide: C.MLXGO_OP_DIVIDE, backend.Maximum: C.MLXGO_OP_MAXIMUM, backend.Minimum: C.MLXGO_OP_MINIMUM,
	backend.Equal: C.MLXGO_OP_EQUAL, backend.Less: C.MLXGO_OP_LESS, backend.Greater: C.MLXGO_OP_GREATER,
}

// Binary applies op to a and b after broadcasting them together, with MLX's
// type promotion (comparisons give Bool).
func (b *Backend) Binary(op backend.BinaryOp, x, y backend.Array) backend.Array {
	if op < 0 || int(op) >= len(binaryCodes) {
		panic(backend.Errorf(op.String(), []backend.Array{x, y}, "unknown binary op %d", int(op)))
	}
	if !b.here() {
		return b.away(op.String(), func() backend.Array { return b.Binary(op, x, y) })
	}
	b.begin(binaryCodes[op])
	return b.exec(op.String(), x, y)
}

var unaryCodes = [...]C.int{
	backend.Exp: C.MLXGO_OP_EXP, backend.Log: C.MLXGO_OP_LOG, backend.Negative: C.MLXGO_OP_NEGATIVE,
	backend.Abs: C.MLXGO_OP_ABS, backend.Sqrt: C.MLXGO_OP_SQRT, backend.Rsqrt: C.MLXGO_OP_RSQRT,
	backend.Square: C.MLXGO_OP_SQUARE, backend.Sigmoid: C.MLXGO_OP_SIGMOID, backend.SiLU: -1,
	backend.Tanh: C.MLXGO_OP_TANH, backend.Sin: C.MLXGO_OP_SIN, backend.Cos: C.MLXGO_OP_COS,
}

// Unary applies op elementwise with MLX's kernels (integer inputs of the
// transcendental ops give F32). SiLU is mlx.nn.silu, compiled shapeless as
// mlx does: x * sigmoid(x).
func (b *Backend) Unary(op backend.UnaryOp, x backend.Array) backend.Array {
	if op == backend.SiLU {
		return b.builtin(op.String(), C.MLXGO_FN_SILU, x, nil)
	}
	if op < 0 || int(op) >= len(unaryCodes) {
		panic(backend.Errorf(op.String(), []backend.Array{x}, "unknown unary op %d", int(op)))
	}
	if !b.here() {
		return b.away(op.String(), func() backend.Array { return b.Unary(op, x) })
	}
	b.begin(unaryCodes[op])
	return b.exec(op.String(), x)
}

// AsType converts x to dt (mx.astype).
func (b *Backend) AsType(x backend.Array, dt tensor.DType) backend.Array {
	d := mlxDType("AsType", dt)
	if !b.here() {
		return b.away("AsType", func() backend.Array { return b.AsType(x, dt) })
	}
	b.begin(C.MLXGO_OP_ASTYPE).i0 = C.int(d)
	return b.exec("AsType", x)
}

// Where picks a where cond is true and b elsewhere (mx.where).
func (b *Backend) Where(cond, x, y backend.Array) backend.Array {
	if !b.here() {
		return b.away("Where", func() backend.Array { return b.Where(cond, x, y) })
	}
	b.begin(C.MLXGO_OP_WHERE)
	return b.exec("Where", cond, x, y)
}

// Reshape gives x a new shape of the same size; one dimension may be -1.
func (b *Backend) Reshape(x backend.Array, shape ...int) backend.Array {
	if !b.here() {
		shape := slices.Clone(shape) // the caller's slice stays on its stack
		return b.away("Reshape", func() backend.Array { return b.Reshape(x, shape...) })
	}
	c := b.begin(C.MLXGO_OP_RESHAPE)
	b.ints("Reshape", &c.v0, shape)
	return b.exec("Reshape", x)
}

// Transpose permutes the axes of x; no axes reverses them (mx.transpose).
func (b *Backend) Transpose(x backend.Array, axes ...int) backend.Array {
	if !b.here() {
		axes := slices.Clone(axes)
		return b.away("Transpose", func() backend.Array { return b.Transpose(x, axes...) })
	}
	c := b.begin(C.MLXGO_OP_TRANSPOSE)
	if len(axes) > 0 || x == nil {
		b.ints("Transpose", &c.v0, axes)
	} else {
		one := [1]backend.Array{x}
		n := len(b.arg("Transpose", one[:], 0).shape)
		for i := range n {
			c.v0[i] = C.int(n - 1 - i)
		}
		c.n = C.size_t(n)
	}
	return b.exec("Transpose", x)
}

// bounds resolves start and stop against shape (negative values count from
// the end) into lo and hi, and checks 0 <= start <= stop <= dim on every
// axis: MLX would clamp, the contract does not.
func bounds(shape tensor.Shape, start, stop []int, lo, hi *[C.MLXGO_MAX_DIMS]C.int) error {
	if len(start) != len(shape) || len(stop) != len(shape) {
		return fmt.Errorf("start %v and stop %v need one entry per axis (%d)", slices.Clone(start), slices.Clone(stop), len(shape))
	}
	for i, d := range shape {
		l, h := start[i], stop[i]
		if l < 0 {
			l += d
		}
		if h < 0 {
			h += d
		}
		if l < 0 || l > h || h > d {
			return fmt.Errorf("axis %d: range [%d:%d] outside [0:%d]", i, start[i], stop[i], d)
		}
		lo[i], hi[i] = C.int(l), C.int(h)
	}
	return nil
}

// Slice takes x[start[i]:stop[i]] on every axis (step 1). Negative bounds
// count from the end; out-of-range bounds panic.
func (b *Backend) Slice(x backend.Array, start, stop []int) backend.Array {
	if !b.here() {
		start, stop := slices.Clone(start), slices.Clone(stop)
		return b.away("Slice", func() backend.Array { return b.Slice(x, start, stop) })
	}
	one := [1]backend.Array{x}
	a := b.arg("Slice", one[:], 0)
	c := b.begin(C.MLXGO_OP_SLICE)
	if err := bounds(a.shape, start, stop, &c.v0, &c.v1); err != nil {
		panic(backend.Errorf("Slice", []backend.Array{x}, "%v", err))
	}
	n := len(a.shape)
	for i := range n {
		c.v2[i] = 1
	}
	c.n = C.size_t(n)
	return b.exec("Slice", x)
}

// SliceUpdate returns dst with src written at start (mx slice_update: src is
// converted to dst's dtype and broadcast, its shape padded with leading 1s).
// Negative starts count from the end; a region outside dst panics. MLX
// reuses dst's buffer when nothing else holds it; dst stays valid either way.
func (b *Backend) SliceUpdate(dst, src backend.Array, start []int) backend.Array {
	if !b.here() {
		start := slices.Clone(start)
		return b.away("SliceUpdate", func() backend.Array { return b.SliceUpdate(dst, src, start) })
	}
	two := [2]backend.Array{dst, src}
	if dst == nil || src == nil {
		panic(backend.Errorf("SliceUpdate", slices.Clone(two[:]), "nil argument"))
	}
	d, s := b.arg("SliceUpdate", two[:], 0), b.arg("SliceUpdate", two[:], 1)
	ds, ss := d.shape, s.shape
	if len(ss) > len(ds) {
		panic(backend.Errorf("SliceUpdate", slices.Clone(two[:]), "src has more dimensions than dst"))
	}
	// stop = start + the region src covers (its shape padded with leading 1s).
	var stop [C.MLXGO_MAX_DIMS]int
	pad := len(ds) - len(ss)
	for i := range min(len(start), len(ds)) {
		r := 1
		if i >= pad {
			r = ss[i-pad]
		}
		stop[i] = start[i] + r
		if start[i] < 0 {
			stop[i] += ds[i]
		}
	}
	c := b.begin(C.MLXGO_OP_SLICE_UPDATE)
	if err := bounds(ds, start, stop[:len(ds)], &c.v0, &c.v1); err != nil {
		panic(backend.Errorf("SliceUpdate", slices.Clone(two[:]), "%v", err))
	}
	for i := range ds {
		c.v2[i] = 1
	}
	c.n = C.size_t(len(ds))
	return b.exec("SliceUpdate", dst, src)
}

// Concatenate joins arrays along axis (mx.concatenate).
func (b *Backend) Concatenate(axis int, xs ...backend.Array) backend.Array {
	if len(xs) == 0 {
		panic(&backend.OpError{Op: "Concatenate", Err: fmt.Errorf("no arrays")})
	}
	if !b.here() {
		xs := slices.Clone(xs)
		return b.away("Concatenate", func() backend.Array { return b.Concatenate(axis, xs...) })
	}
	b.begin(C.MLXGO_OP_CONCATENATE).i0 = C.int(axis)
	return b.exec("Concatenate", xs...)
}

// Take gathers whole slices of x along axis at integer indices (mx.take).
// Indices are not range-checked (they are data, and MLX is lazy).
func (b *Backend) Take(x, indices backend.Array, axis int) backend.Array {
	if indices != nil && (indices.DType().IsFloat() || indices.DType() == tensor.Bool) {
		panic(backend.Errorf("Take", []backend.Array{x, indices}, "indices must have an integer dtype"))
	}
	if !b.here() {
		return b.away("Take", func() backend.Array { return b.Take(x, indices, axis) })
	}
	b.begin(C.MLXGO_OP_TAKE).i0 = C.int(axis)
	return b.exec("Take", x, indices)
}

// reduce records a reduction-like op along axis with its flag (keepdims, or
// Softmax's precise).
func (b *Backend) reduce(op string, code C.int, x backend.Array, axis int, flag bool) backend.Array {
	if !b.here() {
		return b.away(op, func() backend.Array { return b.reduce(op, code, x, axis, flag) })
	}
	c := b.begin(code)
	c.i0, c.b0 = C.int(axis), C.bool(flag)
	return b.exec(op, x)
}

// Sum reduces along axis (mx.sum).
func (b *Backend) Sum(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.reduce("Sum", C.MLXGO_OP_SUM, x, axis, keepDims)
}

// Max reduces along axis (mx.max).
func (b *Backend) Max(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.reduce("Max", C.MLXGO_OP_MAX, x, axis, keepDims)
}

// Argmax returns the uint32 index of the largest element along axis (mx.argmax).
func (b *Backend) Argmax(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.reduce("Argmax", C.MLXGO_OP_ARGMAX, x, axis, keepDims)
}

// LogSumExp reduces along axis (mx.logsumexp).
func (b *Backend) LogSumExp(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.reduce("LogSumExp", C.MLXGO_OP_LOGSUMEXP, x, axis, keepDims)
}

// Softmax along axis (mx.softmax).
func (b *Backend) Softmax(x backend.Array, axis int, precise bool) backend.Array {
	return b.reduce("Softmax", C.MLXGO_OP_SOFTMAX, x, axis, precise)
}

// Matmul is mx.matmul.
func (b *Backend) Matmul(x, y backend.Array) backend.Array {
	if !b.here() {
		return b.away("Matmul", func() backend.Array { return b.Matmul(x, y) })
	}
	b.begin(C.MLXGO_OP_MATMUL)
	return b.exec("Matmul", x, y)
}
