package cpu

import (
	"bytes"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Tests of the storage design: views, copy-on-write SliceUpdate, the pool,
// and the two storage kinds of float arrays (float32 values or dtype
// bytes).

// first returns the address of the storage element a's element 0 is at.
func first(a backend.Array) unsafe.Pointer {
	x := a.(*Array)
	if x.buf.values {
		return unsafe.Pointer(&x.buf.f32[x.off])
	}
	return unsafe.Pointer(&x.buf.raw[x.off*x.dtype.Size()])
}

func TestViewsShareStorage(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I32} {
		t.Run(dt.String(), func(t *testing.T) {
			b := open(t)
			x := arr(b, dt, tensor.Shape{2, 3}, 0, 1, 2, 3, 4, 5)
			bytes0 := b.Stats().LiveBytes
			views := map[string]struct {
				a     backend.Array
				shape tensor.Shape
				want  []float64
			}{
				"reshape":   {b.Reshape(x, 3, 2), tensor.Shape{3, 2}, []float64{0, 1, 2, 3, 4, 5}},
				"transpose": {b.Transpose(x), tensor.Shape{3, 2}, []float64{0, 3, 1, 4, 2, 5}},
				"slice":     {b.Slice(x, []int{0, 1}, []int{2, 3}), tensor.Shape{2, 2}, []float64{1, 2, 4, 5}},
				"astype":    {b.AsType(x, dt), tensor.Shape{2, 3}, []float64{0, 1, 2, 3, 4, 5}},
			}
			if got := b.Stats().LiveBytes; got != bytes0 {
				t.Errorf("views added %d live bytes, want 0", got-bytes0)
			}
			b.Release(x) // the views keep the storage
			for n, v := range views {
				if v.a.(*Array).buf != views["reshape"].a.(*Array).buf {
					t.Errorf("%s: does not share the storage of x", n)
				}
				check(t, b, v.a, dt, v.shape, v.want...)
			}
			// A transposed view's reshape copies (it is not contiguous).
			r := b.Reshape(views["transpose"].a, 6)
			check(t, b, r, dt, tensor.Shape{6}, 0, 3, 1, 4, 2, 5)
			if r.(*Array).buf == views["transpose"].a.(*Array).buf {
				t.Errorf("reshape of a transposed view shares its storage, want a copy")
			}
			b.Release(r)
			for _, v := range views {
				b.Release(v.a)
			}
			if s := b.Stats(); s.LiveArrays != 0 || s.LiveBytes != 0 {
				t.Errorf("after releasing every view: %+v, want nothing live", s)
			}
		})
	}
}

// TestSliceUpdateCopyOnWrite: SliceUpdate writes in place only into storage
// no other live array views; a live view never changes.
func TestSliceUpdateCopyOnWrite(t *testing.T) {
	cases := []struct {
		name   string
		view   bool // keep a view of dst alive
		dtype  tensor.DType
		inSitu bool
	}{
		{"alone/f32", false, tensor.F32, true},
		{"alone/bf16", false, tensor.BF16, true},
		{"viewed/f32", true, tensor.F32, false},
		{"viewed/bf16", true, tensor.BF16, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := open(t)
			dst := b.Zeros(tensor.Shape{1, 2, 4, 2}, c.dtype)
			at := first(dst)
			var view backend.Array
			if c.view {
				view = b.Slice(dst, []int{0, 0, 0, 0}, []int{1, 2, 2, 2})
			}
			src := arr(b, tensor.F32, tensor.Shape{1, 2, 1, 2}, 1, 2, 3, 4)
			out := b.SliceUpdate(dst, src, []int{0, 0, 1, 0})
			check(t, b, out, c.dtype, tensor.Shape{1, 2, 4, 2}, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0)
			if got := first(out) == at; got != c.inSitu {
				t.Errorf("wrote in place: %v, want %v", got, c.inSitu)
			}
			if released := dst.(*Array).released(); released != c.inSitu {
				t.Errorf("dst released: %v, want %v", released, c.inSitu)
			}
			if c.view {
				check(t, b, view, c.dtype, tensor.Shape{1, 2, 2, 2}, 0, 0, 0, 0, 0, 0, 0, 0)
				check(t, b, dst, c.dtype, tensor.Shape{1, 2, 4, 2}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
			}
		})
	}
	// In place into a strided dst (a transposed array with no other view).
	b := open(t)
	base := arr(b, tensor.F32, tensor.Shape{2, 3}, 0, 1, 2, 3, 4, 5)
	dst := b.Transpose(base) // [[0 3] [1 4] [2 5]]
	b.Release(base)
	out := b.SliceUpdate(dst, arr(b, tensor.F32, tensor.Shape{2}, 7, 8), []int{1, 0})
	check(t, b, out, tensor.F32, tensor.Shape{3, 2}, 0, 3, 7, 8, 2, 5)
	// src a view of dst's storage: dst is copied, the view unchanged.
	x := arr(b, tensor.F32, tensor.Shape{4}, 1, 2, 3, 4)
	v := b.Slice(x, []int{0}, []int{2})
	y := b.SliceUpdate(x, v, []int{2})
	check(t, b, y, tensor.F32, tensor.Shape{4}, 1, 2, 1, 2)
	check(t, b, v, tensor.F32, tensor.Shape{2}, 1, 2)
	check(t, b, x, tensor.F32, tensor.Shape{4}, 1, 2, 3, 4)
}

