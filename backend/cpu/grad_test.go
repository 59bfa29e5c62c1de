package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// The VJPs against central finite differences in float64. Each case is a
// function of F64 arrays; the test draws random inputs and cotangents c,
// and compares the VJP of every input with the central difference
// (L(x+h) - L(x-h)) / 2h of L = Σ_i Σ outputs_i ⊙ c_i, with h = 1e-5. The
// fused ops compute in float32 even on F64 arrays, too coarse for a
// difference quotient, so their cases difference a float64 decomposition
// of the op into primitive ops (ref), which the test first checks against
// the op itself (within float32 rounding).

// gradCase is one function to differentiate.
type gradCase struct {
	name   string
	shapes []tensor.Shape
	pos    bool // inputs drawn positive (log, sqrt, rsqrt)
	fn     func(b *Backend, x []backend.Array) []backend.Array
	ref    func(b *Backend, x []backend.Array) []backend.Array // float64 decomposition of fn, nil when fn is one already
	tol    float64                                             // relative tolerance of the VJP; 1e-7 unless set
}

func one(a backend.Array) []backend.Array { return []backend.Array{a} }

func f64s(b *Backend, shape tensor.Shape, v []float64) backend.Array {
	return b.FromHost(tensor.FromFloat64(shape, v))
}

func ints(b *Backend, shape tensor.Shape, v ...int32) backend.Array {
	return b.FromHost(tensor.FromInt32(shape, v))
}

func bools(b *Backend, shape tensor.Shape, v ...bool) backend.Array {
	d := make([]byte, len(v))
	for i, x := range v {
		if x {
			d[i] = 1
		}
	}
	return b.FromHost(&tensor.Dense{DType: tensor.Bool, Shape: shape, Data: d})
}

// ropeRef is mx.fast.rope in float64 primitive ops: the features of each
// rotated pair (i, i+dims/2), or (2i, 2i+1) when traditional, turn by
// position·scale·inv_freq_i, position = offset (per row) + l.
func ropeRef(b *Backend, x backend.Array, p backend.RoPE, offsets []int, freqs []float64) backend.Array {
	s := x.Shape()
	B, L, D := s[0], s[len(s)-2], s[len(s)-1]
	h := p.Dims / 2
	cs, sn := make([]float64, B*L*h), make([]float64, B*L*h)
	for bi := range B {
		for l := range L {
			for i := range h {
				inv := math.Pow(float64(p.Base), -2*float64(i)/float64(p.Dims))
				if freqs != nil {
					inv = 1 / freqs[i]
				}
				off := offsets[0]
				if len(offsets) > 1 {
					off = offsets[bi]
				}
				th := float64(off+l) * float64(p.Scale) * inv
				cs[(bi*L+l)*h+i], sn[(bi*L+l)*h+i] = math.Cos(th), math.Sin(th)
			}
		}
	}
	tab := tensor.Shape{B, 1, L, h}
	if p.Traditional {
		tab = tensor.Shape{B, 1, L, h, 1}
	}
	c, sv := f64s(b, tab, cs), f64s(b, tab, sn)
	lo := make([]int, len(s))
	hi := s.Clone()
	hi[len(s)-1] = p.Dims
	rot := b.Slice(x, lo, hi)
	var x1, x2 backend.Array
	if p.Traditional {
		pairs := b.Reshape(rot, append(s[:len(s)-1].Clone(), h, 2)...)
		ps := pairs.Shape()
		a0, a1 := make([]int, len(ps)), ps.Clone()
		a1[len(ps)-1] = 1
		x1 = b.Slice(pairs, a0, a1)
		a0[len(ps)-1], a1[len(ps)-1] = 1, 2
		x2 = b.Slice(pairs, a0, a1)
	} else {
		a0, a1 := make([]int, len(s)), hi.Clone()
		a1[len(s)-1] = h
		x1 = b.Slice(rot, a0, a1)
		a0[len(s)-1], a1[len(s)-1] = h, p.Dims
		x2 = b.Slice(rot, a0, a1)
	}
	y1 := b.sub(b.mul(x1, c), b.mul(x2, sv))
	y2 := b.add(b.mul(x1, sv), b.mul(x2, c))
	var y backend.Array
	if p.Traditional {
		y = b.Reshape(b.Concatenate(-1, y1, y2), hi...)
	} else {
		y = b.Concatenate(-1, y1, y2)
	}
	if p.Dims == D {
		return y
	}
	lo[len(s)-1], hi[len(s)-1] = p.Dims, D
	return b.Concatenate(-1, y, b.Slice(x, lo, hi))
}

