//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Array is an MLX array: an mlx_array handle with its dtype and shape cached
// in Go, so asking for them never crosses into C. The handle is freed by
// Release, by the scope that owns the array, or by Backend.Close.
type Array struct {
	h        C.mlx_array
	dtype    tensor.DType
	shape    tensor.Shape // in dims when the rank fits
	owner    *Backend
	borrowed bool // aliases caller memory; not counted in LiveBytes
	released bool
	scope    *scope // the scope that frees it; nil at the outermost level
	id       uint64 // its ledger entry, at the outermost level
	cleanup  runtime.Cleanup
	dims     [4]int
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

// ledger counts every live array and holds an entry for each one at the
// outermost level. An array in a scope needs no entry: the scope's list keeps
// it reachable until the scope's Close frees it, so a garbage-collector
// cleanup could never run for it. An array at the outermost level (made with
// no scope open, or kept out of the outermost scope) lives until Release and
// may be forgotten: it gets an entry and a cleanup, the safety net, which
// only moves its handle to the orphan list (under mu); the MLX thread frees
// orphans at its next Eval, scope Close, Release or Close.
//
// The counters are atomic: the MLX thread changes them, the safety net
// lowers them from the cleanup goroutine, and Stats reads them anywhere.
type ledger struct {
	arrays, bytes, peak, leaked atomic.Int64

	mu      sync.Mutex
	next    uint64
	roots   map[uint64]root
	orphans []C.mlx_array
}

type root struct {
	h     C.mlx_array
	bytes int64
}

func newLedger() *ledger { return &ledger{roots: map[uint64]root{}} }

// count adds one live array of n bytes. MLX thread only (it alone raises
// the peak).
func (l *ledger) count(n int64) {
	l.arrays.Add(1)
	if v := l.bytes.Add(n); v > l.peak.Load() {
		l.peak.Store(v)
	}
}

// uncount removes k live arrays of n bytes in all.
func (l *ledger) uncount(k, n int64) {
	l.arrays.Add(-k)
	l.bytes.Add(-n)
}

// addRoot gives a (counted, at the outermost level) an entry and arms the
// safety net. MLX thread only.
func (l *ledger) addRoot(a *Array) {
	l.mu.Lock()
	l.next++
	a.id = l.next
	l.roots[a.id] = root{h: a.h, bytes: a.nbytes()}
	l.mu.Unlock()
	a.cleanup = runtime.AddCleanup(a, gcDrop, gcNote{l, a.id})
}

// dropRoot removes a's entry and disarms the safety net; it reports whether
// the entry was there (it is not after freeAll). MLX thread only.
func (l *ledger) dropRoot(a *Array) bool {
	a.cleanup.Stop()
	l.mu.Lock()
	_, ok := l.roots[a.id]
	delete(l.roots, a.id)
	l.mu.Unlock()
	return ok
}

type gcNote struct {
	l  *ledger
	id uint64
}

// gcDrop is the safety net: the array of n became unreachable without
// Release. Its handle is queued for the MLX thread.
func gcDrop(n gcNote) {
	l := n.l
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.roots[n.id]
	if !ok {
		return
	}
	delete(l.roots, n.id)
	l.uncount(1, e.bytes)
	l.leaked.Add(1)
	l.orphans = append(l.orphans, e.h)
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

// freeAll frees the handles of every array at the outermost level (the
// scopes must be closed first) and of the orphans. Cleanups still armed
// find no entry afterwards. MLX thread only.
func (l *ledger) freeAll() {
	l.freeOrphans()
	l.mu.Lock()
	roots := l.roots
	l.roots = map[uint64]root{}
	l.mu.Unlock()
	for _, e := range roots {
		l.uncount(1, e.bytes)
		C.mlx_array_free(e.h)
	}
}

func (l *ledger) snapshot() backend.Stats {
	return backend.Stats{
		LiveArrays: int(l.arrays.Load()),
		LiveBytes:  l.bytes.Load(),
		PeakBytes:  l.peak.Load(),
		LeakedByGC: int(l.leaked.Load()),
	}
}

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
	a := &Array{h: h, dtype: dtype, owner: b, borrowed: borrowed}
	if ndim <= len(a.dims) {
		a.shape = a.dims[:ndim:ndim]
	} else {
		a.shape = make(tensor.Shape, ndim)
	}
	for i := range a.shape {
		a.shape[i] = int(dims[i])
	}
	b.ledger.count(a.nbytes())
	if n := len(b.scopes); n > 0 {
		s := b.scopes[n-1]
		a.scope = s
		s.arrays = append(s.arrays, a)
	} else {
		b.ledger.addRoot(a)
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
	if a.scope == nil && !b.ledger.dropRoot(a) {
		return // freed by freeAll
	}
	a.scope = nil
	b.ledger.uncount(1, a.nbytes())
	C.mlx_array_free(a.h)
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
func (b *Backend) arg(op string, args []backend.Array, i int) *Array {
	a, ok := args[i].(*Array)
	if ok && a != nil && a.owner == b && !a.released {
		return a
	}
	panic(b.badArg(op, slices.Clone(args), i))
}

func (b *Backend) badArg(op string, xs []backend.Array, i int) *backend.OpError {
	x := xs[i]
	a, ok := x.(*Array)
	switch {
	case x == nil || (ok && a == nil):
		return backend.Errorf(op, xs, "argument %d is nil", i)
	case !ok:
		return backend.Errorf(op, xs, "argument %d is a %T, not an array of this mlx backend", i, x)
	case a.owner != b:
		return backend.Errorf(op, xs, "argument %d belongs to another backend", i)
	default:
		return backend.Errorf(op, xs, "argument %d was released", i)
	}
}

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
	b.ledger.freeOrphans()
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
	if !b.here() {
		var s backend.Scope
		b.do("Scope", func() { s = b.Scope() })
		return s
	}
	s := &scope{b: b}
	if n := len(b.scopes); n > 0 {
		s.parent = b.scopes[n-1]
		s.depth = s.parent.depth + 1
	}
	if n := len(b.spare); n > 0 {
		s.arrays = b.spare[n-1]
		b.spare = b.spare[:n-1]
	}
	b.scopes = append(b.scopes, s)
	return s
}

// Keep moves arrays of this scope to the enclosing one (or to the outermost
// level) and returns the first. Arrays that already belong to an enclosing
// scope or to the outermost level stay where they are. Keeping a released
// array, an array of a still-open inner scope, or keeping on a closed scope
// panics with an *OpError.
func (s *scope) Keep(arrays ...backend.Array) backend.Array {
	b := s.b
	if !b.here() {
		arrays := slices.Clone(arrays)
		b.do("Keep", func() { s.Keep(arrays...) })
	} else {
		for i := range arrays {
			b.arg("Keep", arrays, i)
		}
		if s.closed {
			panic(backend.Errorf("Keep", slices.Clone(arrays), "scope is closed"))
		}
		for i := range arrays {
			a := arrays[i].(*Array)
			switch {
			case a.scope == s:
				a.scope = s.parent
				if s.parent != nil {
					s.parent.arrays = append(s.parent.arrays, a)
				} else {
					b.ledger.addRoot(a)
				}
			case a.scope != nil && a.scope.depth > s.depth:
				panic(backend.Errorf("Keep", slices.Clone(arrays), "array belongs to an inner scope that is still open"))
			}
		}
	}
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
	if !b.here() {
		b.run(s.Close)
		return
	}
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
	// Free the arrays still owned in one cgo call; they have no ledger
	// entry or cleanup (see ledger).
	b.dead.reserve(len(s.arrays))
	hs := b.dead.s
	var k, n int64
	for _, a := range s.arrays {
		if a.scope == s && !a.released {
			a.released = true
			a.scope = nil
			hs[k] = a.h
			k++
			n += a.nbytes()
		}
	}
	if k > 0 {
		C.mlxgo_free_arrays(b.dead.p, C.size_t(k))
		b.ledger.uncount(k, n)
	}
	if cap(s.arrays) > 0 {
		clear(s.arrays)
		b.spare = append(b.spare, s.arrays[:0])
	}
	s.arrays = nil
	s.closed = true
	b.ledger.freeOrphans()
}
