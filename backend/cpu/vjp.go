package cpu

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// The vector-Jacobian product of every differentiable op: given views x of
// the op's array arguments, y of its output and the output's cotangent g,
// each returns the cotangents of the arguments, written with the backend's
// own ops (so they run in any float dtype: F64 for the finite-difference
// tests, the array dtype otherwise). The fused ops' VJPs compute in
// float32 (float64 for F64), as MLX's own VJP kernels do; the tape rounds
// each cotangent to its argument's dtype. Ops without a gradient for an
// argument return nil there (the packed codes, scales and biases of the
// quantized ops, Take's indices, Where's condition, RoPE's offsets and
// frequencies, SDPA's mask); the tape reports it when such an argument is
// being differentiated.

// Small helpers, so that each VJP reads as its formula.

func (b *Backend) add(x, y backend.Array) backend.Array { return b.Binary(backend.Add, x, y) }
func (b *Backend) sub(x, y backend.Array) backend.Array { return b.Binary(backend.Subtract, x, y) }
func (b *Backend) mul(x, y backend.Array) backend.Array { return b.Binary(backend.Multiply, x, y) }
func (b *Backend) div(x, y backend.Array) backend.Array { return b.Binary(backend.Divide, x, y) }
func (b *Backend) neg(x backend.Array) backend.Array    { return b.Unary(backend.Negative, x) }

// scalar is v as a 0-d array of x's dtype (so it never promotes x).
func (b *Backend) scalar(v float64, x backend.Array) backend.Array {
	return b.Full(tensor.Shape{}, v, x.DType())
}

// accDType is the dtype a fused op's VJP computes in.
func accDType(dt tensor.DType) tensor.DType {
	if dt == tensor.F64 {
		return tensor.F64
	}
	return tensor.F32
}

// sumTo sums g over the axes that broadcasting added to or stretched in
// shape, giving g the shape (the cotangent of a broadcast argument).
func (b *Backend) sumTo(g backend.Array, shape tensor.Shape) backend.Array {
	gs := g.Shape()
	for len(gs) > len(shape) {
		g = b.Sum(g, 0, false)
		gs = gs[1:]
	}
	for i := range shape {
		if shape[i] == 1 && gs[i] != 1 {
			g = b.Sum(g, i, true)
		}
	}
	return g
}

// broadcastTo broadcasts g to shape.
func (b *Backend) broadcastTo(g backend.Array, shape tensor.Shape) backend.Array {
	if g.Shape().Equal(shape) {
		return g
	}
	return b.add(b.Zeros(shape, g.DType()), g)
}

// keepAxis gives g, reduced over axis of x without keepDims, that axis
// back with size 1.
func (b *Backend) keepAxis(g backend.Array, x *Array, axis int, keepDims bool) (backend.Array, int) {
	ax, _ := normAxis(axis, len(x.shape))
	if keepDims {
		return g, ax
	}
	s := x.shape.Clone()
	s[ax] = 1
	return b.Reshape(g, s...), ax
}

func binaryVJP(op backend.BinaryOp) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		l, r := x[0], x[1]
		var gl, gr backend.Array
		switch op {
		case backend.Add:
			gl, gr = g, g
		case backend.Subtract:
			gl, gr = g, b.neg(g)
		case backend.Multiply:
			gl, gr = b.mul(g, r), b.mul(g, l)
		case backend.Divide: // d(l/r) = dl/r - l·dr/r²
			gl = b.div(g, r)
			gr = b.neg(b.mul(gl, b.div(l, r)))
		case backend.Maximum, backend.Minimum: // the cotangent goes to the chosen side; ties to r (MLX)
			cmp := backend.Greater
			if op == backend.Minimum {
				cmp = backend.Less
			}
			m := b.Binary(cmp, l, r)
			zero := b.scalar(0, g)
			gl, gr = b.Where(m, g, zero), b.Where(m, zero, g)
		default:
			return nil
		}
		return []backend.Array{b.sumTo(gl, l.shape), b.sumTo(gr, r.shape)}
	}
}