// sdpaRef is attention with the KV heads repeated (Take), in float64:
// softmax(scale·q·kᵀ + mask)·v.
func sdpaRef(b *Backend, q, k, v backend.Array, scale float64, mask backend.Mask) backend.Array {
	H, L := q.Shape()[1], q.Shape()[2]
	Hk, S := k.Shape()[1], k.Shape()[2]
	idx := make([]int32, H)
	for h := range idx {
		idx[h] = int32(h / (H / Hk))
	}
	heads := ints(b, tensor.Shape{H}, idx...)
	k, v = b.Take(k, heads, 1), b.Take(v, heads, 1)
	s := b.mul(b.Matmul(q, b.Transpose(k, 0, 1, 3, 2)), b.scalar(scale, q))
	ninf := b.scalar(math.Inf(-1), q)
	switch m := mask.(type) {
	case backend.CausalMask:
		c := make([]bool, L*S)
		for i := range L {
			for j := range S {
				c[i*S+j] = j <= i+S-L
			}
		}
		s = b.Where(bools(b, tensor.Shape{L, S}, c...), s, ninf)
	case backend.ArrayMask:
		if m.A.DType() == tensor.Bool {
			s = b.Where(m.A, s, ninf)
		} else {
			s = b.add(s, m.A)
		}
	case backend.PrefixMask:
		s = b.Where(b.FromHost(m.Dense()), s, ninf)
	}
	return b.Matmul(b.Softmax(s, -1, true), v)
}

