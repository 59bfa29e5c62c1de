package nn

import "github.com/mlxgo/mlxgo/backend"

// Linear is a layer y = x·Wᵀ (+ bias) over the last axis of x.
type Linear interface {
	Forward(x backend.Array) backend.Array
}

// Dense is an unquantized linear layer, mlx.nn.Linear.
type Dense struct {
	B      backend.Backend
	Weight backend.Array // [out, in]
	Bias   backend.Array // [out], or nil
}

// Forward returns x @ Weightᵀ (+ Bias).
//
// With a bias mlx computes addmm(bias, x, Wᵀ), one fused op that rounds once
// to the output dtype; the Backend has no addmm, so Dense adds the bias as a
// second op. For float32 this is the same value (Metal's addmm epilogue adds
// the bias to the float32 accumulator, as Add does to the float32 product);
// for bf16/f16 it may differ by one rounding.
func (l *Dense) Forward(x backend.Array) backend.Array {
	y := l.B.Matmul(x, l.B.Transpose(l.Weight, 1, 0))
	if l.Bias != nil {
		y = l.B.Binary(backend.Add, y, l.Bias)
	}
	return y
}

// QuantizedLinear is an affine-quantized linear layer, mlx.nn.QuantizedLinear.
type QuantizedLinear struct {
	B      backend.Backend
	Weight backend.QuantizedArray // W [out, in] quantized along in
	Bias   backend.Array          // [out], or nil
}

// forwardShared returns l.Forward(x) for every l of ls: in one
// backend.QuantizedMatmulsT call where every l is a QuantizedLinear without
// a bias (a layer's projections of one input; a backend with a
// SharedMatmuler quantizes x once for them), the same arrays as one
// Forward each, which any other mix takes.
func forwardShared(b backend.Backend, x backend.Array, ls ...Linear) []backend.Array {
	ws := make([]backend.QuantizedArray, len(ls))
	for i, l := range ls {
		ql, ok := l.(*QuantizedLinear)
		if !ok || ql.Bias != nil {
			out := make([]backend.Array, len(ls))
			for i, l := range ls {
				out[i] = l.Forward(x)
			}
			return out
		}
		ws[i] = ql.Weight
	}
	return backend.QuantizedMatmulsT(b, x, ws)
}

// Forward returns quantized_matmul(x, W, transpose=True) (+ Bias).
func (l *QuantizedLinear) Forward(x backend.Array) backend.Array {
	y := l.B.QuantizedMatmul(x, l.Weight, true)
	if l.Bias != nil {
		y = l.B.Binary(backend.Add, y, l.Bias)
	}
	return y
}