func unaryVJP(op backend.UnaryOp) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		a := x[0]
		one := func() backend.Array { return b.scalar(1, a) }
		var d backend.Array
		switch op {
		case backend.Exp: // e^x
			d = b.mul(g, y)
		case backend.Log: // 1/x
			d = b.div(g, a)
		case backend.Negative:
			d = b.neg(g)
		case backend.Abs: // sign(x), 0 at 0
			zero := b.scalar(0, g)
			d = b.Where(b.Binary(backend.Greater, a, zero), g, b.Where(b.Binary(backend.Less, a, zero), b.neg(g), zero))
		case backend.Sqrt: // 1/(2·sqrt(x))
			d = b.div(g, b.mul(b.scalar(2, y), y))
		case backend.Rsqrt: // -x^(-3/2)/2 = -rsqrt(x)/(2x)
			d = b.mul(g, b.mul(b.scalar(-0.5, a), b.div(y, a)))
		case backend.Square: // 2x
			d = b.mul(g, b.mul(b.scalar(2, a), a))
		case backend.Sigmoid: // σ(1-σ)
			d = b.mul(g, b.mul(y, b.sub(b.scalar(1, y), y)))
		case backend.SiLU: // σ(x)·(1 + x·(1-σ(x)))
			s := b.Unary(backend.Sigmoid, a)
			d = b.mul(g, b.mul(s, b.add(one(), b.mul(a, b.sub(one(), s)))))
		case backend.Tanh: // 1 - tanh²
			d = b.mul(g, b.sub(b.scalar(1, y), b.Unary(backend.Square, y)))
		case backend.Sin:
			d = b.mul(g, b.Unary(backend.Cos, a))
		case backend.Cos:
			d = b.neg(b.mul(g, b.Unary(backend.Sin, a)))
		default:
			return nil
		}
		return []backend.Array{d}
	}
}

// asTypeVJP: the cotangent converted back (by the tape) to x's dtype.
func asTypeVJP(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
	return []backend.Array{g}
}

// whereVJP: the cotangent goes to the side each element was taken from.
func whereVJP(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
	zero := b.scalar(0, g)
	return []backend.Array{nil,
		b.sumTo(b.Where(x[0], g, zero), x[1].shape),
		b.sumTo(b.Where(x[0], zero, g), x[2].shape)}
}

func reshapeVJP(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
	return []backend.Array{b.Reshape(g, x[0].shape...)}
}

func transposeVJP(axes []int) vjpFn {
	axes = append([]int(nil), axes...)
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		inv := make([]int, len(axes))
		for i, a := range axes {
			a, _ = normAxis(a, len(axes))
			inv[a] = i
		}
		return []backend.Array{b.Transpose(g, inv...)}
	}
}

// lowBounds resolves negative slice starts against shape.
func lowBounds(shape tensor.Shape, start []int) []int {
	lo := make([]int, len(shape))
	for i := range shape {
		if i < len(start) {
			lo[i] = start[i]
			if lo[i] < 0 {
				lo[i] += shape[i]
			}
		}
	}
	return lo
}

// sliceVJP: the cotangent written into zeros of x's shape.
func sliceVJP(start []int) vjpFn {
	start = append([]int(nil), start...)
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		return []backend.Array{b.SliceUpdate(b.Zeros(x[0].shape, g.DType()), g, lowBounds(x[0].shape, start))}
	}
}

// sliceUpdateVJP: dst gets the cotangent with the written region zeroed,
// src the region.
func sliceUpdateVJP(start []int) vjpFn {
	start = append([]int(nil), start...)
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		dst, src := x[0], x[1]
		lo := lowBounds(dst.shape, start)
		region := make(tensor.Shape, len(dst.shape)-len(src.shape), len(dst.shape))
		for i := range region {
			region[i] = 1
		}
		region = append(region, src.shape...)
		hi := make([]int, len(lo))
		for i := range lo {
			hi[i] = lo[i] + region[i]
		}
		gs := b.Reshape(b.Slice(g, lo, hi), src.shape...)
		gd := b.SliceUpdate(b.view(g.(*Array)), b.Zeros(region, g.DType()), lo)
		return []backend.Array{gd, gs}
	}
}

