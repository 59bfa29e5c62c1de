//go:build mlx

package metal

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// catch runs fn and returns the error backend.Recover makes of its panic.
func catch(fn func()) (err error) {
	defer backend.Recover(&err)
	fn()
	return nil
}

// MLX rejects these when the op is recorded; each must come back as an
// *backend.OpError naming the op and carrying MLX's message, and the process
// must go on (mlx-c's default handler would exit).
func TestBadShapesAreOpErrors(t *testing.T) {
	b := open(t)
	f32 := func(shape ...int) backend.Array { return b.Zeros(shape, tensor.F32) }
	cases := []struct {
		op      string
		run     func()
		wantMsg string // a fragment of MLX's message
	}{
		{"add", func() { b.Binary(backend.Add, f32(2, 3), f32(4, 5)) }, "broadcast"},
		{"Matmul", func() { b.Matmul(f32(2, 3), f32(4, 5)) }, "matmul"},
		{"Reshape", func() { b.Reshape(f32(2, 3), 7) }, "reshape"},
		{"RMSNorm", func() { b.RMSNorm(f32(2, 8), f32(5), 1e-5) }, "rms_norm"},
		{"RoPE", func() { b.RoPE(f32(8), backend.RoPE{Dims: 8, Base: 10000, Scale: 1}, backend.Offset{}) }, "rope"},
		{"ScaledDotProductAttention", func() {
			b.ScaledDotProductAttention(f32(1, 3, 2, 8), f32(1, 2, 4, 8), f32(1, 2, 4, 8), 1, backend.NoMask{})
		}, "heads"},
		{"Quantize", func() { b.Quantize(f32(4, 48), 64, 4) }, "quantize"},
		{"Concatenate", func() { b.Concatenate(0, f32(2, 3), f32(2, 4)) }, "concatenate"},
		{"Slice", func() { b.Slice(f32(2, 3), []int{0, 0}, []int{3, 3}) }, "outside"},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			err := catch(c.run)
			var oe *backend.OpError
			if !errors.As(err, &oe) {
				t.Fatalf("got %v, want an *backend.OpError", err)
			}
			if oe.Op != c.op {
				t.Errorf("got op %q, want %q (%v)", oe.Op, c.op, err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), c.wantMsg) {
				t.Errorf("got %q, want it to mention %q", err, c.wantMsg)
			}
		})
	}
	// The backend still works after the failures.
	x := b.Full(tensor.Shape{2}, 1.5, tensor.F32)
	h, err := b.ToHost(b.Binary(backend.Multiply, x, x))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Float32s(); got[0] != 2.25 || got[1] != 2.25 { // 1.5*1.5, exact
		t.Errorf("got %v, want [2.25 2.25]", got)
	}
}

// Do serialises calls from many goroutines onto the one MLX thread; each
// computes (g+1)*[1 2 3 4] summed = 10*(g+1), exact in float32.
func TestDoFromManyGoroutines(t *testing.T) {
	b := open(t)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	sums := make([]float32, n)
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = b.Do(func() (err error) {
				defer backend.Recover(&err)
				s := b.Scope()
				defer s.Close()
				x := b.FromHost(tensor.FromFloat32(tensor.Shape{4}, []float32{1, 2, 3, 4}))
				y := b.Sum(b.Binary(backend.Multiply, x, b.Full(tensor.Shape{}, float64(g+1), tensor.F32)), 0, false)
				h, err := b.ToHost(y)
				if err == nil {
					sums[g] = h.Float32s()[0]
				}
				return err
			})
		}()
	}
	wg.Wait()
	for g := range n {
		if errs[g] != nil {
			t.Errorf("goroutine %d: %v", g, errs[g])
		} else if want := float32(10 * (g + 1)); sums[g] != want {
			t.Errorf("got %v, want %v (goroutine %d)", sums[g], want, g)
		}
	}
	if s := b.Stats(); s.LiveArrays != 0 {
		t.Errorf("got %d live arrays, want 0", s.LiveArrays)
	}
	// Ops called outside Do, from several goroutines, are handed to the MLX
	// thread one by one.
	var wg2 sync.WaitGroup
	for range 4 {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for range 50 {
				x := b.Zeros(tensor.Shape{3}, tensor.BF16)
				b.Release(x, b.Unary(backend.Exp, x))
			}
		}()
	}
	wg2.Wait()
	if s := b.Stats(); s.LiveArrays != 0 || s.LeakedByGC != 0 {
		t.Errorf("got %d live arrays, %d leaked; want 0, 0", s.LiveArrays, s.LeakedByGC)
	}
}

// An array dropped without Release is found by the safety net: counted in
// LeakedByGC and its handle freed on the MLX thread at the next Eval.
func TestGCSafetyNet(t *testing.T) {
	b := open(t)
	func() {
		for range 10 {
			b.Zeros(tensor.Shape{256}, tensor.F32)
		}
	}()
	if s := b.Stats(); s.LiveArrays != 10 {
		t.Fatalf("got %d live arrays, want 10", s.LiveArrays)
	}
	for i := 0; i < 20 && b.Stats().LeakedByGC < 10; i++ {
		runtime.GC()
	}
	if err := b.Eval(); err != nil { // frees the queued handles
		t.Fatal(err)
	}
	s := b.Stats()
	if s.LeakedByGC != 10 || s.LiveArrays != 0 {
		t.Errorf("got LeakedByGC %d, LiveArrays %d; want 10, 0", s.LeakedByGC, s.LiveArrays)
	}
	if queued := b.life.Queued(); queued != 0 {
		t.Errorf("got %d handles still queued after Eval, want 0", queued)
	}
}

// t.Fatal inside Do ends the MLX thread (runtime.Goexit); the backend then
// reports it instead of hanging.
func TestGoexitInDo(t *testing.T) {
	b, err := New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := b.Close(); !errors.Is(err, errThreadExited) {
			t.Errorf("Close: got %v, want errThreadExited", err)
		}
	}()
	if err := b.Do(func() error { runtime.Goexit(); return nil }); !errors.Is(err, errThreadExited) {
		t.Fatalf("got %v, want errThreadExited", err)
	}
	var oe *backend.OpError
	if err := catch(func() { b.Zeros(tensor.Shape{1}, tensor.F32) }); !errors.As(err, &oe) || !errors.Is(err, errThreadExited) {
		t.Errorf("op after the thread exited: got %v, want an *backend.OpError wrapping errThreadExited", err)
	}
}
