package cpu

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

func TestMatmul(t *testing.T) {
	cases := []struct {
		as, bs tensor.Shape
		a, b   []float64
		out    tensor.Shape
		want   []float64
	}{
		// [[1 2 3] [4 5 6]] · [[1 0] [0 1] [1 1]] = [[1+3, 2+3] [4+6, 5+6]]
		{tensor.Shape{2, 3}, tensor.Shape{3, 2}, []float64{1, 2, 3, 4, 5, 6}, []float64{1, 0, 0, 1, 1, 1},
			tensor.Shape{2, 2}, []float64{4, 5, 10, 11}},
		// batch [2] against one matrix: identity then doubling
		{tensor.Shape{2, 1, 2}, tensor.Shape{2, 2}, []float64{1, 2, 3, 4}, []float64{2, 0, 0, 2},
			tensor.Shape{2, 1, 2}, []float64{2, 4, 6, 8}},
		// batch broadcast [2,1] × [1,3]-batched: a[i] · b[j] for scalars as 1×1 matrices
		{tensor.Shape{2, 1, 1, 1}, tensor.Shape{3, 1, 1}, []float64{1, 10}, []float64{1, 2, 3},
			tensor.Shape{2, 3, 1, 1}, []float64{1, 2, 3, 10, 20, 30}},
		// 1-D · 2-D: [1 2] · [[1 2] [3 4]] = [7 10]
		{tensor.Shape{2}, tensor.Shape{2, 2}, []float64{1, 2}, []float64{1, 2, 3, 4}, tensor.Shape{2}, []float64{7, 10}},
		// 2-D · 1-D: [[1 2] [3 4]] · [1 1] = [3 7]
		{tensor.Shape{2, 2}, tensor.Shape{2}, []float64{1, 2, 3, 4}, []float64{1, 1}, tensor.Shape{2}, []float64{3, 7}},
		// K = 0 gives zeros
		{tensor.Shape{1, 0}, tensor.Shape{0, 2}, nil, nil, tensor.Shape{1, 2}, []float64{0, 0}},
	}
	for _, c := range cases {
		t.Run(name(c.as, c.bs), func(t *testing.T) {
			b := open(t)
			check(t, b, b.Matmul(arr(b, tensor.F32, c.as, c.a...), arr(b, tensor.F32, c.bs, c.b...)), tensor.F32, c.out, c.want...)
		})
	}
	b := open(t)
	// bf16: 1·1 + 2^-8·1 = 1.00390625 in float32, rounded once to bf16: tie → 1
	check(t, b, b.Matmul(arr(b, tensor.BF16, tensor.Shape{1, 2}, 1, 1.0/256), arr(b, tensor.BF16, tensor.Shape{2, 1}, 1, 1)),
		tensor.BF16, tensor.Shape{1, 1}, 1)
	// f16 × bf16 → f32
	check(t, b, b.Matmul(arr(b, tensor.F16, tensor.Shape{1, 1}, 3), arr(b, tensor.BF16, tensor.Shape{1, 1}, 0.5)),
		tensor.F32, tensor.Shape{1, 1}, 1.5)
	opPanic(t, func() { b.Matmul(b.Zeros(tensor.Shape{2, 3}, tensor.F32), b.Zeros(tensor.Shape{2, 3}, tensor.F32)) })
	opPanic(t, func() { b.Matmul(b.Zeros(tensor.Shape{1, 1}, tensor.I32), b.Zeros(tensor.Shape{1, 1}, tensor.I32)) })
	opPanic(t, func() {
		b.Matmul(b.Zeros(tensor.Shape{2, 1, 1}, tensor.F32), b.Zeros(tensor.Shape{3, 1, 1}, tensor.F32))
	})
}

