package backendtest

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// unpack returns the codes of a quantized matrix's packed words (rows ×
// words uint32): element i of a row sits at bit offset i·bits of the row's
// little-endian byte string, least significant bit first.
func unpack(words []uint32, rows, bits int) [][]float64 {
	per := len(words) / max(rows, 1)
	cols := per * 32 / bits
	out := make([][]float64, rows)
	row := make([]byte, 4*per)
	for r := range rows {
		for w := range per {
			binary.LittleEndian.PutUint32(row[4*w:], words[r*per+w])
		}
		out[r] = make([]float64, cols)
		for i := range cols {
			q := 0
			for k := range bits {
				bit := i*bits + k
				q |= int(row[bit/8]>>(bit%8)&1) << k
			}
			out[r][i] = float64(q)
		}
	}
	return out
}

// quantCase is a random quantized matrix made directly from random codes,
// scales and biases (so Dequantize and QuantizedMatmul are checked apart
// from Quantize), with its dequantized values in float64 and each value's
// |s·q| + |b|.
type quantCase struct {
	q        backend.QuantizedArray
	w, mag   [][]float64 // [rows][cols]
	gs, bits int
}

func (g *gen) quantized(b backend.Backend, dt tensor.DType, rows, cols, gs, bits int) quantCase {
	words := make([]uint32, rows*cols*bits/32)
	for i := range words {
		words[i] = g.r.Uint32()
	}
	ng := cols / gs
	sv, bv := g.normal(rows*ng, 0.05), g.normal(rows*ng, 0.2)
	s, sr := g.input(b, dt, tensor.Shape{rows, ng}, sv)
	bi, br := g.input(b, dt, tensor.Shape{rows, ng}, bv)
	c := quantCase{
		q:  backend.QuantizedArray{W: b.FromHost(tensor.FromUint32(tensor.Shape{rows, cols * bits / 32}, words)), Scales: s, Biases: bi, GroupSize: gs, Bits: bits},
		gs: gs, bits: bits,
	}
	codes := unpack(words, rows, bits)
	c.w, c.mag = make([][]float64, rows), make([][]float64, rows)
	for r := range rows {
		c.w[r], c.mag[r] = make([]float64, cols), make([]float64, cols)
		for i := range cols {
			sc, bs := sr.v[r*ng+i/gs], br.v[r*ng+i/gs]
			c.w[r][i] = sc*codes[r][i] + bs
			c.mag[r][i] = math.Abs(sc*codes[r][i]) + math.Abs(bs)
		}
	}
	return c
}

var quantParams = [][2]int{{32, 2}, {64, 3}, {32, 4}, {128, 4}, {64, 5}, {32, 6}, {64, 8}, {128, 8}}

// Dequantize of random codes, every bit width: scales[g]·q + biases[g] in
// the scales' dtype.
func testDequantize(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("dequantize", dt))
			for i, p := range quantParams {
				rows, cols := 1+g.r.IntN(4), p[0]*(1+g.r.IntN(3))
				c := g.quantized(b, dt, rows, cols, p[0], p[1])
				want := nd{tensor.Shape{rows, cols}, nil}
				var mag []float64
				for r := range rows {
					want.v = append(want.v, c.w[r]...)
					mag = append(mag, c.mag[r]...)
				}
				compare(t, caseName(dt, p, i), host(t, b, b.Dequantize(c.q)), dt, want, budget(t, "dequantize", dt), false, mag)
			}
		}
	})
}

