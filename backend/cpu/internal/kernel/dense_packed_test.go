package kernel

import (
	"fmt"
	"math"
	"sync"
	"testing"
)

// TestDenseReferencePacked: the reference precision on packed 16-bit
// weights gives DenseMatmulTRef's bits for every shape of the dense tests
// (one row through denseRefP1, more through the panels), reads nothing past
// x, W or dst (NaN guards), reports every weight row to the slot's rows
// callback once, and reads only the packed copy after the first call: the
// original weights overwritten with NaN, the second call gives the same
// bits. Where the CPU lacks the kernels nothing is packed and the result is
// still DenseMatmulT's.
func TestDenseReferencePacked(t *testing.T) {
	for _, dt := range []string{"bf16", "f16"} {
		w0, _ := denseWeights(t, dt, 1, 1, 1)
		t.Logf("%s: packed kernels on this CPU: %v", dt, densePackable(w0))
		for si, s := range denseShapes {
			m, n, k := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/m%d_n%d_k%d", dt, m, n, k), func(t *testing.T) {
				w, _ := denseWeights(t, dt, uint64(10+si), n, k)
				x := randVec(newRand(uint64(100+si)), m*k, 1, Identity)
				want := make([]float32, m*n)
				DenseMatmulTRef(want, x, w, m, n, k)
				var mu sync.Mutex
				seen := make([]int, n)
				var grew int64
				slot := NewPackSlot(func(b int64) { grew = b }, func(r0, r1 int) {
					mu.Lock()
					defer mu.Unlock()
					for r := r0; r < r1; r++ {
						seen[r]++
					}
				})
				defer slot.Free()
				run := func(call string) {
					t.Helper()
					xin, _ := guarded(m * k)
					copy(xin, x)
					dst, whole := guarded(m * n)
					DenseMatmulTPacked(dst, xin, w, slot, m, n, k, false)
					checkGuards(t, whole, "dst")
					for i := range want {
						if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s call: output %d (row %d, col %d) = %v (%#x), want %v (%#x)", call, i, i/n, i%n, dst[i], math.Float32bits(dst[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
				run("first")
				packed := densePackable(w) && k > 0
				if got := slot.Bytes(); packed != (got > 0) || got != grew {
					t.Fatalf("slot holds %d bytes (grew told %d); packable %v", got, grew, packed)
				}
				if !packed {
					return
				}
				if want := int64(2 * 16 * ((n + 15) / 16) * k); grew != want {
					t.Errorf("packed %d bytes, want %d", grew, want)
				}
				for r, c := range seen {
					if c != 1 {
						t.Fatalf("weight row %d reported %d times, want once", r, c)
					}
				}
				for i := range w.U16 {
					w.U16[i] = 0x7fc1 // NaN in either dtype
				}
				run("second (original weights overwritten)")
			})
		}
	}
}

// TestDenseMatmulTPackedFast: the fast precision ignores the slot (nothing
// is packed) and gives DenseMatmulT's bits.
func TestDenseMatmulTPackedFast(t *testing.T) {
	m, n, k := 2, 37, 70
	w, _ := denseWeights(t, "f16", 3, n, k)
	x := randVec(newRand(4), m*k, 1, Identity)
	want := make([]float32, m*n)
	DenseMatmulT(want, x, w, m, n, k, true)
	slot := NewPackSlot(nil, nil)
	got := make([]float32, m*n)
	DenseMatmulTPacked(got, x, w, slot, m, n, k, true)
	if slot.Bytes() != 0 {
		t.Errorf("fast precision packed %d bytes, want none", slot.Bytes())
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("output %d = %v, want %v", i, got[i], want[i])
		}
	}
}
