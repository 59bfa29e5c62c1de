package backendtest

import (
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// reduceCase draws an input of dtype dt with a non-empty reduction axis (a
// zero elsewhere at times when empty is set: MLX rejects zero-size inputs
// of Argmax and LogSumExp, so the contract leaves them undefined) and returns it with the axis as given to the op
// (negative at times) and as an index.
func (g *gen) reduceCase(b backend.Backend, dt tensor.DType, empty bool, v func(n int) []float64) (backend.Array, nd, int, int, bool) {
	shape := g.shape(1+g.r.IntN(3), 1, 6)
	axis := g.r.IntN(len(shape))
	if empty && len(shape) > 1 && g.r.IntN(8) == 0 {
		shape[(axis+1)%len(shape)] = 0
	}
	x, xr := g.input(b, dt, shape, v(shape.Size()))
	arg := axis
	if g.r.IntN(2) == 0 {
		arg -= len(shape)
	}
	return x, xr, arg, axis, g.r.IntN(2) == 0
}

// reduceRef applies f to every lane along axis; mag, when not nil, receives
// each lane's magnitude scale.
func reduceRef(x nd, axis int, keep bool, f func(lane []float64) (float64, float64)) (nd, []float64) {
	var out, mag []float64
	shape := lanes(x, axis, func(l []float64) {
		r, m := f(l)
		out = append(out, r)
		mag = append(mag, m)
	})
	if keep {
		shape = append(append(append(tensor.Shape{}, x.shape[:axis]...), 1), x.shape[axis+1:]...)
	}
	return nd{shape, out}, mag
}

// reductionEdges sprinkles the edge values of dt other than the largest
// finite ones (whose sums overflow or not depending on the order).
func (g *gen) reductionEdges(v []float64, dt tensor.DType) {
	e := edges(dt)
	e = append(e[:7:7], e[9:]...)
	for i := range v {
		if g.r.IntN(12) == 0 {
			v[i] = e[g.r.IntN(len(e))]
		}
	}
}

// Sum in float dtypes (accumulated in float32 or better, rounded to the
// dtype) and int32 (exact); the bound scales with the lane's Σ|x|.
func testSum(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range append(floats, tensor.I32) {
			g := newGen(caseName("sum", dt))
			for i := range cases {
				x, xr, arg, axis, keep := g.reduceCase(b, dt, true, func(n int) []float64 {
					if dt == tensor.I32 {
						return g.ints(n, -1000, 1000)
					}
					v := g.normal(n, 2)
					if i%3 == 0 {
						g.reductionEdges(v, dt)
					}
					return v
				})
				want, mag := reduceRef(xr, axis, keep, func(l []float64) (float64, float64) {
					s, m := 0.0, 0.0
					for _, v := range l {
						s += v
						m += math.Abs(v)
					}
					return s, m
				})
				bu := budget(t, "sum", dt)
				compare(t, caseName(dt, i), host(t, b, b.Sum(x, arg, keep)), dt, want, bu, false, mag)
			}
		}
	})
}

// maxRef is the NaN-propagating maximum.
func maxRef(l []float64) float64 {
	m := math.Inf(-1)
	for _, v := range l {
		if math.IsNaN(v) {
			return v
		}
		m = math.Max(m, v)
	}
	return m
}

// Max: exact, NaN propagating, in floats and integers.
func testMax(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range append(floats, tensor.I32, tensor.U8) {
			g := newGen(caseName("max", dt))
			for i := range cases {
				x, xr, arg, axis, keep := g.reduceCase(b, dt, true, func(n int) []float64 { return g.values(dt, n, 2) })
				want, _ := reduceRef(xr, axis, keep, func(l []float64) (float64, float64) { return maxRef(l), 0 })
				compare(t, caseName(dt, i), host(t, b, b.Max(x, arg, keep)), dt, want, budget(t, "exact", dt), false, nil)
			}
		}
	})
}

