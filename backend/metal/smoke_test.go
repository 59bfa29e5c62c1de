//go:build mlx

package metal

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Hand-computed: [1 2 3] + [10 20 30] = [11 22 33], each exact in float32.
func TestAddRoundTrip(t *testing.T) {
	b := open(t)
	x := b.FromHost(tensor.FromFloat32(tensor.Shape{3}, []float32{1, 2, 3}))
	y := b.FromHost(tensor.FromFloat32(tensor.Shape{3}, []float32{10, 20, 30}))
	z := b.Binary(backend.Add, x, y)
	if got := z.Shape(); !got.Equal(tensor.Shape{3}) || z.DType() != tensor.F32 {
		t.Fatalf("got %v %v, want F32 [3]", z.DType(), got)
	}
	h, err := b.ToHost(z)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{11, 22, 33}
	for i, v := range h.Float32s() {
		if v != want[i] {
			t.Errorf("got %v, want %v (index %d)", v, want[i], i)
		}
	}
	t.Logf("MLX %s on %s", b.Version(), b.Device())
}
