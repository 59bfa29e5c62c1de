package cpu

import (
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// The fused ops validate their arguments, read them as float32 values in
// the op's dtype (f32In: a view of values storage, or converted scratch),
// and call the kernels of internal/kernel, which document the arithmetic
// and the MLX source each follows. The kernels write float32 values already
// rounded to the dtype into pooled storage, which becomes the output.

// RMSNorm is mx.fast.rms_norm over the last axis: the output dtype is the
// promotion of x and weight (both converted to it), weight is 1-D with x's
// last dimension, or nil for none (mx.fast.rms_norm(x, None, eps)).
func (b *Backend) RMSNorm(x, weight backend.Array, eps float32) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("RMSNorm", traced, rmsNormVJP(eps), x, weight) }()
	}
	a := b.use1("RMSNorm", x)
	if len(a.shape) == 0 || a.shape[len(a.shape)-1] == 0 {
		panic(backend.Errorf("RMSNorm", []backend.Array{x, weight}, "x needs a non-empty last axis"))
	}
	defer b.freeTmps()
	n := a.shape[len(a.shape)-1]
	dt := a.dtype
	var w []float32
	if weight != nil {
		wa := b.use1("RMSNorm", weight)
		if len(wa.shape) != 1 || wa.shape[0] != n {
			panic(backend.Errorf("RMSNorm", []backend.Array{x, weight}, "weight must be 1-D of size %d", n))
		}
		dt = backend.PromoteTypes(dt, wa.dtype)
		if !dt.IsFloat() {
			panic(backend.Errorf("RMSNorm", []backend.Array{x, weight}, "needs a float dtype"))
		}
		w = b.f32Of(wa, dt)
	} else {
		w = b.scratchF32(n)
		for i := range w {
			w[i] = 1
		}
	}
	if !dt.IsFloat() {
		panic(backend.Errorf("RMSNorm", []backend.Array{x, weight}, "needs a float dtype"))
	}
	xs := b.f32Of(a, dt)
	dst := b.pool.getF32(len(xs))
	kernel.RMSNorm(dst, xs, w, len(xs)/n, n, eps, rounder(dt), b.acc())
	return b.floatOut(dt, a.shape, dst)
}

// RoPE is mx.fast.rope on x [B, ..., L, D] (at least 3 dimensions, float):
// the axes between the first and L are heads. The offset is a scalar, or an
// integer array of 1 or B entries (one position per batch row). Freqs, when
// set, is a 1-D float array of Dims/2 entries. The output has x's dtype.
func (b *Backend) RoPE(x backend.Array, p backend.RoPE, offset backend.Offset) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("RoPE", traced, ropeVJP(p, offset), x, p.Freqs, offset.Rows) }()
	}
	a := b.use1("RoPE", x)
	nd := len(a.shape)
	if nd < 3 {
		panic(backend.Errorf("RoPE", []backend.Array{x}, "x needs at least 3 dimensions"))
	}
	if !a.dtype.IsFloat() {
		panic(backend.Errorf("RoPE", []backend.Array{x}, "x needs a float dtype"))
	}
	defer b.freeTmps()
	B, L, D := a.shape[0], a.shape[nd-2], a.shape[nd-1]
	H := tensor.Shape(a.shape[1 : nd-2]).Size()
	if p.Dims <= 0 || p.Dims%2 != 0 || p.Dims > D {
		panic(backend.Errorf("RoPE", []backend.Array{x}, "dims %d must be even, positive and at most %d", p.Dims, D))
	}
	kp := kernel.RoPEParams{Dims: p.Dims, Traditional: p.Traditional, Base: p.Base, Scale: p.Scale}
	if p.Freqs != nil {
		fa := b.use1("RoPE", p.Freqs)
		if len(fa.shape) != 1 || fa.shape[0] != p.Dims/2 || !fa.dtype.IsFloat() {
			panic(backend.Errorf("RoPE", []backend.Array{x, p.Freqs}, "freqs must be a 1-D float array of %d entries", p.Dims/2))
		}
		kp.Freqs = b.f32Of(fa, tensor.F32)
	}
	var offBuf [1]int
	offsets := append(offBuf[:0], offset.Scalar)
	if offset.Rows != nil {
		oa := b.use1("RoPE", offset.Rows)
		if len(oa.shape) > 1 || (oa.shape.Size() != 1 && oa.shape.Size() != B) || oa.dtype.IsFloat() || oa.dtype == tensor.Bool {
			panic(backend.Errorf("RoPE", []backend.Array{x, offset.Rows}, "offset rows must be an integer array of 1 or %d entries", B))
		}
		offsets = offsets[:0]
		for _, u := range b.intsIn(oa, tensor.I32) {
			offsets = append(offsets, int(int64(u)))
		}
	}
	xs := b.f32Of(a, a.dtype)
	dst := b.pool.getF32(len(xs))
	kernel.RoPE(dst, xs, B, H, L, D, kp, offsets, rounder(a.dtype))
	return b.floatOut(a.dtype, a.shape, dst)
}

