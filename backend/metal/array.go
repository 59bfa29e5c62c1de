//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/internal/lifetime"
	"github.com/mlxgo/mlxgo/tensor"
)

// Array is an MLX array: an mlx_array handle with its dtype and shape cached
// in Go, so asking for them never crosses into C. The handle is freed by
// Release, by the scope that owns the array, or by Backend.Close.
type Array struct {
	lifeState // its owner, scope and safety net (package lifetime)
	h         C.mlx_array
	dtype     tensor.DType
	shape     tensor.Shape // in dims when the rank fits
	borrowed  bool         // aliases caller memory; not counted in LiveBytes
	dims      [4]int
}

// lifeState is embedded under this name so that the field stays unexported.
type lifeState = lifetime.State

// DType returns the element type. It stays valid after Release.
func (a *Array) DType() tensor.DType {
	if a == nil {
		return tensor.Invalid
	}
	return a.dtype
}

// Shape returns a copy of the dimensions. It stays valid after Release.
func (a *Array) Shape() tensor.Shape {
	if a == nil {
		return nil
	}
	return a.shape.Clone()
}

// String describes the array for messages.
func (a *Array) String() string { return fmt.Sprintf("mlx.Array(%v %v)", a.dtype, a.shape) }

func (a *Array) nbytes() int64 {
	if a.borrowed {
		return 0
	}
	return int64(a.shape.Size() * a.dtype.Size())
}

// tracker is the lifetime layer of this backend's arrays (package
// lifetime); a root is what the safety net needs to free the handle of an
// array at the outermost level that was dropped without Release.
type tracker = lifetime.Tracker[*Array, root]

type root struct {
	h     C.mlx_array
	bytes int64
}

// scope is a backend.Scope.
type scope = lifetime.Scope[*Array, root]

// hooks plug the MLX handles into the tracker. Every array owns its handle
// and counts its own bytes; the tracker runs on the MLX thread.
type hooks struct{ b *Backend }

// Free frees the handles in one cgo call (a closing scope passes all of
// its arrays).
func (h hooks) Free(arrays []*Array) int64 {
	var n int64
	if len(arrays) == 1 {
		a := arrays[0]
		C.mlx_array_free(a.h)
		return a.nbytes()
	}
	h.b.dead.reserve(len(arrays))
	hs := h.b.dead.s
	for i, a := range arrays {
		hs[i] = a.h
		n += a.nbytes()
	}
	C.mlxgo_free_arrays(h.b.dead.p, C.size_t(len(arrays)))
	return n
}

func (hooks) Root(a *Array) root { return root{a.h, a.nbytes()} }

func (hooks) Drop(r root) int64 {
	C.mlx_array_free(r.h)
	return r.bytes
}

func (h hooks) OnThread() bool           { return h.b.here() }
func (h hooks) Run(op string, fn func()) { h.b.do(op, fn) }

// handles is a growable buffer of handles in C memory, which cgo calls take
// without checking it for Go pointers. MLX thread only.
type handles struct {
	p *C.mlx_array
	s []C.mlx_array // the buffer, len = capacity
}

// reserve makes room for n handles and returns the buffer's address (which
// changes when it grows; the contents are not kept).
func (h *handles) reserve(n int) *C.mlx_array {
	if n > len(h.s) {
		h.free()
		n = max(n, 2*len(h.s), 8)
		h.p = (*C.mlx_array)(C.calloc(C.size_t(n), C.sizeof_mlx_array))
		if h.p == nil {
			panic(&backend.OpError{Op: "mlx", Err: errors.New("out of memory")})
		}
		h.s = unsafe.Slice(h.p, n)
	}
	return h.p
}

func (h *handles) free() {
	C.free(unsafe.Pointer(h.p))
	h.p, h.s = nil, nil
}

// dtypes maps mlx_dtype values to tensor dtypes (Invalid where mlxgo has none).
var dtypes = func() (t [C.MLX_COMPLEX64 + 1]tensor.DType) {
	for k, v := range toDType {
		t[k] = v
	}
	return t
}()

