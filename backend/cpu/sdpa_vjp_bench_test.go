package cpu

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSDPAVJP is one SmolLM2-135M layer's attention, forward and VJP
// (9 query heads, 3 KV heads of 64, bfloat16 activations as in training),
// over a prefix-shared ORPO sequence of a 1024-token prompt and two
// responses of 256: under the PrefixMask (the fused forward skipping the
// hidden key blocks, the VJP in tiles of sdpaVJPTile query positions),
// under its Bool ArrayMask (every key, the dense VJP: as before the
// PrefixMask), and the two causal forwards of 1280 positions it replaces
// (two calls per op, the tiled VJP). cpu-ns/op is the process's CPU time
// (user+sys) per op.
func BenchmarkSDPAVJP(b *testing.B) {
	const h, hk, d, P, R = 9, 3, 64, 1024, 256
	defer func(p bool) { poison = p }(poison)
	poison = false // the tests' NaN fill of every buffer is not the backend's cost
	pm := backend.PrefixMask{Prefix: P, Blocks: []int{R, R}}
	be, err := New(backend.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(s tensor.Shape) backend.Array {
		v := make([]float32, s.Size())
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return be.AsType(be.FromHost(tensor.FromFloat32(s, v)), tensor.BF16)
	}
	for _, c := range []struct {
		name  string
		l     int
		mask  func() backend.Mask
		calls int
	}{
		{"prefix", pm.Len(), func() backend.Mask { return pm }, 1},
		{"bool", pm.Len(), func() backend.Mask { return backend.ArrayMask{A: be.FromHost(pm.Dense())} }, 1},
		{"two-causal", P + R, func() backend.Mask { return backend.CausalMask{} }, 2},
	} {
		q, k, v := rnd(tensor.Shape{1, h, c.l, d}), rnd(tensor.Shape{1, hk, c.l, d}), rnd(tensor.Shape{1, hk, c.l, d})
		cot := rnd(tensor.Shape{1, h, c.l, d})
		m := c.mask()
		b.Run(c.name, func(b *testing.B) {
			t0 := rusage()
			for b.Loop() {
				for range c.calls {
					s := be.Scope()
					_, _, err := be.VJP(func(x []backend.Array) ([]backend.Array, error) {
						return one(be.ScaledDotProductAttention(x[0], x[1], x[2], 0.125, m)), nil
					}, []backend.Array{q, k, v}, []backend.Array{cot})
					if err != nil {
						b.Fatal(err)
					}
					s.Close()
				}
			}
			b.ReportMetric(float64(rusage()-t0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// rusage is the process's user+system CPU time.
func rusage() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
