package backendtest

import (
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// cases is the number of random cases of each op and dtype.
const cases = 12

var floats = []tensor.DType{tensor.F32, tensor.F16, tensor.BF16}

// runOps checks every op of Elementwise, Shaping, Reducing, Linalg, Fused
// and Quantized against the suite's float64 reference.
func runOps(t *testing.T, open func() (backend.Backend, error), skip map[string]string) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, backend.Backend)
	}{
		{"Unary", testUnary},
		{"Binary", testBinary},
		{"AsType", testAsType},
		{"Where", testWhere},
		{"Reshape", testReshape},
		{"Transpose", testTranspose},
		{"Slice", testSlice},
		{"SliceUpdate", testSliceUpdate},
		{"SliceUpdateRows", testSliceUpdateRows},
		{"Concatenate", testConcatenate},
		{"Take", testTake},
		{"Sum", testSum},
		{"Max", testMax},
		{"Argmax", testArgmax},
		{"LogSumExp", testLogSumExp},
		{"Softmax", testSoftmax},
		{"Matmul", testMatmul},
		{"RMSNorm", testRMSNorm},
		{"RoPE", testRoPE},
		{"ScaledDotProductAttention", testSDPA},
		{"ScaledDotProductAttention/PrefixMask", testSDPAPrefix},
		{"AttendRows", testAttendRows},
		{"SwiGLU", testSwiGLU},
		{"Dequantize", testDequantize},
		{"Quantize", testQuantize},
		{"QuantizedMatmul", testQuantizedMatmul},
		{"QuantizedMatmulsT", testQuantizedMatmulsT},
		{"Deterministic", testDeterministic},
	} {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := skip[c.name]; ok {
				t.Skipf("approximate by design in this mode: %s", why)
			}
			b := openB(t, open)
			c.fn(t, b)
		})
	}
}

// anyShape returns a random shape of rank 0..4 with dimensions 0..5 (a zero
// in about one case of eight).
func (g *gen) anyShape() tensor.Shape {
	s := g.shape(g.r.IntN(5), 1, 5)
	if len(s) > 0 && g.r.IntN(8) == 0 {
		s[g.r.IntN(len(s))] = 0
	}
	return s
}

// broadcastable returns a shape that broadcasts to s: some dimensions set
// to 1 and some leading ones dropped.
func (g *gen) broadcastable(s tensor.Shape) tensor.Shape {
	out := s.Clone()
	for i := range out {
		if g.r.IntN(3) == 0 {
			out[i] = 1
		}
	}
	return out[g.r.IntN(len(out)+1):]
}

// values returns n random values fit for dt: normal floats with edge values
// sprinkled in, or integers in a small range (non-negative for unsigned
// types and Bool in {0, 1}).
func (g *gen) values(dt tensor.DType, n int, sd float64) []float64 {
	switch {
	case dt.IsFloat():
		v := g.normal(n, sd)
		g.sprinkle(v, dt)
		return v
	case dt == tensor.Bool:
		return g.ints(n, 0, 1)
	case dt == tensor.U8 || dt == tensor.U16 || dt == tensor.U32 || dt == tensor.U64:
		return g.ints(n, 0, 40)
	}
	return g.ints(n, -20, 20)
}

