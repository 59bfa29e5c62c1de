package nn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/tensor"
)

// The layer's numerics against mlx_lm are the conformance fixtures
// lora/... (forward, gradients, fuse); these check what they do not.

func loraInput(b backend.Backend, seed uint64, scale float64, dt tensor.DType, shape ...int) backend.Array {
	r := rand.New(rand.NewPCG(seed, 3))
	v := make([]float64, tensor.Shape(shape).Size())
	for i := range v {
		v[i] = r.NormFloat64() * scale
	}
	return b.FromHost(tensor.FromFloat64(shape, v).Convert(dt))
}

// TestLoRAFuse: the fused layer (quantized again, or dequantized) computes
// what the adapted layer computes, up to the rounding of the fused weight
// (and, quantized again, its quantization).
func TestLoRAFuse(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := loraInput(b, 1, 0.125, tensor.F32, 16, 64)
	x := loraInput(b, 2, 1, tensor.F32, 3, 64)
	for _, c := range []struct {
		name       string
		base       Linear
		dequantize bool
		tol        float64
		want       string
	}{
		{"dense", &Dense{B: b, Weight: w}, false, 1e-5, "*nn.Dense"},
		{"quantized/dequantize", &QuantizedLinear{B: b, Weight: b.Quantize(w, 32, 8)}, true, 1e-5, "*nn.Dense"},
		{"quantized/requantize", &QuantizedLinear{B: b, Weight: b.Quantize(w, 32, 8)}, false, 0.05, "*nn.QuantizedLinear"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &LoRALinear{B: b, Base: c.base, Scale: 2,
				LoraA: loraInput(b, 3, 0.1, tensor.F32, 64, 4), LoraB: loraInput(b, 4, 0.1, tensor.F32, 4, 16)}
			f, err := l.Fuse(c.dequantize)
			if err != nil {
				t.Fatal(err)
			}
			if got := typeName(f); got != c.want {
				t.Errorf("fused layer is %s, want %s", got, c.want)
			}
			want, _ := b.ToHost(l.Forward(x))
			got, _ := b.ToHost(f.Forward(x))
			wv, gv := want.ToFloat64(), got.ToFloat64()
			scale := 0.0
			for _, v := range wv {
				scale = math.Max(scale, math.Abs(v))
			}
			for i := range wv {
				if math.Abs(gv[i]-wv[i]) > c.tol*scale {
					t.Fatalf("[%d]: fused %v, adapted %v (scale %v)", i, gv[i], wv[i], scale)
				}
			}
		})
	}
	if _, err := (&LoRALinear{B: b, Base: otherLinear{}}).Fuse(false); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("Fuse of an unknown base: got %v, want an error naming it", err)
	}
}

type otherLinear struct{}

func (otherLinear) Forward(x backend.Array) backend.Array { return x }

func typeName(l Linear) string {
	switch l.(type) {
	case *Dense:
		return "*nn.Dense"
	case *QuantizedLinear:
		return "*nn.QuantizedLinear"
	}
	return "?"
}

// TestDoRANormFreesItsTemporaries: DoRANorm called outside any scope (as
// lora.Load under mlxgo generate's backend.Do) leaves one new array, the
// norm, for a dense and a quantized base (whose dequantized weight, as
// large as the layer in float32, must not wait for the garbage collector),
// and the norm is each row's 2-norm.
func TestDoRANormFreesItsTemporaries(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	w := loraInput(b, 1, 0.125, tensor.F32, 16, 64)
	q := b.Quantize(w, 32, 8)
	for _, c := range []struct {
		name string
		base Linear
		tol  float64
	}{
		{"dense", &Dense{B: b, Weight: w}, 1e-6},
		{"quantized", &QuantizedLinear{B: b, Weight: q}, 0.01},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := b.Stats()
			m, err := DoRANorm(b, c.base)
			if err != nil {
				t.Fatal(err)
			}
			if after := b.Stats(); after.LiveArrays != before.LiveArrays+1 {
				t.Errorf("live arrays %d after DoRANorm, %d before: want one more (the norm)", after.LiveArrays, before.LiveArrays)
			}
			got, err := b.ToHost(m)
			if err != nil {
				t.Fatal(err)
			}
			b.Release(m)
			wh, _ := b.ToHost(w)
			wv, gv := wh.ToFloat64(), got.ToFloat64()
			for r := range 16 {
				ss := 0.0
				for _, v := range wv[r*64 : (r+1)*64] {
					ss += v * v
				}
				if want := math.Sqrt(ss); math.Abs(gv[r]-want) > c.tol*want {
					t.Errorf("row %d: norm %v, want %v", r, gv[r], want)
				}
			}
		})
	}
}
