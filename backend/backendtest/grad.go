package backendtest

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// runGradients checks backend.Differentiator, when the backend offers it:
// the VJP of each differentiable op (float32, inputs in random layouts)
// against its gradient worked out by hand in float64 loops, then
// ValueAndGrad, Checkpoint and the transforms' errors and lifetimes.
func runGradients(t *testing.T, open func() (backend.Backend, error)) {
	probe := openB(t, open)
	if _, ok := probe.(backend.Differentiator); !ok {
		t.Skipf("!!! backend %s does not implement backend.Differentiator: no gradient is checked !!!", probe.Name())
	}
	for _, c := range gradCases() {
		t.Run("VJP/"+c.name, func(t *testing.T) {
			b := openB(t, open)
			inDo(t, b, func() { testVJP(t, b, c) })
		})
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, backend.Backend, backend.Differentiator)
	}{
		{"ValueAndGrad", testValueAndGrad},
		{"Checkpoint", testCheckpoint},
		{"Errors", testGradErrors},
		{"Cotangents", testCotangents},
		{"VJP/quantized_matmul", testQuantizedMatmulVJP},
		{"StopGradient", testStopGradient},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openB(t, open)
			inDo(t, b, func() { c.fn(t, b, b.(backend.Differentiator)) })
		})
	}
}

// gradCase is one function of float32 arrays with its VJP in float64.
type gradCase struct {
	name   string
	shapes []tensor.Shape
	pos    bool         // inputs drawn positive (Log, Rsqrt, the divisor)
	out    tensor.Shape // the output's shape
	fn     func(b backend.Backend, x []backend.Array) backend.Array
	vjp    func(x []nd, c nd) []nd // the cotangents of the inputs given the output's c
}

// elementwise is a gradCase of a unary op with derivative d.
func elementwise(op backend.UnaryOp, pos bool, d func(x float64) float64) gradCase {
	return gradCase{name: op.String(), shapes: []tensor.Shape{{3, 7}}, pos: pos, out: tensor.Shape{3, 7},
		fn: func(b backend.Backend, x []backend.Array) backend.Array { return b.Unary(op, x[0]) },
		vjp: func(x []nd, c nd) []nd {
			out := newND(x[0].shape)
			for i, v := range x[0].v {
				out.v[i] = c.v[i] * d(v)
			}
			return []nd{out}
		}}
}

func newND(shape tensor.Shape) nd { return nd{shape.Clone(), make([]float64, shape.Size())} }

// softmaxRows is the softmax of each row of a [rows, n] array.
func softmaxRows(x nd, n int) nd {
	out := newND(x.shape)
	for r := 0; r < len(x.v)/n; r++ {
		row := x.v[r*n : (r+1)*n]
		m := maxRef(row)
		s := 0.0
		for _, v := range row {
			s += math.Exp(v - m)
		}
		for j, v := range row {
			out.v[r*n+j] = math.Exp(v-m) / s
		}
	}
	return out
}

