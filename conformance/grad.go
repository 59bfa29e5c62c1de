package conformance

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// Runners of the gradient fixtures (conformance/oracle/grad.py): each
// writes the function the oracle differentiated, op for op in the same
// order, and hands it to the backend's backend.Differentiator. A vjp_<op>
// case has the op's inputs and a cotangent "cot", and outputs "y" (the
// value) and "d_<input>" (the VJP w.r.t. each differentiated input); the
// value_and_grad case is a next-token loss through the quantized head.
func init() {
	register("vjp_rms_norm", vjpRunner([]string{"x", "weight"}, []string{"x", "weight"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		eps, err := c.Float("eps")
		return b.RMSNorm(x[0], x[1], float32(eps)), err
	}))
	register("vjp_rope", runVJPRoPE)
	register("vjp_scaled_dot_product_attention", runVJPSDPA)
	register("vjp_swiglu", vjpRunner([]string{"gate", "x"}, []string{"gate", "x"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		return b.SwiGLU(x[0], x[1]), nil
	}))
	register("vjp_quantized_matmul", runVJPQuantizedMatmul)
	register("vjp_matmul", vjpRunner([]string{"a", "b"}, []string{"a", "b"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		return b.Matmul(x[0], x[1]), nil
	}))
	register("vjp_softmax", vjpRunner([]string{"x"}, []string{"x"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		axis, err := c.Int("axis")
		if err != nil {
			return nil, err
		}
		precise, err := c.Bool("precise")
		return b.Softmax(x[0], axis, precise), err
	}))
	register("vjp_logsumexp", vjpRunner([]string{"x"}, []string{"x"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		axis, err := c.Int("axis")
		return b.LogSumExp(x[0], axis, false), err
	}))
	register("vjp_take", vjpRunner([]string{"x", "indices"}, []string{"x"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		axis, err := c.Int("axis")
		return b.Take(x[0], x[1], axis), err
	}))
	register("vjp_unary", vjpRunner([]string{"x"}, []string{"x"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		fn, err := c.String("fn")
		if err != nil {
			return nil, err
		}
		for op := backend.Exp; op <= backend.Cos; op++ {
			if op.String() == fn {
				return b.Unary(op, x[0]), nil
			}
		}
		return nil, fmt.Errorf("case %s: unknown unary fn %q", c.Name, fn)
	}))
	register("vjp_binary", vjpRunner([]string{"a", "b"}, []string{"a", "b"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		fn, err := c.String("fn")
		if err != nil {
			return nil, err
		}
		for op := backend.Add; op <= backend.Minimum; op++ {
			if op.String() == fn {
				return b.Binary(op, x[0], x[1]), nil
			}
		}
		return nil, fmt.Errorf("case %s: unknown binary fn %q", c.Name, fn)
	}))
	register("value_and_grad", runValueAndGrad)
	register("value_and_grad_cross_entropy", runCrossEntropyLoss)
	register("lora_linear", loraRunner(false))
	register("lora_quantized_linear", loraRunner(true))
	register("dora_linear", doraRunner(false))
	register("dora_quantized_linear", doraRunner(true))

	quant := map[string]paramKind{"bits": pInt, "group_size": pInt, "mode": pStr, "transpose": pBool}
	for op, s := range map[string]opSchema{
		"vjp_rms_norm": schema(in("x", "weight", "cot"), []string{"y", "d_x", "d_weight"}, map[string]paramKind{"eps": pFloat}, "eps"),
		"vjp_rope": schema([][]string{{"x", "cot"}, {"x", "offset", "cot"}}, []string{"y", "d_x"},
			map[string]paramKind{"base": pFloat, "dims": pInt, "offset": pInt, "offset_is_array": pBool, "scale": pFloat, "traditional": pBool},
			"dims", "base", "scale", "traditional", "offset_is_array"),
		"vjp_scaled_dot_product_attention": schema([][]string{{"q", "k", "v", "cot"}, {"q", "k", "v", "mask", "cot"}}, []string{"y", "d_q", "d_k", "d_v"},
			map[string]paramKind{"mask": pStr | pNull, "mask_dtype": pStr, "mask_kind": pStr, "scale": pFloat}, "scale", "mask"),
		"vjp_swiglu":           schema(in("gate", "x", "cot"), []string{"y", "d_gate", "d_x"}, nil),
		"vjp_quantized_matmul": schema(in("x", "wq", "scales", "biases", "cot"), []string{"y", "d_x"}, quant, "bits", "group_size", "transpose"),
		"vjp_matmul":           schema(in("a", "b", "cot"), []string{"y", "d_a", "d_b"}, nil),
		"vjp_softmax":          schema(in("x", "cot"), []string{"y", "d_x"}, map[string]paramKind{"axis": pInt, "precise": pBool}, "axis", "precise"),
		"vjp_logsumexp":        schema(in("x", "cot"), []string{"y", "d_x"}, map[string]paramKind{"axis": pInt}, "axis"),
		"vjp_take":             schema(in("x", "indices", "cot"), []string{"y", "d_x"}, map[string]paramKind{"axis": pInt}, "axis"),
		"vjp_unary":            schema(in("x", "cot"), []string{"y", "d_x"}, map[string]paramKind{"fn": pStr}, "fn"),
		"vjp_binary":           schema(in("a", "b", "cot"), []string{"y", "d_a", "d_b"}, map[string]paramKind{"fn": pStr}, "fn"),
		"value_and_grad": schema(in("h", "weight", "wq", "scales", "biases", "targets"), []string{"loss", "d_h", "d_weight"},
			map[string]paramKind{"eps": pFloat, "bits": pInt, "group_size": pInt, "mode": pStr, "checkpoint": pBool},
			"eps", "bits", "group_size", "checkpoint"),
		"value_and_grad_cross_entropy": schema(in("logits", "targets", "mask"), []string{"loss", "d_logits"}, nil),
		"lora_linear": schema(in("x", "weight", "lora_a", "lora_b", "cot"), []string{"y", "d_x", "d_lora_a", "d_lora_b", "fused_weight"},
			map[string]paramKind{"scale": pFloat, "rank": pInt}, "scale"),
		"lora_quantized_linear": schema(in("x", "wq", "scales", "biases", "lora_a", "lora_b", "cot"),
			[]string{"y", "d_x", "d_lora_a", "d_lora_b", "fused_wq", "fused_scales", "fused_biases"},
			map[string]paramKind{"scale": pFloat, "rank": pInt, "bits": pInt, "group_size": pInt, "mode": pStr}, "scale", "bits", "group_size"),
		"dora_linear": schema(in("x", "weight", "lora_a", "lora_b", "m", "cot"), []string{"y", "d_x", "d_lora_a", "d_lora_b", "d_m", "m0", "fused_weight"},
			map[string]paramKind{"scale": pFloat, "rank": pInt}, "scale"),
		"dora_quantized_linear": schema(in("x", "wq", "scales", "biases", "lora_a", "lora_b", "m", "cot"),
			[]string{"y", "d_x", "d_lora_a", "d_lora_b", "d_m", "m0", "fused_wq", "fused_scales", "fused_biases"},
			map[string]paramKind{"scale": pFloat, "rank": pInt, "bits": pInt, "group_size": pInt, "mode": pStr}, "scale", "bits", "group_size"),
	} {
		schemas[op] = s
	}
}

