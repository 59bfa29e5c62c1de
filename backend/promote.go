package backend

import "github.com/mlxgo/mlxgo/tensor"

// PromoteTypes returns the dtype of an op on a and b, following MLX's rules
// (mlx/dtype.cpp, JAX-style): equal types stay; a float wins over any integer
// or bool; f16 with bf16 gives f32; two floats give the wider; two integers
// of the same signedness give the wider; a signed and an unsigned integer
// give the smallest signed type that holds both (u64 with any signed: f32,
// as MLX's table says); bool loses to everything.
func PromoteTypes(a, b tensor.DType) tensor.DType {
	if a == b {
		return a
	}
	if a == tensor.Bool {
		return b
	}
	if b == tensor.Bool {
		return a
	}
	af, bf := a.IsFloat(), b.IsFloat()
	switch {
	case af && bf:
		if (a == tensor.F16 && b == tensor.BF16) || (a == tensor.BF16 && b == tensor.F16) {
			return tensor.F32
		}
		if a.Size() >= b.Size() {
			return a
		}
		return b
	case af:
		return a
	case bf:
		return b
	}
	as, bs := isSigned(a), isSigned(b)
	if as == bs {
		if a.Size() >= b.Size() {
			return a
		}
		return b
	}
	s, u := a, b
	if !as {
		s, u = b, a
	}
	if u == tensor.U64 {
		return tensor.F32
	}
	if s.Size() > u.Size() {
		return s
	}
	switch u.Size() {
	case 1:
		return tensor.I16
	case 2:
		return tensor.I32
	default:
		return tensor.I64
	}
}

func isSigned(d tensor.DType) bool {
	switch d {
	case tensor.I8, tensor.I16, tensor.I32, tensor.I64:
		return true
	}
	return false
}