func gradCases() []gradCase {
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	cs := []gradCase{
		elementwise(backend.Exp, false, math.Exp),
		elementwise(backend.Log, true, func(x float64) float64 { return 1 / x }),
		elementwise(backend.Tanh, false, func(x float64) float64 { return 1 - math.Tanh(x)*math.Tanh(x) }),
		elementwise(backend.Sigmoid, false, func(x float64) float64 { return sig(x) * (1 - sig(x)) }),
		elementwise(backend.SiLU, false, func(x float64) float64 { return sig(x) * (1 + x*(1-sig(x))) }),
		elementwise(backend.Rsqrt, true, func(x float64) float64 { return -0.5 * math.Pow(x, -1.5) }),
		{name: "multiply/broadcast", shapes: []tensor.Shape{{3, 4}, {4}}, out: tensor.Shape{3, 4},
			fn: func(b backend.Backend, x []backend.Array) backend.Array {
				return b.Binary(backend.Multiply, x[0], x[1])
			},
			vjp: func(x []nd, c nd) []nd {
				da, db := newND(x[0].shape), newND(x[1].shape)
				for i, v := range x[0].v {
					da.v[i] = c.v[i] * x[1].v[i%4]
					db.v[i%4] += c.v[i] * v
				}
				return []nd{da, db}
			}},
		{name: "divide", shapes: []tensor.Shape{{3, 4}, {3, 4}}, pos: true, out: tensor.Shape{3, 4},
			fn: func(b backend.Backend, x []backend.Array) backend.Array { return b.Binary(backend.Divide, x[0], x[1]) },
			vjp: func(x []nd, c nd) []nd {
				da, db := newND(x[0].shape), newND(x[1].shape)
				for i, a := range x[0].v {
					d := x[1].v[i]
					da.v[i] = c.v[i] / d
					db.v[i] = -c.v[i] * a / (d * d)
				}
				return []nd{da, db}
			}},
		{name: "sum_of_squares", shapes: []tensor.Shape{{3, 5}}, out: tensor.Shape{3},
			fn: func(b backend.Backend, x []backend.Array) backend.Array {
				return b.Sum(b.Unary(backend.Square, x[0]), 1, false)
			},
			vjp: func(x []nd, c nd) []nd {
				d := newND(x[0].shape)
				for i, v := range x[0].v {
					d.v[i] = 2 * v * c.v[i/5]
				}
				return []nd{d}
			}},
		{name: "matmul", shapes: []tensor.Shape{{3, 5}, {5, 4}}, out: tensor.Shape{3, 4},
			fn: func(b backend.Backend, x []backend.Array) backend.Array { return b.Matmul(x[0], x[1]) },
			vjp: func(x []nd, c nd) []nd {
				da, _ := matmulRef(c, transposeND(x[1], []int{1, 0}))
				db, _ := matmulRef(transposeND(x[0], []int{1, 0}), c)
				return []nd{da, db}
			}},
		{name: "softmax", shapes: []tensor.Shape{{3, 6}}, out: tensor.Shape{3, 6},
			fn: func(b backend.Backend, x []backend.Array) backend.Array { return b.Softmax(x[0], -1, true) },
			vjp: func(x []nd, c nd) []nd {
				s, d := softmaxRows(x[0], 6), newND(x[0].shape)
				for r := range 3 {
					dot := 0.0
					for j := range 6 {
						dot += c.v[r*6+j] * s.v[r*6+j]
					}
					for j := range 6 {
						d.v[r*6+j] = s.v[r*6+j] * (c.v[r*6+j] - dot)
					}
				}
				return []nd{d}
			}},
		{name: "logsumexp", shapes: []tensor.Shape{{3, 6}}, out: tensor.Shape{3},
			fn: func(b backend.Backend, x []backend.Array) backend.Array { return b.LogSumExp(x[0], -1, false) },
			vjp: func(x []nd, c nd) []nd {
				s := softmaxRows(x[0], 6)
				for i := range s.v {
					s.v[i] *= c.v[i/6]
				}
				return []nd{s}
			}},
		{name: "take/rows", shapes: []tensor.Shape{{6, 4}}, out: tensor.Shape{2, 3, 4},
			fn: func(b backend.Backend, x []backend.Array) backend.Array {
				ids := b.FromHost(tensor.FromInt32(tensor.Shape{2, 3}, []int32{5, 0, 5, 2, 2, 5}))
				return b.Take(x[0], ids, 0)
			},
			vjp: func(x []nd, c nd) []nd {
				d := newND(x[0].shape)
				for k, id := range []int{5, 0, 5, 2, 2, 5} {
					for j := range 4 {
						d.v[id*4+j] += c.v[k*4+j]
					}
				}
				return []nd{d}
			}},
		{name: "slice_concatenate_transpose", shapes: []tensor.Shape{{3, 5}, {6}}, out: tensor.Shape{3, 5},
			fn: func(b backend.Backend, x []backend.Array) backend.Array {
				s := b.Slice(x[0], []int{0, 1}, []int{3, 4})
				z := b.Transpose(b.Reshape(x[1], 2, 3), 1, 0)
				return b.Concatenate(1, s, z)
			},
			vjp: func(x []nd, c nd) []nd {
				dx, dz := newND(x[0].shape), newND(x[1].shape)
				for i := range 3 {
					for j := range 3 {
						dx.v[i*5+1+j] = c.v[i*5+j]
					}
					for k := range 2 { // z[k, i] sits at output [i, 3+k]
						dz.v[k*3+i] = c.v[i*5+3+k]
					}
				}
				return []nd{dx, dz}
			}},
		{name: "rms_norm", shapes: []tensor.Shape{{3, 16}, {16}}, out: tensor.Shape{3, 16},
			fn: func(b backend.Backend, x []backend.Array) backend.Array { return b.RMSNorm(x[0], x[1], 1e-5) },
			vjp: func(x []nd, c nd) []nd {
				n, eps := 16, float64(float32(1e-5))
				dx, dw := newND(x[0].shape), newND(x[1].shape)
				for r := range 3 {
					row, cr := x[0].v[r*n:(r+1)*n], c.v[r*n:(r+1)*n]
					ms := 0.0
					for _, v := range row {
						ms += v * v / float64(n)
					}
					inv := 1 / math.Sqrt(ms+eps)
					dot := 0.0 // Σ x·w·c
					for j, v := range row {
						dot += v * x[1].v[j] * cr[j]
						dw.v[j] += cr[j] * v * inv
					}
					for j, v := range row {
						dx.v[r*n+j] = inv*x[1].v[j]*cr[j] - v*inv*inv*inv*dot/float64(n)
					}
				}
				return []nd{dx, dw}
			}},
		{name: "swiglu", shapes: []tensor.Shape{{3, 8}, {3, 8}}, out: tensor.Shape{3, 8},
			fn: func(b backend.Backend, x []backend.Array) backend.Array { return b.SwiGLU(x[0], x[1]) },
			vjp: func(x []nd, c nd) []nd {
				dg, du := newND(x[0].shape), newND(x[1].shape)
				for i, g := range x[0].v {
					s := sig(g)
					dg.v[i] = c.v[i] * x[1].v[i] * s * (1 + g*(1-s))
					du.v[i] = c.v[i] * g * s
				}
				return []nd{dg, du}
			}},
	}
	for _, rows := range []bool{false, true} {
		name := "rope/offset2"
		if rows {
			name = "rope/rows"
		}
		cs = append(cs, gradCase{name: name, shapes: []tensor.Shape{{2, 2, 3, 8}}, out: tensor.Shape{2, 2, 3, 8},
			fn: func(b backend.Backend, x []backend.Array) backend.Array {
				off := backend.Offset{Scalar: 2}
				if rows {
					off = backend.Offset{Rows: b.FromHost(tensor.FromInt32(tensor.Shape{2}, []int32{4, 0}))}
				}
				return b.RoPE(x[0], backend.RoPE{Dims: 6, Base: 100, Scale: 1}, off)
			},
			vjp: func(x []nd, c nd) []nd {
				// the transpose of the rotation by θ = pos·base^(-2i/dims) of
				// the pairs (i, i+3), i < 3, is the rotation by -θ; features 6
				// and 7 pass through
				d := newND(x[0].shape)
				copy(d.v, c.v)
				for bi := range 2 {
					off := 2
					if rows {
						off = []int{4, 0}[bi]
					}
					for h := range 2 {
						for l := range 3 {
							at := ((bi*2+h)*3 + l) * 8
							for i := range 3 {
								th := float64(off+l) * math.Pow(100, -2*float64(i)/6)
								c1, c2 := c.v[at+i], c.v[at+i+3]
								d.v[at+i] = c1*math.Cos(th) + c2*math.Sin(th)
								d.v[at+i+3] = -c1*math.Sin(th) + c2*math.Cos(th)
							}
						}
					}
				}
				return []nd{d}
			}})
	}
	cs = append(cs, gradCase{name: "sdpa/causal/gqa", shapes: []tensor.Shape{{1, 4, 3, 8}, {1, 2, 5, 8}, {1, 2, 5, 8}}, out: tensor.Shape{1, 4, 3, 8},
		fn: func(b backend.Backend, x []backend.Array) backend.Array {
			return b.ScaledDotProductAttention(x[0], x[1], x[2], 0.35, backend.CausalMask{})
		},
		vjp: sdpaVJPRef(4, 2, 3, 5, 8, func(i, j int) bool { return j <= i+5-3 })})
	// A prefix-shared sequence of 150 positions (a prefix of 100, blocks of
	// 30 and 20): long enough for the CPU backend's VJP to go in two tiles.
	pm := backend.PrefixMask{Prefix: 100, Blocks: []int{30, 20}}
	cs = append(cs, gradCase{name: "sdpa/prefix/gqa", shapes: []tensor.Shape{{1, 4, 150, 8}, {1, 2, 150, 8}, {1, 2, 150, 8}}, out: tensor.Shape{1, 4, 150, 8},
		fn: func(b backend.Backend, x []backend.Array) backend.Array {
			return b.ScaledDotProductAttention(x[0], x[1], x[2], 0.35, pm)
		},
		vjp: sdpaVJPRef(4, 2, 150, 150, 8, pm.Visible)})
	return cs
}