func gradCases(b *Backend) []gradCase {
	var cs []gradCase
	for _, op := range []backend.BinaryOp{backend.Add, backend.Subtract, backend.Multiply, backend.Divide, backend.Maximum, backend.Minimum} {
		for _, sh := range [][2]tensor.Shape{{{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1, 3}, {4, 1}}} {
			cs = append(cs, gradCase{name: fmt.Sprintf("%v/%v,%v", op, sh[0], sh[1]), shapes: sh[:], pos: op == backend.Divide,
				fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Binary(op, x[0], x[1])) }})
		}
	}
	for op := backend.Exp; op <= backend.Cos; op++ {
		pos := op == backend.Log || op == backend.Sqrt || op == backend.Rsqrt
		cs = append(cs, gradCase{name: op.String(), shapes: []tensor.Shape{{3, 4}}, pos: pos,
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Unary(op, x[0])) }})
	}
	cs = append(cs,
		gradCase{name: "where", shapes: []tensor.Shape{{2, 3}, {3}},
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				return one(b.Where(bools(b, tensor.Shape{2, 1}, true, false), x[0], x[1]))
			}},
		gradCase{name: "reshape", shapes: []tensor.Shape{{2, 6}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Reshape(x[0], 3, -1, 2)) }},
		gradCase{name: "transpose", shapes: []tensor.Shape{{2, 3, 4}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Transpose(x[0], 2, 0, 1)) }},
		gradCase{name: "slice", shapes: []tensor.Shape{{4, 5}},
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				return one(b.Slice(x[0], []int{1, -4}, []int{3, 4}))
			}},
		gradCase{name: "slice_update", shapes: []tensor.Shape{{3, 4}, {2}},
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				return one(b.SliceUpdate(b.mul(x[0], b.scalar(2, x[0])), x[1], []int{1, 2}))
			}},
		gradCase{name: "concatenate", shapes: []tensor.Shape{{2, 3}, {2, 1}, {2, 2}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Concatenate(1, x...)) }},
		gradCase{name: "take/embedding", shapes: []tensor.Shape{{5, 3}},
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				return one(b.Take(x[0], ints(b, tensor.Shape{2, 3}, 4, 0, 4, -1, 2, 2), 0))
			}},
		gradCase{name: "take/axis1", shapes: []tensor.Shape{{2, 4, 3}},
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				return one(b.Take(x[0], ints(b, tensor.Shape{3}, 1, 1, 3), 1))
			}},
	)
	for _, keep := range []bool{false, true} {
		for _, ax := range []int{0, -1} {
			cs = append(cs,
				gradCase{name: name("sum", ax, keep), shapes: []tensor.Shape{{3, 4}},
					fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Sum(x[0], ax, keep)) }},
				gradCase{name: name("max", ax, keep), shapes: []tensor.Shape{{3, 4}},
					fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Max(x[0], ax, keep)) }},
				gradCase{name: name("logsumexp", ax, keep), shapes: []tensor.Shape{{3, 4}},
					fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.LogSumExp(x[0], ax, keep)) }},
			)
		}
	}
	cs = append(cs,
		gradCase{name: "softmax", shapes: []tensor.Shape{{3, 5}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Softmax(x[0], -1, true)) }},
		gradCase{name: "softmax/axis0", shapes: []tensor.Shape{{3, 5}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Softmax(x[0], 0, false)) }},
		gradCase{name: "cross_entropy", shapes: []tensor.Shape{{4, 7}},
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				// mean over rows of logsumexp(logits) - logits[target]
				flat := b.Reshape(x[0], -1)
				picked := b.Take(flat, ints(b, tensor.Shape{4}, 3, 7+0, 14+6, 21+3), 0)
				ce := b.sub(b.LogSumExp(x[0], -1, false), picked)
				return one(b.mul(b.Sum(ce, 0, false), b.scalar(0.25, ce)))
			}},
	)
	for _, sh := range [][2]tensor.Shape{{{3, 4}, {4, 5}}, {{2, 3, 4}, {4, 5}}, {{2, 1, 3, 4}, {3, 4, 2}}, {{4}, {4, 5}}, {{3, 4}, {4}}, {{4}, {4}}} {
		cs = append(cs, gradCase{name: fmt.Sprintf("matmul/%v@%v", sh[0], sh[1]), shapes: sh[:],
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.Matmul(x[0], x[1])) }})
	}
	cs = append(cs,
		gradCase{name: "rms_norm", shapes: []tensor.Shape{{2, 3, 8}, {8}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.RMSNorm(x[0], x[1], 1e-5)) },
			ref: func(b *Backend, x []backend.Array) []backend.Array {
				ms := b.mul(b.Sum(b.Unary(backend.Square, x[0]), -1, true), b.scalar(1.0/8, x[0]))
				r := b.Unary(backend.Rsqrt, b.add(ms, b.scalar(float64(float32(1e-5)), x[0])))
				return one(b.mul(b.mul(x[0], r), x[1]))
			}},
		gradCase{name: "rms_norm/no_weight", shapes: []tensor.Shape{{3, 6}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.RMSNorm(x[0], nil, 1e-2)) },
			ref: func(b *Backend, x []backend.Array) []backend.Array {
				ms := b.mul(b.Sum(b.Unary(backend.Square, x[0]), -1, true), b.scalar(1.0/6, x[0]))
				return one(b.mul(x[0], b.Unary(backend.Rsqrt, b.add(ms, b.scalar(float64(float32(1e-2)), x[0])))))
			}},
		gradCase{name: "swiglu", shapes: []tensor.Shape{{3, 5}, {3, 5}},
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.SwiGLU(x[0], x[1])) },
			ref: func(b *Backend, x []backend.Array) []backend.Array {
				return one(b.mul(b.Unary(backend.SiLU, x[0]), x[1]))
			}},
	)
	for _, rc := range []struct {
		name    string
		p       backend.RoPE
		offsets []int
		freqs   []float64
	}{
		{"rope/offset3", backend.RoPE{Dims: 8, Base: 10000, Scale: 1}, []int{3}, nil},
		{"rope/traditional", backend.RoPE{Dims: 8, Traditional: true, Base: 500, Scale: 0.5}, []int{1}, nil},
		{"rope/partial_dims", backend.RoPE{Dims: 4, Base: 100, Scale: 1}, []int{2}, nil},
		{"rope/rows", backend.RoPE{Dims: 8, Base: 10000, Scale: 1}, []int{5, 0}, nil},
		{"rope/freqs", backend.RoPE{Dims: 8, Scale: 1}, []int{2}, []float64{1, 3, 10, 40}},
	} {
		off := func(b *Backend) backend.Offset {
			if len(rc.offsets) > 1 {
				v := make([]int32, len(rc.offsets))
				for i, o := range rc.offsets {
					v[i] = int32(o)
				}
				return backend.Offset{Rows: ints(b, tensor.Shape{len(v)}, v...)}
			}
			return backend.Offset{Scalar: rc.offsets[0]}
		}
		cs = append(cs, gradCase{name: rc.name, shapes: []tensor.Shape{{2, 2, 3, 8}}, tol: 1e-5,
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				p := rc.p
				if rc.freqs != nil {
					p.Freqs = b.AsType(f64s(b, tensor.Shape{len(rc.freqs)}, rc.freqs), tensor.F32)
				}
				return one(b.RoPE(x[0], p, off(b)))
			},
			ref: func(b *Backend, x []backend.Array) []backend.Array {
				return one(ropeRef(b, x[0], rc.p, rc.offsets, rc.freqs))
			}})
	}
	additive := func(b *Backend) backend.Array {
		v := make([]float64, 2*1*3*5)
		for i := range v {
			v[i] = float64(i%4) - 1.5
		}
		return f64s(b, tensor.Shape{2, 1, 3, 5}, v)
	}
	keep := func(b *Backend) backend.Array {
		return bools(b, tensor.Shape{3, 5}, true, false, true, true, false, false, true, true, true, false, true, true, true, true, true)
	}
	for _, mc := range []struct {
		name string
		mask func(b *Backend) backend.Mask
	}{
		{"none", func(*Backend) backend.Mask { return backend.NoMask{} }},
		{"causal", func(*Backend) backend.Mask { return backend.CausalMask{} }},
		{"bool", func(b *Backend) backend.Mask { return backend.ArrayMask{A: keep(b)} }},
		{"additive", func(b *Backend) backend.Mask { return backend.ArrayMask{A: additive(b)} }},
	} {
		cs = append(cs, gradCase{name: "sdpa/gqa/" + mc.name, shapes: []tensor.Shape{{2, 4, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}}, tol: 1e-6,
			fn: func(b *Backend, x []backend.Array) []backend.Array {
				return one(b.ScaledDotProductAttention(x[0], x[1], x[2], 0.5, mc.mask(b)))
			},
			ref: func(b *Backend, x []backend.Array) []backend.Array {
				return one(sdpaRef(b, x[0], x[1], x[2], 0.5, mc.mask(b)))
			}})
	}
	pm := backend.PrefixMask{Prefix: 3, Blocks: []int{2, 2}}
	cs = append(cs, gradCase{name: "sdpa/gqa/prefix", shapes: []tensor.Shape{{2, 4, 7, 4}, {2, 2, 7, 4}, {2, 2, 7, 3}}, tol: 1e-6,
		fn: func(b *Backend, x []backend.Array) []backend.Array {
			return one(b.ScaledDotProductAttention(x[0], x[1], x[2], 0.5, pm))
		},
		ref: func(b *Backend, x []backend.Array) []backend.Array {
			return one(sdpaRef(b, x[0], x[1], x[2], 0.5, pm))
		}})
	for _, transpose := range []bool{true, false} {
		rows, cols := 6, 32 // W [N, K] with transpose, [K, N] without
		wv := make([]float64, rows*cols)
		r := rand.New(rand.NewPCG(5, 6))
		for i := range wv {
			wv[i] = r.NormFloat64()
		}
		w := b.Quantize(arr(b, tensor.F32, tensor.Shape{rows, cols}, wv...), 32, 4)
		xs := tensor.Shape{2, 3, cols}
		if transpose {
			xs = tensor.Shape{2, 3, cols}
		} else {
			xs = tensor.Shape{2, 3, rows}
		}
		cs = append(cs, gradCase{name: name("quantized_matmul", "transpose", transpose), shapes: []tensor.Shape{xs}, tol: 1e-5,
			fn: func(b *Backend, x []backend.Array) []backend.Array { return one(b.QuantizedMatmul(x[0], w, transpose)) },
			ref: func(b *Backend, x []backend.Array) []backend.Array {
				d := b.AsType(b.Dequantize(w), tensor.F64)
				if transpose {
					d = b.Transpose(d, 1, 0)
				}
				return one(b.Matmul(x[0], d))
			}})
	}
	cs = append(cs, gradCase{name: "two_outputs", shapes: []tensor.Shape{{3, 4}, {4}},
		fn: func(b *Backend, x []backend.Array) []backend.Array {
			y := b.mul(x[0], x[1])
			return []backend.Array{b.Unary(backend.Tanh, y), b.Sum(b.mul(y, x[0]), 0, false)}
		}})
	return cs
}

