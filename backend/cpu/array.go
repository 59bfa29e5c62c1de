package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
	"weak"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Array is the CPU backend's array: a host tensor in the array's own dtype.
// Every op writes a fresh tensor (no views share storage), except
// SliceUpdate, which may take over its dst's storage (see there).
type Array struct {
	dtype    tensor.DType
	shape    tensor.Shape
	data     *tensor.Dense // nil once released
	owner    *Backend
	borrowed bool // data aliases caller memory; never written, not counted
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
func (a *Array) String() string { return fmt.Sprintf("cpu.Array(%v %v)", a.dtype, a.shape) }

// nbytes is what the array adds to Stats.LiveBytes.
func (a *Array) nbytes() int64 {
	if a.borrowed || a.data == nil {
		return 0
	}
	return int64(len(a.data.Data))
}

// ledger counts live arrays and bytes. The garbage-collector safety net runs
// on its own goroutine, hence the mutex.
type ledger struct {
	mu     sync.Mutex
	next   uint64
	live   map[uint64]weak.Pointer[Array]
	bytes  map[uint64]int64
	stats  backend.Stats
	leaked int
}

func newLedger() *ledger {
	return &ledger{live: map[uint64]weak.Pointer[Array]{}, bytes: map[uint64]int64{}}
}

func (l *ledger) add(a *Array) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	a.id = l.next
	n := a.nbytes()
	l.live[a.id] = weak.Make(a)
	l.bytes[a.id] = n
	l.stats.LiveArrays++
	l.stats.LiveBytes += n
	l.stats.PeakBytes = max(l.stats.PeakBytes, l.stats.LiveBytes)
}

// drop removes an array from the accounting; gc says the safety net found it.
func (l *ledger) drop(id uint64, gc bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, ok := l.bytes[id]
	if !ok {
		return
	}
	delete(l.live, id)
	delete(l.bytes, id)
	l.stats.LiveArrays--
	l.stats.LiveBytes -= n
	if gc {
		l.stats.LeakedByGC++
	}
}

// alive returns the arrays not yet released or collected.
func (l *ledger) alive() []*Array {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*Array
	for _, w := range l.live {
		if a := w.Value(); a != nil {
			out = append(out, a)
		}
	}
	return out
}

func (l *ledger) snapshot() backend.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// gcNote is what the safety net needs; it must not point at the Array.
type gcNote struct {
	l  *ledger
	id uint64
}

// newArray wraps d, adds it to the innermost open scope and to the ledger,
// and arms the safety net: if the array becomes unreachable without being
// released, the cleanup removes it from the accounting and counts it in
// Stats.LeakedByGC. The memory itself is the garbage collector's; the cleanup
// only keeps the counts honest and reports the leak. Only arrays outside
// every scope can be collected this way (a scope holds its arrays).
func (b *Backend) newArray(d *tensor.Dense, borrowed bool) *Array {
	if b.closed {
		panic(&backend.OpError{Op: "cpu", Err: fmt.Errorf("backend is closed")})
	}
	a := &Array{dtype: d.DType, shape: d.Shape.Clone(), data: d, owner: b, borrowed: borrowed}
	b.ledger.add(a)
	a.cleanup = runtime.AddCleanup(a, func(n gcNote) { n.l.drop(n.id, true) }, gcNote{b.ledger, a.id})
	if n := len(b.scopes); n > 0 {
		s := b.scopes[n-1]
		a.scope = s
		s.arrays = append(s.arrays, a)
	}
	return a
}

// dense wraps a freshly computed tensor as a new array.
func (b *Backend) dense(d *tensor.Dense) *Array { return b.newArray(d, false) }

// release frees a (idempotent).
func (b *Backend) release(a *Array) {
	if a.released {
		return
	}
	a.released = true
	a.cleanup.Stop()
	b.ledger.drop(a.id, false)
	a.data = nil
	a.scope = nil
}

// use checks that every x is a live array of b and returns them. A nil,
// released or foreign array is a programmer error: it panics with an
// *OpError naming op.
func (b *Backend) use(op string, xs ...backend.Array) []*Array {
	out := make([]*Array, len(xs))
	for i, x := range xs {
		a, ok := x.(*Array)
		switch {
		case x == nil || (ok && a == nil):
			panic(backend.Errorf(op, xs, "argument %d is nil", i))
		case !ok:
			panic(backend.Errorf(op, xs, "argument %d is a %T, not an array of this cpu backend", i, x))
		case a.owner != b:
			panic(backend.Errorf(op, xs, "argument %d belongs to another backend", i))
		case a.released:
			panic(backend.Errorf(op, xs, "argument %d was released", i))
		case b.closed:
			panic(backend.Errorf(op, xs, "backend is closed"))
		}
		out[i] = a
	}
	return out
}

// use1 is use for a single argument.
func (b *Backend) use1(op string, x backend.Array) *Array { return b.use(op, x)[0] }