// sdpaVJPRef is attention's gradient for q [1, H, L, D], k and v
// [1, Hk, S, D], scale 0.35, query i seeing key j where vis(i, j): with
// P = softmax(scale·q·kᵀ) over the keys each query sees, dv = Pᵀ·c,
// dP = c·vᵀ, dS = P⊙(dP - Σ dP⊙P), dq = scale·dS·k, dk = scale·dSᵀ·q
// (query head h reads KV head h/(H/Hk)).
func sdpaVJPRef(H, Hk, L, S, D int, vis func(i, j int) bool) func(x []nd, c nd) []nd {
	return func(x []nd, c nd) []nd { return sdpaVJPRefOf(x, c, H, Hk, L, S, D, vis) }
}

func sdpaVJPRefOf(x []nd, c nd, H, Hk, L, S, D int, vis func(i, j int) bool) []nd {
	const scale = float64(float32(0.35))
	q, k, v := x[0].v, x[1].v, x[2].v
	dq, dk, dv := newND(x[0].shape), newND(x[1].shape), newND(x[2].shape)
	for h := range H {
		kh := h / (H / Hk)
		for i := range L {
			qi := q[(h*L+i)*D : (h*L+i+1)*D]
			ci := c.v[(h*L+i)*D : (h*L+i+1)*D]
			p := make([]float64, S)
			m := math.Inf(-1)
			for j := range S {
				if !vis(i, j) {
					continue
				}
				for d := range D {
					p[j] += qi[d] * k[(kh*S+j)*D+d]
				}
				p[j] *= scale
				m = math.Max(m, p[j])
			}
			sum := 0.0
			for j := range S {
				if vis(i, j) {
					p[j] = math.Exp(p[j] - m)
					sum += p[j]
				} else {
					p[j] = 0
				}
			}
			dp := make([]float64, S)
			dot := 0.0
			for j := range S {
				p[j] /= sum
				for d := range D {
					dp[j] += ci[d] * v[(kh*S+j)*D+d]
					dv.v[(kh*S+j)*D+d] += p[j] * ci[d]
				}
				dot += dp[j] * p[j]
			}
			for j := range S {
				ds := p[j] * (dp[j] - dot) * scale
				for d := range D {
					dq.v[(h*L+i)*D+d] += ds * k[(kh*S+j)*D+d]
					dk.v[(kh*S+j)*D+d] += ds * qi[d]
				}
			}
		}
	}
	return []nd{dq, dk, dv}
}