// differentiator returns b's backend.Differentiator, or an error saying it
// has none.
func differentiator(b backend.Backend) (backend.Differentiator, error) {
	d, ok := b.(backend.Differentiator)
	if !ok {
		return nil, fmt.Errorf("backend %s does not implement backend.Differentiator (gradients)", b.Name())
	}
	return d, nil
}

// vjpRunner runs the VJP of f, a function of the named inputs, with respect
// to those in diff (the others are constants of f), and the case's "cot".
func vjpRunner(names, diff []string, f func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error)) runner {
	return func(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
		in, err := inputs(b, a, append(append([]string(nil), names...), "cot")...)
		if err != nil {
			return nil, err
		}
		return vjp(b, c, names, diff, in[:len(names)], in[len(names)], f)
	}
}

func vjp(b backend.Backend, c *Case, names, diff []string, all []backend.Array, cot backend.Array, f func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error)) (map[string]*tensor.Dense, error) {
	d, err := differentiator(b)
	if err != nil {
		return nil, err
	}
	at := make([]int, len(diff))
	for i, n := range diff {
		at[i] = -1
		for j, m := range names {
			if m == n {
				at[i] = j
			}
		}
	}
	primals := make([]backend.Array, len(diff))
	for i, j := range at {
		primals[i] = all[j]
	}
	fn := func(ps []backend.Array) ([]backend.Array, error) {
		x := append([]backend.Array(nil), all...)
		for i, j := range at {
			x[j] = ps[i]
		}
		y, err := f(b, c, x)
		return []backend.Array{y}, err
	}
	outs, vjps, err := d.VJP(fn, primals, []backend.Array{cot})
	if err != nil {
		return nil, err
	}
	res := map[string]backend.Array{"y": outs[0]}
	for i, n := range diff {
		res["d_"+n] = vjps[i]
	}
	return host(b, res)
}