var toDType = map[C.mlx_dtype]tensor.DType{
	C.MLX_BOOL: tensor.Bool, C.MLX_UINT8: tensor.U8, C.MLX_UINT16: tensor.U16, C.MLX_UINT32: tensor.U32,
	C.MLX_UINT64: tensor.U64, C.MLX_INT8: tensor.I8, C.MLX_INT16: tensor.I16, C.MLX_INT32: tensor.I32,
	C.MLX_INT64: tensor.I64, C.MLX_FLOAT16: tensor.F16, C.MLX_FLOAT32: tensor.F32,
	C.MLX_FLOAT64: tensor.F64, C.MLX_BFLOAT16: tensor.BF16,
}

var fromDType = func() map[tensor.DType]C.mlx_dtype {
	m := map[tensor.DType]C.mlx_dtype{}
	for k, v := range toDType {
		m[v] = k
	}
	return m
}()

// mlxDType converts dt, panicking with an *OpError for a dtype MLX lacks.
func mlxDType(op string, dt tensor.DType) C.mlx_dtype {
	d, ok := fromDType[dt]
	if !ok {
		panic(&backend.OpError{Op: op, DTypes: []string{dt.String()}, Err: fmt.Errorf("dtype %v: %w", dt, backend.ErrUnsupported)})
	}
	return d
}

// wrap makes an Array of a fresh handle h (produced by op): reads its shape
// and dtype (one more cgo call; ops recorded through exec get them with the
// op) and adopts it. If rc reports a failure, h is freed and wrap panics
// with an *OpError naming op and its arguments. MLX thread only.
func (b *Backend) wrap(op string, rc C.int, h C.mlx_array, args ...backend.Array) *Array {
	return b.wrapAs(op, rc, h, false, args)
}

// wrapAs is wrap with the borrowed flag (not counted in LiveBytes).
func (b *Backend) wrapAs(op string, rc C.int, h C.mlx_array, borrowed bool, args []backend.Array) *Array {
	if rc != 0 || h.ctx == nil {
		C.mlx_array_free(h)
		panic(b.opError(op, args))
	}
	var ndim, dt C.int
	var dims [C.MLXGO_MAX_DIMS]C.int
	if C.mlxgo_meta(h, &ndim, &dims[0], &dt) != 0 {
		C.mlx_array_free(h)
		panic(b.opError(op, args))
	}
	return b.adopt(op, h, int(ndim), &dims, dt, borrowed, args)
}

// adopt makes an Array of the fresh handle h with the given rank, dimensions
// and mlx_dtype, counts it and puts it in the innermost open scope, or at
// the outermost level with an entry and the safety net. MLX thread only.
func (b *Backend) adopt(op string, h C.mlx_array, ndim int, dims *[C.MLXGO_MAX_DIMS]C.int, dt C.int, borrowed bool, args []backend.Array) *Array {
	var dtype tensor.DType
	if dt >= 0 && int(dt) < len(dtypes) {
		dtype = dtypes[dt]
	}
	if dtype == tensor.Invalid {
		C.mlx_array_free(h)
		panic(backend.Errorf(op, slices.Clone(args), "MLX produced dtype %d, which mlxgo has no name for", int(dt)))
	}
	a := &Array{h: h, dtype: dtype, borrowed: borrowed}
	if ndim <= len(a.dims) {
		a.shape = a.dims[:ndim:ndim]
	} else {
		a.shape = make(tensor.Shape, ndim)
	}
	for i := range a.shape {
		a.shape[i] = int(dims[i])
	}
	b.life.Add(a, a.nbytes())
	return a
}

// opError builds the *OpError for a failed MLX call, with MLX's message.
func (b *Backend) opError(op string, args []backend.Array) *backend.OpError {
	e := backend.Errorf(op, args, "")
	e.Err = takeError()
	return e
}

// use checks that every x is a live array of b and returns them. A nil,
// released or foreign array panics with an *OpError naming op.
func (b *Backend) use(op string, xs ...backend.Array) []*Array {
	out := make([]*Array, len(xs))
	for i := range xs {
		out[i] = b.arg(op, xs, i)
	}
	return out
}