// testVJP checks the VJP of c with a random cotangent against c.vjp.
func testVJP(t *testing.T, b backend.Backend, c gradCase) {
	d := b.(backend.Differentiator)
	g := newGen("grad/" + c.name)
	xs := make([]backend.Array, len(c.shapes))
	ref := make([]nd, len(c.shapes))
	for i, s := range c.shapes {
		v := g.normal(s.Size(), 1)
		if c.pos {
			for j := range v {
				v[j] = 0.5 + math.Abs(v[j])
			}
		}
		xs[i], ref[i] = g.input(b, tensor.F32, s, v)
	}
	cot, cref := g.input(b, tensor.F32, c.out, g.normal(c.out.Size(), 1))
	outs, vjps, err := d.VJP(func(x []backend.Array) ([]backend.Array, error) {
		return []backend.Array{c.fn(b, x)}, nil
	}, xs, []backend.Array{cot})
	if err != nil {
		t.Errorf("VJP: %v", err)
		return
	}
	if len(outs) != 1 || len(vjps) != len(xs) {
		t.Errorf("VJP: %d outputs and %d vjps, want 1 and %d", len(outs), len(vjps), len(xs))
		return
	}
	bu := budget(t, "grad", tensor.F32)
	for i, want := range c.vjp(ref, cref) {
		scale := 0.0
		for _, v := range want.v {
			scale = math.Max(scale, math.Abs(v))
		}
		mag := make([]float64, len(want.v))
		for j := range mag {
			mag[j] = scale
		}
		compare(t, caseName(c.name, "d", i), host(t, b, vjps[i]), tensor.F32, want, bu, false, mag)
	}
}