// ScaledDotProductAttention is mx.fast.scaled_dot_product_attention on
// q [B, H, L, D], k [B, Hk, S, D] and v [B, Hk, S, Dv], H a multiple of Hk
// (query head h reads KV head h/(H/Hk)). q, k and v are converted to their
// promoted dtype, which is the output's. An ArrayMask is Bool (true =
// attend) or a float dtype that promotes to the output dtype (added to the
// scores), broadcastable to [B, H, L, S]. A PrefixMask (L = S) is read
// from its description (its array, if any, is not): key blocks it hides
// from every query of a block are skipped, as the causal mask's are, and
// the result is that of the equivalent Bool ArrayMask bit for bit.
func (b *Backend) ScaledDotProductAttention(q, k, v backend.Array, scale float32, mask backend.Mask) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("ScaledDotProductAttention", traced, sdpaVJP(scale, mask), q, k, v, maskArray(mask)) }()
	}
	qa, ka, va := b.use3("ScaledDotProductAttention", q, k, v)
	args := func() []backend.Array { return []backend.Array{q, k, v} }
	if len(qa.shape) != 4 || len(ka.shape) != 4 || len(va.shape) != 4 {
		panic(backend.Errorf("ScaledDotProductAttention", args(), "q, k and v must be 4-D"))
	}
	B, H, L, D := qa.shape[0], qa.shape[1], qa.shape[2], qa.shape[3]
	Hk, S, Dv := ka.shape[1], ka.shape[2], va.shape[3]
	switch {
	case ka.shape[0] != B || va.shape[0] != B:
		panic(backend.Errorf("ScaledDotProductAttention", args(), "batch sizes differ"))
	case ka.shape[3] != D:
		panic(backend.Errorf("ScaledDotProductAttention", args(), "q and k head dims differ"))
	case va.shape[1] != Hk || va.shape[2] != S:
		panic(backend.Errorf("ScaledDotProductAttention", args(), "k and v heads or lengths differ"))
	case Hk == 0 || H%Hk != 0:
		panic(backend.Errorf("ScaledDotProductAttention", args(), "%d query heads is not a multiple of %d KV heads", H, Hk))
	case S == 0 || D == 0 || Dv == 0:
		panic(backend.Errorf("ScaledDotProductAttention", args(), "empty keys or head dims"))
	}
	dt := backend.PromoteTypes(backend.PromoteTypes(qa.dtype, ka.dtype), va.dtype)
	if !dt.IsFloat() {
		panic(backend.Errorf("ScaledDotProductAttention", args(), "needs float dtypes"))
	}
	km := b.sdpaMask("ScaledDotProductAttention", args, mask, B, H, L, S, dt)
	defer b.freeTmps()
	dst := b.pool.getF32(B * H * L * Dv)
	kernel.SDPAKV(dst, b.f32Of(qa, dt), b.kvOf(ka, dt), b.kvOf(va, dt), B, H, Hk, L, S, D, Dv, scale, km, rounder(dt), b.acc())
	return b.floatOut(dt, tensor.Shape{B, H, L, Dv}, dst)
}

