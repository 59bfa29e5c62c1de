//go:build mlx

package metal

// #include "mlxgo.h"
//
// // The ops that take lists of dimensions read them during the call only and
// // never call Go (they free no borrowed array), so the lists may stay on
// // the Go stack: cgo keeps them there only when told both.
// #cgo noescape mlxgo_zeros
// #cgo nocallback mlxgo_zeros
// #cgo noescape mlxgo_reshape
// #cgo nocallback mlxgo_reshape
// #cgo noescape mlxgo_transpose
// #cgo nocallback mlxgo_transpose
// #cgo noescape mlxgo_slice
// #cgo nocallback mlxgo_slice
// #cgo noescape mlxgo_slice_update
// #cgo nocallback mlxgo_slice_update
import "C"

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Recording an op. An entry point checks what needs no MLX state, gathers
// its parameters in a value of the op's own args type and passes it, with
// the type's record method, to hop: the one place where an op crosses to
// the MLX thread. On that thread hop calls record at once; from any other
// goroutine it hands the thread a copy and waits. record checks the input
// arrays, calls the op's typed mlxgo_ function (mlxgo.h: one cgo call that
// records the op and writes the result's handle, shape and dtype into
// b.rec) and adopts the result (result).
//
// Nothing on that path allocates but the Array itself. An args value holds
// no slice of the caller's (lists of dimensions are copied into a dims, a
// fixed array), so nothing of the caller's escapes through the copy hop
// makes, and the lists reach C from the MLX thread's stack (the
// #cgo lines above). Error paths clone what they report before it
// escapes into an *OpError.

// hop runs record(p, b) on the MLX thread and returns its result: inline
// when the caller is that thread, else through away. After Close it panics
// with an *OpError naming op.
func hop[P, R any](b *Backend, op string, p P, record func(P, *Backend) R) R {
	if b.here() {
		return record(p, b)
	}
	return away(b, op, p, record)
}

// away is hop's other path: the closure holds its own copy of p.
//
//go:noinline
func away[P, R any](b *Backend, op string, p P, record func(P, *Backend) R) R {
	var out R
	b.do(op, func() { out = record(p, b) })
	return out
}

// result finishes an op whose mlxgo_ call returned rc: a failure panics
// with MLX's message as an *OpError naming op and args; otherwise the
// result in b.rec is adopted. MLX checks shapes and dtypes as it records, so
// a bad call fails here.
func (b *Backend) result(op string, rc C.int, args []backend.Array) *Array {
	b.ops++
	if rc != 0 {
		panic(b.opError(op, slices.Clone(args)))
	}
	r := &b.rec.r
	return b.adopt(op, r.res, int(r.ndim), &r.shape, r.dtype, false, args)
}

// dims is a list of dimensions, axes or bounds as mlx-c takes them, held by
// value.
type dims struct {
	n C.size_t
	v [C.MLXGO_MAX_DIMS]C.int
}

// set copies xs into d. More than MLXGO_MAX_DIMS entries panic with an
// *OpError naming op.
func (d *dims) set(op string, xs []int) {
	if len(xs) > len(d.v) {
		panic(&backend.OpError{Op: op, Err: fmt.Errorf("%d dimensions or axes, at most %d", len(xs), len(d.v))})
	}
	for i, x := range xs {
		d.v[i] = C.int(x)
	}
	d.n = C.size_t(len(xs))
}

// list returns the entries of d (for messages).
func (d *dims) list() []int {
	out := make([]int, d.n)
	for i := range out {
		out[i] = int(d.v[i])
	}
	return out
}

// noArray is the empty handle mlx-c takes for an optional array left out.
const noArray C.mlxgo_arr = 0

// ref is a's handle as the op functions take it: an integer, which cgo
// does not check as it does a pointer (mlxgo.h).
func (a *Array) ref() C.mlxgo_arr { return C.mlxgo_arr(uintptr(a.h.ctx)) }

// recorder is b.rec as the op functions take it (an integer, as ref).
func (b *Backend) recorder() C.mlxgo_rec { return C.mlxgo_rec(uintptr(unsafe.Pointer(b.rec))) }

