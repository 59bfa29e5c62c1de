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
	return m.ForwardTap(x, nil)
}

// ForwardTap is Forward that also hands tap (when not nil) "gate", "up",
// "swiglu" and "down" in graph order.
func (m *MLP) ForwardTap(x backend.Array, tap Tap) backend.Array {
	gu := forwardShared(m.B, x, m.GateProj, m.UpProj)
	gate, up := gu[0], gu[1]
	h := m.B.SwiGLU(gate, up)
	y := m.DownProj.Forward(h)
	if tap != nil {
		tap("gate", gate)
		tap("up", up)
		tap("swiglu", h)
		tap("down", y)
	}
	return y
}