// TestMatmulParMatchesRef holds the parallel loop and matmulNN (the float32
// product on kernel.MatmulNN) to the reference loop, bit for bit, on odd
// sizes and with more workers than rows.
func TestMatmulParMatchesRef(t *testing.T) {
	sizes := []struct{ batch, m, k, n, threads int }{
		{1, 1, 1, 1, 4},
		{1, 7, 33, 5, 3},
		{3, 13, 17, 65, 8},
		{2, 33, 129, 31, 2},
		{1, 300, 64, 300, 5}, // large enough to split
		{2, 70, 300, 8, 2},   // matmulNN: chunks of k, blocks of rows, a narrow tile
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range sizes {
		t.Run(name(s.batch, s.m, s.k, s.n, s.threads), func(t *testing.T) {
			b := open(t)
			a := make([]float64, s.batch*s.m*s.k)
			w := make([]float64, s.k*s.n)
			for i := range a {
				a[i] = rng.NormFloat64()
			}
			for i := range w {
				w[i] = rng.NormFloat64()
			}
			x := arr(b, tensor.F32, tensor.Shape{s.batch, s.m, s.k}, a...).(*Array)
			y := arr(b, tensor.F32, tensor.Shape{s.k, s.n}, w...).(*Array)
			p, err := planMatmul(x, y)
			if err != "" {
				t.Fatal(err)
			}
			ref := make([]float32, s.batch*s.m*s.n)
			par := make([]float32, len(ref))
			matmulRef(ref, x.buf.f32, y.buf.f32, p)
			matmulPar(par, x.buf.f32, y.buf.f32, p, s.threads)
			nn := make([]float32, len(ref))
			matmulNN(nn, x.buf.f32, y.buf.f32, p)
			for i := range ref {
				if ref[i] != par[i] {
					t.Fatalf("got %v, want %v (index %d)", par[i], ref[i], i)
				}
				if ref[i] != nn[i] {
					t.Fatalf("matmulNN: got %v, want %v (index %d)", nn[i], ref[i], i)
				}
			}
			ref64 := make([]float64, len(ref))
			par64 := make([]float64, len(ref))
			matmulRef(ref64, a, w, p)
			matmulPar(par64, a, w, p, s.threads)
			for i := range ref64 {
				if ref64[i] != par64[i] {
					t.Fatalf("float64: got %v, want %v (index %d)", par64[i], ref64[i], i)
				}
			}
		})
	}
}

// TestMatmulTransposedWeight: Matmul(x, Transpose(W)) reads W's rows in
// place (matmulNT, on kernel.DenseMatmulT) and gives the bits of the
// product with the transposed weight materialised (matmulPar, matmulRef's
// bits), for F32, raw BF16, BF16 values and raw F16 weights, at shapes that
// take each path of the kernels: one and two rows of x (weights read in
// place), more rows (the panel), K past a panel and not a multiple of 8,
// N not a multiple of 16.
func TestMatmulTransposedWeight(t *testing.T) {
	for _, c := range []struct {
		dt     tensor.DType
		values bool // W is an op result (float32 values), not FromHost bytes
	}{{tensor.F32, true}, {tensor.BF16, false}, {tensor.BF16, true}, {tensor.F16, false}} {
		for _, sz := range []struct{ batch, m, k, n int }{{2, 3, 37, 21}, {1, 1, 300, 64}, {1, 2, 40, 32}, {2, 33, 263, 35}} {
			t.Run(name(c.dt, c.values, sz.batch, sz.m, sz.k, sz.n), func(t *testing.T) {
				b := open(t)
				rng := rand.New(rand.NewPCG(3, 5))
				w, x := transposedOperands(b, rng, c.dt, c.values, sz.batch, sz.m, sz.k, sz.n)
				if got := w.(*Array).buf.values; got != c.values {
					t.Fatalf("W holds values: %v, want %v", got, c.values)
				}
				wt := b.Transpose(w)
				if _, ok := b.transposedRows(wt.(*Array), mmPlan{dt: c.dt, k: sz.k, n: sz.n}); !ok {
					t.Fatalf("Transpose(W) not recognised as W's rows")
				}
				got, _ := b.ToHost(b.Matmul(x, wt))
				want, _ := b.ToHost(b.Matmul(x, b.Reshape(wt, sz.k, sz.n))) // a contiguous copy
				if !got.Shape.Equal(tensor.Shape{sz.batch, sz.m, sz.n}) || !bytes.Equal(got.Data, want.Data) {
					t.Errorf("Matmul(x, Wᵀ) differs from the product with a materialised Wᵀ")
				}
			})
		}
	}
}

// transposedOperands returns a random W [n, k] (values storage when values,
// else FromHost bytes) and x [batch, m, k] of dtype dt.
func transposedOperands(b *Backend, rng *rand.Rand, dt tensor.DType, values bool, batch, m, k, n int) (w, x backend.Array) {
	randn := func(shape ...int) backend.Array {
		v := make([]float64, tensor.Shape(shape).Size())
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return arr(b, dt, shape, v...)
	}
	w = randn(n, k)
	if values {
		w = b.Binary(backend.Multiply, w, randn(k))
	}
	return w, randn(batch, m, k)
}

// TestMatmulTransposedWeightFast: in Precision "fast" Matmul(x,
// Transpose(W)) may fuse and reorder its sums; every output is within
// kernel.DenseFastBoundW of the exact sum of the same (dtype) inputs, plus
// one rounding to the dtype (the unit roundoff u of the value: 2^-24,
// 2^-8 or 2^-11 for F32, BF16 and F16).
func TestMatmulTransposedWeightFast(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		u := map[tensor.DType]float64{tensor.F32: 0x1p-24, tensor.BF16: 0x1p-8, tensor.F16: 0x1p-11}[dt]
		for _, sz := range []struct{ batch, m, k, n int }{{1, 1, 576, 48}, {1, 2, 37, 21}, {2, 33, 263, 35}} {
			t.Run(name(dt, sz.batch, sz.m, sz.k, sz.n), func(t *testing.T) {
				b := openWith(t, backend.Options{Precision: "fast"})
				rng := rand.New(rand.NewPCG(4, 6))
				w, x := transposedOperands(b, rng, dt, false, sz.batch, sz.m, sz.k, sz.n)
				got := vals(t, b, b.Matmul(x, b.Transpose(w)))
				wv, xv := vals(t, b, w), vals(t, b, x)
				for r := range sz.batch * sz.m {
					for j := range sz.n {
						var sum, abs float64
						for l := range sz.k {
							p := xv[r*sz.k+l] * wv[j*sz.k+l]
							sum += p
							abs += math.Abs(p)
						}
						bound := kernel.DenseFastBoundW(sz.k, abs, dt != tensor.F32)
						bound += u*(math.Abs(sum)+bound) + 0x1p-50*abs
						if e := math.Abs(got[r*sz.n+j] - sum); !(e <= bound) {
							t.Fatalf("output (%d, %d) = %v, exact %v: error %g over the bound %g", r, j, got[r*sz.n+j], sum, e, bound)
						}
					}
				}
			})
		}
	}
}