// Argmax: uint32 index of the largest element, ties to the smallest index
// (few distinct values, so ties are common), the first NaN winning.
func testArgmax(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range append(floats, tensor.I32) {
			g := newGen(caseName("argmax", dt))
			for i := range cases {
				x, xr, arg, axis, keep := g.reduceCase(b, dt, false, func(n int) []float64 {
					v := g.ints(n, -3, 3)
					if dt.IsFloat() && i%2 == 1 {
						g.sprinkle(v, dt)
					}
					return v
				})
				want, _ := reduceRef(xr, axis, keep, func(l []float64) (float64, float64) {
					best := 0
					for j, v := range l {
						if math.IsNaN(v) {
							return float64(j), 0
						}
						if v > l[best] {
							best = j
						}
					}
					return float64(best), 0
				})
				compare(t, caseName(dt, i), host(t, b, b.Argmax(x, arg, keep)), tensor.U32, want, budget(t, "exact", tensor.U32), false, nil)
			}
		}
	})
}

// LogSumExp: log Σ exp(x) computed stably, +Inf if any +Inf, -Inf if all
// are -Inf, NaN if any NaN; the bound is absolute (scale 1) plus the output
// rounding.
func testLogSumExp(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("logsumexp", dt))
			for i := range cases {
				x, xr, arg, axis, keep := g.reduceCase(b, dt, false, func(n int) []float64 {
					v := g.normal(n, 3)
					if i%3 == 0 {
						g.reductionEdges(v, dt)
					}
					return v
				})
				want, mag := reduceRef(xr, axis, keep, func(l []float64) (float64, float64) {
					m := maxRef(l)
					if math.IsNaN(m) || math.IsInf(m, 0) {
						return m, 1
					}
					s := 0.0
					for _, v := range l {
						s += math.Exp(v - m)
					}
					return m + math.Log(s), 1
				})
				compare(t, caseName(dt, i), host(t, b, b.LogSumExp(x, arg, keep)), dt, want, budget(t, "logsumexp", dt), false, mag)
			}
		}
	})
}

// Softmax, precise and not: exp(x - max)/Σ; -Inf entries (masked) give 0,
// every lane keeps at least one finite value.
func testSoftmax(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			for _, precise := range []bool{true, false} {
				g := newGen(caseName("softmax", dt, precise))
				for i := range cases {
					shape := g.shape(1+g.r.IntN(3), 1, 7)
					if len(shape) > 1 && i%5 == 4 {
						shape[0] = 0
					}
					axis := g.r.IntN(len(shape))
					v := g.normal(shape.Size(), 3)
					// Some -Inf entries, never a whole lane (the first of each stays finite).
					{
						idx := make([]int, len(shape))
						for k := range v {
							unravel(k, shape, idx)
							if idx[axis] > 0 && g.r.IntN(6) == 0 {
								v[k] = math.Inf(-1)
							}
						}
					}
					x, xr := g.input(b, dt, shape, v)
					var want nd
					want.shape = shape
					want.v = make([]float64, len(xr.v))
					mag := make([]float64, len(xr.v))
					xs := strides(shape)
					idx := make([]int, len(shape))
					lane := make([]int, shape[axis])
					for k := range xr.v {
						unravel(k, shape, idx)
						if idx[axis] != 0 {
							continue
						}
						m := math.Inf(-1)
						for j := range lane {
							lane[j] = k + j*xs[axis]
							m = math.Max(m, xr.v[lane[j]])
						}
						s := 0.0
						for _, o := range lane {
							s += math.Exp(xr.v[o] - m)
						}
						for _, o := range lane {
							want.v[o] = math.Exp(xr.v[o]-m) / s
							// x - max is rounded before exp: a relative
							// error of |x - max| units in p.
							if want.v[o] > 0 {
								mag[o] = want.v[o] * math.Abs(xr.v[o]-m)
							}
						}
					}
					compare(t, caseName(dt, precise, i), host(t, b, b.Softmax(x, axis-len(shape)*(i%2), precise)), dt, want, budget(t, "softmax", dt), false, mag)
				}
			}
		}
	})
}