func TestVJPFiniteDifferences(t *testing.T) {
	b := open(t)
	for ci, c := range gradCases(b) {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(ci), 17))
			draw := func(shape tensor.Shape, pos bool) []float64 {
				v := make([]float64, shape.Size())
				for i := range v {
					v[i] = r.NormFloat64()
					if pos {
						v[i] = 0.5 + math.Abs(v[i])
					}
				}
				return v
			}
			xv := make([][]float64, len(c.shapes))
			for i, s := range c.shapes {
				xv[i] = draw(s, c.pos)
			}
			sc := b.Scope()
			defer sc.Close()
			inputs := func(vs [][]float64) []backend.Array {
				xs := make([]backend.Array, len(vs))
				for i, v := range vs {
					xs[i] = f64s(b, c.shapes[i], v)
				}
				return xs
			}
			outs := c.fn(b, inputs(xv))
			cots := make([]backend.Array, len(outs))
			cv := make([][]float64, len(outs))
			for i, o := range outs {
				cv[i] = draw(o.Shape(), false)
				cots[i] = f64s(b, o.Shape(), cv[i])
			}
			ref := c.ref
			if ref == nil {
				ref = c.fn
			} else {
				for i, o := range ref(b, inputs(xv)) {
					got, want := vals(t, b, outs[i]), vals(t, b, o)
					for j := range want {
						if math.Abs(got[j]-want[j]) > 1e-5*(1+math.Abs(want[j])) {
							t.Fatalf("the float64 reference is not the op: output %d[%d] %v, reference %v", i, j, got[j], want[j])
						}
					}
				}
			}
			loss := func(vs [][]float64) float64 {
				s := b.Scope()
				defer s.Close()
				l := 0.0
				for i, o := range ref(b, inputs(vs)) {
					for j, y := range vals(t, b, o) {
						l += y * cv[i][j]
					}
				}
				return l
			}
			fn := func(x []backend.Array) ([]backend.Array, error) { return c.fn(b, x), nil }
			_, vjps, err := b.VJP(fn, inputs(xv), cots)
			if err != nil {
				t.Fatalf("VJP: %v", err)
			}
			tol := c.tol
			if tol == 0 {
				tol = 1e-7
			}
			const h = 1e-5
			for i := range xv {
				if vjps[i].DType() != tensor.F64 || !vjps[i].Shape().Equal(c.shapes[i]) {
					t.Fatalf("vjp %d: %v %v, want F64 %v", i, vjps[i].DType(), vjps[i].Shape(), c.shapes[i])
				}
				got := vals(t, b, vjps[i])
				for j := range xv[i] {
					x0 := xv[i][j]
					xv[i][j] = x0 + h
					up := loss(xv)
					xv[i][j] = x0 - h
					down := loss(xv)
					xv[i][j] = x0
					fd := (up - down) / (2 * h)
					if math.Abs(got[j]-fd) > tol*(1+math.Abs(fd)) {
						t.Errorf("input %d [%d]: vjp %.10g, finite difference %.10g", i, j, got[j], fd)
					}
				}
			}
		})
	}
}

