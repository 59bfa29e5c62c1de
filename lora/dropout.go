package lora

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/tensor"
)

// Dropout returns mlx.nn.Dropout(p) in training mode, for
// nn.LoRALinear.Dropout: each call draws one key from rng (as
// mx.random.bernoulli does from MLX's key sequence), keeps the elements
// whose uniform draw is below 1-p (in float32) and returns
// (mask·x)·(1/(1-p)), the factor in x's dtype. With rng the state after
// mx.random.seed and the same calls in the same order, the masks are
// MLX's. p must be in [0, 1); p = 0 returns x itself, as MLX does.
func Dropout(b backend.Backend, p float64, rng *generate.RNG) (func(x backend.Array) backend.Array, error) {
	return DropoutKeys(b, p, rng.Next)
}

// DropoutKeys is Dropout with each call's key from next (a trainer that
// recomputes a checkpointed block hands the recomputation the keys its
// forward drew, so that both draw the same masks).
func DropoutKeys(b backend.Backend, p float64, next func() [2]uint32) (func(x backend.Array) backend.Array, error) {
	return DropoutMasks(b, p, func(s tensor.Shape) backend.Array { return KeepMask(b, p, next(), s) })
}

// DropoutMasks is Dropout with each call's keep mask (bool, of x's
// shape) from mask, which a call makes only when p > 0.
func DropoutMasks(b backend.Backend, p float64, mask func(s tensor.Shape) backend.Array) (func(x backend.Array) backend.Array, error) {
	if !(p >= 0 && p < 1) {
		return nil, fmt.Errorf("lora: dropout %g, want 0 <= p < 1", p)
	}
	keep := 1 - p
	return func(x backend.Array) backend.Array {
		if keep == 1 {
			return x
		}
		m := mask(x.Shape())
		return b.Binary(backend.Multiply, b.Binary(backend.Multiply, m, x), b.Full(tensor.Shape{}, 1/keep, x.DType()))
	}, nil
}

// KeepMask is mx.random.bernoulli(1-p, s, key): true where the uniform
// draw of key is below 1-p in float32.
func KeepMask(b backend.Backend, p float64, key [2]uint32, s tensor.Shape) backend.Array {
	u := generate.Uniform(key, s.Size())
	mask := make([]byte, len(u))
	for i, v := range u {
		if v < float32(1-p) {
			mask[i] = 1
		}
	}
	return b.FromHost(&tensor.Dense{DType: tensor.Bool, Shape: s, Data: mask})
}