// QuantizedScaledDotProductAttention is ScaledDotProductAttention with keys
// and values affine-quantized along their last axis (mx.quantize of [B, Hk,
// S, D] and [B, Hk, S, Dv]: W uint32 [B, Hk, S, D·bits/32], scales and
// biases [B, Hk, S, D/groupSize]), read in place through their strides a
// block of 32 positions at a time (kernel.QuantKV): each value is
// float32(scale·code) + bias, and the attention is the fused one's on those
// values (blocked online softmax, float32 scores and weights, the output
// rounded to the promoted dtype of q and the scales). It implements
// backend.QuantizedAttention.
func (b *Backend) QuantizedScaledDotProductAttention(q backend.Array, keys, values backend.QuantizedArray, scale float32, mask backend.Mask) backend.Array {
	const op = "QuantizedScaledDotProductAttention"
	qa := b.use1(op, q)
	kw, ks, kb, kdt := b.quantParts(op, []backend.Array{q}, keys)
	vw, vs, vb, vdt := b.quantParts(op, []backend.Array{q}, values)
	args := func() []backend.Array {
		return []backend.Array{q, keys.W, keys.Scales, keys.Biases, values.W, values.Scales, values.Biases}
	}
	if len(qa.shape) != 4 || len(kw.shape) != 4 || len(vw.shape) != 4 {
		panic(backend.Errorf(op, args(), "q and the keys' and values' parts must be 4-D"))
	}
	B, H, L, D := qa.shape[0], qa.shape[1], qa.shape[2], qa.shape[3]
	Hk, S := kw.shape[1], kw.shape[2]
	Dk, Dv := kw.shape[3]*32/keys.Bits, vw.shape[3]*32/values.Bits
	switch {
	case kw.shape[0] != B || vw.shape[0] != B:
		panic(backend.Errorf(op, args(), "batch sizes differ"))
	case Dk != D:
		panic(backend.Errorf(op, args(), "q's head dim %d and the keys' %d differ", D, Dk))
	case vw.shape[1] != Hk || vw.shape[2] != S:
		panic(backend.Errorf(op, args(), "keys and values heads or lengths differ"))
	case Hk == 0 || H%Hk != 0:
		panic(backend.Errorf(op, args(), "%d query heads is not a multiple of %d KV heads", H, Hk))
	case S == 0 || D == 0 || Dv == 0:
		panic(backend.Errorf(op, args(), "empty keys or head dims"))
	}
	dt := backend.PromoteTypes(backend.PromoteTypes(qa.dtype, kdt), vdt)
	if !dt.IsFloat() {
		panic(backend.Errorf(op, args(), "needs float dtypes"))
	}
	km := b.sdpaMask(op, args, mask, B, H, L, S, dt)
	defer b.freeTmps()
	kq := b.quantKVOf(kw, ks, kb, kdt, keys)
	vq := b.quantKVOf(vw, vs, vb, vdt, values)
	dst := b.pool.getF32(B * H * L * Dv)
	kernel.SDPAKV(dst, b.f32Of(qa, dt), kernel.KV{Q: kq}, kernel.KV{Q: vq}, B, H, Hk, L, S, D, Dv, scale, km, rounder(dt), b.acc())
	return b.floatOut(dt, tensor.Shape{B, H, L, Dv}, dst)
}

// quantKVOf describes the quantized keys or values (w, s, bi: the parts of
// q, scales and biases of dtype sdt) for kernel.SDPAKV: the codes read in
// place through their strides when their rows are contiguous (a slice of
// a cache buffer), else copied; the scales and biases as kvOf reads them.
func (b *Backend) quantKVOf(w, s, bi *Array, sdt tensor.DType, q backend.QuantizedArray) *kernel.QuantKV {
	B, Hk, S, wpr := w.shape[0], w.shape[1], w.shape[2], w.shape[3]
	out := &kernel.QuantKV{Scales: b.kvOf(s, sdt), Biases: b.kvOf(bi, sdt), GroupSize: q.GroupSize, Bits: q.Bits}
	st := stridesOf(w)
	if st[3] != 1 && wpr > 1 {
		out.W = b.codes(w)
		out.BStride, out.HStride, out.RowStride = Hk*S*wpr, S*wpr, wpr
		return out
	}
	out.BStride, out.HStride, out.RowStride = st[0], st[1], st[2]
	if B == 1 {
		out.BStride = 0
	}
	if Hk == 1 {
		out.HStride = 0
	}
	if S == 1 {
		out.RowStride = wpr
	}
	raw := w.buf.raw[4*w.off:]
	out.W = unsafe.Slice((*uint32)(unsafe.Pointer(&raw[0])), len(raw)/4)
	return out
}

