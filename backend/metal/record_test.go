//go:build mlx

package metal

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// roots is the number of arrays with a ledger entry (and a cleanup armed).
func roots(b *Backend) (n int) {
	b.run(func() { n = b.life.Roots() })
	return n
}

// collect runs the garbage collector until the safety net has counted want
// arrays in all (or gives up after 20 rounds) and returns the count.
func collect(b *Backend, want int) int {
	for i := 0; i < 20 && b.Stats().LeakedByGC < want; i++ {
		runtime.GC()
	}
	return b.Stats().LeakedByGC
}

// Arrays in a scope get no safety net (their scope frees them and keeps them
// reachable until then); an array kept out of the outermost scope gets one,
// and is counted in LeakedByGC when dropped without Release.
func TestSafetyNetOnlyAtOutermostLevel(t *testing.T) {
	b := open(t)
	s := b.Scope()
	func() {
		for range 10 {
			b.Zeros(tensor.Shape{64}, tensor.F32)
		}
	}()
	if n := roots(b); n != 0 {
		t.Errorf("got %d ledger entries for arrays in a scope, want 0", n)
	}
	if got := collect(b, 1); got != 0 {
		t.Errorf("got LeakedByGC %d for arrays of an open scope, want 0", got)
	}
	if st := b.Stats(); st.LiveArrays != 10 || st.LiveBytes != 10*64*4 {
		t.Errorf("got %d live arrays / %d bytes with the scope open, want 10 / %d", st.LiveArrays, st.LiveBytes, 10*64*4)
	}
	s.Close()
	if st := b.Stats(); st.LiveArrays != 0 || st.LiveBytes != 0 {
		t.Errorf("got %d live arrays / %d bytes after Close, want 0 / 0", st.LiveArrays, st.LiveBytes)
	}

	// Kept to the outermost level: released explicitly (no leak), then
	// forgotten (a leak).
	for i, release := range []bool{true, false} {
		func() {
			s := b.Scope()
			x := s.Keep(b.Zeros(tensor.Shape{64}, tensor.F32))
			s.Close()
			if n := roots(b); n != 1 {
				t.Errorf("got %d ledger entries after Keep to the outermost level, want 1 (case %d)", n, i)
			}
			if release {
				b.Release(x)
			}
		}()
	}
	if got := collect(b, 1); got != 1 {
		t.Errorf("got LeakedByGC %d, want 1 (the forgotten kept array)", got)
	}
	if err := b.Eval(); err != nil { // frees the queued handle
		t.Fatal(err)
	}
	if st := b.Stats(); st.LiveArrays != 0 || st.LiveBytes != 0 || roots(b) != 0 {
		t.Errorf("got %d live arrays / %d bytes / %d entries, want 0 / 0 / 0", st.LiveArrays, st.LiveBytes, roots(b))
	}
}

// The shape an op call reports (mlxgo_result) comes back intact at every rank, inline in the
// Array (up to 4) or not; more dimensions than MLXGO_MAX_DIMS are refused.
func TestRecordedShapes(t *testing.T) {
	b := open(t)
	for _, shape := range []tensor.Shape{{}, {3}, {2, 1, 3, 1}, {1, 2, 1, 3, 1}, {1, 1, 2, 1, 1, 3, 1, 1}} {
		t.Run(fmt.Sprint(shape), func(t *testing.T) {
			x := b.Zeros(tensor.Shape{shape.Size()}, tensor.BF16)
			y := b.Reshape(x, shape...)
			defer b.Release(x, y)
			if got := y.Shape(); !got.Equal(shape) || y.DType() != tensor.BF16 {
				t.Errorf("got %v %v, want BF16 %v", y.DType(), got, shape)
			}
			h, err := b.ToHost(y)
			if err != nil {
				t.Fatal(err)
			}
			if want := 2 * shape.Size(); !h.Shape.Equal(shape) || len(h.Data) != want {
				t.Errorf("ToHost: got %v with %d bytes, want %v with %d", h.Shape, len(h.Data), shape, want)
			}
		})
	}
	many := make([]int, 33)
	for i := range many {
		many[i] = 1
	}
	x := b.Zeros(tensor.Shape{1}, tensor.F32)
	var oe *backend.OpError
	if err := catch(func() { b.Reshape(x, many...) }); !errors.As(err, &oe) || oe.Op != "Reshape" {
		t.Errorf("Reshape to 33 dimensions: got %v, want an *backend.OpError of Reshape", err)
	}
}

