package generate

import (
	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/tensor"
)

// expF32 is MLX's CPU exp for float32 (mlx/backend/cpu/simd/math.h,
// simd::exp, which mx.exp and the float32 parts of categorical use on the
// CPU device); the one implementation is mlxmath.Exp.
func expF32(x float32) float32 { return mlxmath.Exp(x) }

// rounder returns the function that rounds a float32 to dt, the way MLX's CPU
// types store each op's result: RNE to bfloat16 or float16, identity for
// float32. Other dtypes are not logits dtypes and give nil.
func rounder(dt tensor.DType) func(float32) float32 {
	switch dt {
	case tensor.BF16:
		return tensor.RoundBF16
	case tensor.F16:
		return tensor.RoundF16
	case tensor.F32:
		return func(f float32) float32 { return f }
	}
	return nil
}
