//go:build mlx

package metal

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestCompile: a compiled function (a value-and-grad inside, as the
// trainer's step has) gives the uncompiled function's outputs; it traces
// once per list of input shapes and replays the trace after, so a value
// the function reads from outside its inputs keeps its trace-time value;
// the function's error is the call's; after release the Go function is let
// go and a call is an error.
func TestCompile(t *testing.T) {
	b := open(t)
	before := closuresAlive.Load()
	k := 0.5 // read by fn from outside its inputs: a constant of each trace
	traces := 0
	var failWith error
	fn := func(in []backend.Array) ([]backend.Array, error) {
		traces++
		if failWith != nil {
			return nil, failWith
		}
		x, w := in[0], in[1]
		loss := func(p []backend.Array) ([]backend.Array, error) {
			y := b.Unary(backend.Tanh, b.Matmul(p[0], p[1]))
			y = b.Binary(backend.Add, b.Binary(backend.Multiply, y, b.Full(tensor.Shape{}, k, tensor.F32)), b.Unary(backend.Square, p[0]))
			return []backend.Array{b.Sum(b.Reshape(y, -1), 0, false)}, nil
		}
		outs, grads, err := b.ValueAndGrad(loss, []backend.Array{x, w}, []int{1})
		if err != nil {
			return nil, err
		}
		// An Adam-like update of w, elementwise ops MLX fuses.
		m := b.Binary(backend.Multiply, grads[0], b.Full(tensor.Shape{}, 0.1, tensor.F32))
		den := b.Binary(backend.Add, b.Unary(backend.Sqrt, b.Unary(backend.Square, grads[0])), b.Full(tensor.Shape{}, 1e-8, tensor.F32))
		next := b.Binary(backend.Subtract, w, b.Binary(backend.Divide, m, den))
		return []backend.Array{outs[0], grads[0], next}, nil
	}
	host := func(xs []backend.Array) [][]float32 {
		t.Helper()
		var out [][]float32
		for _, x := range xs {
			d, err := b.ToHost(x)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d.Float32s())
		}
		return out
	}
	rnd := func(shape tensor.Shape, seed int) backend.Array {
		v := make([]float32, shape.Size())
		for i := range v {
			v[i] = float32(math.Sin(float64(seed*1000+i)*0.37)) * 0.8
		}
		return b.FromHost(tensor.FromFloat32(shape, v))
	}
	call, release := b.Compile(fn)
	s := b.Scope()
	defer s.Close()
	cases := []struct {
		name       string
		x, w       backend.Array
		k          float64
		wantTraces int
	}{
		{"first shape traces", rnd(tensor.Shape{3, 4}, 1), rnd(tensor.Shape{4, 4}, 2), 0.5, 1},
		{"same shapes replay", rnd(tensor.Shape{3, 4}, 3), rnd(tensor.Shape{4, 4}, 4), 0.5, 1},
		{"new shape traces", rnd(tensor.Shape{5, 4}, 5), rnd(tensor.Shape{4, 4}, 6), 0.5, 2},
		{"old shape replays", rnd(tensor.Shape{3, 4}, 7), rnd(tensor.Shape{4, 4}, 8), 0.5, 2},
	}
	for _, c := range cases {
		k = c.k
		in := []backend.Array{c.x, c.w}
		got, err := call(in)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if traces != c.wantTraces {
			t.Errorf("%s: %d traces, want %d", c.name, traces, c.wantTraces)
		}
		n := traces
		want, err := fn(in) // uncompiled
		traces = n
		if err != nil {
			t.Fatal(err)
		}
		g, w := host(got), host(want)
		for i := range w {
			for j := range w[i] {
				if g[i][j] != w[i][j] {
					t.Errorf("%s: output %d[%d]: compiled %v, uncompiled %v", c.name, i, j, g[i][j], w[i][j])
				}
			}
		}
	}
	// A value read from outside the inputs is the trace's.
	k = 2
	got, err := call([]backend.Array{cases[0].x, cases[0].w})
	if err != nil {
		t.Fatal(err)
	}
	k = 0.5
	want, err := fn([]backend.Array{cases[0].x, cases[0].w})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := host(got)[0][0], host(want)[0][0]; g != w {
		t.Errorf("replay after the outside value changed: %v, want the trace's %v", g, w)
	}
	// The function's error is the call's; the next trace works.
	failWith = errors.New("the function failed")
	if _, err := call([]backend.Array{rnd(tensor.Shape{2, 4}, 9), cases[0].w}); !errors.Is(err, failWith) {
		t.Errorf("a failing trace: %v, want %v", err, failWith)
	}
	failWith = nil
	if _, err := call([]backend.Array{rnd(tensor.Shape{2, 4}, 9), cases[0].w}); err != nil {
		t.Errorf("a trace after a failed one: %v", err)
	}
	release()
	if _, err := call([]backend.Array{cases[0].x, cases[0].w}); err == nil || !strings.Contains(err.Error(), "released") {
		t.Errorf("a call after release: %v, want an error saying it was released", err)
	}
	release() // twice is harmless
	if got := closuresAlive.Load(); got != before {
		t.Errorf("closures MLX still holds after release: %d, want %d", got, before)
	}
}

// TestCompileFreedOnClose: a compiled function not released is freed
// when the backend closes.
func TestCompileFreedOnClose(t *testing.T) {
	before := closuresAlive.Load()
	b, err := New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	call, _ := b.Compile(func(in []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Binary(backend.Add, in[0], in[0])}, nil
	})
	x := b.Full(tensor.Shape{3}, 1, tensor.F32)
	if _, err := call([]backend.Array{x}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := closuresAlive.Load(); got != before {
		t.Errorf("closures MLX still holds after Close: %d, want %d", got, before)
	}
}
