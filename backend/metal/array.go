//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Array is an MLX array: an mlx_array handle with its dtype and shape cached
// in Go, so asking for them never crosses into C. The handle is freed by
// Release, by the scope that owns the array, or by Backend.Close.
type Array struct {
	h        C.mlx_array
	dtype    tensor.DType
	shape    tensor.Shape
	owner    *Backend
	borrowed bool // aliases caller memory; not counted in LiveBytes
	released bool
	scope    *scope // the scope that frees it; nil at the outermost level
	id       uint64
	cleanup  runtime.Cleanup
}

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

// ledger owns every live handle. It is touched on the MLX thread, except by
// the garbage-collector safety net, which only moves a handle to the orphan
// list (under mu); the MLX thread frees orphans at its next Eval, scope
// Close, Release or Close.
type ledger struct {
	mu      sync.Mutex
	next    uint64
	live    map[uint64]*entry
	orphans []C.mlx_array
	stats   backend.Stats
}

type entry struct {
	h     C.mlx_array
	bytes int64
	a     weak.Pointer[Array]
}

func newLedger() *ledger { return &ledger{live: map[uint64]*entry{}} }

func (l *ledger) add(a *Array) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	a.id = l.next
	n := a.nbytes()
	l.live[a.id] = &entry{h: a.h, bytes: n, a: weak.Make(a)}
	l.stats.LiveArrays++
	l.stats.LiveBytes += n
	l.stats.PeakBytes = max(l.stats.PeakBytes, l.stats.LiveBytes)
}

// drop removes id from the accounting and returns its handle (ctx nil when
// already gone). gc says the safety net found it.
func (l *ledger) drop(id uint64, gc bool) C.mlx_array {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.live[id]
	if !ok {
		return C.mlx_array{}
	}
	delete(l.live, id)
	l.stats.LiveArrays--
	l.stats.LiveBytes -= e.bytes
	if gc {
		l.stats.LeakedByGC++
		l.orphans = append(l.orphans, e.h)
		return C.mlx_array{}
	}
	return e.h
}

// freeOrphans frees the handles the safety net queued. MLX thread only.
func (l *ledger) freeOrphans() {
	l.mu.Lock()
	hs := l.orphans
	l.orphans = nil
	l.mu.Unlock()
	for _, h := range hs {
		C.mlx_array_free(h)
	}
}

// freeAll frees every live handle and marks its Array released. MLX thread only.
func (l *ledger) freeAll() {
	l.freeOrphans()
	l.mu.Lock()
	live := l.live
	l.live = map[uint64]*entry{}
	l.stats.LiveArrays, l.stats.LiveBytes = 0, 0
	l.mu.Unlock()
	for _, e := range live {
		if a := e.a.Value(); a != nil {
			a.released = true
			a.cleanup.Stop()
		}
		C.mlx_array_free(e.h)
	}
}

func (l *ledger) snapshot() backend.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

type gcNote struct {
	l  *ledger
	id uint64
}

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
// and dtype, puts it in the innermost open scope and in the ledger, and arms
// the safety net. If rc reports a failure, h is freed and wrap panics with an
// *OpError naming op and its arguments. MLX thread only.
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
	dtype, ok := toDType[C.mlx_dtype(dt)]
	if !ok {
		C.mlx_array_free(h)
		panic(backend.Errorf(op, args, "MLX produced dtype %d, which mlxgo has no name for", int(dt)))
	}
	shape := make(tensor.Shape, int(ndim))
	for i := range shape {
		shape[i] = int(dims[i])
	}
	a := &Array{h: h, dtype: dtype, shape: shape, owner: b, borrowed: borrowed}
	b.ledger.add(a)
	a.cleanup = runtime.AddCleanup(a, func(n gcNote) { n.l.drop(n.id, true) }, gcNote{b.ledger, a.id})
	if n := len(b.scopes); n > 0 {
		s := b.scopes[n-1]
		a.scope = s
		s.arrays = append(s.arrays, a)
	}
	return a
}

// opError builds the *OpError for a failed MLX call, with MLX's message.
func (b *Backend) opError(op string, args []backend.Array) *backend.OpError {
	e := backend.Errorf(op, args, "")
	e.Err = takeError()
	return e
}

// release frees a now (idempotent). MLX thread only.
func (b *Backend) release(a *Array) {
	if a.released {
		return
	}
	a.released = true
	a.cleanup.Stop()
	a.scope = nil
	if h := b.ledger.drop(a.id, false); h.ctx != nil {
		C.mlx_array_free(h)
	}
}