// mlp is a small two-layer function of (x, w1, w2) with a scalar output:
// Σ tanh(x·w1)·w2 over everything, through a scope as model code opens one.
func mlp(b *Backend, calls *int) backend.Func {
	return func(x []backend.Array) ([]backend.Array, error) {
		*calls++
		s := b.Scope()
		defer s.Close()
		h := b.Unary(backend.Tanh, b.Matmul(x[0], x[1]))
		y := b.Sum(b.Reshape(b.Matmul(h, x[2]), -1), 0, false)
		return []backend.Array{s.Keep(y)}, nil
	}
}

func randArray(b *Backend, seed uint64, dt tensor.DType, shape ...int) backend.Array {
	r := rand.New(rand.NewPCG(seed, 1))
	v := make([]float64, tensor.Shape(shape).Size())
	for i := range v {
		v[i] = r.NormFloat64()
	}
	return arr(b, dt, shape, v...)
}

func TestValueAndGrad(t *testing.T) {
	b := open(t)
	x, w1, w2 := randArray(b, 1, tensor.F32, 3, 4), randArray(b, 2, tensor.F32, 4, 5), randArray(b, 3, tensor.F32, 5, 2)
	before := b.Stats().LiveArrays
	calls := 0
	outs, grads, err := b.ValueAndGrad(mlp(b, &calls), []backend.Array{x, w1, w2}, []int{2, 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || len(grads) != 2 || calls != 1 {
		t.Fatalf("got %d outputs, %d grads, %d calls; want 1, 2, 1", len(outs), len(grads), calls)
	}
	if !grads[0].Shape().Equal(tensor.Shape{5, 2}) || !grads[1].Shape().Equal(tensor.Shape{4, 5}) {
		t.Fatalf("grad shapes %v %v, want [5 2] (argnum 2) and [4 5] (argnum 1)", grads[0].Shape(), grads[1].Shape())
	}
	// the same gradients through VJP with a cotangent of one
	outs2, vjps, err := b.VJP(mlp(b, &calls), []backend.Array{x, w1, w2}, []backend.Array{b.Full(tensor.Shape{}, 1, tensor.F32)})
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, b, grads[0], vjps[2])
	checkSame(t, b, grads[1], vjps[1])
	b.Release(append(append(append(outs, grads...), vjps...), outs2...)...)
	if got := b.Stats().LiveArrays; got != before+1 { // the cotangent above
		t.Errorf("live arrays after releasing the results: %d, want %d (the tape leaked views)", got, before+1)
	}

	_, _, err = b.ValueAndGrad(func(x []backend.Array) ([]backend.Array, error) { return x, nil }, []backend.Array{x}, []int{0})
	if err == nil || !strings.Contains(err.Error(), "float scalar") {
		t.Errorf("non-scalar output: got %v, want an error about a float scalar", err)
	}
	_, _, err = b.ValueAndGrad(mlp(b, &calls), []backend.Array{x, w1, w2}, []int{3})
	if err == nil || !strings.Contains(err.Error(), "argnum 3") {
		t.Errorf("argnum out of range: got %v", err)
	}
}

func checkSame(t *testing.T, b *Backend, got, want backend.Array) {
	t.Helper()
	g, w := vals(t, b, got), vals(t, b, want)
	if !got.Shape().Equal(want.Shape()) || got.DType() != want.DType() {
		t.Fatalf("got %v %v, want %v %v", got.DType(), got.Shape(), want.DType(), want.Shape())
	}
	for i := range w {
		if g[i] != w[i] {
			t.Fatalf("[%d]: got %v, want %v", i, g[i], w[i])
		}
	}
}

func TestCheckpoint(t *testing.T) {
	b := open(t)
	x, w1, w2 := randArray(b, 1, tensor.F32, 3, 4), randArray(b, 2, tensor.F32, 4, 5), randArray(b, 3, tensor.F32, 5, 2)
	calls := 0
	plain := mlp(b, &calls)
	_, want, err := b.ValueAndGrad(plain, []backend.Array{x, w1, w2}, []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	calls = 0
	ck := b.Checkpoint(plain)
	// the checkpointed block inside a larger function: 2·block(x·3, w1, w2)
	outer := func(in []backend.Array) ([]backend.Array, error) {
		y, err := ck([]backend.Array{b.mul(in[0], b.scalar(3, in[0])), in[1], in[2]})
		if err != nil {
			return nil, err
		}
		return []backend.Array{b.mul(y[0], b.scalar(2, y[0]))}, nil
	}
	_, got, err := b.ValueAndGrad(outer, []backend.Array{x, w1, w2}, []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("the checkpointed function ran %d times, want 2 (forward, and again in the backward)", calls)
	}
	calls = 0
	outerPlain := func(in []backend.Array) ([]backend.Array, error) {
		y, err := plain([]backend.Array{b.mul(in[0], b.scalar(3, in[0])), in[1], in[2]})
		if err != nil {
			return nil, err
		}
		return []backend.Array{b.mul(y[0], b.scalar(2, y[0]))}, nil
	}
	_, want, err = b.ValueAndGrad(outerPlain, []backend.Array{x, w1, w2}, []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		checkSame(t, b, got[i], want[i])
	}
	// outside a transform a checkpoint is the function itself
	calls = 0
	if _, err := ck([]backend.Array{x, w1, w2}); err != nil || calls != 1 {
		t.Errorf("untraced checkpoint: err %v, %d calls", err, calls)
	}
}

func TestGradDTypes(t *testing.T) {
	b := open(t)
	x := randArray(b, 4, tensor.BF16, 2, 8)
	w := randArray(b, 5, tensor.F32, 8)
	fn := func(in []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Sum(b.Reshape(b.AsType(b.RMSNorm(in[0], in[1], 1e-5), tensor.F32), -1), 0, false)}, nil
	}
	_, g, err := b.ValueAndGrad(fn, []backend.Array{x, w}, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if g[0].DType() != tensor.BF16 || g[1].DType() != tensor.F32 {
		t.Errorf("gradient dtypes %v %v, want the inputs' BF16 F32", g[0].DType(), g[1].DType())
	}
	// one array passed twice is two inputs: d(a·b)/da = b, d/db = a
	a := randArray(b, 6, tensor.F32, 3)
	_, v, err := b.VJP(func(in []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.mul(in[0], b.mul(in[1], b.scalar(2, in[1])))}, nil
	}, []backend.Array{a, a}, []backend.Array{b.Full(tensor.Shape{3}, 1, tensor.F32)})
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, b, v[0], b.mul(a, b.scalar(2, a)))
	checkSame(t, b, v[1], b.mul(a, b.scalar(2, a)))
}