// checkDense panics unless t is a well-formed host tensor.
func checkDense(op string, t *tensor.Dense) {
	switch {
	case t == nil:
		panic(&backend.OpError{Op: op, Err: fmt.Errorf("nil tensor")})
	case t.DType.Size() == 0:
		panic(&backend.OpError{Op: op, Shapes: []string{t.Shape.String()}, DTypes: []string{t.DType.String()}, Err: fmt.Errorf("invalid dtype")})
	}
	for i, d := range t.Shape {
		if d < 0 {
			panic(&backend.OpError{Op: op, Shapes: []string{t.Shape.String()}, DTypes: []string{t.DType.String()}, Err: fmt.Errorf("negative dimension %d at axis %d", d, i)})
		}
	}
	if want := t.Shape.Size() * t.DType.Size(); len(t.Data) != want {
		panic(&backend.OpError{Op: op, Shapes: []string{t.Shape.String()}, DTypes: []string{t.DType.String()}, Err: fmt.Errorf("%d data bytes, want %d", len(t.Data), want)})
	}
}

// FromHost copies t into a new array.
func (b *Backend) FromHost(t *tensor.Dense) backend.Array {
	checkDense("FromHost", t)
	return b.dense(t.Clone())
}

// Borrow wraps t without copying when t.Data is aligned for its dtype (as
// memory-mapped safetensors data is); otherwise it copies, and the copy counts
// in Stats like any owned array. t must stay valid and unmodified while the
// array lives. The backend never writes borrowed memory.
func (b *Backend) Borrow(t *tensor.Dense) backend.Array {
	checkDense("Borrow", t)
	if len(t.Data) > 0 && uintptr(unsafe.Pointer(&t.Data[0]))%uintptr(t.DType.Size()) != 0 {
		return b.dense(t.Clone())
	}
	return b.newArray(&tensor.Dense{DType: t.DType, Shape: t.Shape.Clone(), Data: t.Data}, true)
}

// ToHost returns a copy of a's contents.
func (b *Backend) ToHost(x backend.Array) (*tensor.Dense, error) {
	return b.use1("ToHost", x).data.Clone(), nil
}

// Eval checks its arguments and returns nil: every op has already computed.
// Nil arguments are skipped.
func (b *Backend) Eval(arrays ...backend.Array) error {
	for _, x := range arrays {
		if x != nil {
			b.use1("Eval", x)
		}
	}
	return nil
}

// Release frees arrays now. Nil and already-released arrays are skipped;
// another backend's array panics.
func (b *Backend) Release(arrays ...backend.Array) {
	for _, x := range arrays {
		if x == nil {
			continue
		}
		a, ok := x.(*Array)
		switch {
		case ok && a == nil:
		case !ok || a.owner != b:
			panic(backend.Errorf("Release", []backend.Array{x}, "not an array of this cpu backend"))
		default:
			b.release(a)
		}
	}
}

// Stats reports live arrays (borrowed ones included), the bytes they own
// (borrowed memory not counted), the peak of those bytes, and the arrays the
// garbage-collector safety net had to account for.
func (b *Backend) Stats() backend.Stats { return b.ledger.snapshot() }

// checkShape panics unless every dimension is non-negative and dt is valid.
func checkShape(op string, shape tensor.Shape, dt tensor.DType) {
	if dt.Size() == 0 {
		panic(&backend.OpError{Op: op, Shapes: []string{shape.String()}, DTypes: []string{dt.String()}, Err: fmt.Errorf("invalid dtype")})
	}
	for i, d := range shape {
		if d < 0 {
			panic(&backend.OpError{Op: op, Shapes: []string{shape.String()}, DTypes: []string{dt.String()}, Err: fmt.Errorf("negative dimension %d at axis %d", d, i)})
		}
	}
}

// Zeros returns an array of zeros.
func (b *Backend) Zeros(shape tensor.Shape, dt tensor.DType) backend.Array {
	checkShape("Zeros", shape, dt)
	return b.dense(tensor.New(dt, shape))
}

// Full returns an array filled with v converted to dt as MLX's full does
// (through float32 for f16 and bf16; truncation for integers).
func (b *Backend) Full(shape tensor.Shape, v float64, dt tensor.DType) backend.Array {
	checkShape("Full", shape, dt)
	one := tensor.FromFloat64(tensor.Shape{}, []float64{v}).Convert(dt)
	out := tensor.New(dt, shape)
	for off := 0; off < len(out.Data); off += len(one.Data) {
		copy(out.Data[off:], one.Data)
	}
	return b.dense(out)
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
	if b.closed {
		panic(&backend.OpError{Op: "Scope", Err: fmt.Errorf("backend is closed")})
	}
	s := &scope{b: b}
	if n := len(b.scopes); n > 0 {
		s.parent = b.scopes[n-1]
		s.depth = s.parent.depth + 1
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
	if len(arrays) == 0 {
		return nil
	}
	return arrays[0]
}

// Close releases every array of the scope that was not kept. Inner scopes
// still open are closed first. Closing twice is allowed.
func (s *scope) Close() {
	if s.closed {
		return
	}
	b := s.b
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
}