// lossFn is Σ tanh(x·w) over everything: a float scalar of x [3, 4] and
// w [4, 2]; calls counts its calls.
func lossFn(b backend.Backend, calls *int) backend.Func {
	return func(x []backend.Array) ([]backend.Array, error) {
		*calls++
		s := b.Scope()
		defer s.Close()
		y := b.Unary(backend.Tanh, b.Matmul(x[0], x[1]))
		return []backend.Array{s.Keep(b.Sum(b.Reshape(y, -1), 0, false))}, nil
	}
}

func lossInputs(b backend.Backend) []backend.Array {
	g := newGen("grad/loss")
	x, _ := g.input(b, tensor.F32, tensor.Shape{3, 4}, g.normal(12, 1))
	w, _ := g.input(b, tensor.F32, tensor.Shape{4, 2}, g.normal(8, 1))
	return []backend.Array{x, w}
}

// sameValues reports an error unless got and want hold the same dtype,
// shape and bits.
func sameValues(t *testing.T, what string, b backend.Backend, got, want backend.Array) {
	t.Helper()
	g, w := host(t, b, got), host(t, b, want)
	if g == nil || w == nil {
		return
	}
	if g.DType != w.DType || !g.Shape.Equal(w.Shape) || string(g.Data) != string(w.Data) {
		t.Errorf("%s: got %v %v %v, want %v %v %v", what, g.DType, g.Shape, g.ToFloat64(), w.DType, w.Shape, w.ToFloat64())
	}
}