func runVJPRoPE(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
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
	base, err := c.Float("base")
	if err != nil {
		return nil, err
	}
	rows, err := c.Bool("offset_is_array")
	if err != nil {
		return nil, err
	}
	p := backend.RoPE{Dims: dims, Traditional: trad, Base: float32(base), Scale: float32(scale)}
	names := []string{"x"}
	var off backend.Offset
	if rows {
		names = append(names, "offset")
	} else if off.Scalar, err = c.Int("offset"); err != nil {
		return nil, err
	}
	return vjpRunner(names, []string{"x"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		if rows {
			off.Rows = x[1]
		}
		return b.RoPE(x[0], p, off), nil
	})(b, c, a)
}

func runVJPSDPA(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	scale, err := c.Float("scale")
	if err != nil {
		return nil, err
	}
	kind, err := c.String("mask")
	if err != nil {
		return nil, err
	}
	names := []string{"q", "k", "v"}
	switch kind {
	case "", "causal":
	case "array":
		names = append(names, "mask")
	default:
		return nil, fmt.Errorf("case %s: mask %q, want null, \"causal\" or \"array\"", c.Name, kind)
	}
	return vjpRunner(names, []string{"q", "k", "v"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		var mask backend.Mask = backend.NoMask{}
		switch kind {
		case "causal":
			mask = backend.CausalMask{}
		case "array":
			mask = backend.ArrayMask{A: x[3]}
		}
		return b.ScaledDotProductAttention(x[0], x[1], x[2], float32(scale), mask), nil
	})(b, c, a)
}

func runVJPQuantizedMatmul(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	gs, bits, err := quantParams(c)
	if err != nil {
		return nil, err
	}
	transpose, err := c.Bool("transpose")
	if err != nil {
		return nil, err
	}
	return vjpRunner([]string{"x", "wq", "scales", "biases"}, []string{"x"}, func(b backend.Backend, c *Case, x []backend.Array) (backend.Array, error) {
		q := backend.QuantizedArray{W: x[1], Scales: x[2], Biases: x[3], GroupSize: gs, Bits: bits}
		return b.QuantizedMatmul(x[0], q, transpose), nil
	})(b, c, a)
}

// runValueAndGrad is grad.py's _loss: logits = quantized_matmul(
// rms_norm(h, weight)) (under Checkpoint when the case says so), and the
// mean over rows of logsumexp(logits) - logits[row, target], with its
// gradients w.r.t. h and weight.
func runValueAndGrad(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	d, err := differentiator(b)
	if err != nil {
		return nil, err
	}
	eps, err := c.Float("eps")
	if err != nil {
		return nil, err
	}
	gs, bits, err := quantParams(c)
	if err != nil {
		return nil, err
	}
	ck, err := c.Bool("checkpoint")
	if err != nil {
		return nil, err
	}
	in, err := inputs(b, a, "h", "weight", "wq", "scales", "biases")
	if err != nil {
		return nil, err
	}
	tt, err := a.Input("targets")
	if err != nil {
		return nil, err
	}
	q := backend.QuantizedArray{W: in[2], Scales: in[3], Biases: in[4], GroupSize: gs, Bits: bits}
	T, V := in[0].Shape()[0], q.W.Shape()[0]
	if tt.DType != tensor.I32 || !tt.Shape.Equal(tensor.Shape{T}) {
		return nil, fmt.Errorf("case %s: targets are %v %v, want int32 [%d]", c.Name, tt.DType, tt.Shape, T)
	}
	flat := make([]int32, T)
	for i, v := range tt.Int32s() {
		if v < 0 || int(v) >= V {
			return nil, fmt.Errorf("case %s: target %d of row %d is outside the vocabulary of %d", c.Name, v, i, V)
		}
		flat[i] = v + int32(i*V)
	}
	pick := b.FromHost(tensor.FromInt32(tensor.Shape{T}, flat))
	head := func(x []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.QuantizedMatmul(b.RMSNorm(x[0], x[1], float32(eps)), q, true)}, nil
	}
	if ck {
		head = d.Checkpoint(head)
	}
	loss := func(x []backend.Array) ([]backend.Array, error) {
		l, err := head(x)
		if err != nil {
			return nil, err
		}
		logits := l[0]
		picked := b.Take(b.Reshape(logits, -1), pick, 0)
		ce := b.Binary(backend.Subtract, b.LogSumExp(logits, -1, false), picked)
		return []backend.Array{b.Binary(backend.Divide, b.Sum(ce, 0, false), b.Full(tensor.Shape{}, float64(T), ce.DType()))}, nil
	}
	outs, grads, err := d.ValueAndGrad(loss, in[:2], []int{0, 1})
	if err != nil {
		return nil, err
	}
	// the fixture stores the scalar loss as [1] (see grad.py)
	return host(b, map[string]backend.Array{"loss": b.Reshape(outs[0], 1), "d_h": grads[0], "d_weight": grads[1]})
}

