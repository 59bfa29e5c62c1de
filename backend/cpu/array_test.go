package cpu

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

func TestNewOptions(t *testing.T) {
	cases := []struct {
		opts    backend.Options
		wantErr string // "" for success
		high    bool
	}{
		{backend.Options{}, "", false},
		{backend.Options{Precision: "reference"}, "", false},
		{backend.Options{Precision: "high"}, "", true},
		{backend.Options{Precision: "fast"}, "", false},
		{backend.Options{Precision: "turbo"}, `"turbo"`, false},
		{backend.Options{Device: "cpu"}, "", false},
		{backend.Options{Device: "gpu"}, `"gpu"`, false},
		{backend.Options{Threads: -1}, "Threads is -1", false},
	}
	for _, c := range cases {
		t.Run(name(c.opts.Precision, c.opts.Device, c.opts.Threads), func(t *testing.T) {
			b, err := New(c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got error %v, want one containing %s", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if b.high != c.high {
				t.Errorf("high: got %v, want %v", b.high, c.high)
			}
		})
	}
}

func TestRegistered(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatalf("Open(cpu): %v", err)
	}
	defer b.Close()
	if b.Name() != "cpu" {
		t.Errorf("Name: got %q, want cpu", b.Name())
	}
	ran := false
	if err := b.Do(func() error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("Do: ran %v, err %v; want true, nil", ran, err)
	}
	want := errors.New("x")
	if err := b.Do(func() error { return want }); err != want {
		t.Errorf("Do: got %v, want the function's error", err)
	}
}

func TestStatsCounting(t *testing.T) {
	b := open(t)
	const n = 5
	var as []backend.Array
	for i := range n {
		as = append(as, b.Zeros(tensor.Shape{i + 1, 2}, tensor.F32)) // (i+1)*2*4 bytes
	}
	// bytes: 8·(1+2+3+4+5) = 120
	s := b.Stats()
	if s.LiveArrays != n || s.LiveBytes != 120 || s.PeakBytes != 120 {
		t.Fatalf("after create: got %+v, want 5 arrays, 120 bytes, peak 120", s)
	}
	b.Release(as...)
	b.Release(as...) // twice is fine
	b.Release(nil)
	s = b.Stats()
	if s.LiveArrays != 0 || s.LiveBytes != 0 || s.PeakBytes != 120 || s.LeakedByGC != 0 {
		t.Fatalf("after release: got %+v, want 0 arrays, 0 bytes, peak 120, 0 leaked", s)
	}
}

func TestBorrow(t *testing.T) {
	b := open(t)
	src := tensor.FromFloat32(tensor.Shape{2}, []float32{1, 2})
	a := b.Borrow(src)
	if s := b.Stats(); s.LiveArrays != 1 || s.LiveBytes != 0 {
		t.Errorf("aligned borrow: got %+v, want 1 array and 0 bytes", s)
	}
	if &f32Bytes(a.(*Array).buf.f32)[0] != &src.Data[0] {
		t.Errorf("aligned borrow copied the data, want an alias")
	}
	// Element 0 of a BF16 tensor starting at an odd address cannot be viewed: copy.
	buf := make([]byte, 5)
	odd := buf[1:]
	if uintptr(unsafe.Pointer(&odd[0]))%2 == 0 {
		odd = buf[:4]
	}
	bad := &tensor.Dense{DType: tensor.BF16, Shape: tensor.Shape{2}, Data: odd}
	c := b.Borrow(bad)
	if s := b.Stats(); s.LiveArrays != 2 || s.LiveBytes != 4 {
		t.Errorf("unaligned borrow: got %+v, want 2 arrays and 4 bytes (a copy)", s)
	}
	check(t, b, c, tensor.BF16, tensor.Shape{2}, 0, 0)
	// Ops on a borrowed array never write it.
	b.SliceUpdate(a, arr(b, tensor.F32, tensor.Shape{1}, 9), []int{0})
	if src.Float32s()[0] != 1 {
		t.Errorf("SliceUpdate wrote borrowed memory: got %v, want 1", src.Float32s()[0])
	}
	check(t, b, a, tensor.F32, tensor.Shape{2}, 1, 2)
}