// arg checks that args[i] is a live array of b and returns it; a nil,
// released or foreign array panics with an *OpError naming op. It does not
// allocate (args stays on the caller's stack) unless it panics.
func (b *Backend) arg(op string, args []backend.Array, i int) *Array { return b.life.Arg(op, args, i) }

// here reports whether the caller may call MLX inline: the backend is open
// and this is its MLX thread. Every entry point checks it first and, when
// false, hands itself to the MLX thread through do (which also reports a
// closed backend or an exited thread).
func (b *Backend) here() bool { return !b.closed && b.w.here() }

// do checks that b is open and runs fn on the MLX thread.
func (b *Backend) do(op string, fn func()) {
	if b.closed {
		panic(&backend.OpError{Op: op, Err: fmt.Errorf("backend is closed")})
	}
	b.run(fn)
}

// checkDense panics unless t is a well-formed host tensor.
func checkDense(op string, t *tensor.Dense) {
	if t == nil {
		panic(&backend.OpError{Op: op, Err: fmt.Errorf("nil tensor")})
	}
	fail := func(format string, a ...any) {
		panic(&backend.OpError{Op: op, Shapes: []string{t.Shape.String()}, DTypes: []string{t.DType.String()}, Err: fmt.Errorf(format, a...)})
	}
	if t.DType.Size() == 0 {
		fail("invalid dtype")
	}
	for i, d := range t.Shape {
		if d < 0 {
			fail("negative dimension %d at axis %d", d, i)
		}
	}
	if len(t.Shape) > C.MLXGO_MAX_DIMS {
		fail("%d dimensions, at most %d", len(t.Shape), C.MLXGO_MAX_DIMS)
	}
	if want := t.Shape.Size() * t.DType.Size(); len(t.Data) != want {
		fail("%d data bytes, want %d", len(t.Data), want)
	}
}

// cints converts dimensions or indices to C ints. The capacity is at least
// one, so ptr works for scalars too.
func cints(xs []int) []C.int {
	out := make([]C.int, len(xs), len(xs)+1)
	for i, x := range xs {
		out[i] = C.int(x)
	}
	return out
}

// ptr returns the address of the first element of s (made by cints).
func ptr(s []C.int) *C.int { return &s[:1][0] }

// FromHost copies t into a new array.
func (b *Backend) FromHost(t *tensor.Dense) backend.Array {
	checkDense("FromHost", t)
	var out *Array
	b.do("FromHost", func() {
		dt := mlxDType("FromHost", t.DType)
		shape := cints(t.Shape)
		var data unsafe.Pointer
		if len(t.Data) > 0 {
			data = unsafe.Pointer(&t.Data[0])
		}
		h := C.mlx_array_new_data(data, ptr(shape), C.int(len(shape)), dt)
		out = b.wrap("FromHost", 0, h)
	})
	return out
}

// ToHost evaluates a and returns its contents in a new host tensor.
func (b *Backend) ToHost(x backend.Array) (t *tensor.Dense, err error) {
	b.do("ToHost", func() {
		a := b.use("ToHost", x)[0]
		t = tensor.New(a.dtype, a.shape)
		var dst unsafe.Pointer
		if len(t.Data) > 0 {
			dst = unsafe.Pointer(&t.Data[0])
		}
		switch C.mlxgo_to_host(a.h, b.s, dst, C.size_t(len(t.Data))) {
		case 0:
		case 2:
			t, err = nil, backend.Errorf("ToHost", []backend.Array{x}, "MLX array size differs from its cached shape and dtype")
		default:
			t, err = nil, b.opError("ToHost", []backend.Array{x})
		}
	})
	return t, err
}

// Eval computes the given arrays and returns MLX's error if computing fails.
// Nil arguments are skipped. It also frees handles the garbage-collector
// safety net found.
func (b *Backend) Eval(arrays ...backend.Array) (err error) {
	return b.eval("Eval", false, arrays)
}

// AsyncEval starts computing the given arrays and returns at once (as
// mx.async_eval); a later Eval or ToHost waits for them.
func (b *Backend) AsyncEval(arrays ...backend.Array) error {
	return b.eval("AsyncEval", true, arrays)
}

