package conformance

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Runners for the backend ops. Each reads the case's inputs and params as
// documented in conformance/README.md ("Op fixtures") and calls the backend
// op with MLX's name.
func init() {
	register("quantize", runQuantize)
	register("dequantize", runDequantize)
	register("quantized_matmul", runQuantizedMatmul)
	register("quantized_embedding", runQuantizedEmbedding)
	register("matmul", runMatmul)
	register("rms_norm", runRMSNorm)
	register("rope", runRoPE)
	register("scaled_dot_product_attention", runSDPA)
	register("softmax", runSoftmax)
	register("silu", unaryRunner(backend.SiLU))
	register("swiglu", runSwiGLU)
	register("sum", reduceRunner("sum"))
	register("max", reduceRunner("max"))
	register("argmax", reduceRunner("argmax"))
	register("logsumexp", runLogSumExp)
}

func quantParams(c *Case) (groupSize, bits int, err error) {
	if mode, err := c.String("mode"); err != nil {
		return 0, 0, err
	} else if mode != "" && mode != "affine" {
		return 0, 0, fmt.Errorf("case %s: quantization mode %q, only affine is supported", c.Name, mode)
	}
	if groupSize, err = c.Int("group_size"); err != nil {
		return 0, 0, err
	}
	bits, err = c.Int("bits")
	return groupSize, bits, err
}

func runQuantize(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	gs, bits, err := quantParams(c)
	if err != nil {
		return nil, err
	}
	in, err := inputs(b, a, "w")
	if err != nil {
		return nil, err
	}
	q := b.Quantize(in[0], gs, bits)
	return host(b, map[string]backend.Array{"wq": q.W, "scales": q.Scales, "biases": q.Biases})
}

func quantized(b backend.Backend, c *Case, a *Arrays, w, s, bi string) (backend.QuantizedArray, error) {
	gs, bits, err := quantParams(c)
	if err != nil {
		return backend.QuantizedArray{}, err
	}
	in, err := inputs(b, a, w, s, bi)
	if err != nil {
		return backend.QuantizedArray{}, err
	}
	return backend.QuantizedArray{W: in[0], Scales: in[1], Biases: in[2], GroupSize: gs, Bits: bits}, nil
}

func runDequantize(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	q, err := quantized(b, c, a, "wq", "scales", "biases")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"w": b.Dequantize(q)})
}

func runQuantizedMatmul(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	q, err := quantized(b, c, a, "wq", "scales", "biases")
	if err != nil {
		return nil, err
	}
	transpose, err := c.Bool("transpose")
	if err != nil {
		return nil, err
	}
	x, err := inputs(b, a, "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.QuantizedMatmul(x[0], q, transpose)})
}

// runQuantizedEmbedding is mlx.nn.QuantizedEmbedding.__call__: gather the
// rows of the packed weight, scales and biases, then dequantize them.
func runQuantizedEmbedding(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	q, err := quantized(b, c, a, "weight", "scales", "biases")
	if err != nil {
		return nil, err
	}
	ids, err := inputs(b, a, "ids")
	if err != nil {
		return nil, err
	}
	rows := backend.QuantizedArray{
		W:         b.Take(q.W, ids[0], 0),
		Scales:    b.Take(q.Scales, ids[0], 0),
		Biases:    b.Take(q.Biases, ids[0], 0),
		GroupSize: q.GroupSize, Bits: q.Bits,
	}
	return host(b, map[string]backend.Array{"y": b.Dequantize(rows)})
}

func runMatmul(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	in, err := inputs(b, a, "a", "b")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Matmul(in[0], in[1])})
}

func runRMSNorm(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	eps, err := c.Float("eps")
	if err != nil {
		return nil, err
	}
	in, err := inputs(b, a, "x", "weight")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.RMSNorm(in[0], in[1], float32(eps))})
}

