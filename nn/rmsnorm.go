package nn

import "github.com/mlxgo/mlxgo/backend"

// RMSNorm is mlx.nn.RMSNorm: mx.fast.rms_norm(x, weight, eps).
type RMSNorm struct {
	B      backend.Backend
	Weight backend.Array // [dim]
	Eps    float32
}

// Forward normalises x over its last axis.
func (n *RMSNorm) Forward(x backend.Array) backend.Array {
	return n.B.RMSNorm(x, n.Weight, n.Eps)
}