// testValueAndGrad: the gradients of ValueAndGrad, in argnums order (a
// repeated argnum repeats its gradient), are
// the VJP's with a cotangent of one; a non-scalar first output and an
// argnum out of range are errors.
func testValueAndGrad(t *testing.T, b backend.Backend, d backend.Differentiator) {
	in := lossInputs(b)
	calls := 0
	outs, grads, err := d.ValueAndGrad(lossFn(b, &calls), in, []int{1, 0, 1})
	if err != nil {
		t.Errorf("ValueAndGrad: %v", err)
		return
	}
	if len(outs) != 1 || len(grads) != 3 || calls != 1 {
		t.Errorf("ValueAndGrad: %d outputs, %d gradients, %d calls; want 1, 3, 1", len(outs), len(grads), calls)
		return
	}
	if !outs[0].Shape().Equal(tensor.Shape{}) || !grads[0].Shape().Equal(tensor.Shape{4, 2}) || !grads[1].Shape().Equal(tensor.Shape{3, 4}) {
		t.Errorf("ValueAndGrad: shapes %v %v %v, want [] [4 2] [3 4]", outs[0].Shape(), grads[0].Shape(), grads[1].Shape())
		return
	}
	vo, vjps, err := d.VJP(lossFn(b, &calls), in, []backend.Array{b.Full(tensor.Shape{}, 1, tensor.F32)})
	if err != nil {
		t.Errorf("VJP: %v", err)
		return
	}
	sameValues(t, "value", b, outs[0], vo[0])
	sameValues(t, "gradient of argnum 1", b, grads[0], vjps[1])
	sameValues(t, "gradient of argnum 0", b, grads[1], vjps[0])
	sameValues(t, "gradient of argnum 1, asked again", b, grads[2], vjps[1])

	_, _, err = d.ValueAndGrad(func(x []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Binary(backend.Multiply, x[0], x[0])}, nil
	}, in, []int{0})
	if err == nil || !strings.Contains(err.Error(), "float scalar") {
		t.Errorf("ValueAndGrad of a [3 4] output: got %v, want an error saying the first output must be a float scalar", err)
	}
	if _, _, err = d.ValueAndGrad(lossFn(b, &calls), in, []int{2}); err == nil || !strings.Contains(err.Error(), "argnum 2") {
		t.Errorf("ValueAndGrad with argnum 2 of 2 inputs: got %v, want an error naming it", err)
	}
}

// testCheckpoint: a checkpointed block inside a differentiated function
// gives the gradients of the plain block, bit for bit, and runs twice:
// in the forward and again in the backward.
func testCheckpoint(t *testing.T, b backend.Backend, d backend.Differentiator) {
	in := lossInputs(b)
	calls := 0
	block := lossFn(b, &calls)
	outer := func(f backend.Func) backend.Func {
		return func(x []backend.Array) ([]backend.Array, error) {
			y, err := f([]backend.Array{b.Binary(backend.Multiply, x[0], b.Full(tensor.Shape{}, 3, tensor.F32)), x[1]})
			if err != nil {
				return nil, err
			}
			return []backend.Array{b.Unary(backend.Square, y[0])}, nil
		}
	}
	_, want, err := d.ValueAndGrad(outer(block), in, []int{0, 1})
	if err != nil {
		t.Errorf("ValueAndGrad: %v", err)
		return
	}
	calls = 0
	_, got, err := d.ValueAndGrad(outer(d.Checkpoint(block)), in, []int{0, 1})
	if err != nil {
		t.Errorf("ValueAndGrad through Checkpoint: %v", err)
		return
	}
	if calls != 2 {
		t.Errorf("the checkpointed block ran %d times, want 2 (the forward, and again in the backward)", calls)
	}
	for i := range want {
		sameValues(t, caseName("checkpoint gradient", i), b, got[i], want[i])
	}
}

// testGradErrors: the function's error, and an *OpError it panics with,
// come back as the transform's error.
func testGradErrors(t *testing.T, b backend.Backend, d backend.Differentiator) {
	in := lossInputs(b)
	boom := errors.New("boom")
	_, _, err := d.VJP(func(x []backend.Array) ([]backend.Array, error) { return nil, boom }, in, nil)
	if !errors.Is(err, boom) {
		t.Errorf("VJP of a function that fails: got %v, want its error", err)
	}
	_, _, err = d.ValueAndGrad(func(x []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Matmul(x[0], x[0])}, nil // [3 4]·[3 4]
	}, in, []int{0})
	var oe *backend.OpError
	if !errors.As(err, &oe) || oe.Op == "" {
		t.Errorf("ValueAndGrad of a function whose op panics: got %v, want the *backend.OpError", err)
	}
	_, _, err = d.VJP(lossFn(b, new(int)), in, []backend.Array{nil, nil})
	if err == nil || !strings.Contains(err.Error(), "2 cotangents for 1 outputs") {
		t.Errorf("VJP with 2 cotangents of a 1-output function: got %v, want an error", err)
	}
}