func (b *Backend) eval(op string, async bool, arrays []backend.Array) (err error) {
	if !b.here() {
		arrays := slices.Clone(arrays) // the caller's slice stays on its stack
		b.do(op, func() { err = b.eval(op, async, arrays) })
		return err
	}
	b.life.Drain()
	b.evals.reserve(len(arrays))
	hs := b.evals.s
	n := 0
	for i, x := range arrays {
		if x != nil {
			hs[n] = b.arg(op, arrays, i).h
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if C.mlxgo_eval(b.evals.p, C.size_t(n), C.bool(async)) != 0 {
		var args []backend.Array
		for _, x := range arrays {
			if x != nil {
				args = append(args, x)
			}
		}
		return b.opError(op, args)
	}
	return nil
}

// Release frees arrays now. Nil and already-released arrays are skipped;
// another backend's array panics.
func (b *Backend) Release(arrays ...backend.Array) {
	if !b.here() {
		arrays := slices.Clone(arrays) // the caller's slice stays on its stack
		b.do("Release", func() { b.Release(arrays...) })
		return
	}
	b.life.Release(arrays...)
}

// Stats reports live arrays (borrowed ones included), the bytes their shapes
// and dtypes describe (borrowed memory not counted; a lazy array counts
// before it is computed), the peak of those bytes, and the arrays the
// garbage-collector safety net had to free. MLX's own allocator counters are
// in Memory. Called from another goroutine, it runs on the MLX thread (and
// waits for the call in progress there).
func (b *Backend) Stats() (s backend.Stats) {
	if b.closed || b.here() {
		return b.life.Stats()
	}
	b.do("Stats", func() { s = b.life.Stats() })
	return s
}

// checkShape panics unless every dimension is non-negative and dt is valid.
func checkShape(op string, shape tensor.Shape, dt tensor.DType) {
	fail := func(format string, a ...any) {
		panic(&backend.OpError{Op: op, Shapes: []string{shape.String()}, DTypes: []string{dt.String()}, Err: fmt.Errorf(format, a...)})
	}
	if dt.Size() == 0 {
		fail("invalid dtype")
	}
	for i, d := range shape {
		if d < 0 {
			fail("negative dimension %d at axis %d", d, i)
		}
	}
}

// Zeros returns an array of zeros.
func (b *Backend) Zeros(shape tensor.Shape, dt tensor.DType) backend.Array {
	checkShape("Zeros", shape, dt)
	p := zerosArgs{dt: mlxDType("Zeros", dt)}
	p.shape.set("Zeros", shape)
	return hop(b, "Zeros", p, zerosArgs.record)
}

// Full returns an array filled with v converted to dt as MLX's full does
// (through float32 for f16 and bf16; truncation for integers). The
// conversion happens on the host (tensor.Convert), so it does not depend on
// the device having float64.
func (b *Backend) Full(shape tensor.Shape, v float64, dt tensor.DType) backend.Array {
	checkShape("Full", shape, dt)
	one := tensor.FromFloat64(tensor.Shape{}, []float64{v}).Convert(dt)
	var out *Array
	b.do("Full", func() {
		d := mlxDType("Full", dt)
		val := C.mlx_array_new_data(unsafe.Pointer(&one.Data[0]), nil, 0, d)
		if val.ctx == nil {
			panic(b.opError("Full", nil))
		}
		defer C.mlx_array_free(val)
		s := cints(shape)
		var h C.mlx_array
		rc := C.mlx_full(&h, ptr(s), C.size_t(len(s)), val, d, b.s)
		out = b.wrap("Full", rc, h)
	})
	return out
}

// Scope opens a scope nested in the innermost open one. Its Keep and Close
// run on the MLX thread; Close frees its arrays in one cgo call (MLX keeps
// what a pending graph still needs).
func (b *Backend) Scope() backend.Scope {
	if !b.here() {
		var s backend.Scope
		b.do("Scope", func() { s = b.Scope() })
		return s
	}
	return b.life.Open()
}
