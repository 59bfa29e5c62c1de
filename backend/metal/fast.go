//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import "github.com/mlxgo/mlxgo/backend"

// builtin applies one of the functions compiled shapeless with mlx_compile
// (mlxgo.c: silu, swiglu), compiling it on first use. The compiled function
// and its cache live on the MLX thread.
func (b *Backend) builtin(op string, which C.int, x, y backend.Array) backend.Array {
	if !b.here() {
		return b.away(op, func() backend.Array { return b.builtin(op, which, x, y) })
	}
	f := &b.silu
	if which == C.MLXGO_FN_SWIGLU {
		f = &b.swiglu
	}
	if f.ctx == nil {
		var c C.mlx_closure // a local: cgo may not see into *b
		if C.mlxgo_compile_builtin(&c, which, b.s) != 0 {
			args := []backend.Array{x}
			if y != nil {
				args = append(args, y)
			}
			panic(b.opError(op, args))
		}
		*f = c
	}
	b.begin(C.MLXGO_OP_APPLY).fn = *f
	if which == C.MLXGO_FN_SWIGLU {
		return b.exec(op, x, y)
	}
	return b.exec(op, x)
}

// RMSNorm is mx.fast.rms_norm. A nil weight means none.
func (b *Backend) RMSNorm(x, weight backend.Array, eps float32) backend.Array {
	if !b.here() {
		return b.away("RMSNorm", func() backend.Array { return b.RMSNorm(x, weight, eps) })
	}
	b.begin(C.MLXGO_OP_RMS_NORM).f0 = C.float(eps)
	if weight == nil {
		return b.exec("RMSNorm", x)
	}
	return b.exec("RMSNorm", x, weight)
}

// RoPE is mx.fast.rope: with p.Freqs the frequencies are 1/Freqs (base
// unused), else Base^(-2i/Dims); a scalar offset uses the int overload, an
// offset per row (Offset.Rows, int32 [B]) the array one, as mlx_lm passes
// them.
func (b *Backend) RoPE(x backend.Array, p backend.RoPE, offset backend.Offset) backend.Array {
	if !b.here() {
		return b.away("RoPE", func() backend.Array { return b.RoPE(x, p, offset) })
	}
	code := C.int(C.MLXGO_OP_ROPE)
	if offset.Rows != nil {
		code = C.MLXGO_OP_ROPE_DYNAMIC
	}
	c := b.begin(code)
	c.i0, c.b0, c.f0, c.i1 = C.int(p.Dims), C.bool(p.Traditional), C.float(p.Scale), C.int(offset.Scalar)
	c.f1, c.b1 = C.float(p.Base), p.Freqs == nil
	switch {
	case offset.Rows != nil && p.Freqs != nil:
		return b.exec("RoPE", x, offset.Rows, p.Freqs)
	case offset.Rows != nil:
		return b.exec("RoPE", x, offset.Rows)
	case p.Freqs != nil:
		return b.exec("RoPE", x, p.Freqs)
	default:
		return b.exec("RoPE", x)
	}
}

var (
	maskNone   = C.CString("")
	maskCausal = C.CString("causal")
	maskArray  = C.CString("array")
)

// ScaledDotProductAttention is mx.fast.scaled_dot_product_attention (GQA
// without repeating heads; no sinks; force_fused false where mlx-c has it).
func (b *Backend) ScaledDotProductAttention(q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	const op = "ScaledDotProductAttention"
	var m backend.Array
	mode := maskNone
	switch mk := mask.(type) {
	case nil, backend.NoMask:
	case backend.CausalMask:
		mode = maskCausal
	case backend.ArrayMask:
		mode, m = maskArray, mk.A
	default:
		panic(backend.Errorf(op, []backend.Array{q, k, v}, "unknown mask %T", mask))
	}
	if !b.here() {
		return b.away(op, func() backend.Array { return b.ScaledDotProductAttention(q, k, v, scale, mask) })
	}
	c := b.begin(C.MLXGO_OP_SDPA)
	c.f0, c.str = C.float(scale), mode
	if mode == maskArray {
		return b.exec(op, q, k, v, m)
	}
	return b.exec(op, q, k, v)
}

// SwiGLU is mlx_lm's swiglu: silu(gate) * up, compiled shapeless as
// @partial(mx.compile, shapeless=True) does, so the fused kernel is MLX's.
func (b *Backend) SwiGLU(gate, up backend.Array) backend.Array {
	return b.builtin("SwiGLU", C.MLXGO_FN_SWIGLU, gate, up)
}

// Quantize is mx.quantize in affine mode.
func (b *Backend) Quantize(w backend.Array, groupSize, bits int) backend.QuantizedArray {
	var q backend.QuantizedArray
	b.do("Quantize", func() {
		a := b.use("Quantize", w)[0]
		var wq, scales, biases C.mlx_array
		rc := C.mlxgo_quantize(&wq, &scales, &biases, a.h, C.int(groupSize), C.int(bits), b.s)
		if rc != 0 {
			C.mlx_array_free(wq)
			C.mlx_array_free(scales)
			C.mlx_array_free(biases)
			if rc == 2 {
				panic(backend.Errorf("Quantize", []backend.Array{w}, "mlx_quantize did not return three arrays"))
			}
			panic(b.opError("Quantize", []backend.Array{w}))
		}
		q = backend.QuantizedArray{GroupSize: groupSize, Bits: bits}
		q.W = b.wrap("Quantize", 0, wq, w)
		q.Scales = b.wrap("Quantize", 0, scales, w)
		q.Biases = b.wrap("Quantize", 0, biases, w)
	})
	return q
}

func quantArgs(op string, q backend.QuantizedArray) {
	if q.W == nil || q.Scales == nil || q.Biases == nil {
		panic(backend.Errorf(op, []backend.Array{q.W, q.Scales, q.Biases}, "affine quantized array needs W, Scales and Biases"))
	}
}

var modeAffine = C.CString("affine")

// Dequantize is mx.dequantize (affine): output in the scales' dtype.
func (b *Backend) Dequantize(q backend.QuantizedArray) backend.Array {
	quantArgs("Dequantize", q)
	if !b.here() {
		return b.away("Dequantize", func() backend.Array { return b.Dequantize(q) })
	}
	c := b.begin(C.MLXGO_OP_DEQUANTIZE)
	c.i0, c.i1, c.str = C.int(q.GroupSize), C.int(q.Bits), modeAffine
	return b.exec("Dequantize", q.W, q.Scales, q.Biases)
}

// QuantizedMatmul is mx.quantized_matmul (affine).
func (b *Backend) QuantizedMatmul(x backend.Array, w backend.QuantizedArray, transpose bool) backend.Array {
	quantArgs("QuantizedMatmul", w)
	if !b.here() {
		return b.away("QuantizedMatmul", func() backend.Array { return b.QuantizedMatmul(x, w, transpose) })
	}
	c := b.begin(C.MLXGO_OP_QUANTIZED_MATMUL)
	c.i0, c.i1, c.b0, c.str = C.int(w.GroupSize), C.int(w.Bits), C.bool(transpose), modeAffine
	return b.exec("QuantizedMatmul", x, w.W, w.Scales, w.Biases)
}