// concatenateVJP: each input gets its slice of the cotangent.
func concatenateVJP(axis int) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		ax, _ := normAxis(axis, len(y.shape))
		out := make([]backend.Array, len(x))
		at := 0
		for i, a := range x {
			lo, hi := make([]int, len(y.shape)), y.shape.Clone()
			lo[ax], hi[ax] = at, at+a.shape[ax]
			at = hi[ax]
			out[i] = b.Slice(g, lo, hi)
		}
		return out
	}
}

// takeVJP scatters the cotangent back: each gathered slice adds into the
// slice of x it came from (indices repeated add up), summed in float64.
func takeVJP(axis int) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		a, ia := x[0], x[1]
		ax, _ := normAxis(axis, len(a.shape))
		dim := a.shape[ax]
		inner := tensor.Shape(a.shape[ax+1:]).Size()
		outer := tensor.Shape(a.shape[:ax]).Size()
		defer b.freeTmps()
		gv := b.f64In(b.use1("Take", g), tensor.F64)
		dst := make([]float64, a.size())
		k := 0
		for o := range outer {
			base := o * dim * inner
			for _, u := range b.intsIn(ia, ia.dtype) {
				p := int(int64(u))
				if p < 0 {
					p += dim
				}
				row := dst[base+p*inner : base+(p+1)*inner]
				for j := range row {
					row[j] += gv[k+j]
				}
				k += inner
			}
		}
		return []backend.Array{b.valuesF64(accDType(a.dtype), a.shape, dst), nil}
	}
}

// sumVJP: the cotangent broadcast over the summed axis.
func sumVJP(axis int, keepDims bool) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		gk, _ := b.keepAxis(g, x[0], axis, keepDims)
		return []backend.Array{b.broadcastTo(gk, x[0].shape)}
	}
}

// maxVJP: the cotangent shared equally by the elements equal to the max.
func maxVJP(axis int, keepDims bool) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		gk, ax := b.keepAxis(g, x[0], axis, keepDims)
		yk, _ := b.keepAxis(y, x[0], axis, keepDims)
		m := b.AsType(b.Binary(backend.Equal, x[0], yk), g.DType())
		return []backend.Array{b.div(b.mul(gk, m), b.Sum(m, ax, true))}
	}
}

// logSumExpVJP: g·softmax(x).
func logSumExpVJP(axis int, keepDims bool) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		gk, ax := b.keepAxis(g, x[0], axis, keepDims)
		return []backend.Array{b.mul(gk, b.Softmax(x[0], ax, true))}
	}
}

// softmaxVJP: s·(g - Σ g·s).
func softmaxVJP(axis int) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		return []backend.Array{b.mul(y, b.sub(g, b.Sum(b.mul(g, y), axis, true)))}
	}
}

// swapLast transposes the last two axes.
func (b *Backend) swapLast(x backend.Array) backend.Array {
	n := len(x.Shape())
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	perm[n-2], perm[n-1] = n-1, n-2
	return b.Transpose(x, perm...)
}

// matmulVJP: for C = A·B, dA = G·Bᵀ and dB = Aᵀ·G, summed over broadcast
// batch axes; a 1-D A is a row and a 1-D B a column.
func matmulVJP(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
	A, B := backend.Array(x[0]), backend.Array(x[1])
	as, bs := x[0].shape, x[1].shape
	gs := g.Shape()
	if len(as) == 1 { // g lacks the row axis, before its column axis if any
		at := len(gs)
		if len(bs) > 1 {
			at--
		}
		gs = append(gs[:at:at], append(tensor.Shape{1}, gs[at:]...)...)
		A = b.Reshape(A, 1, as[0])
	}
	if len(bs) == 1 {
		gs = append(gs, 1)
		B = b.Reshape(B, bs[0], 1)
	}
	G := b.Reshape(g, gs...)
	gA := b.Reshape(b.sumTo(b.Matmul(G, b.swapLast(B)), A.Shape()), as...)
	gB := b.Reshape(b.sumTo(b.Matmul(b.swapLast(A), G), B.Shape()), bs...)
	return []backend.Array{gA, gB}
}