// quantizeRef is MLX's affine quantization of one group (mlx/backend/cpu/quantized.cpp,
// the CPU kernel), in float32: s = max((wmax-wmin)/n, 1e-7); the extreme of
// larger magnitude is the edge (s negated when it is wmax); q0 =
// rint(edge/s); if q0 != 0, s = edge/q0 and bias = edge, else bias = 0;
// each code is clamp(rint((w-bias)/s), 0, n). The stored scale and bias are
// s and bias rounded to the dtype.
func quantizeRef(group []float32, bits int) (codes []float64, scale, bias float32) {
	n := float32(int(1)<<bits - 1)
	wmax, wmin := group[0], group[0]
	for _, w := range group {
		wmax, wmin = max(wmax, w), min(wmin, w)
	}
	s := max((wmax-wmin)/n, 1e-7)
	edge := wmin
	if !(abs32(wmin) > abs32(wmax)) {
		s, edge = -s, wmax
	}
	rint := func(x float32) float32 { return float32(math.RoundToEven(float64(x))) }
	q0 := rint(edge / s)
	if q0 != 0 {
		s, bias = edge/q0, edge
	}
	codes = make([]float64, len(group))
	for i, w := range group {
		codes[i] = float64(min(max(rint((w-bias)/s), 0), n))
	}
	return codes, s, bias
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

// Quantize, every bit width and group size, groups all negative and
// constant included: the parts have MLX's shapes and dtypes, and the codes,
// scales and biases equal quantizeRef's exactly. Dequantize of the result
// gives scales·q + biases.
func testQuantize(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("quantize", dt))
			for i, p := range quantParams {
				gs, bits := p[0], p[1]
				rows, cols := 1+g.r.IntN(4), gs*(1+g.r.IntN(3))
				v := g.normal(rows*cols, 1)
				if i%3 == 0 {
					for k := range gs { // an all-negative group, and a constant one
						v[k] = -math.Abs(v[k]) - 0.1
					}
					if rows > 1 {
						for k := range gs {
							v[cols+k] = 0.25
						}
					}
				}
				x, xr := g.input(b, dt, tensor.Shape{rows, cols}, v)
				q := b.Quantize(x, gs, bits)
				name := caseName(dt, p, i)
				ng := cols / gs
				if q.GroupSize != gs || q.Bits != bits || q.W.DType() != tensor.U32 || !q.W.Shape().Equal(tensor.Shape{rows, cols * bits / 32}) ||
					q.Scales.DType() != dt || !q.Scales.Shape().Equal(tensor.Shape{rows, ng}) || q.Biases.DType() != dt || !q.Biases.Shape().Equal(tensor.Shape{rows, ng}) {
					t.Errorf("%s: got W %v %v, scales %v %v, biases %v %v, group %d bits %d; want U32 [%d %d], %v [%d %d] twice, %d, %d", name,
						q.W.DType(), q.W.Shape(), q.Scales.DType(), q.Scales.Shape(), q.Biases.DType(), q.Biases.Shape(), q.GroupSize, q.Bits,
						rows, cols*bits/32, dt, rows, ng, gs, bits)
					continue
				}
				wd := host(t, b, q.W)
				if wd == nil {
					continue
				}
				codes := unpack(wd.Uint32s(), rows, bits)
				wantC := nd{tensor.Shape{rows, cols}, nil}
				gotC := nd{tensor.Shape{rows, cols}, nil}
				wantS := nd{tensor.Shape{rows, ng}, nil}
				wantB := nd{tensor.Shape{rows, ng}, nil}
				for r := range rows {
					gotC.v = append(gotC.v, codes[r]...)
					for k := range ng {
						group := make([]float32, gs)
						for j := range group {
							group[j] = float32(xr.v[r*cols+k*gs+j])
						}
						c, sc, bi := quantizeRef(group, bits)
						wantC.v = append(wantC.v, c...)
						wantS.v = append(wantS.v, roundTo(float64(sc), dt))
						wantB.v = append(wantB.v, roundTo(float64(bi), dt))
					}
				}
				ex := budget(t, "exact", tensor.U32)
				compare(t, name+"/codes", dense(tensor.F64, gotC.shape, gotC.v), tensor.F64, wantC, ex, false, nil)
				compare(t, name+"/scales", host(t, b, q.Scales), dt, wantS, ex, false, nil)
				compare(t, name+"/biases", host(t, b, q.Biases), dt, wantB, ex, false, nil)
				want := nd{tensor.Shape{rows, cols}, make([]float64, rows*cols)}
				mag := make([]float64, rows*cols)
				for r := range rows {
					for k := range cols {
						sc, bi := wantS.v[r*ng+k/gs], wantB.v[r*ng+k/gs]
						want.v[r*cols+k] = sc*wantC.v[r*cols+k] + bi
						mag[r*cols+k] = math.Abs(sc*wantC.v[r*cols+k]) + math.Abs(bi)
					}
				}
				compare(t, name+"/dequantize", host(t, b, b.Dequantize(q)), dt, want, budget(t, "dequantize", dt), false, mag)
			}
		}
	})
}

