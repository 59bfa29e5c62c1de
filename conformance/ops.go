package conformance

import (
	"fmt"
	"strconv"

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
	register("swiglu", runSwiGLU)
	register("sum", reduceRunner("sum"))
	register("max", reduceRunner("max"))
	register("argmax", reduceRunner("argmax"))
	register("logsumexp", runLogSumExp)
	for op := backend.Add; op <= backend.Greater; op++ {
		register(op.String(), binaryRunner(op))
	}
	for op := backend.Exp; op <= backend.Cos; op++ {
		register(op.String(), unaryRunner(op))
	}
	register("astype", runAsType)
	register("where", runWhere)
	register("reshape", runReshape)
	register("transpose", runTranspose)
	register("slice", runSlice)
	register("slice_update", runSliceUpdate)
	register("concatenate", runConcatenate)
	register("take", runTake)
	register("zeros", runZeros)
	register("full", runFull)
}

// MethodOps maps every op method of backend.Backend to the fixture ops that
// exercise it: the methods of the interfaces in OpInterfaces, and Memory's
// Zeros and Full. Coverage and the tests use it to show that every method
// is held to the oracle.
var MethodOps = map[string][]string{
	"Binary":                    binaryOps(),
	"Unary":                     unaryOps(),
	"AsType":                    {"astype"},
	"Where":                     {"where"},
	"Reshape":                   {"reshape"},
	"Transpose":                 {"transpose"},
	"Slice":                     {"slice"},
	"SliceUpdate":               {"slice_update"},
	"Concatenate":               {"concatenate"},
	"Take":                      {"take", "quantized_embedding"},
	"Sum":                       {"sum"},
	"Max":                       {"max"},
	"Argmax":                    {"argmax"},
	"LogSumExp":                 {"logsumexp"},
	"Softmax":                   {"softmax"},
	"Matmul":                    {"matmul"},
	"RMSNorm":                   {"rms_norm"},
	"RoPE":                      {"rope"},
	"ScaledDotProductAttention": {"scaled_dot_product_attention"},
	"SwiGLU":                    {"swiglu"},
	"Quantize":                  {"quantize"},
	"Dequantize":                {"dequantize", "quantized_embedding"},
	"QuantizedMatmul":           {"quantized_matmul"},
	"Zeros":                     {"zeros"},
	"Full":                      {"full"},
}

func binaryOps() []string {
	var ops []string
	for op := backend.Add; op <= backend.Greater; op++ {
		ops = append(ops, op.String())
	}
	return ops
}

func unaryOps() []string {
	var ops []string
	for op := backend.Exp; op <= backend.Cos; op++ {
		ops = append(ops, op.String())
	}
	return ops
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
	in, err := viewed(b, c, a, "a", "b")
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
		x, err := viewed(b, c, a, "x")
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

func binaryRunner(op backend.BinaryOp) runner {
	return func(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
		in, err := viewed(b, c, a, "a", "b")
		if err != nil {
			return nil, err
		}
		return host(b, map[string]backend.Array{"y": b.Binary(op, in[0], in[1])})
	}
}

func runAsType(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	to, err := c.String("to")
	if err != nil {
		return nil, err
	}
	dt, err := tensor.ParseDType(to)
	if err != nil {
		return nil, fmt.Errorf("case %s: param \"to\": %w", c.Name, err)
	}
	x, err := viewed(b, c, a, "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.AsType(x[0], dt)})
}

func runWhere(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	in, err := viewed(b, c, a, "cond", "a", "b")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Where(in[0], in[1], in[2])})
}

func runReshape(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	shape, err := ints(c, "shape")
	if err != nil {
		return nil, err
	}
	x, err := viewed(b, c, a, "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Reshape(x[0], shape...)})
}

func runTranspose(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	axes, err := ints(c, "axes")
	if err != nil {
		return nil, err
	}
	x, err := viewed(b, c, a, "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Transpose(x[0], axes...)})
}

func runSlice(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	start, err := ints(c, "start")
	if err != nil {
		return nil, err
	}
	stop, err := ints(c, "stop")
	if err != nil {
		return nil, err
	}
	x, err := viewed(b, c, a, "x")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Slice(x[0], start, stop)})
}

func runSliceUpdate(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	start, err := ints(c, "start")
	if err != nil {
		return nil, err
	}
	in, err := viewed(b, c, a, "dst", "src")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.SliceUpdate(in[0], in[1], start)})
}

// runConcatenate joins the case's inputs in their manifest order.
func runConcatenate(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	axis, err := c.Int("axis")
	if err != nil {
		return nil, err
	}
	xs, err := viewed(b, c, a, c.Inputs...)
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Concatenate(axis, xs...)})
}