// rmsNormVJP: with r = rsqrt(mean(x²)+eps) and u = g⊙w,
// dx = r·u - x·r³·mean(x·u) and dw = Σ_rows g·x·r (in float32, or float64
// for F64).
func rmsNormVJP(eps float32) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		dt := accDType(x[0].dtype)
		xa, ga := b.AsType(x[0], dt), b.AsType(g, dt)
		n := x[0].shape[len(x[0].shape)-1]
		inv := b.Full(tensor.Shape{}, 1/float64(n), dt)
		r := b.Unary(backend.Rsqrt, b.add(b.mul(b.Sum(b.Unary(backend.Square, xa), -1, true), inv), b.Full(tensor.Shape{}, float64(eps), dt)))
		u := ga
		if x[1] != nil {
			u = b.mul(ga, b.AsType(x[1], dt))
		}
		r3 := b.mul(r, b.mul(r, r))
		dx := b.sub(b.mul(u, r), b.mul(b.mul(xa, r3), b.mul(b.Sum(b.mul(xa, u), -1, true), inv)))
		var dw backend.Array
		if x[1] != nil {
			dw = b.Sum(b.Reshape(b.mul(ga, b.mul(xa, r)), -1, n), 0, false)
		}
		return []backend.Array{dx, dw}
	}
}

// ropeVJP: RoPE is a rotation by angle θ = position·scale·inv_freq; its
// transpose is the rotation by -θ, the same op with the scale negated.
func ropeVJP(p backend.RoPE, off backend.Offset) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		q := p
		q.Scale = -p.Scale
		if x[1] != nil {
			q.Freqs = x[1]
		}
		o := backend.Offset{Scalar: off.Scalar}
		if x[2] != nil {
			o.Rows = x[2]
		}
		return []backend.Array{b.RoPE(g, q, o), nil, nil}
	}
}