func TestFromHostCopies(t *testing.T) {
	b := open(t)
	src := tensor.FromFloat32(tensor.Shape{2}, []float32{1, 2})
	a := b.FromHost(src)
	src.Float32s()[0] = 7
	check(t, b, a, tensor.F32, tensor.Shape{2}, 1, 2)
	h, _ := b.ToHost(a)
	h.Float32s()[1] = 7
	check(t, b, a, tensor.F32, tensor.Shape{2}, 1, 2)
	opPanic(t, func() { b.FromHost(&tensor.Dense{DType: tensor.F32, Shape: tensor.Shape{3}, Data: make([]byte, 8)}) })
}

func TestFull(t *testing.T) {
	b := open(t)
	// 0.1 → float32 0.100000001490116 → bf16: 0.1 = 1.6·2^-4, 0.6·128 = 76.8 → 77 → (1+77/128)/16 = 0.10009765625
	check(t, b, b.Full(tensor.Shape{2}, 0.1, tensor.BF16), tensor.BF16, tensor.Shape{2}, 0.10009765625, 0.10009765625)
	check(t, b, b.Full(tensor.Shape{1, 2}, -2.7, tensor.I32), tensor.I32, tensor.Shape{1, 2}, -2, -2)
	check(t, b, b.Full(tensor.Shape{}, 3, tensor.F32), tensor.F32, tensor.Shape{}, 3)
	check(t, b, b.Zeros(tensor.Shape{3}, tensor.F16), tensor.F16, tensor.Shape{3}, 0, 0, 0)
	opPanic(t, func() { b.Zeros(tensor.Shape{-1}, tensor.F32) })
}

func TestScopes(t *testing.T) {
	b := open(t)
	root := b.Zeros(tensor.Shape{1}, tensor.F32)
	outer := b.Scope()
	o1 := b.Zeros(tensor.Shape{1}, tensor.F32)
	inner := b.Scope()
	i1 := b.Zeros(tensor.Shape{1}, tensor.F32)
	i2 := b.Zeros(tensor.Shape{1}, tensor.F32)
	if got := inner.Keep(i1, root, o1); got != i1 {
		t.Errorf("Keep returned %v, want its first argument", got)
	}
	inner.Close()
	inner.Close() // twice is fine
	if !i2.(*Array).released() || i1.(*Array).released() {
		t.Fatalf("inner Close: i2 released %v (want true), i1 released %v (want false)", i2.(*Array).released(), i1.(*Array).released())
	}
	if s := b.Stats(); s.LiveArrays != 3 {
		t.Errorf("after inner Close: %d live arrays, want 3 (root, o1, i1)", s.LiveArrays)
	}
	kept := outer.Keep(b.Zeros(tensor.Shape{1}, tensor.F32))
	outer.Close()
	for n, a := range map[string]backend.Array{"o1": o1, "i1": i1} {
		if !a.(*Array).released() {
			t.Errorf("outer Close left %s alive", n)
		}
	}
	if root.(*Array).released() || kept.(*Array).released() {
		t.Errorf("outer Close released root (%v) or a kept array (%v), want neither", root.(*Array).released(), kept.(*Array).released())
	}
	b.Release(root, kept)
	if s := b.Stats(); s.LiveArrays != 0 || s.LiveBytes != 0 {
		t.Errorf("at end: got %+v, want nothing live", s)
	}
}

func TestScopeCloseOutOfOrder(t *testing.T) {
	b := open(t)
	outer := b.Scope()
	b.Scope()
	x := b.Zeros(tensor.Shape{1}, tensor.F32)
	outer.Close() // closes the inner scope first
	if !x.(*Array).released() || b.life.Depth() != 0 {
		t.Errorf("closing the outer scope: inner array released %v, %d scopes open; want true, 0", x.(*Array).released(), b.life.Depth())
	}
	s := b.Scope()
	in := b.Scope()
	y := b.Zeros(tensor.Shape{1}, tensor.F32)
	if oe := opPanic(t, func() { s.Keep(y) }); !strings.Contains(oe.Error(), "inner scope") {
		t.Errorf("Keep of an inner scope's array: got %v", oe)
	}
	in.Close()
	s.Close()
	opPanic(t, func() { s.Keep(b.Zeros(tensor.Shape{1}, tensor.F32)) })
}

