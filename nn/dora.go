package nn

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// DoRALinear is mlx_lm's tuner.dora.DoRALinear: LoRALinear's update on the
// base weight W (dequantized when quantized, and applied as a dense
// matmul), the output rescaled row by row by the learned magnitude M over
// the norm of the adapted weight W + scale·LoraBᵀ·LoraAᵀ (a constant to
// gradients, mx.stop_gradient):
//
//	out = T(M / ‖W + scale·LoraBᵀLoraAᵀ‖_row) · (x·Wᵀ + T(scale·((dropout(x)·LoraA)·LoraB))) (+ bias)
type DoRALinear struct {
	B     backend.Backend
	Base  Linear        // *Dense or *QuantizedLinear
	LoraA backend.Array // lora_a, float32 [in, rank]
	LoraB backend.Array // lora_b, float32 [rank, out]
	M     backend.Array // m, float32 [out]: ‖W‖ per row when made (DoRANorm)
	Scale float32
	// Dropout, when set, is applied to x before the update (training).
	Dropout func(x backend.Array) backend.Array
}

// DoRANorm is mlx_lm's DoRALinear.set_linear magnitude: the 2-norm of each
// row of base's weight (dequantized), in float32. It runs in a scope of
// its own: only the norm outlives it (the dequantized weight, as large as
// the layer in float32, is freed at once wherever it is called from).
func DoRANorm(b backend.Backend, base Linear) (out backend.Array, err error) {
	sc := b.Scope()
	defer sc.Close()
	w, _, err := baseWeight(b, base)
	if err != nil {
		return nil, err
	}
	out = rowNorm(b, b.AsType(w, tensor.F32))
	sc.Keep(out)
	return out, nil
}

// baseWeight returns base's weight, dequantized when quantized, and bias.
func baseWeight(b backend.Backend, base Linear) (w, bias backend.Array, err error) {
	switch l := base.(type) {
	case *Dense:
		return l.Weight, l.Bias, nil
	case *QuantizedLinear:
		return b.Dequantize(l.Weight), l.Bias, nil
	}
	return nil, nil, fmt.Errorf("nn: base layer %T is neither *Dense nor *QuantizedLinear", base)
}

// rowNorm is mx.linalg.norm(w, axis=1): sqrt(Σ w²) over each row.
func rowNorm(b backend.Backend, w backend.Array) backend.Array {
	return b.Unary(backend.Sqrt, b.Sum(b.Unary(backend.Square, w), 1, false))
}

// adapted returns W + (scale·LoraBᵀ)·LoraAᵀ, the sum in the promoted dtype
// (float32), as DoRALinear.__call__ computes it.
func (l *DoRALinear) update() backend.Array {
	s := l.B.Binary(backend.Multiply, l.B.Full(tensor.Shape{}, float64(l.Scale), tensor.F32), l.B.Transpose(l.LoraB, 1, 0))
	return l.B.Matmul(s, l.B.Transpose(l.LoraA, 1, 0))
}

// Forward is mlx_lm's DoRALinear.__call__. The norm of the adapted weight
// is a constant to gradients when the backend is a
// backend.Differentiator (its value is the same either way).
func (l *DoRALinear) Forward(x backend.Array) backend.Array {
	w, bias, err := baseWeight(l.B, l.Base)
	if err != nil {
		panic(backend.Errorf("DoRALinear", nil, "%v", err))
	}
	y := l.B.Matmul(x, l.B.Transpose(w, 1, 0))
	xd := x
	if l.Dropout != nil {
		xd = l.Dropout(x)
	}
	z := l.B.Matmul(l.B.Matmul(xd, l.LoraA), l.LoraB)
	s := l.B.Binary(backend.Multiply, l.B.Full(tensor.Shape{}, float64(l.Scale), tensor.F32), z)
	out := l.B.Binary(backend.Add, y, l.B.AsType(s, x.DType()))
	denom := rowNorm(l.B, l.B.Binary(backend.Add, w, l.update()))
	if d, ok := l.B.(backend.Differentiator); ok {
		denom = d.StopGradient(denom)
	}
	out = l.B.Binary(backend.Multiply, l.B.AsType(l.B.Binary(backend.Divide, l.M, denom), x.DType()), out)
	if bias != nil {
		out = l.B.Binary(backend.Add, out, bias)
	}
	return out
}

// Fuse is mlx_lm's DoRALinear.fuse: W' = W + T(scale·LoraBᵀ·LoraAᵀ), then
// (M / ‖W'‖_row)[:, None] · W' (float32, as mlx_lm computes it), quantized
// again with the base's group size and bits unless dequantize is set (or
// the base was not quantized).
func (l *DoRALinear) Fuse(dequantize bool) (Linear, error) {
	w, bias, err := baseWeight(l.B, l.Base)
	if err != nil {
		return nil, err
	}
	s := l.B.Binary(backend.Multiply, l.B.Full(tensor.Shape{}, float64(l.Scale), tensor.F32), l.B.Transpose(l.LoraB, 1, 0))
	w = l.B.Binary(backend.Add, w, l.B.AsType(l.B.Matmul(s, l.B.Transpose(l.LoraA, 1, 0)), w.DType()))
	ns := l.B.Binary(backend.Divide, l.M, rowNorm(l.B, w))
	fused := l.B.Binary(backend.Multiply, l.B.Reshape(ns, -1, 1), w)
	if q, ok := l.Base.(*QuantizedLinear); ok && !dequantize {
		return &QuantizedLinear{B: l.B, Weight: l.B.Quantize(fused, q.Weight.GroupSize, q.Weight.Bits), Bias: bias}, nil
	}
	return &Dense{B: l.B, Weight: fused, Bias: bias}, nil
}