// testCotangents: an output without a cotangent still comes back (and
// contributes nothing), and one array passed twice is two inputs.
func testCotangents(t *testing.T, b backend.Backend, d backend.Differentiator) {
	g := newGen("grad/cotangents")
	a, av := g.input(b, tensor.F32, tensor.Shape{5}, g.normal(5, 1))
	two := func(x []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Binary(backend.Multiply, x[0], x[1]), b.Unary(backend.Exp, x[0])}, nil
	}
	ones := b.Full(tensor.Shape{5}, 1, tensor.F32)
	outs, vjps, err := d.VJP(two, []backend.Array{a, a}, []backend.Array{ones, nil})
	if err != nil {
		t.Errorf("VJP: %v", err)
		return
	}
	if len(outs) != 2 || len(vjps) != 2 {
		t.Errorf("VJP: %d outputs and %d vjps, want 2 and 2", len(outs), len(vjps))
		return
	}
	exp := newND(tensor.Shape{5})
	for i, v := range av.v {
		exp.v[i] = math.Exp(v)
	}
	compare(t, "the output without a cotangent", host(t, b, outs[1]), tensor.F32, exp, budget(t, "unary", tensor.F32), false, nil)
	for i := range 2 { // d(x0·x1)/dx0 = x1 = a, and the same for x1
		compare(t, caseName("vjp", i), host(t, b, vjps[i]), tensor.F32, av, exactBudget, false, nil)
	}
}

// testQuantizedMatmulVJP: the VJP of x·Ŵᵀ with respect to x is c·Ŵ, Ŵ the
// exactly dequantized weight (the quantized weight itself is frozen).
func testQuantizedMatmulVJP(t *testing.T, b backend.Backend, d backend.Differentiator) {
	g := newGen("grad/quantized_matmul")
	qc := g.quantized(b, tensor.F32, 8, 64, 32, 4)
	x, _ := g.input(b, tensor.F32, tensor.Shape{3, 64}, g.normal(3*64, 1))
	cot, cref := g.input(b, tensor.F32, tensor.Shape{3, 8}, g.normal(3*8, 1))
	_, vjps, err := d.VJP(func(in []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.QuantizedMatmul(in[0], qc.q, true)}, nil
	}, []backend.Array{x}, []backend.Array{cot})
	if err != nil {
		t.Errorf("VJP: %v", err)
		return
	}
	want, scale := newND(tensor.Shape{3, 64}), 0.0
	for i := range 3 {
		for k := range 64 {
			for n := range 8 {
				want.v[i*64+k] += cref.v[i*8+n] * qc.w[n][k]
			}
			scale = math.Max(scale, math.Abs(want.v[i*64+k]))
		}
	}
	mag := make([]float64, len(want.v))
	for i := range mag {
		mag[i] = scale
	}
	compare(t, "quantized_matmul/d/0", host(t, b, vjps[0]), tensor.F32, want, budget(t, "grad", tensor.F32), false, mag)
}

// testStopGradient: d(x·stop_gradient(x))/dx is x, not 2x, and the
// stopped array holds x's values.
func testStopGradient(t *testing.T, b backend.Backend, d backend.Differentiator) {
	g := newGen("grad/stop_gradient")
	x, xv := g.input(b, tensor.F32, tensor.Shape{2, 3}, g.normal(6, 1))
	compare(t, "values", host(t, b, d.StopGradient(x)), tensor.F32, xv, exactBudget, true, nil)
	_, vjps, err := d.VJP(func(in []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Binary(backend.Multiply, in[0], d.StopGradient(in[0]))}, nil
	}, []backend.Array{x}, []backend.Array{b.Full(tensor.Shape{2, 3}, 1, tensor.F32)})
	if err != nil {
		t.Errorf("VJP: %v", err)
		return
	}
	compare(t, "vjp", host(t, b, vjps[0]), tensor.F32, xv, exactBudget, false, nil)
}