// QuantizedMatmul with transposed weights (W [N, K] quantized along K: x @
// Wᵀ) and without (W [K, N] quantized along N: x @ W), x with batch axes,
// against the float64 product with the exact dequantized weights; the bound
// scales with Σ|x·ŵ|.
func testQuantizedMatmul(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("qmm", dt))
			for i, p := range quantParams {
				for _, transpose := range []bool{true, false} {
					gs, bits := p[0], p[1]
					M := 1 + g.r.IntN(5)
					K, N := gs*(1+g.r.IntN(2)), 1+g.r.IntN(9)
					var c quantCase
					if transpose {
						c = g.quantized(b, dt, N, K, gs, bits)
					} else {
						N = gs * (1 + g.r.IntN(2))
						K = 1 + g.r.IntN(40)
						c = g.quantized(b, dt, K, N, gs, bits)
					}
					batch := g.shape(g.r.IntN(2), 1, 3)
					xs := append(batch.Clone(), M, K)
					x, xr := g.input(b, dt, xs, g.normal(xs.Size(), 1))
					// ŵ as a [K, N] matrix.
					wkn := nd{tensor.Shape{K, N}, make([]float64, K*N)}
					mkn := nd{tensor.Shape{K, N}, make([]float64, K*N)}
					for k := range K {
						for n := range N {
							if transpose {
								wkn.v[k*N+n], mkn.v[k*N+n] = c.w[n][k], c.mag[n][k]
							} else {
								wkn.v[k*N+n], mkn.v[k*N+n] = c.w[k][n], c.mag[k][n]
							}
						}
					}
					want, _ := matmulRef(xr, wkn)
					absx := nd{xr.shape, make([]float64, len(xr.v))}
					for k, v := range xr.v {
						absx.v[k] = math.Abs(v)
					}
					_, mag := matmulRef(absx, mkn)
					compare(t, caseName(dt, p, transpose, i), host(t, b, b.QuantizedMatmul(x, c.q, transpose)), dt, want, budget(t, "quantized_matmul", dt), false, mag)
				}
			}
		}
	})
}

// backend.QuantizedMatmulsT (several matrices of one x, through the
// backend's SharedMatmuler where it has one) gives each matrix, value for
// value, what QuantizedMatmul(x, w, true) gives it alone: every bit width,
// x with batch axes, matrices of different row counts.
func testQuantizedMatmulsT(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		for _, dt := range floats {
			g := newGen(caseName("qmms", dt))
			for i, p := range quantParams {
				gs, bits := p[0], p[1]
				K := gs * (1 + g.r.IntN(2))
				var ws []backend.QuantizedArray
				for range 2 + g.r.IntN(2) {
					ws = append(ws, g.quantized(b, dt, 1+g.r.IntN(40), K, gs, bits).q)
				}
				xs := append(g.shape(g.r.IntN(2), 1, 3), 1+g.r.IntN(9), K)
				x, _ := g.input(b, dt, xs, g.normal(xs.Size(), 1))
				got := backend.QuantizedMatmulsT(b, x, ws)
				for j, w := range ws {
					alone := host(t, b, b.QuantizedMatmul(x, w, true))
					if alone == nil {
						continue
					}
					compare(t, caseName(dt, p, i, "matrix", j), host(t, b, got[j]), dt, nd{alone.Shape, alone.ToFloat64()}, exactBudget, true, nil)
				}
			}
		}
	})
}

// Deterministic: the same op on the same inputs gives the same bits, run
// after run (what an oracle-exact backend needs to be checkable at all, and
// what every backend's tests rely on).
func testDeterministic(t *testing.T, b backend.Backend) {
	inDo(t, b, func() {
		g := newGen("deterministic")
		x := b.FromHost(dense(tensor.BF16, tensor.Shape{2, 4, 9, 64}, g.normal(2*4*9*64, 1)))
		w := b.FromHost(dense(tensor.BF16, tensor.Shape{96, 64}, g.normal(96*64, 1)))
		q := b.Quantize(w, 64, 4)
		ops := map[string]func() backend.Array{
			"Matmul":  func() backend.Array { return b.Matmul(x, b.Transpose(w, 1, 0)) },
			"Sum":     func() backend.Array { return b.Sum(x, -1, false) },
			"Softmax": func() backend.Array { return b.Softmax(x, -1, false) },
			"SDPA":    func() backend.Array { return b.ScaledDotProductAttention(x, x, x, 0.125, backend.CausalMask{}) },
			"QMM":     func() backend.Array { return b.QuantizedMatmul(x, q, true) },
			"RMSNorm": func() backend.Array { return b.RMSNorm(x, nil, 1e-5) },
		}
		for name, op := range ops {
			a, c := host(t, b, op()), host(t, b, op())
			if a != nil && c != nil && string(a.Data) != string(c.Data) {
				t.Errorf("%s: two runs on the same inputs differ", name)
			}
		}
	})
}
