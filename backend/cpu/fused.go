package cpu

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// The fused ops validate their arguments, convert them to float32 in the
// op's dtype, and call the kernels of internal/kernel, which document the
// arithmetic and the MLX source each follows. Their outputs are float32
// values already rounded to the dtype.

// RMSNorm is mx.fast.rms_norm over the last axis: the output dtype is the
// promotion of x and weight (both converted to it), weight is 1-D with x's
// last dimension, or nil for none (mx.fast.rms_norm(x, None, eps)).
func (b *Backend) RMSNorm(x, weight backend.Array, eps float32) backend.Array {
	args := []backend.Array{x, weight}
	a := b.use1("RMSNorm", x)
	if len(a.shape) == 0 || a.shape[len(a.shape)-1] == 0 {
		panic(backend.Errorf("RMSNorm", args, "x needs a non-empty last axis"))
	}
	n := a.shape[len(a.shape)-1]
	dt := a.dtype
	var w []float32
	if weight != nil {
		wa := b.use1("RMSNorm", weight)
		if len(wa.shape) != 1 || wa.shape[0] != n {
			panic(backend.Errorf("RMSNorm", args, "weight must be 1-D of size %d", n))
		}
		dt = backend.PromoteTypes(dt, wa.dtype)
		w = f32As(wa, dt)
	} else {
		w = make([]float32, n)
		for i := range w {
			w[i] = 1
		}
	}
	if !dt.IsFloat() {
		panic(backend.Errorf("RMSNorm", args, "needs a float dtype"))
	}
	xs := f32As(a, dt)
	dst := make([]float32, len(xs))
	kernel.RMSNorm(dst, xs, w, len(xs)/n, n, eps, rounder(dt), b.acc())
	return b.dense(packF32(dt, a.shape, dst))
}

// RoPE is mx.fast.rope on x [B, ..., L, D] (at least 3 dimensions, float):
// the axes between the first and L are heads. The offset is a scalar, or an
// integer array of 1 or B entries (one position per batch row). Freqs, when
// set, is a 1-D float array of Dims/2 entries. The output has x's dtype.
func (b *Backend) RoPE(x backend.Array, p backend.RoPE, offset backend.Offset) backend.Array {
	args := []backend.Array{x}
	a := b.use1("RoPE", x)
	nd := len(a.shape)
	if nd < 3 {
		panic(backend.Errorf("RoPE", args, "x needs at least 3 dimensions"))
	}
	if !a.dtype.IsFloat() {
		panic(backend.Errorf("RoPE", args, "x needs a float dtype"))
	}
	B, L, D := a.shape[0], a.shape[nd-2], a.shape[nd-1]
	H := tensor.Shape(a.shape[1 : nd-2]).Size()
	if p.Dims <= 0 || p.Dims%2 != 0 || p.Dims > D {
		panic(backend.Errorf("RoPE", args, "dims %d must be even, positive and at most %d", p.Dims, D))
	}
	kp := kernel.RoPEParams{Dims: p.Dims, Traditional: p.Traditional, Base: p.Base, Scale: p.Scale}
	if p.Freqs != nil {
		fa := b.use1("RoPE", p.Freqs)
		if len(fa.shape) != 1 || fa.shape[0] != p.Dims/2 || !fa.dtype.IsFloat() {
			panic(backend.Errorf("RoPE", []backend.Array{x, p.Freqs}, "freqs must be a 1-D float array of %d entries", p.Dims/2))
		}
		kp.Freqs = f32As(fa, tensor.F32)
	}
	offsets := []int{offset.Scalar}
	if offset.Rows != nil {
		oa := b.use1("RoPE", offset.Rows)
		if len(oa.shape) > 1 || (oa.shape.Size() != 1 && oa.shape.Size() != B) || oa.dtype.IsFloat() || oa.dtype == tensor.Bool {
			panic(backend.Errorf("RoPE", []backend.Array{x, offset.Rows}, "offset rows must be an integer array of 1 or %d entries", B))
		}
		offsets = offsets[:0]
		for _, u := range intsAs(oa, tensor.I32) {
			offsets = append(offsets, int(int64(u)))
		}
	}
	xs := f32As(a, a.dtype)
	dst := make([]float32, len(xs))
	kernel.RoPE(dst, xs, B, H, L, D, kp, offsets, rounder(a.dtype))
	return b.dense(packF32(a.dtype, a.shape, dst))
}

