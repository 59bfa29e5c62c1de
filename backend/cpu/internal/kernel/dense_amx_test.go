package kernel

import (
	"fmt"
	"sync/atomic"
	"testing"
)

// TestDenseAMX holds the fast precision's AMX dense matmul (dense_amx.go)
// to the float64 sum within DenseFastBoundW, and to itself: a row alone
// gets the bits it gets among many, and a second call (on the packed
// form) the first call's (which packed it), through the slot as the
// backend calls it, for float16
// and bfloat16 weights, partial groups of 64 columns, partial blocks of 16
// rows and guard-padded outputs; packing reports every weight row done.
func TestDenseAMX(t *testing.T) {
	if !asmAMXBF16 {
		t.Skip("SKIPPED: no AMX-BF16 here (the CPU, the kernel, or MLXGO_NO_AMX=1); the fast dense matmul runs on the denseB kernels (TestDenseFast)")
	}
	shapes := [][3]int{{1, 16, 32}, {1, 70, 96}, {2, 64, 64}, {3, 130, 960}, {16, 64, 128}, {17, 200, 320}, {37, 65, 32}}
	for _, dt := range []string{"f16", "bf16"} {
		for si, s := range shapes {
			m, n, k := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/m%d_n%d_k%d", dt, m, n, k), func(t *testing.T) {
				w, wv := denseWeights(t, dt, uint64(40+si), n, k)
				x := randVec(newRand(uint64(140+si)), m*k, 1, Identity)
				x[0] = 1e-39 // subnormal: flushed
				var rows atomic.Int64
				var grew int64
				slot := NewPackSlot(func(b int64) { grew = b }, func(r0, r1 int) { rows.Add(int64(r1 - r0)) })
				got, whole := guarded(m * n)
				withThreads(2, func() { DenseMatmulTPacked(got, x, w, slot, m, n, k, true) })
				checkGuards(t, whole, "packing call")
				if rows.Load() != int64(n) || grew == 0 || slot.Bytes() != grew {
					t.Fatalf("packing reported %d of %d rows done, grew %d, slot %d bytes", rows.Load(), n, grew, slot.Bytes())
				}
				want := got
				again, whole := guarded(m * n)
				withThreads(3, func() { DenseMatmulTPacked(again, x, w, slot, m, n, k, true) })
				checkGuards(t, whole, "packed call")
				expectSame(t, again, want, "packed call")
				for i := 0; i < m; i += 5 {
					one := make([]float32, n)
					DenseMatmulTPacked(one, x[i*k:(i+1)*k], w, slot, 1, n, k, true)
					expectSame(t, one, want[i*n:(i+1)*n], fmt.Sprintf("row %d alone", i))
				}
				checkDenseFastBound(t, got, x, wv, m, n, k, true)
			})
		}
	}
}