type binaryArgs struct {
	op   backend.BinaryOp
	x, y backend.Array
}

// Binary applies op to a and b after broadcasting them together, with MLX's
// type promotion (comparisons give Bool).
func (b *Backend) Binary(op backend.BinaryOp, x, y backend.Array) backend.Array {
	if op < backend.Add || op > backend.Greater {
		panic(backend.Errorf(op.String(), []backend.Array{x, y}, "unknown binary op %d", int(op)))
	}
	return hop(b, op.String(), binaryArgs{op, x, y}, binaryArgs.record)
}

func (p binaryArgs) record(b *Backend) *Array {
	op := p.op.String()
	args := [2]backend.Array{p.x, p.y}
	x, y, r := b.arg(op, args[:], 0).ref(), b.arg(op, args[:], 1).ref(), b.recorder()
	var rc C.int
	switch p.op {
	case backend.Add:
		rc = C.mlxgo_add(r, x, y)
	case backend.Subtract:
		rc = C.mlxgo_subtract(r, x, y)
	case backend.Multiply:
		rc = C.mlxgo_multiply(r, x, y)
	case backend.Divide:
		rc = C.mlxgo_divide(r, x, y)
	case backend.Maximum:
		rc = C.mlxgo_maximum(r, x, y)
	case backend.Minimum:
		rc = C.mlxgo_minimum(r, x, y)
	case backend.Equal:
		rc = C.mlxgo_equal(r, x, y)
	case backend.Less:
		rc = C.mlxgo_less(r, x, y)
	case backend.Greater:
		rc = C.mlxgo_greater(r, x, y)
	}
	return b.result(op, rc, args[:])
}

type unaryArgs struct {
	op backend.UnaryOp
	x  backend.Array
}

// Unary applies op elementwise with MLX's kernels (integer inputs of the
// transcendental ops give F32). SiLU is mlx.nn.silu, compiled shapeless as
// mlx does: x * sigmoid(x).
func (b *Backend) Unary(op backend.UnaryOp, x backend.Array) backend.Array {
	if op == backend.SiLU {
		return b.builtin(op.String(), C.MLXGO_FN_SILU, x, nil)
	}
	if op < backend.Exp || op > backend.Cos {
		panic(backend.Errorf(op.String(), []backend.Array{x}, "unknown unary op %d", int(op)))
	}
	return hop(b, op.String(), unaryArgs{op, x}, unaryArgs.record)
}

func (p unaryArgs) record(b *Backend) *Array {
	op := p.op.String()
	args := [1]backend.Array{p.x}
	x, r := b.arg(op, args[:], 0).ref(), b.recorder()
	var rc C.int
	switch p.op {
	case backend.Exp:
		rc = C.mlxgo_exp(r, x)
	case backend.Log:
		rc = C.mlxgo_log(r, x)
	case backend.Negative:
		rc = C.mlxgo_negative(r, x)
	case backend.Abs:
		rc = C.mlxgo_abs(r, x)
	case backend.Sqrt:
		rc = C.mlxgo_sqrt(r, x)
	case backend.Rsqrt:
		rc = C.mlxgo_rsqrt(r, x)
	case backend.Square:
		rc = C.mlxgo_square(r, x)
	case backend.Sigmoid:
		rc = C.mlxgo_sigmoid(r, x)
	case backend.Tanh:
		rc = C.mlxgo_tanh(r, x)
	case backend.Sin:
		rc = C.mlxgo_sin(r, x)
	case backend.Cos:
		rc = C.mlxgo_cos(r, x)
	default:
		panic(backend.Errorf(op, slices.Clone(args[:]), "unknown unary op %d", int(p.op)))
	}
	return b.result(op, rc, args[:])
}

type asTypeArgs struct {
	x  backend.Array
	dt C.mlx_dtype
}

// AsType converts x to dt (mx.astype).
func (b *Backend) AsType(x backend.Array, dt tensor.DType) backend.Array {
	return hop(b, "AsType", asTypeArgs{x, mlxDType("AsType", dt)}, asTypeArgs.record)
}