func runTake(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	axis, err := c.Int("axis")
	if err != nil {
		return nil, err
	}
	in, err := viewed(b, c, a, "x", "indices")
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Take(in[0], in[1], axis)})
}

// fillParams reads a fill case's shape and its dtype (the case dtype).
func fillParams(c *Case) (tensor.Shape, tensor.DType, error) {
	shape, err := ints(c, "shape")
	if err != nil {
		return nil, 0, err
	}
	size := 1
	for i, d := range shape {
		if d < 0 || d > maxRandomValues {
			return nil, 0, fmt.Errorf("case %s: shape[%d] = %d, want an integer in [0, %d]", c.Name, i, d, maxRandomValues)
		}
		if size *= d; size > maxRandomValues {
			return nil, 0, fmt.Errorf("case %s: shape %v holds more than %d values", c.Name, shape, maxRandomValues)
		}
	}
	dt, err := tensor.ParseDType(c.DType)
	if err != nil {
		return nil, 0, fmt.Errorf("case %s: %w", c.Name, err)
	}
	return tensor.Shape(shape), dt, nil
}

func runZeros(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	shape, dt, err := fillParams(c)
	if err != nil {
		return nil, err
	}
	return host(b, map[string]backend.Array{"y": b.Zeros(shape, dt)})
}

// runFull reads the fill value from params.value, Python's repr of the
// float passed to mx.full ("0.1", "-inf", "nan": JSON has no infinities).
func runFull(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	shape, dt, err := fillParams(c)
	if err != nil {
		return nil, err
	}
	s, err := c.String("value")
	if err != nil {
		return nil, err
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("case %s: param \"value\" = %q, want a float: %w", c.Name, s, err)
	}
	return host(b, map[string]backend.Array{"y": b.Full(shape, v, dt)})
}

// ints returns params[key] as a list of integers.
func ints(c *Case, key string) ([]int, error) {
	v, ok := c.Params[key].([]any)
	if !ok {
		return nil, fmt.Errorf("case %s: param %q = %v, want a list of integers", c.Name, key, c.Params[key])
	}
	return intList(c, key, v)
}

func intList(c *Case, key string, v []any) ([]int, error) {
	out := make([]int, len(v))
	for i, e := range v {
		f, ok := e.(float64)
		if !ok || f != float64(int(f)) {
			return nil, fmt.Errorf("case %s: param %q: element %d = %v, want an integer", c.Name, key, i, e)
		}
		out[i] = int(f)
	}
	return out, nil
}

// viewed loads the named inputs and applies each one's view, the steps the
// oracle took before the op (params.views[name], in order): {"transpose":
// axes} or {"slice": [start, stop]}. Inputs without a view come as stored.
func viewed(b backend.Backend, c *Case, a *Arrays, names ...string) ([]backend.Array, error) {
	in, err := inputs(b, a, names...)
	if err != nil {
		return nil, err
	}
	if !c.Has("views") {
		return in, nil
	}
	views, ok := c.Params["views"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("case %s: param \"views\" = %v, want an object", c.Name, c.Params["views"])
	}
	for i, n := range names {
		if views[n] == nil {
			continue
		}
		steps, ok := views[n].([]any)
		if !ok {
			return nil, fmt.Errorf("case %s: views[%q] = %v, want a list of steps", c.Name, n, views[n])
		}
		for _, st := range steps {
			if in[i], err = applyView(b, c, n, in[i], st); err != nil {
				return nil, err
			}
		}
	}
	return in, nil
}

func applyView(b backend.Backend, c *Case, name string, x backend.Array, step any) (backend.Array, error) {
	m, ok := step.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, fmt.Errorf("case %s: views[%q] step %v, want {\"transpose\": axes} or {\"slice\": [start, stop]}", c.Name, name, step)
	}
	key := "views." + name
	if v, ok := m["transpose"].([]any); ok {
		axes, err := intList(c, key, v)
		if err != nil {
			return nil, err
		}
		return b.Transpose(x, axes...), nil
	}
	if v, ok := m["slice"].([]any); ok && len(v) == 2 {
		start, ok1 := v[0].([]any)
		stop, ok2 := v[1].([]any)
		if ok1 && ok2 {
			lo, err := intList(c, key, start)
			if err != nil {
				return nil, err
			}
			hi, err := intList(c, key, stop)
			if err != nil {
				return nil, err
			}
			return b.Slice(x, lo, hi), nil
		}
	}
	return nil, fmt.Errorf("case %s: views[%q] step %v, want {\"transpose\": axes} or {\"slice\": [start, stop]}", c.Name, name, step)
}