// sdpaMask converts mask for an attention of L queries of B×H rows over S
// keys in dtype dt: an ArrayMask is Bool (true = attend) or a float dtype
// that promotes to dt (added to the scores), broadcastable to [B, H, L, S].
func (b *Backend) sdpaMask(op string, args func() []backend.Array, mask backend.Mask, B, H, L, S int, dt tensor.DType) kernel.Mask {
	var km kernel.Mask
	switch m := mask.(type) {
	case nil, backend.NoMask:
		km.Kind = kernel.MaskNone
	case backend.CausalMask:
		km.Kind = kernel.MaskCausal
	case backend.PrefixMask:
		if L != S {
			panic(backend.Errorf(op, args(), "a prefix mask needs as many queries as keys, got %d and %d", L, S))
		}
		if err := m.Check(S); err != nil {
			panic(backend.Errorf(op, args(), "%v", err))
		}
		km.Kind, km.Prefix = kernel.MaskPrefix, m.Prefix
		at := m.Prefix
		for _, l := range m.Blocks {
			at += l
			km.Ends = append(km.Ends, at)
		}
	case backend.ArrayMask:
		margs := func() []backend.Array { return append(args(), m.A) }
		ma := b.use1(op, m.A)
		target := tensor.Shape{B, H, L, S}
		if len(ma.shape) > 4 {
			panic(backend.Errorf(op, margs(), "mask has more than 4 dimensions"))
		}
		if got, ok := broadcastShapes(ma.shape, target); !ok || !got.Equal(target) {
			panic(backend.Errorf(op, margs(), "mask does not broadcast to %v", target))
		}
		st := bstrides(ma.shape, target)
		copy(km.Strides[:], st)
		switch {
		case ma.dtype == tensor.Bool:
			km.Kind = kernel.MaskBool
			md := b.hostDense(ma).Data
			km.Bool = make([]bool, len(md))
			for i, c := range md {
				km.Bool[i] = c != 0
			}
		case backend.PromoteTypes(ma.dtype, dt) == dt:
			km.Kind = kernel.MaskAdd
			km.Add = b.f32Of(ma, dt)
		default:
			panic(backend.Errorf(op, margs(), "mask dtype %v does not promote to %v", ma.dtype, dt))
		}
	default:
		panic(backend.Errorf(op, args(), "unknown mask %T", mask))
	}
	return km
}

// kvOf returns a, a [B, Hk, S, D] array of keys or values, for
// kernel.SDPAKV: read in place (float32 values, or bf16/f16 bits) through
// its strides when its rows are contiguous, which a slice of a KV cache
// buffer is; converted into contiguous float32 scratch otherwise (and for
// F64).
func (b *Backend) kvOf(a *Array, dt tensor.DType) kernel.KV {
	B, Hk, S, D := a.shape[0], a.shape[1], a.shape[2], a.shape[3]
	st := stridesOf(a)
	if !isF32Family(dt) || !exactIn(a.dtype, dt) || (st[3] != 1 && D > 1) {
		return kernel.DenseKV(b.f32Of(a, dt), Hk, S, D)
	}
	kv := kernel.KV{BStride: st[0], HStride: st[1], RowStride: st[2]}
	if B == 1 {
		kv.BStride = 0
	}
	if Hk == 1 {
		kv.HStride = 0
	}
	if S == 1 {
		kv.RowStride = D
	}
	switch {
	case a.buf.values:
		kv.Vec = kernel.F32Vec(a.buf.f32[a.off:])
	case a.dtype == tensor.BF16:
		kv.Vec = kernel.BF16Vec(u16View(a.buf.raw)[a.off:])
	default: // F16 (F32 arrays are always values)
		kv.Vec = kernel.F16Vec(u16View(a.buf.raw)[a.off:])
	}
	return kv
}

// SwiGLU is mlx_lm's swiglu, silu(gate)·up with every step rounded to the
// dtype (kernel.SwiGLU). gate and up have the same shape; their dtypes are
// promoted together (float only).
func (b *Backend) SwiGLU(gate, up backend.Array) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("SwiGLU", traced, swiGLUVJP, gate, up) }()
	}
	ga, ua := b.use2("SwiGLU", gate, up)
	if !ga.shape.Equal(ua.shape) {
		panic(backend.Errorf("SwiGLU", []backend.Array{gate, up}, "gate and up shapes differ"))
	}
	dt := backend.PromoteTypes(ga.dtype, ua.dtype)
	if !dt.IsFloat() {
		panic(backend.Errorf("SwiGLU", []backend.Array{gate, up}, "needs a float dtype"))
	}
	defer b.freeTmps()
	g := b.f32Of(ga, dt)
	dst := b.pool.getF32(len(g))
	kernel.SwiGLU(dst, g, b.f32Of(ua, dt), rounder(dt))
	return b.floatOut(dt, ga.shape, dst)
}