func TestGradErrors(t *testing.T) {
	b := open(t)
	w := b.Quantize(randArray(b, 1, tensor.F32, 4, 32), 32, 4)
	x := randArray(b, 2, tensor.F32, 2, 32)
	cot := []backend.Array{b.Full(tensor.Shape{2, 4}, 1, tensor.F32)}
	qmm := func(in []backend.Array) ([]backend.Array, error) {
		q := w
		q.Scales = in[1]
		return []backend.Array{b.QuantizedMatmul(in[0], q, true)}, nil
	}
	_, v, err := b.VJP(qmm, []backend.Array{x, w.Scales}, cot)
	if err == nil || !strings.Contains(err.Error(), "no gradient with respect to argument 2") {
		t.Errorf("gradient of the scales: got %v, %v; want an error", v, err)
	}
	_, _, err = b.VJP(func(in []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Quantize(in[0], 32, 4).Scales}, nil
	}, []backend.Array{randArray(b, 3, tensor.F32, 4, 32)}, []backend.Array{nil})
	if err == nil || !strings.Contains(err.Error(), "Quantize") {
		t.Errorf("Quantize of a differentiated array: got %v, want an error", err)
	}
	_, _, err = b.VJP(qmm, []backend.Array{x, w.Scales}, nil)
	if err == nil || !strings.Contains(err.Error(), "0 cotangents for 1 outputs") {
		t.Errorf("missing cotangents: got %v", err)
	}
	_, _, err = b.VJP(func(in []backend.Array) ([]backend.Array, error) { return nil, fmt.Errorf("boom") }, []backend.Array{x}, nil)
	if err == nil || err.Error() != "boom" {
		t.Errorf("the function's error: got %v, want boom", err)
	}
	// the tape is off again after a failure
	if b.tape != nil {
		t.Errorf("tape left on after an error")
	}
}