// Concatenate takes any number of arrays: up to four inline in its args
// value, more in a copy, and more handles than the buffer first holds (8):
// 0, 1, ..., n-1 joined is [0 1 ... n-1], exact in float32.
func TestConcatenateMany(t *testing.T) {
	b := open(t)
	for _, n := range []int{1, 4, 5, 8, 9, 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := b.Scope()
			defer s.Close()
			xs := make([]backend.Array, n)
			for i := range xs {
				xs[i] = b.Full(tensor.Shape{1}, float64(i), tensor.F32)
			}
			h, err := b.ToHost(b.Concatenate(0, xs...))
			if err != nil {
				t.Fatal(err)
			}
			got := h.Float32s()
			if len(got) != n {
				t.Fatalf("got %d values, want %d", len(got), n)
			}
			for i, v := range got {
				if v != float32(i) {
					t.Errorf("got %v, want %v (index %d)", v, i, i)
				}
			}
		})
	}
}

// Recording an op on the MLX thread allocates only its Array: arguments,
// shapes and index lists stay on the caller's stack (BenchmarkOpRecord
// depends on it), and keeping to an enclosing scope arms no safety net.
func TestOpAllocations(t *testing.T) {
	b := open(t)
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		x := b.Zeros(tensor.Shape{1, 2, 3, 4}, tensor.BF16)
		w := b.Zeros(tensor.Shape{64, 64}, tensor.BF16)
		q := b.Quantize(w, 64, 4)
		v := b.Zeros(tensor.Shape{1, 64}, tensor.BF16)
		defer b.Release(x, w, q.W, q.Scales, q.Biases, v)
		rope := backend.RoPE{Dims: 4, Base: 10000, Scale: 1}
		outer := b.Scope()
		defer outer.Close()
		inner := b.Scope().(*scope) // called through backend.Scope, variadic arguments escape at the call
		defer inner.Close()
		for _, c := range []struct {
			name string
			run  func()
		}{
			{"Binary", func() { b.Binary(backend.Add, x, x) }},
			{"Unary", func() { b.Unary(backend.Exp, x) }},
			{"SiLU", func() { b.Unary(backend.SiLU, x) }},
			{"Reshape", func() { b.Reshape(x, 6, 4) }},
			{"Transpose", func() { b.Transpose(x, 2, 0, 1, 3) }},
			{"Slice", func() { b.Slice(x, []int{0, 0, 0, 0}, []int{1, 1, 2, 3}) }},
			{"SliceUpdate", func() { b.SliceUpdate(x, x, []int{0, 0, 0, 0}) }},
			{"Concatenate", func() { b.Concatenate(0, x, x) }},
			{"Sum", func() { b.Sum(x, 0, false) }},
			{"QuantizedMatmul", func() { b.QuantizedMatmul(v, q, true) }},
			{"RoPE", func() { b.RoPE(x, rope, backend.Offset{Scalar: 3}) }},
			{"RMSNorm", func() { b.RMSNorm(x, nil, 1e-5) }},
			{"ScaledDotProductAttention", func() { b.ScaledDotProductAttention(x, x, x, 1, backend.CausalMask{}) }},
			{"SwiGLU", func() { b.SwiGLU(x, x) }},
			{"Release", func() { b.Release(b.Binary(backend.Add, x, x)) }},
			{"Keep", func() { inner.Keep(b.Binary(backend.Add, x, x)) }},
		} {
			if got := testing.AllocsPerRun(20, c.run); got > 1 {
				t.Errorf("got %v allocations, want 1 (%s)", got, c.name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
