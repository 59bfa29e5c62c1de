package mlxmath

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestFMA32 checks fma32 against exact big.Float arithmetic rounded once to
// float32, including cases built to make a float64 sum round twice.
func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type abc struct{ a, b, c float32 }
	var cases []abc
	for range 20000 {
		a := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))
		b := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))
		c := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(80)-40)))
		cases = append(cases, abc{a, b, c})
	}
	// a·b exactly halfway between float32s plus a tiny c: a float64 sum
	// would round to the tie and then to even.
	cases = append(cases, abc{1 + 1.0/(1<<12), 1 + 1.0/(1<<12), 1e-30}, abc{1 + 1.0/(1<<12), 1 + 1.0/(1<<12), -1e-30})
	for i, x := range cases {
		exact := new(big.Float).SetPrec(0).SetMode(big.ToNearestEven)
		exact.SetPrec(2000)
		exact.Mul(big.NewFloat(float64(x.a)).SetPrec(2000), big.NewFloat(float64(x.b)).SetPrec(2000))
		exact.Add(exact, big.NewFloat(float64(x.c)).SetPrec(2000))
		want, _ := exact.Float32()
		if got := FMA32(x.a, x.b, x.c); got != want {
			t.Fatalf("FMA32(%v, %v, %v): got %v, want %v (case %d)", x.a, x.b, x.c, got, want, i)
		}
	}
}