func TestReleasedUsePanics(t *testing.T) {
	b := open(t)
	x := b.Zeros(tensor.Shape{2}, tensor.F32)
	b.Release(x)
	ops := map[string]func(){
		"Unary":   func() { b.Unary(backend.Exp, x) },
		"Binary":  func() { b.Binary(backend.Add, x, x) },
		"ToHost":  func() { b.ToHost(x) },
		"Eval":    func() { b.Eval(x) },
		"Reshape": func() { b.Reshape(x, 2, 1) },
		"Sum":     func() { b.Sum(x, 0, false) },
	}
	for n, fn := range ops {
		t.Run(n, func(t *testing.T) {
			oe := opPanic(t, fn)
			if !strings.Contains(oe.Error(), "released") {
				t.Errorf("got %q, want a message saying released", oe.Error())
			}
		})
	}
	// Shape and DType stay valid after release (error messages use them).
	if !x.Shape().Equal(tensor.Shape{2}) || x.DType() != tensor.F32 {
		t.Errorf("metadata after release: got %v %v, want F32 [2]", x.DType(), x.Shape())
	}
}

func TestForeignArrayPanics(t *testing.T) {
	b1, b2 := open(t), open(t)
	x := b1.Zeros(tensor.Shape{1}, tensor.F32)
	oe := opPanic(t, func() { b2.Unary(backend.Exp, x) })
	if oe.Op != "exp" || !strings.Contains(oe.Error(), "another backend") {
		t.Errorf("got %q (op %q), want op exp and a message about another backend", oe.Error(), oe.Op)
	}
	opPanic(t, func() { b2.Release(x) })
	opPanic(t, func() { b1.Unary(backend.Exp, nil) })
}

func TestRecoverReturnsError(t *testing.T) {
	b := open(t)
	forward := func() (out backend.Array, err error) {
		defer backend.Recover(&err)
		return b.Matmul(b.Zeros(tensor.Shape{2, 3}, tensor.F32), b.Zeros(tensor.Shape{2, 3}, tensor.F32)), nil
	}
	out, err := forward()
	var oe *backend.OpError
	if out != nil || !errors.As(err, &oe) || oe.Op != "Matmul" {
		t.Fatalf("got (%v, %v), want (nil, *OpError for Matmul)", out, err)
	}
	if !strings.Contains(err.Error(), "[2 3]") || !strings.Contains(err.Error(), "F32") {
		t.Errorf("message %q should name the shapes and dtypes", err)
	}
}

func TestClose(t *testing.T) {
	b, _ := New(backend.Options{})
	x := b.Zeros(tensor.Shape{1}, tensor.F32)
	b.Scope()
	y := b.Zeros(tensor.Shape{1}, tensor.F32)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !x.(*Array).released() || !y.(*Array).released() {
		t.Errorf("Close left arrays alive: root %v, scoped %v", !x.(*Array).released(), !y.(*Array).released())
	}
	if s := b.Stats(); s.LiveArrays != 0 || s.LiveBytes != 0 {
		t.Errorf("after Close: got %+v, want nothing live", s)
	}
	opPanic(t, func() { b.Zeros(tensor.Shape{1}, tensor.F32) })
}

func TestLeakedByGC(t *testing.T) {
	b := open(t)
	func() { b.Zeros(tensor.Shape{1024}, tensor.F32) }() // dropped without Release
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().LeakedByGC == 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if s := b.Stats(); s.LeakedByGC != 1 || s.LiveArrays != 0 || s.LiveBytes != 0 {
		t.Errorf("after GC: got %+v, want 1 leaked and nothing live", s)
	}
}