func (p asTypeArgs) record(b *Backend) *Array {
	args := [1]backend.Array{p.x}
	x := b.arg("AsType", args[:], 0).ref()
	return b.result("AsType", C.mlxgo_astype(b.recorder(), x, p.dt), args[:])
}

type whereArgs struct{ cond, x, y backend.Array }

// Where picks a where cond is true and b elsewhere (mx.where).
func (b *Backend) Where(cond, x, y backend.Array) backend.Array {
	return hop(b, "Where", whereArgs{cond, x, y}, whereArgs.record)
}

func (p whereArgs) record(b *Backend) *Array {
	args := [3]backend.Array{p.cond, p.x, p.y}
	c, x, y := b.arg("Where", args[:], 0).ref(), b.arg("Where", args[:], 1).ref(), b.arg("Where", args[:], 2).ref()
	return b.result("Where", C.mlxgo_where(b.recorder(), c, x, y), args[:])
}

type reshapeArgs struct {
	x     backend.Array
	shape dims
}

// Reshape gives x a new shape of the same size; one dimension may be -1.
func (b *Backend) Reshape(x backend.Array, shape ...int) backend.Array {
	p := reshapeArgs{x: x}
	p.shape.set("Reshape", shape)
	return hop(b, "Reshape", p, reshapeArgs.record)
}

func (p reshapeArgs) record(b *Backend) *Array {
	args := [1]backend.Array{p.x}
	x := b.arg("Reshape", args[:], 0).ref()
	return b.result("Reshape", C.mlxgo_reshape(b.recorder(), x, &p.shape.v[0], p.shape.n), args[:])
}

type transposeArgs struct {
	x    backend.Array
	axes dims // none: reversed
}

// Transpose permutes the axes of x; no axes reverses them (mx.transpose).
func (b *Backend) Transpose(x backend.Array, axes ...int) backend.Array {
	p := transposeArgs{x: x}
	p.axes.set("Transpose", axes)
	return hop(b, "Transpose", p, transposeArgs.record)
}

func (p transposeArgs) record(b *Backend) *Array {
	args := [1]backend.Array{p.x}
	a := b.arg("Transpose", args[:], 0)
	if p.axes.n == 0 {
		n := len(a.shape)
		for i := range n {
			p.axes.v[i] = C.int(n - 1 - i)
		}
		p.axes.n = C.size_t(n)
	}
	return b.result("Transpose", C.mlxgo_transpose(b.recorder(), a.ref(), &p.axes.v[0], p.axes.n), args[:])
}

// bounds resolves start and stop against shape (negative values count from
// the end) into lo and hi, and checks 0 <= start <= stop <= dim on every
// axis: MLX would clamp, the contract does not.
func bounds(shape tensor.Shape, start, stop *dims, lo, hi *dims) error {
	if int(start.n) != len(shape) || int(stop.n) != len(shape) {
		return fmt.Errorf("start %v and stop %v need one entry per axis (%d)", start.list(), stop.list(), len(shape))
	}
	for i, d := range shape {
		l, h := int(start.v[i]), int(stop.v[i])
		if l < 0 {
			l += d
		}
		if h < 0 {
			h += d
		}
		if l < 0 || l > h || h > d {
			return fmt.Errorf("axis %d: range [%d:%d] outside [0:%d]", i, start.v[i], stop.v[i], d)
		}
		lo.v[i], hi.v[i] = C.int(l), C.int(h)
	}
	lo.n, hi.n = C.size_t(len(shape)), C.size_t(len(shape))
	return nil
}

type sliceArgs struct {
	x           backend.Array
	start, stop dims
}

// Slice takes x[start[i]:stop[i]] on every axis (step 1). Negative bounds
// count from the end; out-of-range bounds panic.
func (b *Backend) Slice(x backend.Array, start, stop []int) backend.Array {
	p := sliceArgs{x: x}
	p.start.set("Slice", start)
	p.stop.set("Slice", stop)
	return hop(b, "Slice", p, sliceArgs.record)
}