// runCrossEntropyLoss is mlx_lm's default_loss after the model, with
// mlx.nn.losses.cross_entropy written out as MLX's CPU path computes it:
// l = logits - stop_gradient(max(logits)), ce = logsumexp(l) - l[target]
// (take_along_axis, here a Take of the flattened l), then
// sum(T(ce·mask) as float32) / sum(mask).
func runCrossEntropyLoss(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	d, err := differentiator(b)
	if err != nil {
		return nil, err
	}
	in, err := inputs(b, a, "logits", "mask")
	if err != nil {
		return nil, err
	}
	tt, err := a.Input("targets")
	if err != nil {
		return nil, err
	}
	s := in[0].Shape()
	if len(s) != 3 || tt.DType != tensor.I32 || !tt.Shape.Equal(s[:2]) {
		return nil, fmt.Errorf("case %s: logits %v and targets %v %v, want [B, T, V] and int32 [B, T]", c.Name, s, tt.DType, tt.Shape)
	}
	V := s[2]
	flat := make([]int32, tt.Shape.Size())
	for i, v := range tt.Int32s() {
		if v < 0 || int(v) >= V {
			return nil, fmt.Errorf("case %s: target %d at %d is outside the vocabulary of %d", c.Name, v, i, V)
		}
		flat[i] = v + int32(i*V)
	}
	pick := b.FromHost(tensor.FromInt32(tt.Shape, flat))
	mask := in[1]
	loss := func(x []backend.Array) ([]backend.Array, error) {
		l := b.Binary(backend.Subtract, x[0], d.StopGradient(b.Max(x[0], -1, true)))
		score := b.Take(b.Reshape(l, -1), pick, 0)
		ce := b.Binary(backend.Multiply, b.Binary(backend.Subtract, b.LogSumExp(l, -1, false), score), mask)
		sum := b.Sum(b.Reshape(b.AsType(ce, tensor.F32), -1), 0, false)
		return []backend.Array{b.Binary(backend.Divide, sum, b.Sum(b.Reshape(mask, -1), 0, false))}, nil
	}
	outs, grads, err := d.ValueAndGrad(loss, in[:1], []int{0})
	if err != nil {
		return nil, err
	}
	// the fixture stores the scalar loss as [1] (see grad.py)
	return host(b, map[string]backend.Array{"loss": b.Reshape(outs[0], 1), "d_logits": grads[0]})
}