func runRoPE(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	dims, err := c.Int("dims")
	if err != nil {
		return nil, err
	}
	trad, err := c.Bool("traditional")
	if err != nil {
		return nil, err
	}
	scale, err := c.Float("scale")
	if err != nil {
		return nil, err
	}
	p := backend.RoPE{Dims: dims, Traditional: trad, Scale: float32(scale)}
	if c.Has("freqs") {
		f, err := inputs(b, a, "freqs")
		if err != nil {
			return nil, err
		}
		p.Freqs = f[0]
	} else {
		base, err := c.Float("base")
		if err != nil {
			return nil, err
		}
		p.Base = float32(base)
	}
	var off backend.Offset
	if isArray, err := c.Bool("offset_is_array"); err != nil {
		return nil, err
	} else if isArray {
		o, err := inputs(b, a, "offset")
		if err != nil {
			return nil, err
		}
		off.Rows = o[0]
	} else if off.Scalar, err = c.Int("offset"); err != nil {
		return nil, err
	}
	x, err := inputs(b, a, "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.RoPE(x[0], p, off)})
}

func runSDPA(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	scale, err := c.Float("scale")
	if err != nil {
		return nil, err
	}
	in, err := inputs(b, a, "q", "k", "v")
	if err != nil {
		return nil, err
	}
	kind, err := c.String("mask")
	if err != nil {
		return nil, err
	}
	var mask backend.Mask = backend.NoMask{}
	switch kind {
	case "":
	case "causal":
		mask = backend.CausalMask{}
	case "array":
		m, err := inputs(b, a, "mask")
		if err != nil {
			return nil, err
		}
		mask = backend.ArrayMask{A: m[0]}
	default:
		return nil, fmt.Errorf("case %s: mask %q, want null, \"causal\" or \"array\"", c.Name, kind)
	}
	return host(b, map[string]backend.Array{"y": b.ScaledDotProductAttention(in[0], in[1], in[2], float32(scale), mask)})
}

func runSoftmax(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	axis, err := c.Int("axis")
	if err != nil {
		return nil, err
	}
	precise, err := c.Bool("precise")
	if err != nil {
		return nil, err
	}
	x, err := inputs(b, a, "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Softmax(x[0], axis, precise)})
}

func unaryRunner(op backend.UnaryOp) runner {
	return func(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
		x, err := inputs(b, a, "x")
		if err != nil {
			return nil, err
		}
		return host(b, map[string]backend.Array{"y": b.Unary(op, x[0])})
	}
}

func runSwiGLU(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	in, err := inputs(b, a, "gate", "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.SwiGLU(in[0], in[1])})
}

func reduceRunner(op string) runner {
	return func(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
		axis, err := c.Int("axis")
		if err != nil {
			return nil, err
		}
		keep, err := c.Bool("keepdims")
		if err != nil {
			return nil, err
		}
		x, err := inputs(b, a, "x")
		if err != nil {
			return nil, err
		}
		var y backend.Array
		switch op {
		case "sum":
			y = b.Sum(x[0], axis, keep)
		case "max":
			y = b.Max(x[0], axis, keep)
		case "argmax":
			y = b.Argmax(x[0], axis, keep)
		}
		return host(b, map[string]backend.Array{"y": y})
	}
}

// runLogSumExp reproduces generate_step's normalisation: lse over the whole
// (single-row) array with keepdims, then logprobs = x - lse in x's dtype.
func runLogSumExp(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	x, err := inputs(b, a, "x")
	if err != nil {
		return nil, err
	}
	if c.Has("axis") {
		return nil, fmt.Errorf("case %s: logsumexp over one axis is not a generate_step case", c.Name)
	}
	shape := x[0].Shape()
	flat := b.Reshape(x[0], -1)
	lse := b.Reshape(b.LogSumExp(flat, 0, true), onesLike(len(shape))...)
	outs := map[string]backend.Array{"lse": lse}
	if contains(c.Outputs, "logprobs") {
		outs["logprobs"] = b.Binary(backend.Subtract, x[0], lse)
	}
	return host(b, outs)
}

func onesLike(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}