func (p sliceArgs) record(b *Backend) *Array {
	args := [1]backend.Array{p.x}
	a := b.arg("Slice", args[:], 0)
	var lo, hi dims
	if err := bounds(a.shape, &p.start, &p.stop, &lo, &hi); err != nil {
		panic(backend.Errorf("Slice", slices.Clone(args[:]), "%v", err))
	}
	return b.result("Slice", C.mlxgo_slice(b.recorder(), a.ref(), &lo.v[0], &hi.v[0], lo.n), args[:])
}

type sliceUpdateArgs struct {
	dst, src backend.Array
	start    dims
}

// SliceUpdate returns dst with src written at start (mx slice_update: src is
// converted to dst's dtype and broadcast, its shape padded with leading 1s).
// Negative starts count from the end; a region outside dst panics. MLX
// reuses dst's buffer when nothing else holds it; dst stays valid either way.
func (b *Backend) SliceUpdate(dst, src backend.Array, start []int) backend.Array {
	p := sliceUpdateArgs{dst: dst, src: src}
	p.start.set("SliceUpdate", start)
	return hop(b, "SliceUpdate", p, sliceUpdateArgs.record)
}

func (p sliceUpdateArgs) record(b *Backend) *Array {
	args := [2]backend.Array{p.dst, p.src}
	if p.dst == nil || p.src == nil {
		panic(backend.Errorf("SliceUpdate", slices.Clone(args[:]), "nil argument"))
	}
	d, s := b.arg("SliceUpdate", args[:], 0), b.arg("SliceUpdate", args[:], 1)
	ds, ss := d.shape, s.shape
	if len(ss) > len(ds) {
		panic(backend.Errorf("SliceUpdate", slices.Clone(args[:]), "src has more dimensions than dst"))
	}
	// stop = start + the region src covers (its shape padded with leading 1s).
	var stop dims
	pad := len(ds) - len(ss)
	for i := range min(int(p.start.n), len(ds)) {
		r := 1
		if i >= pad {
			r = ss[i-pad]
		}
		stop.v[i] = p.start.v[i] + C.int(r)
		if p.start.v[i] < 0 {
			stop.v[i] += C.int(ds[i])
		}
	}
	stop.n = C.size_t(len(ds))
	var lo, hi dims
	if err := bounds(ds, &p.start, &stop, &lo, &hi); err != nil {
		panic(backend.Errorf("SliceUpdate", slices.Clone(args[:]), "%v", err))
	}
	return b.result("SliceUpdate", C.mlxgo_slice_update(b.recorder(), d.ref(), s.ref(), &lo.v[0], &hi.v[0], lo.n), args[:])
}

type concatenateArgs struct {
	axis int
	n    int
	few  [4]backend.Array // the arrays, when there are at most four
	many []backend.Array  // else a copy of them
}

// Concatenate joins arrays along axis (mx.concatenate).
func (b *Backend) Concatenate(axis int, xs ...backend.Array) backend.Array {
	if len(xs) == 0 {
		panic(&backend.OpError{Op: "Concatenate", Err: fmt.Errorf("no arrays")})
	}
	p := concatenateArgs{axis: axis, n: len(xs)}
	if len(xs) <= len(p.few) {
		copy(p.few[:], xs)
	} else {
		p.many = slices.Clone(xs)
	}
	return hop(b, "Concatenate", p, concatenateArgs.record)
}

func (p concatenateArgs) record(b *Backend) *Array {
	xs := p.many
	if xs == nil {
		xs = p.few[:p.n]
	}
	if len(xs) > len(b.args.s) {
		b.args.reserve(len(xs))
	}
	hs := b.args.s
	for i := range xs {
		hs[i] = b.arg("Concatenate", xs, i).h
	}
	return b.result("Concatenate", C.mlxgo_concatenate(b.recorder(), b.args.p, C.size_t(len(xs)), C.int(p.axis)), xs)
}

type takeArgs struct {
	x, indices backend.Array
	axis       int
}

