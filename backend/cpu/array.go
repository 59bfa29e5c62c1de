package cpu

import (
	"fmt"
	"runtime/debug"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/backend/internal/lifetime"
	"github.com/mlxgo/mlxgo/tensor"
)

// Array is the CPU backend's array: a view of a buffer, given by its shape,
// the storage index of its first element and its element strides. Several
// arrays may view one buffer (Reshape, Transpose, Slice and AsType to the
// same values return views); no op writes a buffer that another live array
// views (see SliceUpdate).
type Array struct {
	lifeState // its owner, scope and safety net (package lifetime)
	dtype     tensor.DType
	shape     tensor.Shape // backed by dims when it fits
	dims      [4]int
	buf       *buffer // nil once released
	off       int     // storage index of element 0
	strides   []int   // element strides; nil when row-major contiguous
	sdims     [4]int
}

// lifeState is embedded under this name so that the field stays unexported.
type lifeState = lifetime.State

// buffer is the storage of one or more arrays. Values storage holds
// float32 values that are exact in the dtype of every array viewing it
// (F32, BF16 or F16); raw storage holds the elements in the dtype's own
// little-endian bytes (the dtype of the arrays viewing it).
type buffer struct {
	values   bool
	f32      []float32 // values storage
	raw      []byte    // raw storage
	refs     int       // live arrays viewing it
	borrowed bool      // caller memory: never written, pooled or counted
	nbytes   int64     // what it adds to Stats.LiveBytes
	packs    []packed  // weights in this (borrowed) buffer, rearranged (packSlot, denseSlot)
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

// size is the number of elements.
func (a *Array) size() int { return a.shape.Size() }

// tracker is the lifetime layer of this backend's arrays; a root is the
// buffer an array at the outermost level views, which the safety net
// unreferences if the array is lost.
type tracker = lifetime.Tracker[*Array, *buffer]

// hooks plug the buffers into the tracker: an array holds one reference on
// its buffer, whose bytes count while any array views it.
type hooks struct{ b *Backend }

func (h hooks) Free(arrays []*Array) int64 {
	var n int64
	for _, a := range arrays {
		n += h.b.unref(a.buf, true)
		a.buf = nil
	}
	return n
}

func (hooks) Root(a *Array) *buffer    { return a.buf }
func (h hooks) Drop(buf *buffer) int64 { return h.b.unref(buf, false) }
func (hooks) OnThread() bool           { return true }
func (hooks) Run(op string, fn func()) { fn() }

// released reports whether a was freed (by Release, its scope or Close).
func (a *Array) released() bool { return lifetime.Released(&a.lifeState) }

// valuesBuf makes a buffer of float32 values that takes over v (from the
// pool or freshly allocated).
func (b *Backend) valuesBuf(v []float32) *buffer {
	buf := b.newBuf()
	buf.values, buf.f32, buf.nbytes = true, v, int64(4*len(v))
	return buf
}

// rawBuf makes a buffer of raw bytes that takes over v (8-byte aligned
// unless borrowed).
func (b *Backend) rawBuf(v []byte, borrowed bool) *buffer {
	buf := b.newBuf()
	buf.raw, buf.borrowed = v, borrowed
	if !borrowed {
		buf.nbytes = int64(len(v))
	}
	return buf
}

func (b *Backend) newBuf() *buffer {
	if n := len(b.pool.bufs); n > 0 {
		buf := b.pool.bufs[n-1]
		b.pool.bufs = b.pool.bufs[:n-1]
		return buf
	}
	return &buffer{}
}

// newArray makes a view of buf (its first element at storage index off,
// strides nil for row-major contiguous), adds it to the innermost open
// scope, or at the outermost level to the safety net, and counts it.
func (b *Backend) newArray(dt tensor.DType, shape tensor.Shape, buf *buffer, off int, strides []int) *Array {
	return b.makeArray(dt, shape, buf, off, strides, false)
}

// makeArray is newArray, at the outermost level whatever scopes are open
// when outermost is set (the gradient tape's views).
func (b *Backend) makeArray(dt tensor.DType, shape tensor.Shape, buf *buffer, off int, strides []int, outermost bool) *Array {
	if b.closed {
		panic(&backend.OpError{Op: "cpu", Err: fmt.Errorf("backend is closed")})
	}
	a := &Array{dtype: dt, buf: buf, off: off}
	a.shape = append(a.dims[:0:len(a.dims)], shape...)
	if strides != nil {
		a.strides = append(a.sdims[:0:len(a.sdims)], strides...)
	}
	var bytes int64
	if buf.refs++; buf.refs == 1 {
		bytes = buf.nbytes
	}
	if outermost {
		b.life.AddOutermost(a, bytes)
	} else {
		b.life.Add(a, bytes)
	}
	return a
}

// valuesMax is the largest BF16 or F16 op result held as float32 values;
// a larger one is stored in its dtype's bytes (see the package doc). 2^20
// holds a decode step's logits for eight rows of a vocabulary of up to
// 131072 (Llama-3.2's, MiniCPM5's) as values, read back as they are: at
// 2^18 the eight-row logits of a float16 SmolLM2 (393,216 values) were
// encoded and decoded again on the way to the host, 0.12-0.33 ms of a
// 9-11 ms step (Zen 4, 2026-12-05). A variable so that tests can move it.
var valuesMax = 1 << 20

// valuesOut wraps v (from the pool, every value exact in dt) as a new
// row-major array of dtype dt (F32, BF16 or F16). A BF16 or F16 result of
// more than valuesMax elements is encoded into its dtype's bytes (exactly)
// and v goes back to the pool.
func (b *Backend) valuesOut(dt tensor.DType, shape tensor.Shape, v []float32) *Array {
	if dt == tensor.F32 || len(v) <= valuesMax {
		return b.newArray(dt, shape, b.valuesBuf(v), 0, nil)
	}
	raw := b.pool.getRaw(2*len(v), false)
	if dt == tensor.BF16 {
		kernel.Float32sToBF16(u16View(raw), v)
	} else {
		kernel.Float32sToF16(u16View(raw), v)
	}
	b.pool.putF32(v)
	return b.newArray(dt, shape, b.rawBuf(raw, false), 0, nil)
}

// denseOut wraps the 8-byte-aligned storage of a freshly made host tensor
// as a new array (an F32 tensor becomes values storage).
func (b *Backend) denseOut(d *tensor.Dense) *Array {
	if d.DType == tensor.F32 {
		return b.valuesOut(d.DType, d.Shape, f32View(d.Data))
	}
	return b.newArray(d.DType, d.Shape, b.rawBuf(d.Data, false), 0, nil)
}

// unref drops one reference to buf and returns the bytes this frees: the
// last one frees buf's bytes and, when pool is set, gives its storage to
// the pool.
func (b *Backend) unref(buf *buffer, pool bool) int64 {
	buf.refs--
	if buf.refs > 0 {
		return 0
	}
	n := buf.nbytes
	for _, p := range buf.packs {
		b.packed -= p.slot.Bytes()
		p.slot.Free()
	}
	buf.packs = nil
	if !pool {
		return n
	}
	if !buf.borrowed {
		if buf.values {
			b.pool.putF32(buf.f32)
		} else {
			b.pool.putRaw(buf.raw)
		}
	}
	*buf = buffer{}
	b.pool.bufs = append(b.pool.bufs, buf)
	return n
}

// use1 checks a single argument: a live array of b (see lifetime.Tracker.Arg).
func (b *Backend) use1(op string, x backend.Array) *Array {
	xs := [...]backend.Array{x}
	return b.life.Arg(op, xs[:], 0)
}

// use2 checks two arguments.
func (b *Backend) use2(op string, x, y backend.Array) (*Array, *Array) {
	xs := [...]backend.Array{x, y}
	return b.life.Arg(op, xs[:], 0), b.life.Arg(op, xs[:], 1)
}

// use3 checks three arguments.
func (b *Backend) use3(op string, x, y, z backend.Array) (*Array, *Array, *Array) {
	xs := [...]backend.Array{x, y, z}
	return b.life.Arg(op, xs[:], 0), b.life.Arg(op, xs[:], 1), b.life.Arg(op, xs[:], 2)
}

// use checks every argument of xs.
func (b *Backend) use(op string, xs ...backend.Array) []*Array {
	out := make([]*Array, len(xs))
	for i := range xs {
		out[i] = b.life.Arg(op, xs, i)
	}
	return out
}

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
	if t.DType == tensor.F32 {
		v := b.pool.getF32(t.Shape.Size())
		copy(f32Bytes(v), t.Data)
		return b.valuesOut(t.DType, t.Shape, v)
	}
	raw := b.pool.getRaw(len(t.Data), false)
	copy(raw, t.Data)
	return b.newArray(t.DType, t.Shape, b.rawBuf(raw, false), 0, nil)
}