// TestCheckpointMemory: checkpointed blocks keep only their inputs and
// outputs for the backward, so the peak of a chain of them is lower than
// the plain chain's, with the same gradients (up to the order of float32
// sums).
func TestCheckpointMemory(t *testing.T) {
	peak := func(ck bool) (uint64, []float64) {
		b := open(t)
		x, w := randArray(b, 1, tensor.F32, 64, 128), randArray(b, 2, tensor.F32, 128, 128)
		block := func(in []backend.Array) ([]backend.Array, error) {
			s := b.Scope()
			defer s.Close()
			h := in[0]
			for range 3 { // three intermediates of 32 KiB each
				h = b.Unary(backend.Tanh, b.mul(b.Matmul(h, in[1]), b.scalar(0.05, h)))
			}
			return []backend.Array{s.Keep(h)}, nil
		}
		if ck {
			block = b.Checkpoint(block)
		}
		loss := func(in []backend.Array) ([]backend.Array, error) {
			h := in[0]
			for range 6 {
				y, err := block([]backend.Array{h, in[1]})
				if err != nil {
					return nil, err
				}
				h = y[0]
			}
			return []backend.Array{b.Sum(b.Reshape(h, -1), 0, false)}, nil
		}
		_, g, err := b.ValueAndGrad(loss, []backend.Array{x, w}, []int{1})
		if err != nil {
			t.Fatal(err)
		}
		return uint64(b.Stats().PeakBytes), vals(t, b, g[0])
	}
	plain, gp := peak(false)
	ck, gc := peak(true)
	t.Logf("peak bytes: plain %d, checkpointed %d", plain, ck)
	if ck >= plain {
		t.Errorf("checkpointed peak %d bytes, plain %d: want less", ck, plain)
	}
	// w's six blocks sum their three contributions first when checkpointed,
	// so the float32 sums associate differently: equal up to rounding
	scale := 0.0
	for _, v := range gp {
		scale = math.Max(scale, math.Abs(v))
	}
	for i := range gp {
		if math.Abs(gp[i]-gc[i]) > 1e-5*scale {
			t.Fatalf("gradient [%d]: checkpointed %v, plain %v (scale %v)", i, gc[i], gp[i], scale)
		}
	}
}