// TestPoolReuse: the storage of a released array serves the next array of
// the same size; Zeros from the pool is zeroed; ClearCache empties it.
func TestPoolReuse(t *testing.T) {
	b := open(t)
	x := b.Full(tensor.Shape{100}, 3, tensor.F32)
	at := first(x)
	b.Release(x)
	y := b.Zeros(tensor.Shape{100}, tensor.F32)
	if first(y) != at {
		t.Errorf("Zeros after a release of the same size got new storage, want the released one")
	}
	check(t, b, y, tensor.F32, tensor.Shape{100}, make([]float64, 100)...)
	b.Release(y)
	if b.pool.bytes == 0 {
		t.Fatalf("pool empty after a release, want the storage kept")
	}
	b.ClearCache()
	if b.pool.bytes != 0 {
		t.Errorf("pool holds %d bytes after ClearCache, want 0", b.pool.bytes)
	}
}

func TestSizeClasses(t *testing.T) {
	for n := 1; n < 5000; n++ {
		c, f := ceilClass(n), floorClass(n)
		if c < n || c > n+n/8 || f > n || f < n-n/8-1 || ceilClass(c) != c || floorClass(f) != f {
			t.Fatalf("n=%d: ceilClass %d, floorClass %d (want classes within 1/8 of n, on the right side)", n, c, f)
		}
	}
}

// TestLeakedViewByGC: a view dropped without Release at the outermost
// level is found by the safety net; the storage it shared stays counted
// until its last array goes.
func TestLeakedViewByGC(t *testing.T) {
	b := open(t)
	x := b.Zeros(tensor.Shape{256}, tensor.F32) // 1024 bytes
	func() { b.Reshape(x, 16, 16) }()           // dropped without Release
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().LeakedByGC == 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if s := b.Stats(); s.LeakedByGC != 1 || s.LiveArrays != 1 || s.LiveBytes != 1024 {
		t.Fatalf("after GC: got %+v, want 1 leaked, 1 array and 1024 bytes live", s)
	}
	b.Release(x)
	if s := b.Stats(); s.LiveArrays != 0 || s.LiveBytes != 0 {
		t.Errorf("after Release: got %+v, want nothing live", s)
	}
}

// TestStorageKinds runs ops on BF16 and F16 arrays with op results held as
// float32 values (the default for small ones), as dtype bytes (valuesMax
// 0), and the inputs in either kind, and checks that the bytes ToHost gives
// are the same.
func TestStorageKinds(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		t.Run(dt.String(), func(t *testing.T) {
			ref := storageRun(t, dt, math.MaxInt)
			for _, vm := range []int{0, 7} {
				got := storageRun(t, dt, vm)
				for i := range ref {
					if !bytes.Equal(got[i].Data, ref[i].Data) || !got[i].Shape.Equal(ref[i].Shape) {
						t.Errorf("valuesMax %d: output %d (%v) differs from the float32-values run", vm, i, got[i].Shape)
					}
				}
			}
		})
	}
}

