package conformance

import (
	"math"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestCompareKL: identical rows pass with KL 0; a row whose two largest
// logits are swapped (clear margin) fails on the argmax; a row shifted by a
// constant is the same distribution; a NaN fails.
func TestCompareKL(t *testing.T) {
	b := Budget{MaxKL: 1.5, MeanKL: 0.25, ArgmaxMargin: 0.5}
	want := []float32{0, 1, 5, 2, 3, 0, 1, 0}
	rows := func(x []float32) *tensor.Dense { return tensor.FromFloat32(tensor.Shape{2, 4}, x) }
	if r := compareKL("c", "b", "logits", rows(want), rows(want), b); !r.Pass || r.Value != 0 {
		t.Errorf("identical rows: got %v, want a pass with KL 0", r)
	}
	shifted := []float32{7, 8, 12, 9, 3, 0, 1, 0}
	if r := compareKL("c", "b", "logits", rows(shifted), rows(want), b); !r.Pass || r.Value > 1e-12 {
		t.Errorf("row 0 shifted by 7: got %v, want a pass with KL ~0", r)
	}
	// Row 0: 5 and 2 swapped. KL = softmax mass moved: well over 1.5 nats.
	swapped := []float32{0, 1, 2, 5, 3, 0, 1, 0}
	r := compareKL("c", "b", "logits", rows(swapped), rows(want), b)
	if r.Pass || r.Index != 3 || r.Value <= b.MaxKL {
		t.Errorf("row 0's top two swapped: got %v, want a failure at flat index 3 with KL over %g", r, b.MaxKL)
	}
	// Argmax miss below the margin only: row 1's top two differ by 0.4 in
	// the oracle; swapping them moves little mass.
	want2 := []float32{0, 1, 5, 2, 3, 2.6, 1, 0}
	near := []float32{0, 1, 5, 2, 2.6, 3, 1, 0}
	if r := compareKL("c", "b", "logits", rows(near), rows(want2), b); !r.Pass || !strings.Contains(r.Detail, "argmax agrees at 1 of 2 rows, 1 of 1") {
		t.Errorf("near-tie swapped: got %v, want a pass noting 1 of 2 argmaxes", r)
	}
	nan := append([]float32(nil), want...)
	nan[1] = float32(math.NaN())
	if r := compareKL("c", "b", "logits", rows(nan), rows(want), b); r.Pass {
		t.Errorf("NaN: got %v, want a failure", r)
	}
}