// ScaledDotProductAttention is mx.fast.scaled_dot_product_attention on
// q [B, H, L, D], k [B, Hk, S, D] and v [B, Hk, S, Dv], H a multiple of Hk
// (query head h reads KV head h/(H/Hk)). q, k and v are converted to their
// promoted dtype, which is the output's. An ArrayMask is Bool (true =
// attend) or a float dtype that promotes to the output dtype (added to the
// scores), broadcastable to [B, H, L, S].
func (b *Backend) ScaledDotProductAttention(q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	args := []backend.Array{q, k, v}
	as := b.use("ScaledDotProductAttention", args...)
	qa, ka, va := as[0], as[1], as[2]
	if len(qa.shape) != 4 || len(ka.shape) != 4 || len(va.shape) != 4 {
		panic(backend.Errorf("ScaledDotProductAttention", args, "q, k and v must be 4-D"))
	}
	B, H, L, D := qa.shape[0], qa.shape[1], qa.shape[2], qa.shape[3]
	Hk, S, Dv := ka.shape[1], ka.shape[2], va.shape[3]
	switch {
	case ka.shape[0] != B || va.shape[0] != B:
		panic(backend.Errorf("ScaledDotProductAttention", args, "batch sizes differ"))
	case ka.shape[3] != D:
		panic(backend.Errorf("ScaledDotProductAttention", args, "q and k head dims differ"))
	case va.shape[1] != Hk || va.shape[2] != S:
		panic(backend.Errorf("ScaledDotProductAttention", args, "k and v heads or lengths differ"))
	case Hk == 0 || H%Hk != 0:
		panic(backend.Errorf("ScaledDotProductAttention", args, "%d query heads is not a multiple of %d KV heads", H, Hk))
	case S == 0 || D == 0 || Dv == 0:
		panic(backend.Errorf("ScaledDotProductAttention", args, "empty keys or head dims"))
	}
	dt := backend.PromoteTypes(backend.PromoteTypes(qa.dtype, ka.dtype), va.dtype)
	if !dt.IsFloat() {
		panic(backend.Errorf("ScaledDotProductAttention", args, "needs float dtypes"))
	}
	var km kernel.Mask
	switch m := mask.(type) {
	case nil, backend.NoMask:
		km.Kind = kernel.MaskNone
	case backend.CausalMask:
		km.Kind = kernel.MaskCausal
	case backend.ArrayMask:
		margs := append(args, m.A)
		ma := b.use1("ScaledDotProductAttention", m.A)
		target := tensor.Shape{B, H, L, S}
		if len(ma.shape) > 4 {
			panic(backend.Errorf("ScaledDotProductAttention", margs, "mask has more than 4 dimensions"))
		}
		if got, ok := broadcastShapes(ma.shape, target); !ok || !got.Equal(target) {
			panic(backend.Errorf("ScaledDotProductAttention", margs, "mask does not broadcast to %v", target))
		}
		st := bstrides(ma.shape, target)
		copy(km.Strides[:], st)
		switch {
		case ma.dtype == tensor.Bool:
			km.Kind = kernel.MaskBool
			km.Bool = make([]bool, len(ma.data.Data))
			for i, c := range ma.data.Data {
				km.Bool[i] = c != 0
			}
		case backend.PromoteTypes(ma.dtype, dt) == dt:
			km.Kind = kernel.MaskAdd
			km.Add = f32As(ma, dt)
		default:
			panic(backend.Errorf("ScaledDotProductAttention", margs, "mask dtype %v does not promote to %v", ma.dtype, dt))
		}
	default:
		panic(backend.Errorf("ScaledDotProductAttention", args, "unknown mask %T", mask))
	}
	dst := make([]float32, B*H*L*Dv)
	kernel.SDPA(dst, f32As(qa, dt), f32As(ka, dt), f32As(va, dt), B, H, Hk, L, S, D, Dv, scale, km, rounder(dt), b.acc())
	return b.dense(packF32(dt, tensor.Shape{B, H, L, Dv}, dst))
}

// SwiGLU is mlx_lm's swiglu, silu(gate)·up with every step rounded to the
// dtype (kernel.SwiGLU). gate and up have the same shape; their dtypes are
// promoted together (float only).
func (b *Backend) SwiGLU(gate, up backend.Array) backend.Array {
	args := []backend.Array{gate, up}
	as := b.use("SwiGLU", args...)
	if !as[0].shape.Equal(as[1].shape) {
		panic(backend.Errorf("SwiGLU", args, "gate and up shapes differ"))
	}
	dt := backend.PromoteTypes(as[0].dtype, as[1].dtype)
	if !dt.IsFloat() {
		panic(backend.Errorf("SwiGLU", args, "needs a float dtype"))
	}
	g := f32As(as[0], dt)
	dst := make([]float32, len(g))
	kernel.SwiGLU(dst, g, f32As(as[1], dt), rounder(dt))
	return b.dense(packF32(dt, as[0].shape, dst))
}
