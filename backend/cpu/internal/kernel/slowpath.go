package kernel

import (
	"fmt"
	"slices"
	"sync"
)

// slowKey is one combination of the quantized matmul with transposed
// weights.
type slowKey struct {
	bits, gs int
	scales   string // dtype of the scales and biases
	q8       bool   // int8 activations ("fast")
}

// slowPaths holds the combinations that ran whole on the portable loops
// because no vector kernel of this CPU covers them (set once per
// combination; a map read per call after that).
var slowPaths sync.Map // slowKey -> struct{}

// noteSlow records that a matmul of n ≥ 8 weight rows ran on the portable
// loops. Smaller matrices (which the vector kernels leave to the loops by
// design) are not recorded.
func noteSlow(n, gs, bits int, sc Vec, q8 bool) {
	if n < 8 {
		return
	}
	dt := "float32"
	switch {
	case sc.F32 == nil && sc.F16:
		dt = "float16"
	case sc.F32 == nil:
		dt = "bfloat16"
	}
	slowPaths.LoadOrStore(slowKey{bits, gs, dt, q8}, struct{}{})
}

// SlowPaths names, sorted, every combination of the quantized matmul that
// has run on the portable loops in this process because no vector kernel of
// this CPU covers it (for example "4-bit group 32, float16 scales, float32
// accumulation"). Empty when every matmul so far found a kernel.
func SlowPaths() []string {
	var out []string
	slowPaths.Range(func(k, _ any) bool {
		s := k.(slowKey)
		acc := "float32 accumulation"
		if s.q8 {
			acc = "int8 activations"
		}
		out = append(out, fmt.Sprintf("%d-bit group %d, %s scales, %s", s.bits, s.gs, s.scales, acc))
		return true
	})
	slices.Sort(out)
	return out
}