// use checks that every x is a live array of b and returns them. A nil,
// released or foreign array panics with an *OpError naming op.
func (b *Backend) use(op string, xs ...backend.Array) []*Array {
	out := make([]*Array, len(xs))
	for i, x := range xs {
		a, ok := x.(*Array)
		switch {
		case x == nil || (ok && a == nil):
			panic(backend.Errorf(op, xs, "argument %d is nil", i))
		case !ok:
			panic(backend.Errorf(op, xs, "argument %d is a %T, not an array of this mlx backend", i, x))
		case a.owner != b:
			panic(backend.Errorf(op, xs, "argument %d belongs to another backend", i))
		case a.released:
			panic(backend.Errorf(op, xs, "argument %d was released", i))
		}
		out[i] = a
	}
	return out
}

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
	b.do(op, func() {
		b.ledger.freeOrphans()
		var hs []C.mlx_array
		var args []backend.Array
		for _, x := range arrays {
			if x != nil {
				hs = append(hs, b.use(op, x)[0].h)
				args = append(args, x)
			}
		}
		if len(hs) == 0 {
			return
		}
		if C.mlxgo_eval(&hs[0], C.size_t(len(hs)), C.bool(async)) != 0 {
			err = b.opError(op, args)
		}
	})
	return err
}

// Release frees arrays now. Nil and already-released arrays are skipped;
// another backend's array panics.
func (b *Backend) Release(arrays ...backend.Array) {
	b.do("Release", func() {
		for _, x := range arrays {
			if x == nil {
				continue
			}
			a, ok := x.(*Array)
			switch {
			case ok && a == nil:
			case !ok || a.owner != b:
				panic(backend.Errorf("Release", []backend.Array{x}, "not an array of this mlx backend"))
			default:
				b.release(a)
			}
		}
		b.ledger.freeOrphans()
	})
}

// Stats reports live arrays (borrowed ones included), the bytes their shapes
// and dtypes describe (borrowed memory not counted; a lazy array counts
// before it is computed), the peak of those bytes, and the arrays the
// garbage-collector safety net had to free. MLX's own allocator counters are
// in Memory.
func (b *Backend) Stats() backend.Stats { return b.ledger.snapshot() }

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
	var out *Array
	b.do("Zeros", func() {
		s := cints(shape)
		var h C.mlx_array
		rc := C.mlx_zeros(&h, ptr(s), C.size_t(len(s)), mlxDType("Zeros", dt), b.s)
		out = b.wrap("Zeros", rc, h)
	})
	return out
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

// scope is a backend.Scope: it frees its arrays at Close.
type scope struct {
	b      *Backend
	parent *scope
	depth  int
	arrays []*Array
	closed bool
}

// Scope opens a scope nested in the innermost open one.
func (b *Backend) Scope() backend.Scope {
	var s *scope
	b.do("Scope", func() {
		s = &scope{b: b}
		if n := len(b.scopes); n > 0 {
			s.parent = b.scopes[n-1]
			s.depth = s.parent.depth + 1
		}
		b.scopes = append(b.scopes, s)
	})
	return s
}

// Keep moves arrays of this scope to the enclosing one (or to the outermost
// level) and returns the first. Arrays that already belong to an enclosing
// scope or to the outermost level stay where they are. Keeping a released
// array, an array of a still-open inner scope, or keeping on a closed scope
// panics with an *OpError.
func (s *scope) Keep(arrays ...backend.Array) backend.Array {
	s.b.do("Keep", func() {
		as := s.b.use("Keep", arrays...)
		if s.closed {
			panic(backend.Errorf("Keep", arrays, "scope is closed"))
		}
		for _, a := range as {
			switch {
			case a.scope == s:
				a.scope = s.parent
				if s.parent != nil {
					s.parent.arrays = append(s.parent.arrays, a)
				}
			case a.scope != nil && a.scope.depth > s.depth:
				panic(backend.Errorf("Keep", arrays, "array belongs to an inner scope that is still open"))
			}
		}
	})
	if len(arrays) == 0 {
		return nil
	}
	return arrays[0]
}

// Close releases every array of the scope that was not kept, on the MLX
// thread (MLX keeps what a pending graph still needs). Inner scopes still
// open are closed first. Closing twice, or after the backend closed, is allowed.
func (s *scope) Close() {
	if s.closed || s.b.closed {
		s.closed = true
		return
	}
	b := s.b
	b.run(func() {
		at := -1
		for i, o := range b.scopes {
			if o == s {
				at = i
				break
			}
		}
		if at >= 0 {
			for len(b.scopes) > at+1 {
				b.scopes[len(b.scopes)-1].Close()
			}
			b.scopes = b.scopes[:at]
		}
		for _, a := range s.arrays {
			if a.scope == s {
				b.release(a)
			}
		}
		s.arrays = nil
		s.closed = true
		b.ledger.freeOrphans()
	})
}
