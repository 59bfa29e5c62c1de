package cpu

import (
	"errors"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestMain poisons pooled buffers (see poison) so that an op leaving part
// of its output unwritten fails the tests.
func TestMain(m *testing.M) {
	poison = true
	os.Exit(m.Run())
}

// open returns a reference-precision backend closed at the end of the test.
func open(t *testing.T) *Backend {
	t.Helper()
	return openWith(t, backend.Options{})
}

func openWith(t *testing.T, o backend.Options) *Backend {
	t.Helper()
	b, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// arr makes an array of dtype dt from float64 values (converted as astype).
func arr(b *Backend, dt tensor.DType, shape tensor.Shape, v ...float64) backend.Array {
	return b.FromHost(tensor.FromFloat64(shape, v).Convert(dt))
}

// vals returns a's elements as float64.
func vals(t *testing.T, b *Backend, a backend.Array) []float64 {
	t.Helper()
	d, err := b.ToHost(a)
	if err != nil {
		t.Fatalf("ToHost: %v", err)
	}
	return d.ToFloat64()
}

// check compares a's dtype, shape and values (exactly, NaN equal to NaN).
func check(t *testing.T, b *Backend, a backend.Array, dt tensor.DType, shape tensor.Shape, want ...float64) {
	t.Helper()
	checkTol(t, b, a, dt, shape, 0, want...)
}

// checkTol is check with an absolute tolerance.
func checkTol(t *testing.T, b *Backend, a backend.Array, dt tensor.DType, shape tensor.Shape, tol float64, want ...float64) {
	t.Helper()
	if a.DType() != dt {
		t.Errorf("dtype: got %v, want %v", a.DType(), dt)
	}
	if !a.Shape().Equal(shape) {
		t.Fatalf("shape: got %v, want %v", a.Shape(), shape)
	}
	got := vals(t, b, a)
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if math.IsNaN(w) && math.IsNaN(g) {
			continue
		}
		if g != w && !(math.Abs(g-w) <= tol) {
			t.Errorf("got %v, want %v (index %d)", g, w, i)
		}
	}
}

// opPanic runs fn and returns the *backend.OpError it panics with, failing
// the test if it does not panic that way.
func opPanic(t *testing.T, fn func()) (oe *backend.OpError) {
	t.Helper()
	var err error
	func() {
		defer backend.Recover(&err)
		fn()
	}()
	if err == nil {
		t.Fatalf("no panic, want *backend.OpError")
	}
	if !errors.As(err, &oe) {
		t.Fatalf("got %T, want *backend.OpError", err)
	}
	return oe
}

func name(parts ...any) string {
	s := ""
	for i, p := range parts {
		if i > 0 {
			s += "/"
		}
		s += fmt.Sprint(p)
	}
	return s
}
