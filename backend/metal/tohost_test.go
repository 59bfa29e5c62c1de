//go:build mlx

package metal

import (
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// ToHost reads row-contiguous results in place and relays out the others
// (views with other strides or an offset): every case must come back in
// row-major order. x is [[0 1 2] [3 4 5]]; the wants are written out by hand.
func TestToHostLayouts(t *testing.T) {
	b := open(t)
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		s := b.Scope()
		defer s.Close()
		x := b.FromHost(tensor.FromFloat32(tensor.Shape{2, 3}, []float32{0, 1, 2, 3, 4, 5}))
		evaluated := b.Transpose(x, 1, 0)
		if err := b.Eval(evaluated); err != nil {
			return err
		}
		for _, tc := range []struct {
			name  string
			a     backend.Array
			shape tensor.Shape
			want  []float32
		}{
			{"dense", x, tensor.Shape{2, 3}, []float32{0, 1, 2, 3, 4, 5}},
			{"transpose", b.Transpose(x, 1, 0), tensor.Shape{3, 2}, []float32{0, 3, 1, 4, 2, 5}},
			{"columns", b.Slice(x, []int{0, 1}, []int{2, 3}), tensor.Shape{2, 2}, []float32{1, 2, 4, 5}},
			{"second-row", b.Slice(x, []int{1, 0}, []int{2, 3}), tensor.Shape{1, 3}, []float32{3, 4, 5}},
			{"column-of-transpose", b.Slice(b.Transpose(x, 1, 0), []int{0, 1}, []int{3, 2}), tensor.Shape{3, 1}, []float32{3, 4, 5}},
			{"evaluated-transpose", evaluated, tensor.Shape{3, 2}, []float32{0, 3, 1, 4, 2, 5}},
		} {
			h, err := b.ToHost(tc.a)
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if !slices.Equal(h.Shape, tc.shape) {
				t.Errorf("%s: got shape %v, want %v", tc.name, h.Shape, tc.shape)
			}
			if got := h.ToFloat32(); !slices.Equal(got, tc.want) {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
