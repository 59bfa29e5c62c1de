//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import "github.com/mlxgo/mlxgo/backend"

// builtin applies one of the functions compiled shapeless with mlx_compile
// (mlxgo.c: silu, swiglu), compiling it on first use. The compiled function
// and its cache live on the MLX thread.
func (b *Backend) builtin(op string, which C.int, args ...backend.Array) *Array {
	return b.op(op, func(res *C.mlx_array, h []C.mlx_array) C.int {
		f := &b.silu
		if which == C.MLXGO_FN_SWIGLU {
			f = &b.swiglu
		}
		if f.ctx == nil {
			var c C.mlx_closure // a local: cgo may not see into *b
			if rc := C.mlxgo_compile_builtin(&c, which, b.s); rc != 0 {
				return rc
			}
			*f = c
		}
		return C.mlxgo_apply(*f, &h[0], C.size_t(len(h)), res)
	}, args...)
}

// RMSNorm is mx.fast.rms_norm. A nil weight means none.
func (b *Backend) RMSNorm(x, weight backend.Array, eps float32) backend.Array {
	args := []backend.Array{x}
	if weight != nil {
		args = append(args, weight)
	}
	return b.op("RMSNorm", func(res *C.mlx_array, h []C.mlx_array) C.int {
		w := C.mlx_array_new()
		if len(h) > 1 {
			w = h[1]
		}
		return C.mlx_fast_rms_norm(res, h[0], w, C.float(eps), b.s)
	}, args...)
}

// RoPE is mx.fast.rope: with p.Freqs the frequencies are 1/Freqs (base
// unused), else Base^(-2i/Dims); a scalar offset uses the int overload, an
// offset per row (Offset.Rows, int32 [B]) the array one, as mlx_lm passes
// them.
func (b *Backend) RoPE(x backend.Array, p backend.RoPE, offset backend.Offset) backend.Array {
	args := []backend.Array{x}
	if offset.Rows != nil {
		args = append(args, offset.Rows)
	}
	if p.Freqs != nil {
		args = append(args, p.Freqs)
	}
	return b.op("RoPE", func(res *C.mlx_array, h []C.mlx_array) C.int {
		base := C.mlx_optional_float{value: C.float(p.Base), has_value: true}
		freqs := C.mlx_array_new()
		if p.Freqs != nil {
			base = C.mlx_optional_float{}
			freqs = h[len(h)-1]
		}
		dims, trad, scale := C.int(p.Dims), C.bool(p.Traditional), C.float(p.Scale)
		if offset.Rows != nil {
			return C.mlx_fast_rope_dynamic(res, h[0], dims, trad, base, scale, h[1], freqs, b.s)
		}
		return C.mlx_fast_rope(res, h[0], dims, trad, base, scale, C.int(offset.Scalar), freqs, b.s)
	}, args...)
}

var (
	maskNone   = C.CString("")
	maskCausal = C.CString("causal")
	maskArray  = C.CString("array")
)

// ScaledDotProductAttention is mx.fast.scaled_dot_product_attention (GQA
// without repeating heads; no sinks; force_fused false where mlx-c has it).
func (b *Backend) ScaledDotProductAttention(q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	args := []backend.Array{q, k, v}
	mode := maskNone
	switch m := mask.(type) {
	case nil, backend.NoMask:
	case backend.CausalMask:
		mode = maskCausal
	case backend.ArrayMask:
		mode = maskArray
		args = append(args, m.A)
	default:
		panic(backend.Errorf("ScaledDotProductAttention", args, "unknown mask %T", mask))
	}
	return b.op("ScaledDotProductAttention", func(res *C.mlx_array, h []C.mlx_array) C.int {
		m := C.mlx_array_new()
		if len(h) > 3 {
			m = h[3]
		}
		return C.mlxgo_sdpa(res, h[0], h[1], h[2], C.float(scale), mode, m, b.s)
	}, args...)
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

func quantArgs(op string, q backend.QuantizedArray) (C.mlx_optional_int, C.mlx_optional_int) {
	if q.W == nil || q.Scales == nil || q.Biases == nil {
		panic(backend.Errorf(op, []backend.Array{q.W, q.Scales, q.Biases}, "affine quantized array needs W, Scales and Biases"))
	}
	return C.mlx_optional_int{value: C.int(q.GroupSize), has_value: true},
		C.mlx_optional_int{value: C.int(q.Bits), has_value: true}
}

var modeAffine = C.CString("affine")

// Dequantize is mx.dequantize (affine): output in the scales' dtype.
func (b *Backend) Dequantize(q backend.QuantizedArray) backend.Array {
	g, bits := quantArgs("Dequantize", q)
	return b.op("Dequantize", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_dequantize(res, h[0], h[1], h[2], g, bits, modeAffine, C.mlx_array_new(), C.mlx_optional_dtype{}, b.s)
	}, q.W, q.Scales, q.Biases)
}

// QuantizedMatmul is mx.quantized_matmul (affine).
func (b *Backend) QuantizedMatmul(x backend.Array, w backend.QuantizedArray, transpose bool) backend.Array {
	g, bits := quantArgs("QuantizedMatmul", w)
	return b.op("QuantizedMatmul", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_quantized_matmul(res, h[0], h[1], h[2], h[3], C.bool(transpose), g, bits, modeAffine, b.s)
	}, x, w.W, w.Scales, w.Biases)
}
