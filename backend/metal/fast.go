//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"slices"

	"github.com/mlxgo/mlxgo/backend"
)

type builtinArgs struct {
	op    string
	which C.int
	x, y  backend.Array // y: SwiGLU's up
}

// builtin applies one of the functions compiled shapeless with mlx_compile
// (mlxgo.c: silu, swiglu), compiling it on first use. The compiled function
// and its cache live on the MLX thread.
func (b *Backend) builtin(op string, which C.int, x, y backend.Array) backend.Array {
	return hop(b, op, builtinArgs{op, which, x, y}, builtinArgs.record)
}

func (p builtinArgs) record(b *Backend) *Array {
	args := [2]backend.Array{p.x, p.y}
	n := 1
	if p.which == C.MLXGO_FN_SWIGLU {
		n = 2
	}
	f := &b.silu
	if p.which == C.MLXGO_FN_SWIGLU {
		f = &b.swiglu
	}
	if f.ctx == nil {
		var c C.mlx_closure // a local: cgo may not see into *b
		if C.mlxgo_compile_builtin(&c, p.which, b.s) != 0 {
			panic(b.opError(p.op, slices.Clone(args[:n])))
		}
		*f = c
	}
	x, y := b.arg(p.op, args[:n], 0).ref(), noArray
	if n == 2 {
		y = b.arg(p.op, args[:n], 1).ref()
	}
	return b.result(p.op, C.mlxgo_apply(b.recorder(), C.mlxgo_fn(uintptr(f.ctx)), x, y), args[:n])
}

type rmsNormArgs struct {
	x, weight backend.Array
	eps       float32
}

// RMSNorm is mx.fast.rms_norm. A nil weight means none.
func (b *Backend) RMSNorm(x, weight backend.Array, eps float32) backend.Array {
	return hop(b, "RMSNorm", rmsNormArgs{x, weight, eps}, rmsNormArgs.record)
}

func (p rmsNormArgs) record(b *Backend) *Array {
	args := [2]backend.Array{p.x, p.weight}
	n := 1
	if p.weight != nil {
		n = 2
	}
	x, w := b.arg("RMSNorm", args[:n], 0).ref(), noArray
	if n == 2 {
		w = b.arg("RMSNorm", args[:n], 1).ref()
	}
	return b.result("RMSNorm", C.mlxgo_rms_norm(b.recorder(), x, w, C.float(p.eps)), args[:n])
}

type ropeArgs struct {
	x      backend.Array
	p      backend.RoPE
	offset backend.Offset
}

// RoPE is mx.fast.rope: with p.Freqs the frequencies are 1/Freqs (base
// unused), else Base^(-2i/Dims); a scalar offset uses the int overload, an
// offset per row (Offset.Rows, int32 [B]) the array one, as mlx_lm passes
// them.
func (b *Backend) RoPE(x backend.Array, p backend.RoPE, offset backend.Offset) backend.Array {
	return hop(b, "RoPE", ropeArgs{x, p, offset}, ropeArgs.record)
}

func (p ropeArgs) record(b *Backend) *Array {
	// The arrays in the order errors list them: x, the offsets, freqs.
	args := [3]backend.Array{p.x}
	n := 1
	if p.offset.Rows != nil {
		args[n] = p.offset.Rows
		n++
	}
	if p.p.Freqs != nil {
		args[n] = p.p.Freqs
		n++
	}
	x, rows, freqs := b.arg("RoPE", args[:n], 0).ref(), noArray, noArray
	if p.offset.Rows != nil {
		rows = b.arg("RoPE", args[:n], 1).ref()
	}
	if p.p.Freqs != nil {
		freqs = b.arg("RoPE", args[:n], n-1).ref()
	}
	dims, trad, scale := C.int(p.p.Dims), C.bool(p.p.Traditional), C.float(p.p.Scale)
	base := C.mlx_optional_float{value: C.float(p.p.Base), has_value: p.p.Freqs == nil}
	var rc C.int
	if p.offset.Rows != nil {
		rc = C.mlxgo_rope_dynamic(b.recorder(), x, dims, trad, base, scale, rows, freqs)
	} else {
		rc = C.mlxgo_rope(b.recorder(), x, dims, trad, base, scale, C.int(p.offset.Scalar), freqs)
	}
	return b.result("RoPE", rc, args[:n])
}

var (
	maskNone   = C.CString("")
	maskCausal = C.CString("causal")
	maskArray  = C.CString("array")
)

type sdpaArgs struct {
	q, k, v backend.Array
	scale   float32
	mode    *C.char       // maskNone, maskCausal or maskArray
	mask    backend.Array // with maskArray
}