// f32Of is f32In for any float dt: an F64 op reads its values rounded to
// float32 (the fused kernels compute in float32) into scratch.
func (b *Backend) f32Of(a *Array, dt tensor.DType) []float32 {
	if isF32Family(dt) {
		return b.f32In(a, dt)
	}
	v := b.f64In(a, dt)
	out := b.scratchF32(len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// floatOut wraps dst (from the pool, float32 values a kernel computed in
// dtype dt) as a new array: dst itself for F32, BF16 and F16, widened for
// F64.
func (b *Backend) floatOut(dt tensor.DType, shape tensor.Shape, dst []float32) *Array {
	if isF32Family(dt) {
		return b.valuesOut(dt, shape, dst)
	}
	v := make([]float64, len(dst))
	for i, x := range dst {
		v[i] = float64(x)
	}
	b.pool.putF32(dst)
	return b.valuesF64(dt, shape, v)
}

// ScaledDotProductAttentionRows attends row r of q [B, H, L, D] to keys[r]
// [1, Hk, S_r, D] and values[r] [1, Hk, S_r, Dv] under mask (NoMask or
// CausalMask, per row) in one parallel pass over every row's work
// (kernel.SDPAKVRows), the output [B, H, L, Dv] in the rows' promoted
// dtype: row r's values are ScaledDotProductAttention's on row r alone,
// bit for bit. It implements backend.RowAttention. While gradients are
// recorded it runs row by row (backend.AttendRowsComposed).
func (b *Backend) ScaledDotProductAttentionRows(q backend.Array, keys, values []backend.Array, scale float32, mask backend.Mask) backend.Array {
	const op = "ScaledDotProductAttentionRows"
	if b.tape != nil {
		return backend.AttendRowsComposed(b, q, keys, values, scale, mask)
	}
	qa := b.use1(op, q)
	args := func() []backend.Array { return append(append([]backend.Array{q}, keys...), values...) }
	if len(qa.shape) != 4 || qa.shape[0] != len(keys) || len(values) != len(keys) {
		panic(backend.Errorf(op, []backend.Array{q}, "q of shape %v for %d key and %d value arrays, want [%d, H, L, D]", qa.shape, len(keys), len(values), len(keys)))
	}
	B, H, L, D := qa.shape[0], qa.shape[1], qa.shape[2], qa.shape[3]
	switch mask.(type) {
	case nil, backend.NoMask, backend.CausalMask:
	default:
		panic(backend.Errorf(op, args(), "mask %T: want NoMask or CausalMask (the same for every row)", mask))
	}
	ks, vs := b.use(op, keys...), b.use(op, values...)
	var dt tensor.DType
	var Hk, Dv int
	lens := make([]int, B)
	for r := range B {
		k, v := ks[r], vs[r]
		if len(k.shape) != 4 || len(v.shape) != 4 || k.shape[0] != 1 || v.shape[0] != 1 {
			panic(backend.Errorf(op, args(), "row %d: keys %v and values %v, want [1, Hk, S, D] each", r, k.shape, v.shape))
		}
		rdt := backend.PromoteTypes(backend.PromoteTypes(qa.dtype, k.dtype), v.dtype)
		if r == 0 {
			dt, Hk, Dv = rdt, k.shape[1], v.shape[3]
		}
		switch {
		case k.shape[3] != D:
			panic(backend.Errorf(op, args(), "row %d: q and k head dims differ (%d, %d)", r, D, k.shape[3]))
		case v.shape[1] != k.shape[1] || v.shape[2] != k.shape[2]:
			panic(backend.Errorf(op, args(), "row %d: k and v heads or lengths differ", r))
		case k.shape[1] != Hk || v.shape[3] != Dv:
			panic(backend.Errorf(op, args(), "row %d: %d KV heads of %d values, row 0 has %d of %d", r, k.shape[1], v.shape[3], Hk, Dv))
		case rdt != dt:
			panic(backend.Errorf(op, args(), "row %d promotes to %v, row 0 to %v", r, rdt, dt))
		case k.shape[2] == 0 || D == 0 || Dv == 0:
			panic(backend.Errorf(op, args(), "row %d: empty keys or head dims", r))
		}
		lens[r] = k.shape[2]
	}
	if B > 0 && (Hk == 0 || H%Hk != 0) {
		panic(backend.Errorf(op, args(), "%d query heads is not a multiple of %d KV heads", H, Hk))
	}
	if B > 0 && !dt.IsFloat() {
		panic(backend.Errorf(op, args(), "needs float dtypes"))
	}
	if B == 0 {
		return b.floatOut(qa.dtype, tensor.Shape{0, H, L, D}, nil)
	}
	km := kernel.Mask{Kind: kernel.MaskNone}
	if _, ok := mask.(backend.CausalMask); ok {
		km.Kind = kernel.MaskCausal
	}
	defer b.freeTmps()
	kk, vv := make([]kernel.KV, B), make([]kernel.KV, B)
	for r := range B {
		kk[r], vv[r] = b.kvOf(ks[r], dt), b.kvOf(vs[r], dt)
	}
	dst := b.pool.getF32(B * H * L * Dv)
	kernel.SDPAKVRows(dst, b.f32Of(qa, dt), kk, vv, lens, H, Hk, L, D, Dv, scale, km, rounder(dt), b.acc())
	return b.floatOut(dt, tensor.Shape{B, H, L, Dv}, dst)
}