// Take gathers whole slices of x along axis at integer indices (mx.take).
// Indices are not range-checked (they are data, and MLX is lazy).
func (b *Backend) Take(x, indices backend.Array, axis int) backend.Array {
	if indices != nil && (indices.DType().IsFloat() || indices.DType() == tensor.Bool) {
		panic(backend.Errorf("Take", []backend.Array{x, indices}, "indices must have an integer dtype"))
	}
	return hop(b, "Take", takeArgs{x, indices, axis}, takeArgs.record)
}

func (p takeArgs) record(b *Backend) *Array {
	args := [2]backend.Array{p.x, p.indices}
	x, i := b.arg("Take", args[:], 0).ref(), b.arg("Take", args[:], 1).ref()
	return b.result("Take", C.mlxgo_take(b.recorder(), x, i, C.int(p.axis)), args[:])
}

// reduction names the ops that reduceArgs records.
type reduction int

const (
	sum reduction = iota
	maxAlong
	argmax
	logSumExp
	softmax
)

var reductionNames = [...]string{sum: "Sum", maxAlong: "Max", argmax: "Argmax", logSumExp: "LogSumExp", softmax: "Softmax"}

type reduceArgs struct {
	op   reduction
	x    backend.Array
	axis int
	flag bool // keepdims, or Softmax's precise
}

func (p reduceArgs) record(b *Backend) *Array {
	op := reductionNames[p.op]
	args := [1]backend.Array{p.x}
	x, r, axis, flag := b.arg(op, args[:], 0).ref(), b.recorder(), C.int(p.axis), C.bool(p.flag)
	var rc C.int
	switch p.op {
	case sum:
		rc = C.mlxgo_sum(r, x, axis, flag)
	case maxAlong:
		rc = C.mlxgo_max(r, x, axis, flag)
	case argmax:
		rc = C.mlxgo_argmax(r, x, axis, flag)
	case logSumExp:
		rc = C.mlxgo_logsumexp(r, x, axis, flag)
	case softmax:
		rc = C.mlxgo_softmax(r, x, axis, flag)
	}
	return b.result(op, rc, args[:])
}

// Sum reduces along axis (mx.sum).
func (b *Backend) Sum(x backend.Array, axis int, keepDims bool) backend.Array {
	return hop(b, "Sum", reduceArgs{sum, x, axis, keepDims}, reduceArgs.record)
}

// Max reduces along axis (mx.max).
func (b *Backend) Max(x backend.Array, axis int, keepDims bool) backend.Array {
	return hop(b, "Max", reduceArgs{maxAlong, x, axis, keepDims}, reduceArgs.record)
}

// Argmax returns the uint32 index of the largest element along axis (mx.argmax).
func (b *Backend) Argmax(x backend.Array, axis int, keepDims bool) backend.Array {
	return hop(b, "Argmax", reduceArgs{argmax, x, axis, keepDims}, reduceArgs.record)
}

// LogSumExp reduces along axis (mx.logsumexp).
func (b *Backend) LogSumExp(x backend.Array, axis int, keepDims bool) backend.Array {
	return hop(b, "LogSumExp", reduceArgs{logSumExp, x, axis, keepDims}, reduceArgs.record)
}

// Softmax along axis (mx.softmax).
func (b *Backend) Softmax(x backend.Array, axis int, precise bool) backend.Array {
	return hop(b, "Softmax", reduceArgs{softmax, x, axis, precise}, reduceArgs.record)
}

type matmulArgs struct{ x, y backend.Array }

// Matmul is mx.matmul.
func (b *Backend) Matmul(x, y backend.Array) backend.Array {
	return hop(b, "Matmul", matmulArgs{x, y}, matmulArgs.record)
}

func (p matmulArgs) record(b *Backend) *Array {
	args := [2]backend.Array{p.x, p.y}
	x, y := b.arg("Matmul", args[:], 0).ref(), b.arg("Matmul", args[:], 1).ref()
	return b.result("Matmul", C.mlxgo_matmul(b.recorder(), x, y), args[:])
}

type zerosArgs struct {
	shape dims
	dt    C.mlx_dtype
}

func (p zerosArgs) record(b *Backend) *Array {
	return b.result("Zeros", C.mlxgo_zeros(b.recorder(), &p.shape.v[0], p.shape.n, p.dt), nil)
}