// storageRun runs a chain of ops with valuesMax set to vm and returns
// every result on the host.
func storageRun(t *testing.T, dt tensor.DType, vm int) []*tensor.Dense {
	t.Helper()
	defer func(v int) { valuesMax = v }(valuesMax)
	valuesMax = vm
	b := open(t)
	rng := rand.New(rand.NewPCG(7, 11))
	randn := func(shape ...int) backend.Array {
		v := make([]float64, tensor.Shape(shape).Size())
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return arr(b, dt, shape, v...)
	}
	var outs []backend.Array
	keep := func(a backend.Array) backend.Array { outs = append(outs, a); return a }
	x := randn(1, 3, 4, 8) // raw: FromHost keeps the dtype's bytes
	y := keep(b.Binary(backend.Multiply, x, randn(8)))
	keep(b.Binary(backend.Add, y, x))
	z := b.Slice(randn(1, 3, 6, 8), []int{0, 0, 1, 0}, []int{1, 3, 5, 8}) // a strided view
	keep(b.Binary(backend.Maximum, y, z))
	keep(b.Binary(backend.Subtract, z, b.Transpose(b.Transpose(x, 0, 2, 1, 3), 0, 2, 1, 3)))
	keep(b.Binary(backend.Less, y, x))
	keep(b.Unary(backend.Exp, y))
	keep(b.Unary(backend.SiLU, x))
	keep(b.AsType(y, tensor.F32))
	keep(b.AsType(b.AsType(y, tensor.F32), dt))
	w := keep(b.AsType(b.Binary(backend.Multiply, b.AsType(x, tensor.F32), b.Full(tensor.Shape{}, 1.1, tensor.F32)), dt))
	keep(b.Binary(backend.Add, w, w))
	keep(b.SliceUpdate(b.Binary(backend.Add, y, y), b.Unary(backend.Sqrt, b.AsType(b.Unary(backend.Abs, x), tensor.F32)), []int{0, 0, 0, 0}))
	n := keep(b.RMSNorm(y, randn(8), 1e-5))
	r := keep(b.RoPE(n, backend.RoPE{Dims: 8, Base: 10000, Scale: 1}, backend.Offset{Scalar: 3}))
	kv := func(a backend.Array) backend.Array { return b.Slice(a, []int{0, 1, 0, 0}, []int{1, 2, 4, 8}) }
	keep(b.ScaledDotProductAttention(r, kv(x), kv(y), 0.3, backend.CausalMask{}))
	keep(b.ScaledDotProductAttention(r, kv(z), kv(r), 0.3, backend.NoMask{}))
	keep(b.SwiGLU(y, x))
	keep(b.Softmax(y, -1, false))
	keep(b.Softmax(y, -1, true))
	keep(b.LogSumExp(y, -1, true))
	keep(b.Sum(y, 2, false))
	keep(b.Max(y, 1, false))
	keep(b.Argmax(y, -1, false))
	keep(b.Matmul(y, b.Transpose(x, 0, 1, 3, 2)))
	q := b.Quantize(randn(16, 64), 32, 4)
	keep(b.QuantizedMatmul(b.Reshape(b.Concatenate(-1, y, y, x, y, x, y, x, x), 1, 12, 64), q, true))
	keep(b.Dequantize(q))
	keep(b.Concatenate(2, y, x))
	keep(b.Where(b.Binary(backend.Greater, y, x), y, x))
	keep(b.Take(y, b.FromHost(tensor.FromInt32(tensor.Shape{2}, []int32{2, 0})), 2))
	keep(b.SliceUpdate(b.Zeros(tensor.Shape{1, 3, 6, 8}, dt), y, []int{0, 0, 1, 0}))
	keep(b.SliceUpdate(b.Binary(backend.Add, y, y), x, []int{0, 0, 0, 0}))
	var res []*tensor.Dense
	for i, a := range outs {
		// Values storage holds values exact in the dtype.
		if x := a.(*Array); x.buf.values {
			round := rounder(x.dtype)
			for j, v := range x.buf.f32[x.off : x.off+x.size()] {
				if r := round(v); math.Float32bits(r) != math.Float32bits(v) && v == v {
					t.Fatalf("output %d (%v) holds %v at %d, not a %v value (it rounds to %v)", i, x.dtype, v, j, x.dtype, r)
				}
			}
		}
		h, err := b.ToHost(a)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, h)
	}
	return res
}

// TestQuantizedStridedW: a strided view of the packed codes (a slice of a
// wider uint32 array) gives the same product as the contiguous codes.
func TestQuantizedStridedW(t *testing.T) {
	b := open(t)
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float64, 8*64)
	for i := range w {
		w[i] = rng.NormFloat64()
	}
	q := b.Quantize(arr(b, tensor.F32, tensor.Shape{8, 64}, w...), 32, 4) // W [8, 8] uint32
	wide := b.Concatenate(1, q.W, b.Zeros(tensor.Shape{8, 3}, tensor.U32))
	sq := q
	sq.W = b.Slice(wide, []int{0, 0}, []int{8, 8})
	if sq.W.(*Array).strides == nil {
		t.Fatalf("the sliced codes are contiguous, want a strided view")
	}
	x := arr(b, tensor.F32, tensor.Shape{2, 64}, w[:128]...)
	for _, transpose := range []bool{true, false} {
		xx := x
		if !transpose {
			xx = b.Slice(x, []int{0, 0}, []int{2, 8})
		}
		got, _ := b.ToHost(b.QuantizedMatmul(xx, sq, transpose))
		want, _ := b.ToHost(b.QuantizedMatmul(xx, q, transpose))
		if !bytes.Equal(got.Data, want.Data) {
			t.Errorf("transpose %v: product with strided codes differs", transpose)
		}
	}
	got, _ := b.ToHost(b.Dequantize(sq))
	want, _ := b.ToHost(b.Dequantize(q))
	if !bytes.Equal(got.Data, want.Data) {
		t.Errorf("Dequantize of strided codes differs")
	}
}
