//go:build mlx

package metal

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestClosuresDropped: every Go function handed to MLX as a closure is let
// go once the transform is done and its results are released, the
// checkpointed ones (which the graph holds for the backward) included, and
// no array is left alive.
func TestClosuresDropped(t *testing.T) {
	b := open(t)
	before := closuresAlive.Load()
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		s := b.Scope()
		defer s.Close()
		x := b.FromHost(tensor.FromFloat32(tensor.Shape{2, 3}, []float32{1, -2, 3, 0.5, 4, -1}))
		w := b.FromHost(tensor.FromFloat32(tensor.Shape{3, 3}, []float32{1, 0, 2, -1, 1, 0, 0.5, 0.5, 1}))
		block := func(in []backend.Array) ([]backend.Array, error) {
			return []backend.Array{b.Unary(backend.Tanh, b.Matmul(in[0], in[1]))}, nil
		}
		loss := func(in []backend.Array) ([]backend.Array, error) {
			y, err := b.Checkpoint(block)(in)
			if err != nil {
				return nil, err
			}
			return []backend.Array{b.Sum(b.Reshape(y[0], -1), 0, false)}, nil
		}
		for range 3 {
			outs, grads, err := b.ValueAndGrad(loss, []backend.Array{x, w}, []int{0, 1})
			if err != nil {
				return err
			}
			if err := b.Eval(append(outs, grads...)...); err != nil {
				return err
			}
			b.Release(append(outs, grads...)...)
			outs, vjps, err := b.VJP(block, []backend.Array{x, w}, []backend.Array{b.Full(tensor.Shape{2, 3}, 1, tensor.F32)})
			if err != nil {
				return err
			}
			b.Release(append(outs, vjps...)...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := closuresAlive.Load(); got != before {
		t.Errorf("closures MLX still holds: %d, want %d", got, before)
	}
	if s := b.Stats(); s.LiveArrays != 0 {
		t.Errorf("live arrays after the scope closed: %d, want 0", s.LiveArrays)
	}
}

// TestClosurePanic: a panic that is not an *OpError inside the function
// comes back as the transform's error, and the backend keeps working.
func TestClosurePanic(t *testing.T) {
	b := open(t)
	x := b.Full(tensor.Shape{2}, 1, tensor.F32)
	defer b.Release(x)
	_, _, err := b.VJP(func([]backend.Array) ([]backend.Array, error) {
		var m map[string]int
		m["x"]++ // a nil map write: a runtime panic
		return nil, nil
	}, []backend.Array{x}, []backend.Array{x})
	if err == nil {
		t.Fatal("no error from a function that panics")
	}
	t.Logf("error: %v", err)
	y := b.Binary(backend.Add, x, x)
	defer b.Release(y)
	if d, err := b.ToHost(y); err != nil || d.Float32s()[0] != 2 {
		t.Errorf("after the panic: %v, %v", d, err)
	}
}
