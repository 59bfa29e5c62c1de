package kernel

import (
	"fmt"
	"math"
	"testing"
)

// TestArgmaxRow holds ArgmaxRow to the plain loop of mx.argmax's rule (the
// first index of the largest value; the first NaN wins): ties, NaNs before
// and after the maximum, infinities, signed zeros, and random rows of
// lengths around the vector width (with the installed vector maximum).
func TestArgmaxRow(t *testing.T) {
	plain := func(v []float32) int {
		best, at := v[0], 0
		for j := 1; j < len(v) && best == best; j++ {
			if e := v[j]; e != e || e > best {
				best, at = e, j
			}
		}
		return at
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	negz := float32(math.Copysign(0, -1))
	rows := [][]float32{
		{3},
		{nan, 1, 2},
		{1, 2, nan, 5, nan},
		{2, 5, 5, 1, 5},
		{-inf, -inf, -inf},
		{negz, 0, negz},
		{-1, negz, 0},
		{1, inf, 2, inf},
	}
	r := newRand(5)
	for _, n := range []int{1, 15, 16, 17, 33, 100, 1000} {
		v := randVec(r, n, 1, Identity)
		rows = append(rows, v)
		w := append([]float32(nil), v...)
		w[n/2] = nan
		rows = append(rows, w)
		q := make([]float32, n) // ties everywhere
		for i := range q {
			q[i] = float32(r.IntN(3))
		}
		rows = append(rows, q)
	}
	for i, v := range rows {
		t.Run(fmt.Sprintf("row%d/len%d", i, len(v)), func(t *testing.T) {
			if got, want := ArgmaxRow(v), plain(v); got != want {
				t.Fatalf("ArgmaxRow = %d, want %d (%v)", got, want, v)
			}
		})
	}
}
