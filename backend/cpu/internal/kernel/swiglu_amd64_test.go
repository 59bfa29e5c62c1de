//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestExpAVX512BitExact holds the vector exp of ExpSlice to ExpMLX bit for bit.
func TestExpAVX512BitExact(t *testing.T) {
	if simdExp == nil {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the vector exp is not installed")
	}
	xs := sdpaExpInputs()
	got := make([]float32, len(xs))
	if n := simdExp(got, xs); n != len(xs) {
		t.Fatalf("simdExp wrote %d values, want %d", n, len(xs))
	}
	for i, x := range xs {
		want := ExpMLX(x)
		if math.Float32bits(got[i]) != math.Float32bits(want) {
			t.Fatalf("exp(%v = %#08x): got %v (%#08x), want %v (%#08x) (index %d)", x, math.Float32bits(x), got[i], math.Float32bits(got[i]), want, math.Float32bits(want), i)
		}
	}
}

// TestSwiGLUAVX512BitExact holds the vector SwiGLU to SwiGLURef bit for bit
// with every bf16 pattern as the gate (and as the up value, shifted).
func TestSwiGLUAVX512BitExact(t *testing.T) {
	if simdSwiGLU == nil {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the vector SwiGLU is not installed")
	}
	xs := sdpaExpInputs()[:1<<16]
	up := make([]float32, len(xs))
	for i := range up {
		up[i] = xs[(i*7919+13)%len(xs)]
	}
	for _, dt := range []struct {
		name  string
		round Rounder
		kind  byte
	}{{"bf16", tensor.RoundBF16, 'b'}, {"f32", Identity, 'i'}, {"f16", tensor.RoundF16, 'h'}} {
		t.Run(fmt.Sprintf("swiglu/%s", dt.name), func(t *testing.T) {
			got := make([]float32, len(xs))
			if n := simdSwiGLU(got, xs, up, dt.kind); n != len(xs) {
				t.Fatalf("simdSwiGLU wrote %d values, want %d", n, len(xs))
			}
			for i := range xs {
				want := swiglu(xs[i], up[i], dt.round)
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("swiglu(%v, %v): got %v (%#08x), want %v (%#08x) (index %d)", xs[i], up[i], got[i], math.Float32bits(got[i]), want, math.Float32bits(want), i)
				}
			}
		})
	}
}

// TestNormScaleAVX512BitExact holds RMSNorm's vector last step to the scalar
// one bit for bit: every bf16 pattern as x (NaNs of both signs, infinities,
// subnormals, zeros) against weights that are also every pattern, shifted,
// at several inv (including NaN, as a row holding a NaN gives).
func TestNormScaleAVX512BitExact(t *testing.T) {
	if simdNormScale == nil {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the vector RMSNorm step is not installed")
	}
	xs := sdpaExpInputs()[:1<<16]
	w := make([]float32, len(xs))
	for i := range w {
		w[i] = xs[(i*7919+13)%len(xs)]
	}
	for _, dt := range []struct {
		name  string
		round Rounder
		kind  byte
	}{{"bf16", tensor.RoundBF16, 'b'}, {"f32", Identity, 'i'}, {"f16", tensor.RoundF16, 'h'}} {
		for _, inv := range []float32{0.37, 3e-39, 7e30, 0, float32(math.Inf(1)), float32(math.NaN()), -float32(math.NaN())} {
			t.Run(fmt.Sprintf("%s/inv%v", dt.name, inv), func(t *testing.T) {
				got := make([]float32, len(xs))
				if n := simdNormScale(got, xs, w, inv, dt.kind); n != len(xs) {
					t.Fatalf("simdNormScale wrote %d values, want %d", n, len(xs))
				}
				for i, x := range xs {
					want := dt.round(float32(w[i] * dt.round(float32(x*inv))))
					if math.Float32bits(got[i]) != math.Float32bits(want) {
						t.Fatalf("w %#08x, x %#08x, inv %v: got %#08x, want %#08x (index %d)", math.Float32bits(w[i]), math.Float32bits(x), inv, math.Float32bits(got[i]), math.Float32bits(want), i)
					}
				}
			})
		}
	}
}

// TestMLXMathExpSlice: the sampler's mlxmath.ExpSlice runs through the
// kernels' exp registered by this package (SetExpSlice) and gives
// mlxmath.Exp's bits on every input of the SDPA exp test, in place too.
func TestMLXMathExpSlice(t *testing.T) {
	xs := sdpaExpInputs()
	xs = append(xs, 0.25, -3) // a length that is not a multiple of 16
	got := make([]float32, len(xs))
	mlxmath.ExpSlice(got, xs)
	inPlace := slices.Clone(xs)
	mlxmath.ExpSlice(inPlace, inPlace)
	for i, x := range xs {
		want := mlxmath.Exp(x)
		if math.Float32bits(got[i]) != math.Float32bits(want) || math.Float32bits(inPlace[i]) != math.Float32bits(want) {
			t.Fatalf("mlxmath.ExpSlice(%v) at %d: got %v (in place %v), want %v", x, i, got[i], inPlace[i], want)
		}
	}
}
