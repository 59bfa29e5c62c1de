package kernel

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestSlowPaths: a quantized matmul that no vector kernel covers (3 bits
// has no AVX-512 kernel; the AVX2 ones are switched off here) is named once
// by SlowPaths, and a matrix of fewer than 8 rows is not.
func TestSlowPaths(t *testing.T) {
	defer func() { avxOn = true }()
	avxOn = false
	for _, c := range []struct {
		n, m int
		acc  Acc
		want string
		kept bool
	}{
		{24, 1, AccF32, "3-bit group 32, float16 scales, float32 accumulation", true},
		{24, 3, AccQ8, "3-bit group 32, float16 scales, int8 activations", true},
		{4, 1, AccF32, "3-bit group 64, float16 scales, float32 accumulation", false},
	} {
		slowPaths.Clear() // other tests of the package record their own combinations
		k, gs := 256, 32
		if !c.kept {
			gs = 64
		}
		_, wq, sc, bi, sb, bb := qmvInputs(1, c.n, k, gs, 3)
		scv, biv := avxVecs("f16", sc, bi, sb, bb)
		x := randVec(newRand(2), c.m*k, 1, tensor.RoundBF16)
		for range 2 {
			QuantizedMatmulTVec(make([]float32, c.m*c.n), x, wq, scv, biv, c.m, c.n, k, gs, 3, Identity, c.acc)
		}
		got := SlowPaths()
		if n := countOf(got, c.want); c.kept && n != 1 || !c.kept && n != 0 {
			t.Errorf("n %d m %d: SlowPaths() = %q: %q listed %d times, want %v", c.n, c.m, got, c.want, n, c.kept)
		}
	}
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}