// loraRunner runs nn.LoRALinear over a Dense (or, quantized, a
// QuantizedLinear) base as grad.py's _gen_lora runs mlx_lm's LoRALinear:
// the forward, its VJP w.r.t. x, lora_a and lora_b, and Fuse (re-quantized
// for a quantized base).
func loraRunner(quant bool) runner {
	return func(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
		d, err := differentiator(b)
		if err != nil {
			return nil, err
		}
		scale, err := c.Float("scale")
		if err != nil {
			return nil, err
		}
		names := []string{"x", "weight"}
		if quant {
			names = []string{"x", "wq", "scales", "biases"}
		}
		in, err := inputs(b, a, append(names, "lora_a", "lora_b", "cot")...)
		if err != nil {
			return nil, err
		}
		var base nn.Linear = &nn.Dense{B: b, Weight: in[1]}
		if quant {
			gs, bits, err := quantParams(c)
			if err != nil {
				return nil, err
			}
			base = &nn.QuantizedLinear{B: b, Weight: backend.QuantizedArray{W: in[1], Scales: in[2], Biases: in[3], GroupSize: gs, Bits: bits}}
		}
		n := len(names)
		x, la, lb, cot := in[0], in[n], in[n+1], in[n+2]
		layer := &nn.LoRALinear{B: b, Base: base, Scale: float32(scale)}
		outs, vjps, err := d.VJP(func(p []backend.Array) ([]backend.Array, error) {
			layer.LoraA, layer.LoraB = p[1], p[2]
			return []backend.Array{layer.Forward(p[0])}, nil
		}, []backend.Array{x, la, lb}, []backend.Array{cot})
		if err != nil {
			return nil, err
		}
		layer.LoraA, layer.LoraB = la, lb
		fused, err := layer.Fuse(false)
		if err != nil {
			return nil, err
		}
		res := map[string]backend.Array{"y": outs[0], "d_x": vjps[0], "d_lora_a": vjps[1], "d_lora_b": vjps[2]}
		switch f := fused.(type) {
		case *nn.QuantizedLinear:
			res["fused_wq"], res["fused_scales"], res["fused_biases"] = f.Weight.W, f.Weight.Scales, f.Weight.Biases
		case *nn.Dense:
			res["fused_weight"] = f.Weight
		}
		return host(b, res)
	}
}

// doraRunner runs nn.DoRALinear as grad.py's _gen_dora runs mlx_lm's
// DoRALinear: m0 = nn.DoRANorm of the base, the forward with the case's m,
// its VJP w.r.t. x, lora_a, lora_b and m, and Fuse.
func doraRunner(quant bool) runner {
	return func(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
		d, err := differentiator(b)
		if err != nil {
			return nil, err
		}
		scale, err := c.Float("scale")
		if err != nil {
			return nil, err
		}
		names := []string{"x", "weight"}
		if quant {
			names = []string{"x", "wq", "scales", "biases"}
		}
		in, err := inputs(b, a, append(names, "lora_a", "lora_b", "m", "cot")...)
		if err != nil {
			return nil, err
		}
		var base nn.Linear = &nn.Dense{B: b, Weight: in[1]}
		if quant {
			gs, bits, err := quantParams(c)
			if err != nil {
				return nil, err
			}
			base = &nn.QuantizedLinear{B: b, Weight: backend.QuantizedArray{W: in[1], Scales: in[2], Biases: in[3], GroupSize: gs, Bits: bits}}
		}
		n := len(names)
		x, la, lb, m, cot := in[0], in[n], in[n+1], in[n+2], in[n+3]
		m0, err := nn.DoRANorm(b, base)
		if err != nil {
			return nil, err
		}
		layer := &nn.DoRALinear{B: b, Base: base, Scale: float32(scale)}
		outs, vjps, err := d.VJP(func(p []backend.Array) ([]backend.Array, error) {
			layer.LoraA, layer.LoraB, layer.M = p[1], p[2], p[3]
			return []backend.Array{layer.Forward(p[0])}, nil
		}, []backend.Array{x, la, lb, m}, []backend.Array{cot})
		if err != nil {
			return nil, err
		}
		layer.LoraA, layer.LoraB, layer.M = la, lb, m
		fused, err := layer.Fuse(false)
		if err != nil {
			return nil, err
		}
		res := map[string]backend.Array{"y": outs[0], "d_x": vjps[0], "d_lora_a": vjps[1], "d_lora_b": vjps[2], "d_m": vjps[3], "m0": m0}
		switch f := fused.(type) {
		case *nn.QuantizedLinear:
			res["fused_wq"], res["fused_scales"], res["fused_biases"] = f.Weight.W, f.Weight.Scales, f.Weight.Biases
		case *nn.Dense:
			res["fused_weight"] = f.Weight
		}
		return host(b, res)
	}
}