// wrapInt wraps an exact integer result to dt's range (two's complement).
func wrapInt(v float64, dt tensor.DType) float64 {
	switch dt {
	case tensor.Bool:
		if v != 0 {
			return 1
		}
		return 0
	case tensor.U8:
		return float64(uint8(int64(v)))
	case tensor.I8:
		return float64(int8(int64(v)))
	case tensor.U16:
		return float64(uint16(int64(v)))
	case tensor.I16:
		return float64(int16(int64(v)))
	case tensor.U32:
		return float64(uint32(int64(v)))
	case tensor.I32:
		return float64(int32(int64(v)))
	}
	return v
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

var unaryRef = map[backend.UnaryOp]func(float64) float64{
	backend.Exp:      math.Exp,
	backend.Log:      math.Log,
	backend.Negative: func(x float64) float64 { return -x },
	backend.Abs:      math.Abs,
	backend.Sqrt:     math.Sqrt,
	backend.Rsqrt:    func(x float64) float64 { return 1 / math.Sqrt(x) },
	backend.Square:   func(x float64) float64 { return x * x },
	backend.Sigmoid:  sigmoid,
	backend.SiLU:     func(x float64) float64 { return x * sigmoid(x) },
	backend.Tanh:     math.Tanh,
	backend.Sin:      math.Sin,
	backend.Cos:      math.Cos,
}

// Unary: every op on every float dtype with edge values, and on integers
// (Negative, Abs and Square keep the integer dtype and wrap; the others give
// F32).
func testUnary(t *testing.T, b backend.Backend) {
	for op := backend.Exp; op <= backend.Cos; op++ {
		f := unaryRef[op]
		inDo(t, b, func() {
			for _, dt := range append(floats, tensor.I32) {
				g := newGen(caseName("unary", op, dt))
				for i := range cases {
					name := caseName(op, dt, i)
					shape := g.anyShape()
					v := g.values(dt, shape.Size(), 2)
					if dt == tensor.I32 && i%3 == 0 && len(v) > 0 {
						v[0] = -1 << 31 // wraps under Negative and Abs
						if len(v) > 1 {
							v[1] = 50000 // 50000² wraps in int32
						}
					}
					x, xr := g.input(b, dt, shape, v)
					out := dt
					integer := op == backend.Negative || op == backend.Abs || op == backend.Square
					if dt == tensor.I32 && !integer {
						out = tensor.F32
					}
					want := mapN(func(a []float64) float64 {
						r := f(a[0])
						if out == tensor.I32 {
							r = wrapInt(r, out)
						}
						return r
					}, xr)
					bu := budget(t, "unary", out)
					var mag []float64
					if op == backend.Sin || op == backend.Cos {
						mag = ones(len(want.v)) // absolute error bounded by Rel
					}
					compare(t, name, host(t, b, b.Unary(op, x)), out, want, bu, op == backend.Negative || op == backend.Abs, mag)
				}
			}
		})
	}
}

func ones(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// The dtype pairs of Binary and Where: equal types, the mixed pairs of the
// promotion table that models meet, and integer pairs.
var pairs = [][2]tensor.DType{
	{tensor.F32, tensor.F32}, {tensor.F16, tensor.F16}, {tensor.BF16, tensor.BF16},
	{tensor.BF16, tensor.F16}, {tensor.I32, tensor.BF16}, {tensor.F32, tensor.BF16},
	{tensor.Bool, tensor.F16}, {tensor.I32, tensor.I32}, {tensor.U8, tensor.I8}, {tensor.U32, tensor.I32},
}

// Binary: every op on every pair of dtypes, broadcast shapes, edge values.
// The output dtype is backend.PromoteTypes of the inputs (F32 at least for
// Divide of integers, Bool for comparisons); both inputs are converted to
// it first. Integer arithmetic and comparisons are exact.
func testBinary(t *testing.T, b backend.Backend) {
	for op := backend.Add; op <= backend.Greater; op++ {
		inDo(t, b, func() {
			for _, p := range pairs {
				g := newGen(caseName("binary", op, p[0], p[1]))
				ct := backend.PromoteTypes(p[0], p[1])
				if op == backend.Divide && !ct.IsFloat() {
					ct = tensor.F32
				}
				cmp := op == backend.Equal || op == backend.Less || op == backend.Greater
				out := ct
				if cmp {
					out = tensor.Bool
				}
				for i := range cases {
					s := g.anyShape()
					sa, sb := g.broadcastable(s), g.broadcastable(s)
					if i%2 == 1 {
						sa, sb = sb, sa
					}
					x, xr := g.input(b, p[0], sa, g.values(p[0], sa.Size(), 2))
					y, yr := g.input(b, p[1], sb, g.values(p[1], sb.Size(), 2))
					if i%4 == 0 && p[0] == p[1] && len(xr.v) > 0 && sa.Equal(sb) {
						// Equal values on purpose, for the comparisons.
						y, yr = x, xr
					}
					xr.v, yr.v = roundAll(xr.v, ct), roundAll(yr.v, ct)
					want := mapN(func(a []float64) float64 { return binaryRef(op, a[0], a[1], out) }, xr, yr)
					bu := budget(t, "binary", out)
					if !out.IsFloat() {
						bu = budget(t, "exact", out)
					}
					compare(t, caseName(op, p[0], p[1], i), host(t, b, b.Binary(op, x, y)), out, want, bu, false, nil)
				}
			}
		})
	}
}

func binaryRef(op backend.BinaryOp, x, y float64, out tensor.DType) float64 {
	b2f := func(c bool) float64 {
		if c {
			return 1
		}
		return 0
	}
	var r float64
	switch op {
	case backend.Add:
		r = x + y
	case backend.Subtract:
		r = x - y
	case backend.Multiply:
		r = x * y
	case backend.Divide:
		r = x / y
	case backend.Maximum, backend.Minimum:
		switch {
		case math.IsNaN(x) || math.IsNaN(y):
			r = math.NaN()
		case (op == backend.Maximum) == (x > y):
			r = x
		default:
			r = y
		}
	case backend.Equal:
		return b2f(x == y)
	case backend.Less:
		return b2f(x < y)
	case backend.Greater:
		return b2f(x > y)
	}
	if !out.IsFloat() {
		return wrapInt(r, out)
	}
	return r
}

// AsType between floats, integers and Bool: floats round to nearest even,
// floats truncate toward zero into integers (values in range, no NaN:
// where C leaves the conversion undefined the contract says nothing),
// integers convert exactly, anything nonzero (NaN included) is true.
func testAsType(t *testing.T, b backend.Backend) {
	types := []tensor.DType{tensor.F32, tensor.F16, tensor.BF16, tensor.I32, tensor.U8, tensor.Bool}
	inDo(t, b, func() {
		for _, from := range types {
			for _, to := range types {
				g := newGen(caseName("astype", from, to))
				for i := range cases / 2 {
					shape := g.anyShape()
					v := g.values(from, shape.Size(), 60)
					if from.IsFloat() && !to.IsFloat() && to != tensor.Bool {
						for k := range v { // in range for U8 and I32, no NaN or infinity
							if math.IsNaN(v[k]) || math.IsInf(v[k], 0) || math.Abs(v[k]) > 250 {
								v[k] = 7.5
							}
							if to == tensor.U8 {
								v[k] = math.Abs(v[k])
							}
						}
					}
					x, xr := g.input(b, from, shape, v)
					want := mapN(func(a []float64) float64 {
						switch {
						case to == tensor.Bool:
							if a[0] != 0 {
								return 1
							}
							return 0
						case to.IsFloat():
							return roundTo(a[0], to)
						case !from.IsFloat():
							return wrapInt(a[0], to) // integers wrap
						}
						return math.Trunc(a[0]) + 0 // -0 truncates to integer 0
					}, xr)
					compare(t, caseName(from, to, i), host(t, b, b.AsType(x, to)), to, want, budget(t, "exact", to), to.IsFloat(), nil)
				}
			}
		}
	})
}

// Where with broadcast cond, a and b; cond Bool or an integer (nonzero is
// true); the output is the promotion of a and b, values copied exactly.
func testWhere(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, p := range [][2]tensor.DType{{tensor.F32, tensor.F32}, {tensor.BF16, tensor.BF16}, {tensor.BF16, tensor.F16}, {tensor.I32, tensor.F32}, {tensor.I32, tensor.I32}, {tensor.Bool, tensor.Bool}} {
			g := newGen(caseName("where", p[0], p[1]))
			ct := backend.PromoteTypes(p[0], p[1])
			for i := range cases {
				s := g.anyShape()
				cs, sa, sb := g.broadcastable(s), g.broadcastable(s), g.broadcastable(s)
				cdt := tensor.Bool
				if i%4 == 3 {
					cdt = tensor.I32
				}
				c, cr := g.input(b, cdt, cs, g.ints(cs.Size(), 0, 1))
				if cdt == tensor.I32 {
					c, cr = g.input(b, cdt, cs, g.ints(cs.Size(), -2, 2))
				}
				x, xr := g.input(b, p[0], sa, g.values(p[0], sa.Size(), 2))
				y, yr := g.input(b, p[1], sb, g.values(p[1], sb.Size(), 2))
				want := mapN(func(a []float64) float64 {
					if a[0] != 0 {
						return roundTo(a[1], ct)
					}
					return roundTo(a[2], ct)
				}, cr, xr, yr)
				compare(t, caseName(p[0], p[1], i), host(t, b, b.Where(c, x, y)), ct, want, budget(t, "exact", ct), true, nil)
			}
		}
	})
}