// sdpaVJP recomputes the attention probabilities P = softmax(scale·QKᵀ +
// mask) and, with dO the cotangent, returns dV = PᵀdO, dS = P⊙(dP - Σ dP⊙P)
// where dP = dO·Vᵀ, dQ = scale·dS·K and dK = scale·dSᵀ·Q. Query heads are
// grouped [B, Hk, H/Hk, L, D] so that each group reads its KV head by
// broadcasting, and the groups' dK and dV are summed.
//
// Under a causal mask (with L <= S, so that every query sees a key) or a
// PrefixMask the queries go in tiles of sdpaVJPTile positions, each over
// the keys up to its last position's last visible key only (the keys past
// it are masked for the whole tile), and under a PrefixMask a tile wholly
// inside a block after the first skips the earlier blocks' keys too; dQ of
// the tiles is concatenated and their dK and dV summed in order. A single
// tile is the dense computation op for op; with several, dK and dV differ
// from it by summation order.
func sdpaVJP(scale float32, mask backend.Mask) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		q, k, v := x[0], x[1], x[2]
		B, H, L, D := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
		Hk, S, Dv := k.shape[1], k.shape[2], v.shape[3]
		R := H / Hk
		dt := accDType(backend.PromoteTypes(backend.PromoteTypes(q.dtype, k.dtype), v.dtype))
		a := &sdpaGrad{b: b, sc: b.Full(tensor.Shape{}, float64(scale), dt), dt: dt, B: B, Hk: Hk, R: R, L: L, S: S, D: D, Dv: Dv}
		a.q5 = b.Reshape(b.AsType(q, dt), B, Hk, R, L, D)
		a.k5 = b.Reshape(b.AsType(k, dt), B, Hk, 1, S, D)
		a.v5 = b.Reshape(b.AsType(v, dt), B, Hk, 1, S, Dv)
		a.g5 = b.Reshape(b.AsType(g, dt), B, Hk, R, L, Dv)
		switch m := mask.(type) {
		case backend.CausalMask:
			causal := func(i int, row []byte) {
				for j := range min(len(row), max(0, i+S-L+1)) {
					row[j] = 1
				}
			}
			if L <= S {
				return a.tiled(causal, nil)
			}
			return a.dense(func(s backend.Array) backend.Array { return a.where(s, 0, L, S, 0, 0, causal) })
		case backend.PrefixMask:
			return a.tiled(func(i int, row []byte) {
				for j := range min(len(row), m.Prefix, i+1) {
					row[j] = 1
				}
				for j := max(m.Prefix, m.BlockStart(i)); j <= i && j < len(row); j++ {
					row[j] = 1
				}
			}, func(i0, i1 int) (lo, hi int) {
				// A tile inside one block after the first does not read
				// the earlier blocks' keys.
				if bs := m.BlockStart(i0); i0 >= m.Prefix && m.BlockStart(i1-1) == bs {
					return m.Prefix, bs
				}
				return 0, 0
			})
		case backend.ArrayMask:
			return a.dense(func(s backend.Array) backend.Array {
				m, full := x[3], tensor.Shape{B, H, L, S}
				if m.dtype == tensor.Bool {
					bm := b.Reshape(b.Where(m, b.Full(full, 1, tensor.Bool), b.Full(tensor.Shape{}, 0, tensor.Bool)), B, Hk, R, L, S)
					return b.Where(bm, s, b.Full(tensor.Shape{}, negInf, dt))
				}
				return b.add(s, b.Reshape(b.broadcastTo(b.AsType(m, dt), full), B, Hk, R, L, S))
			})
		}
		return a.dense(func(s backend.Array) backend.Array { return s })
	}
}

// sdpaVJPTile is the number of query positions per tile of sdpaVJP.
var sdpaVJPTile = 128

// sdpaGrad is one attention VJP: the inputs grouped by KV head in the
// accumulation dtype dt (q5 [B, Hk, R, L, D], k5 [B, Hk, 1, S, D], v5
// [B, Hk, 1, S, Dv], the cotangent g5 [B, Hk, R, L, Dv]) and the scale sc.
type sdpaGrad struct {
	b                     *Backend
	q5, k5, v5, g5, sc    backend.Array
	dt                    tensor.DType
	B, Hk, R, L, S, D, Dv int
}

// dense is the VJP over all queries and keys, mask applied to the scores.
func (a *sdpaGrad) dense(mask func(s backend.Array) backend.Array) []backend.Array {
	dq, dk, dv := a.tile(a.q5, a.g5, a.k5, a.v5, mask)
	return []backend.Array{a.b.Reshape(dq, a.B, a.Hk*a.R, a.L, a.D), dk, dv, nil}
}

// tile computes the gradients of the queries q5 (cotangent g5) over the
// keys k5 and values v5, mask applied to the scores: dQ of those queries
// and their parts of dK and dV.
func (a *sdpaGrad) tile(q5, g5, k5, v5 backend.Array, mask func(s backend.Array) backend.Array) (dq, dk, dv backend.Array) {
	b := a.b
	s := mask(b.mul(b.Matmul(q5, b.swapLast(k5)), a.sc))
	p := b.Softmax(s, -1, true)
	// Pᵀ·dO and dSᵀ·Q as (dOᵀ·P)ᵀ and (Qᵀ·dS)ᵀ: the same in-order sums
	// (Matmul's), transposing the small results instead of P and dS.
	dv = b.swapLast(b.Sum(b.Matmul(b.swapLast(g5), p), 2, false))
	dp := b.Matmul(g5, b.swapLast(v5))
	ds := b.mul(p, b.sub(dp, b.Sum(b.mul(dp, p), -1, true)))
	dq = b.mul(b.Matmul(ds, k5), a.sc)
	dk = b.mul(b.swapLast(b.Sum(b.Matmul(b.swapLast(q5), ds), 2, false)), a.sc)
	return dq, dk, dv
}

