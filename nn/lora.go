package nn

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// LoRALinear is mlx_lm's tuner.lora.LoRALinear: a frozen base layer (a
// Dense, or a QuantizedLinear that stays quantized: QLoRA) plus a low-rank
// update, y = base(x) + T(scale·((x·LoraA)·LoraB)) with T the dtype of x.
// The adapters are float32, so the update is computed in float32; Scale
// multiplies it directly (mlx_lm has no alpha/rank). Training dropout is
// held by Dropout, which is nil in eval mode (mlx_lm's layer with its
// nn.Dropout not training, or p = 0).
type LoRALinear struct {
	B     backend.Backend
	Base  Linear        // *Dense or *QuantizedLinear
	LoraA backend.Array // lora_a, float32 [in, rank]
	LoraB backend.Array // lora_b, float32 [rank, out]
	Scale float32
	// Dropout, when set, is applied to x before the update (mlx.nn.Dropout
	// in training mode; package lora makes one with MLX's random stream).
	Dropout func(x backend.Array) backend.Array
}

// Forward returns base(x) + T(scale·((dropout(x)·LoraA)·LoraB)), as
// mlx_lm's LoRALinear.__call__.
func (l *LoRALinear) Forward(x backend.Array) backend.Array {
	y := l.Base.Forward(x)
	xd := x
	if l.Dropout != nil {
		xd = l.Dropout(x)
	}
	z := l.B.Matmul(l.B.Matmul(xd, l.LoraA), l.LoraB)
	s := l.B.Binary(backend.Multiply, l.B.Full(tensor.Shape{}, float64(l.Scale), tensor.F32), z)
	return l.B.Binary(backend.Add, y, l.B.AsType(s, x.DType()))
}

// Fuse returns the base layer with the update folded into its weight, as
// mlx_lm's LoRALinear.fuse: W + T((scale·LoraBᵀ)·LoraAᵀ), T the weight's
// dtype (a quantized weight dequantized first), the bias kept; a quantized
// base is quantized again with its group size and bits unless dequantize
// is set. The result's arrays are new; the base's are left as they are.
func (l *LoRALinear) Fuse(dequantize bool) (Linear, error) {
	var w, bias backend.Array
	var q *backend.QuantizedArray
	switch base := l.Base.(type) {
	case *Dense:
		w, bias = base.Weight, base.Bias
	case *QuantizedLinear:
		w, bias, q = l.B.Dequantize(base.Weight), base.Bias, &base.Weight
	default:
		return nil, fmt.Errorf("nn: LoRALinear.Fuse: base layer %T is neither *Dense nor *QuantizedLinear", l.Base)
	}
	bt := l.B.Transpose(l.LoraB, 1, 0)
	s := l.B.Binary(backend.Multiply, l.B.Full(tensor.Shape{}, float64(l.Scale), tensor.F32), bt)
	delta := l.B.AsType(l.B.Matmul(s, l.B.Transpose(l.LoraA, 1, 0)), w.DType())
	fused := l.B.Binary(backend.Add, w, delta)
	if q != nil && !dequantize {
		return &QuantizedLinear{B: l.B, Weight: l.B.Quantize(fused, q.GroupSize, q.Bits), Bias: bias}, nil
	}
	return &Dense{B: l.B, Weight: fused, Bias: bias}, nil
}
