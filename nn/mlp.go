package nn

import "github.com/mlxgo/mlxgo/backend"

// MLP is the SwiGLU feed-forward of mlx_lm's llama.py:
// down_proj(swiglu(gate_proj(x), up_proj(x))).
type MLP struct {
	B                          backend.Backend
	GateProj, UpProj, DownProj Linear
}

// Forward applies the feed-forward to x [..., dim].
func (m *MLP) Forward(x backend.Array) backend.Array {
	return m.DownProj.Forward(m.B.SwiGLU(m.GateProj.Forward(x), m.UpProj.Forward(x)))
}