// where masks the scores s of queries [i0, i0+l) over keys [0, n) less
// [lo, hi): vis sets to 1 the keys query i sees in its row of all n keys
// (the others score −Inf).
func (a *sdpaGrad) where(s backend.Array, i0, l, n, lo, hi int, vis func(i int, row []byte)) backend.Array {
	nk := n - (hi - lo)
	m := make([]byte, l*nk)
	row := make([]byte, n)
	for i := range l {
		clear(row)
		vis(i0+i, row)
		copy(m[i*nk:], row[:lo])
		copy(m[i*nk+lo:], row[hi:])
	}
	c := a.b.FromHost(&tensor.Dense{DType: tensor.Bool, Shape: tensor.Shape{l, nk}, Data: m})
	return a.b.Where(c, s, a.b.Full(tensor.Shape{}, negInf, a.dt))
}

// tiled is the VJP in tiles of query positions under a causal-bounded mask
// vis (as where's; query i sees no key past i + S − L). hidden, when not
// nil, gives the keys [lo, hi) that no query of a tile sees (hi <= lo:
// none), which the tile then does not read.
func (a *sdpaGrad) tiled(vis func(i int, row []byte), hidden func(i0, i1 int) (lo, hi int)) []backend.Array {
	b := a.b
	B, Hk, R, L, S, D, Dv := a.B, a.Hk, a.R, a.L, a.S, a.D, a.Dv
	var dqs []backend.Array
	var dk, dv backend.Array
	for i0 := 0; i0 < L; i0 += sdpaVJPTile {
		i1 := min(L, i0+sdpaVJPTile)
		n := min(S, i1+S-L) // keys up to the tile's last visible one
		lo, hi := 0, 0
		if hidden != nil {
			if lo, hi = hidden(i0, i1); hi > n || hi <= lo || dk == nil {
				lo, hi = 0, 0 // (the first tile reads its keys from 0)
			}
		}
		mask := func(s backend.Array) backend.Array { return a.where(s, i0, i1-i0, n, lo, hi, vis) }
		if i0 == 0 && i1 == L && n == S {
			dq, dkt, dvt := a.tile(a.q5, a.g5, a.k5, a.v5, mask)
			return []backend.Array{b.Reshape(dq, B, Hk*R, L, D), dkt, dvt, nil}
		}
		sc := b.Scope()
		q5 := b.Slice(a.q5, []int{0, 0, 0, i0, 0}, []int{B, Hk, R, i1, D})
		g5 := b.Slice(a.g5, []int{0, 0, 0, i0, 0}, []int{B, Hk, R, i1, Dv})
		k5, v5 := a.keys(a.k5, n, lo, hi, D), a.keys(a.v5, n, lo, hi, Dv)
		dq, dkt, dvt := a.tile(q5, g5, k5, v5, mask)
		if dk == nil {
			dk, dv = a.padKeys(dkt, n, D), a.padKeys(dvt, n, Dv)
		} else {
			odk, odv := dk, dv
			dk, dv = a.addKeys(dk, dkt, n, lo, hi, D), a.addKeys(dv, dvt, n, lo, hi, Dv)
			b.Release(odk, odv) // (released already where updated in place)
		}
		sc.Keep(dq, dk, dv)
		sc.Close()
		dqs = append(dqs, dq)
	}
	dq := b.Reshape(b.Concatenate(3, dqs...), B, Hk*R, L, D)
	return []backend.Array{dq, dk, dv, nil}
}