// ScaledDotProductAttention is mx.fast.scaled_dot_product_attention (GQA
// without repeating heads; no sinks; force_fused false where mlx-c has it).
func (b *Backend) ScaledDotProductAttention(q, k, v backend.Array, scale float32, mask backend.Mask) backend.Array {
	p := sdpaArgs{q: q, k: k, v: v, scale: scale, mode: maskNone}
	switch mk := mask.(type) {
	case nil, backend.NoMask:
	case backend.CausalMask:
		p.mode = maskCausal
	case backend.ArrayMask:
		p.mode, p.mask = maskArray, mk.A
	case backend.PrefixMask:
		if err := mk.Check(q.Shape()[2]); err != nil || k.Shape()[2] != mk.Len() {
			panic(backend.Errorf("ScaledDotProductAttention", []backend.Array{q, k, v}, "prefix mask of %d positions for %d queries over %d keys", mk.Len(), q.Shape()[2], k.Shape()[2]))
		}
		return b.prefixSDPA(q, k, v, scale, mk)
	default:
		panic(backend.Errorf("ScaledDotProductAttention", []backend.Array{q, k, v}, "unknown mask %T", mask))
	}
	return hop(b, "ScaledDotProductAttention", p, sdpaArgs.record)
}

// prefixSDPA is the attention under a PrefixMask in blocks, each a fused
// causal attention of MLX's: the prefix's queries over the prefix's keys,
// and each block's queries over the prefix's keys followed by the block's
// own (MLX's causal mask with fewer queries than keys aligns the last
// query with the last key, so a block query sees the whole prefix and its
// block up to itself: the PrefixMask's rule). Nothing is computed for the
// keys the mask hides, no [L, L] mask or score array is made, and each
// block's attention is the one its sequence would get alone.
func (b *Backend) prefixSDPA(q, k, v backend.Array, scale float32, mk backend.PrefixMask) backend.Array {
	seq := func(x backend.Array, lo, hi int) backend.Array {
		s := x.Shape()
		return b.Slice(x, []int{0, 0, lo, 0}, []int{s[0], s[1], hi, s[3]})
	}
	P := mk.Prefix
	var outs []backend.Array
	if P > 0 {
		outs = append(outs, b.ScaledDotProductAttention(seq(q, 0, P), seq(k, 0, P), seq(v, 0, P), scale, backend.CausalMask{}))
	}
	for s, i := P, 0; i < len(mk.Blocks); s, i = s+mk.Blocks[i], i+1 {
		e := s + mk.Blocks[i]
		kb, vb := seq(k, s, e), seq(v, s, e)
		if P > 0 {
			kb = b.Concatenate(2, seq(k, 0, P), kb)
			vb = b.Concatenate(2, seq(v, 0, P), vb)
		}
		outs = append(outs, b.ScaledDotProductAttention(seq(q, s, e), kb, vb, scale, backend.CausalMask{}))
	}
	if len(outs) == 1 {
		return outs[0]
	}
	return b.Concatenate(2, outs...)
}

func (p sdpaArgs) record(b *Backend) *Array {
	const op = "ScaledDotProductAttention"
	args := [4]backend.Array{p.q, p.k, p.v, p.mask}
	n := 3
	if p.mode == maskArray {
		n = 4
	}
	q, k, v, m := b.arg(op, args[:n], 0).ref(), b.arg(op, args[:n], 1).ref(), b.arg(op, args[:n], 2).ref(), noArray
	if n == 4 {
		m = b.arg(op, args[:n], 3).ref()
	}
	return b.result(op, C.mlxgo_sdpa(b.recorder(), q, k, v, C.float(p.scale), p.mode, m), args[:n])
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

type dequantizeArgs struct{ q backend.QuantizedArray }

// Dequantize is mx.dequantize (affine): output in the scales' dtype.
func (b *Backend) Dequantize(q backend.QuantizedArray) backend.Array {
	quantArgs("Dequantize", q)
	return hop(b, "Dequantize", dequantizeArgs{q}, dequantizeArgs.record)
}

func (p dequantizeArgs) record(b *Backend) *Array {
	args := [3]backend.Array{p.q.W, p.q.Scales, p.q.Biases}
	w, sc, bi := b.arg("Dequantize", args[:], 0).ref(), b.arg("Dequantize", args[:], 1).ref(), b.arg("Dequantize", args[:], 2).ref()
	rc := C.mlxgo_dequantize(b.recorder(), w, sc, bi, C.int(p.q.GroupSize), C.int(p.q.Bits), modeAffine)
	return b.result("Dequantize", rc, args[:])
}

type quantizedMatmulArgs struct {
	x         backend.Array
	w         backend.QuantizedArray
	transpose bool
}

// QuantizedMatmul is mx.quantized_matmul (affine).
func (b *Backend) QuantizedMatmul(x backend.Array, w backend.QuantizedArray, transpose bool) backend.Array {
	quantArgs("QuantizedMatmul", w)
	return hop(b, "QuantizedMatmul", quantizedMatmulArgs{x, w, transpose}, quantizedMatmulArgs.record)
}

func (p quantizedMatmulArgs) record(b *Backend) *Array {
	const op = "QuantizedMatmul"
	args := [4]backend.Array{p.x, p.w.W, p.w.Scales, p.w.Biases}
	x, w := b.arg(op, args[:], 0).ref(), b.arg(op, args[:], 1).ref()
	sc, bi := b.arg(op, args[:], 2).ref(), b.arg(op, args[:], 3).ref()
	rc := C.mlxgo_quantized_matmul(b.recorder(), x, w, sc, bi, C.bool(p.transpose), C.int(p.w.GroupSize), C.int(p.w.Bits), modeAffine)
	return b.result(op, rc, args[:])
}