// Borrow wraps t without copying when t.Data is aligned for its dtype (as
// memory-mapped safetensors data is); otherwise it copies, and the copy counts
// in Stats like any owned array. t must stay valid and unmodified while the
// array lives. The backend never writes borrowed memory.
func (b *Backend) Borrow(t *tensor.Dense) backend.Array {
	checkDense("Borrow", t)
	if len(t.Data) > 0 && uintptr(unsafe.Pointer(&t.Data[0]))%uintptr(t.DType.Size()) != 0 {
		return b.FromHost(t)
	}
	if t.DType == tensor.F32 {
		buf := b.newBuf()
		buf.values, buf.f32, buf.borrowed = true, f32View(t.Data), true
		return b.newArray(t.DType, t.Shape, buf, 0, nil)
	}
	return b.newArray(t.DType, t.Shape, b.rawBuf(t.Data, true), 0, nil)
}

// ToHost returns a copy of a's contents.
func (b *Backend) ToHost(x backend.Array) (*tensor.Dense, error) {
	return b.hostCopy(b.use1("ToHost", x)), nil
}

// ReadFloat32 writes x's elements, row-major, as float32 to dst, which
// must hold exactly x's size (backend.HostReader): float32, bfloat16 and
// float16 exactly, other dtypes as AsType F32 converts them.
func (b *Backend) ReadFloat32(dst []float32, x backend.Array) error {
	a := b.use1("ReadFloat32", x)
	if n := a.size(); len(dst) != n {
		return fmt.Errorf("cpu: ReadFloat32: the buffer holds %d values, the %v array %v has %d", len(dst), a.dtype, a.shape, n)
	}
	defer b.freeTmps()
	b.fillF32(dst, a, tensor.F32)
	return nil
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
func (b *Backend) Release(arrays ...backend.Array) { b.life.Release(arrays...) }

// Stats reports live arrays (borrowed ones and views included), the bytes
// of the buffers they view (each buffer once; borrowed memory not
// counted), the peak of those bytes, and the arrays the garbage-collector
// safety net had to account for.
func (b *Backend) Stats() backend.Stats {
	s := b.life.Stats()
	s.PackedBytes, s.ReleasedBytes = b.packed, b.released
	return s
}

// ClearCache empties the buffer pool (backend.CacheClearer; generation
// calls it where mlx_lm calls mx.clear_cache: after each chunk of a prompt
// and every 256 tokens), and when the pool held freeOSMin bytes or more
// (a long prompt's storage) returns the freed memory to the operating
// system. Without that, the storage a long prompt used stays in the pool,
// or as garbage until the garbage collector's next cycle, which the heap
// size the prompt reached puts off for hundreds of tokens. Below it the
// forced collection is not worth its cost: a server's short prompts called
// it at every join, 4–5 ms on the engine's goroutine each while every row
// waited (SmolLM2 under 8 clients, Zen 3).
func (b *Backend) ClearCache() {
	held := b.pool.bytes
	b.pool.clear()
	if held >= freeOSMin {
		debug.FreeOSMemory()
	}
}

// freeOSMin is the pool size from which ClearCache also frees memory to
// the operating system.
const freeOSMin = 64 << 20

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
	if dt == tensor.F32 {
		v := b.pool.getF32(shape.Size())
		clear(v)
		return b.valuesOut(dt, shape, v)
	}
	return b.newArray(dt, shape, b.rawBuf(b.pool.getRaw(shape.Size()*dt.Size(), true), false), 0, nil)
}

// Full returns an array filled with v converted to dt as MLX's full does
// (through float32 for f16 and bf16; truncation for integers).
func (b *Backend) Full(shape tensor.Shape, v float64, dt tensor.DType) backend.Array {
	checkShape("Full", shape, dt)
	one := tensor.FromFloat64(tensor.Shape{}, []float64{v}).Convert(dt)
	n := shape.Size()
	if dt == tensor.F32 {
		out := b.pool.getF32(n)
		x := one.Float32s()[0]
		for i := range out {
			out[i] = x
		}
		return b.valuesOut(dt, shape, out)
	}
	raw := b.pool.getRaw(n*dt.Size(), false)
	for off := 0; off < len(raw); off += len(one.Data) {
		copy(raw[off:], one.Data)
	}
	return b.newArray(dt, shape, b.rawBuf(raw, false), 0, nil)
}

// Scope opens a scope nested in the innermost open one.
func (b *Backend) Scope() backend.Scope {
	if b.closed {
		panic(&backend.OpError{Op: "Scope", Err: fmt.Errorf("backend is closed")})
	}
	return b.life.Open()
}