// padKeys extends the [B, Hk, n, w] gradient x of the first n keys with
// zeros to all S keys.
func (a *sdpaGrad) padKeys(x backend.Array, n, w int) backend.Array {
	if n == a.S {
		return x
	}
	return a.b.Concatenate(2, x, a.b.Zeros(tensor.Shape{a.B, a.Hk, a.S - n, w}, a.dt))
}

// keys returns the keys (or values) x5 [B, Hk, 1, S, w] a tile reads: the
// first n less [lo, hi).
func (a *sdpaGrad) keys(x5 backend.Array, n, lo, hi, w int) backend.Array {
	b := a.b
	if hi <= lo {
		return b.Slice(x5, []int{0, 0, 0, 0, 0}, []int{a.B, a.Hk, 1, n, w})
	}
	return b.Concatenate(3, b.Slice(x5, []int{0, 0, 0, 0, 0}, []int{a.B, a.Hk, 1, lo, w}), b.Slice(x5, []int{0, 0, 0, hi, 0}, []int{a.B, a.Hk, 1, n, w}))
}

// addKeys adds the [B, Hk, ·, w] gradient x of the keys a tile read (the
// first n less [lo, hi)) to acc.
func (a *sdpaGrad) addKeys(acc, x backend.Array, n, lo, hi, w int) backend.Array {
	if hi <= lo {
		return a.addAt(acc, x, 0, n, w)
	}
	head := a.b.Slice(x, []int{0, 0, 0, 0}, []int{a.B, a.Hk, lo, w})
	tail := a.b.Slice(x, []int{0, 0, lo, 0}, []int{a.B, a.Hk, n - hi + lo, w})
	return a.addAt(a.addAt(acc, head, 0, lo, w), tail, hi, n-hi, w)
}

// addAt adds the [B, Hk, m, w] x to keys [at, at+m) of acc.
func (a *sdpaGrad) addAt(acc, x backend.Array, at, m, w int) backend.Array {
	if at == 0 && m == a.S {
		return a.b.add(acc, x)
	}
	part := a.b.Slice(acc, []int{0, 0, at, 0}, []int{a.B, a.Hk, at + m, w})
	sum := a.b.add(part, x)
	a.b.Release(part) // acc is then the only view: updated in place
	return a.b.SliceUpdate(acc, sum, []int{0, 0, at, 0})
}

var negInf = -1 / zero64

var zero64 float64

// swiGLUVJP: with σ = sigmoid(gate), d gate = g·up·σ·(1 + gate·(1-σ)) and
// d up = g·gate·σ.
func swiGLUVJP(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
	dt := accDType(backend.PromoteTypes(x[0].dtype, x[1].dtype))
	gate, up, ga := b.AsType(x[0], dt), b.AsType(x[1], dt), b.AsType(g, dt)
	s := b.Unary(backend.Sigmoid, gate)
	one := b.Full(tensor.Shape{}, 1, dt)
	dgate := b.mul(b.mul(ga, up), b.mul(s, b.add(one, b.mul(gate, b.sub(one, s)))))
	dup := b.mul(ga, b.mul(gate, s))
	return []backend.Array{dgate, dup}
}

// quantizedMatmulVJP: the gradient with respect to x only (the quantized
// weight is frozen): x·Wᵀ gives g·W and x·W gives g·Wᵀ, the same op with
// transpose flipped.
func quantizedMatmulVJP(groupSize, bits int, transpose bool) vjpFn {
	return func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
		w := backend.QuantizedArray{W: x[1], Scales: x[2], Biases: x[3], GroupSize: groupSize, Bits: bits}
		return []backend.Array{b.sumTo(b.QuantizedMatmul(g, w, !transpose), x[0].shape), nil, nil, nil}
	}
}

// noVJP is the VJP of an op without gradients (Dequantize).
func noVJP(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array {
	return nil
}

// maskArray is the array of an ArrayMask, nil for the other masks.
func maskArray(m backend.Mask) backend.Array {
	if am, ok := m.(backend.ArrayMask); ok {
		return am.A
	}
	return nil
}
