package kernel

import (
	"math"
	"testing"
)

// TestSubScalar holds SubScalar (vector code where the CPU has it) to the
// scalar subtraction bit for bit, NaNs, infinities and zeros included, on
// lengths around the vector width, in place and not.
func TestSubScalar(t *testing.T) {
	if simdSubScalar == nil {
		t.Logf("no vector SubScalar in this build or on this CPU: only the scalar loop is tested")
	}
	specials := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)), 1e-40, 3.5}
	r := newRand(7)
	for _, n := range []int{0, 1, 15, 16, 17, 33, 64, 1000} {
		for _, c := range []float32{0, 2.75, float32(math.Inf(1)), float32(math.NaN()), -1e30} {
			a := randVec(r, n, 8, Identity)
			for i := range a {
				if r.IntN(5) == 0 {
					a[i] = specials[r.IntN(len(specials))]
				}
			}
			want := make([]float32, n)
			for i, v := range a {
				want[i] = v - c
			}
			got := make([]float32, n)
			SubScalar(got, a, c)
			SubScalar(a, a, c) // in place
			for i := range want {
				if w := math.Float32bits(want[i]); math.Float32bits(got[i]) != w || math.Float32bits(a[i]) != w {
					t.Fatalf("n %d, c %v, index %d: %#08x and in place %#08x, want %#08x", n, c, i, math.Float32bits(got[i]), math.Float32bits(a[i]), w)
				}
			}
		}
	}
}
