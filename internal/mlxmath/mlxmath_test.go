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
	// Results near and past float32's range (subnormal, overflow), where
	// FMA32 leaves the hardware float64 FMA for fma32Exact.
	for range 20000 {
		a := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(130)-65)))
		b := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(130)-65)))
		c := float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(260)-140)))
		cases = append(cases, abc{a, b, c})
	}
	cases = append(cases, abc{math.MaxFloat32, 1, math.MaxFloat32}, abc{math.MaxFloat32, 2, -math.MaxFloat32},
		abc{0x1p-75, 0x1p-75, 0x1p-149}, abc{0x1p-70, 0x1.8p-60, -0x1p-140}, abc{0, 5, -0})
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
		if got := fma32Exact(x.a, x.b, x.c); got != want {
			t.Fatalf("fma32Exact(%v, %v, %v): got %v, want %v (case %d)", x.a, x.b, x.c, got, want, i)
		}
	}
}

// TestExpSlice holds ExpSlice's own loop to Exp bit for bit (special
// values included); the kernels' vector exp has its own tests.
func TestExpSlice(t *testing.T) {
	src := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 88, -88, 88.0001, -88.0001, 0, float32(math.Copysign(0, -1)), 1e-30, -3.5, 10.25}
	got := make([]float32, len(src))
	ExpSlice(got, src)
	for i, v := range src {
		if want := Exp(v); math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("ExpSlice(%v): got %v, want Exp's %v", v, got[i], want)
		}
	}
}
