package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

func TestSum(t *testing.T) {
	cases := []struct {
		dt     tensor.DType
		axis   int
		keep   bool
		wantDT tensor.DType
		shape  tensor.Shape
		want   []float64
	}{
		// [[0 1 2] [3 4 5]]: rows sum to 3 and 12, columns to 3, 5, 7
		{tensor.F32, 1, false, tensor.F32, tensor.Shape{2}, []float64{3, 12}},
		{tensor.F32, 0, true, tensor.F32, tensor.Shape{1, 3}, []float64{3, 5, 7}},
		{tensor.BF16, -1, false, tensor.BF16, tensor.Shape{2}, []float64{3, 12}},
		{tensor.U8, 0, false, tensor.U32, tensor.Shape{3}, []float64{3, 5, 7}},
		{tensor.I8, 1, false, tensor.I32, tensor.Shape{2}, []float64{3, 12}},
		{tensor.Bool, 1, false, tensor.I32, tensor.Shape{2}, []float64{2, 3}}, // [[0 1 1] [1 1 1]]
	}
	for _, c := range cases {
		t.Run(name(c.dt, c.axis, c.keep), func(t *testing.T) {
			b := open(t)
			check(t, b, b.Sum(iota6(b, c.dt), c.axis, c.keep), c.wantDT, c.shape, c.want...)
		})
	}
	b := open(t)
	// bf16: 256 + 1 + 1 in float32 is 258, rounded once to bf16 (exact: 258 = 1.0078125·2^8);
	// a bf16 accumulator would give 256 + 1 → 256 twice.
	check(t, b, b.Sum(arr(b, tensor.BF16, tensor.Shape{3}, 256, 1, 1), 0, false), tensor.BF16, tensor.Shape{}, 258)
	opPanic(t, func() { b.Sum(iota6(b, tensor.F32), 2, false) })
}

func TestMaxArgmax(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		in      []float64
		max     float64
		argmax  float64
		comment string
	}{
		{[]float64{1, 3, 3, 2}, 3, 1, "tie: smallest index"},
		{[]float64{1, nan, 3, 3}, nan, 1, "first NaN wins"},
		{[]float64{nan, 1}, nan, 0, "NaN first"},
		{[]float64{3, nan, nan}, nan, 1, "first of two NaNs"},
		{[]float64{-inf, -inf}, -inf, 0, "all -inf"},
		{[]float64{inf, nan}, nan, 1, "NaN beats +inf"},
	}
	for _, c := range cases {
		t.Run(c.comment, func(t *testing.T) {
			b := open(t)
			x := arr(b, tensor.F32, tensor.Shape{len(c.in)}, c.in...)
			check(t, b, b.Max(x, 0, false), tensor.F32, tensor.Shape{}, c.max)
			check(t, b, b.Argmax(x, 0, false), tensor.U32, tensor.Shape{}, c.argmax)
			check(t, b, b.Argmax(b.AsType(x, tensor.BF16), 0, true), tensor.U32, tensor.Shape{1}, c.argmax)
		})
	}
	b := open(t)
	// [[0 1 2] [3 4 5]] along axis 0: row 1 everywhere
	check(t, b, b.Argmax(iota6(b, tensor.I32), 0, false), tensor.U32, tensor.Shape{3}, 1, 1, 1)
	check(t, b, b.Max(iota6(b, tensor.I32), 1, false), tensor.I32, tensor.Shape{2}, 2, 5)
	check(t, b, b.Max(arr(b, tensor.I8, tensor.Shape{2}, -3, -2), 0, false), tensor.I8, tensor.Shape{}, -2)
	opPanic(t, func() { b.Max(b.Zeros(tensor.Shape{2, 0}, tensor.F32), 1, false) })
}

// TestArgmaxRows holds the argmax of a batch's long rows (split across
// the workers) to a plain scan of each row, ties and NaNs included: each
// row's maximum is planted at a row-dependent index, some rows get a tie
// after it, one a NaN.
func TestArgmaxRows(t *testing.T) {
	b := open(t)
	const rows, n = 7, 20000
	v := make([]float64, rows*n)
	r := rand.New(rand.NewPCG(5, 1))
	for i := range v {
		v[i] = r.NormFloat64()
	}
	for row := range rows {
		at := (row*7919 + 13) % n
		v[row*n+at] = 10
		if row%2 == 1 {
			v[row*n+(at+1+row)%n] = 10 // a tie: the first wins
		}
		if row == 5 {
			v[row*n+n-3] = math.NaN()
		}
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		x := arr(b, dt, tensor.Shape{rows, n}, v...)
		got := vals(t, b, b.Argmax(x, -1, false))
		xs := vals(t, b, x)
		for row := range rows {
			want := 0
			for j, e := range xs[row*n : (row+1)*n] {
				if best := xs[row*n+want]; best == best && (e != e || e > best) {
					want = j
				}
			}
			if got[row] != float64(want) {
				t.Errorf("%v row %d: argmax %v, want %d", dt, row, got[row], want)
			}
		}
	}
}

func TestLogSumExp(t *testing.T) {
	b := open(t)
	inf := math.Inf(1)
	// log(e^0 + e^0) = ln 2; log(e^1 + e^1) = 1 + ln 2
	checkTol(t, b, b.LogSumExp(arr(b, tensor.F32, tensor.Shape{2, 2}, 0, 0, 1, 1), 1, false),
		tensor.F32, tensor.Shape{2}, 1e-6, math.Ln2, 1+math.Ln2)
	// Infinite maxima pass through; all -inf gives -inf.
	check(t, b, b.LogSumExp(arr(b, tensor.F32, tensor.Shape{2, 2}, inf, 0, -inf, -inf), 1, true),
		tensor.F32, tensor.Shape{2, 1}, inf, -inf)
	// ln 2 = 0.693147 in bf16: 1.386294·2^-1, 0.386294·128 = 49.4 → 49 → 0.69140625
	check(t, b, b.LogSumExp(arr(b, tensor.BF16, tensor.Shape{2}, 0, 0), 0, false), tensor.BF16, tensor.Shape{}, 0.69140625)
	check(t, b, b.LogSumExp(arr(b, tensor.I32, tensor.Shape{1}, 3), 0, false), tensor.F32, tensor.Shape{}, 3)
}

// TestLogSumExpRows: long lanes go to the workers, and each gets the bits
// it gets reduced alone, in every float dtype, along the last axis (lanes
// of one value, and rows of consecutive values that go four at a time,
// nine of them: groups of four, four and one) and a middle one.
func TestLogSumExpRows(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, c := range []struct {
			axis  int
			shape []int
		}{{-1, []int{5, 30000, 1}}, {-1, []int{9, 1, 20000}}, {1, []int{5, 20000, 2}}} {
			t.Run(fmt.Sprintf("%v/axis%d/%v", dt, c.axis, c.shape), func(t *testing.T) {
				b := open(t)
				axis, shape := c.axis, c.shape
				x := randArray(b, 7, dt, shape...)
				got := vals(t, b, b.LogSumExp(x, axis, false))
				var want []float64
				for r := range shape[0] {
					row := b.Slice(x, []int{r, 0, 0}, []int{r + 1, shape[1], shape[2]})
					want = append(want, vals(t, b, b.LogSumExp(row, axis, false))...)
				}
				if len(got) != len(want) {
					t.Fatalf("%d values, want %d", len(got), len(want))
				}
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
						t.Fatalf("lane %d: %g, alone %g", i, got[i], want[i])
					}
				}
			})
		}
	}
}

// TestLogSumExpContiguous: a lane of consecutive values (the last axis,
// logsumExpRow) gets the bits of the strided loop (the same values down a
// column of the transpose), rows with NaN, infinities and signed zeros
// included.
func TestLogSumExpContiguous(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	special := [][]float32{
		{0, float32(math.Copysign(0, -1)), 0},
		{-inf, -inf, -inf},
		{1, inf, 2},
		{3, nan, -inf},
		{-0.5, -0.25, float32(math.Copysign(0, -1))},
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, n := range []int{3, 7, 513, 1100} {
			t.Run(fmt.Sprintf("%v/%d", dt, n), func(t *testing.T) {
				b := open(t)
				r := rand.New(rand.NewPCG(uint64(n), 5))
				rows := len(special) + 3
				v := make([]float32, rows*n)
				for i := range v {
					v[i] = float32(r.NormFloat64() * 4)
				}
				for i, sp := range special {
					copy(v[i*n:], sp)
				}
				x := b.AsType(b.FromHost(tensor.FromFloat32(tensor.Shape{rows, n}, v)), dt)
				got := vals(t, b, b.LogSumExp(x, -1, false))
				want := vals(t, b, b.LogSumExp(b.Transpose(x, 1, 0), 0, false))
				for i := range want {
					if math.Float64bits(got[i]) != math.Float64bits(want[i]) && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
						t.Fatalf("row %d: contiguous %g, strided %g", i, got[i], want[i])
					}
				}
			})
		}
	}
}

func TestSoftmax(t *testing.T) {
	cases := []struct {
		dt      tensor.DType
		precise bool
		want    []float64
		tol     float64
	}{
		// x = [1, 0, 0]: e = [1, e^-1, e^-1], s = 1 + 2/e = 1.7357589, out = [0.5761169, 0.2119416, 0.2119416]
		{tensor.F32, false, []float64{0.5761168847658291, 0.21194155761708544, 0.21194155761708544}, 1e-7},
		// precise bf16 rounds only the output: 0.576117 = 1.152234·2^-1, 0.152234·128 = 19.49 → 19 → 0.57421875;
		// 0.2119416 = 1.695533·2^-3, 0.695533·128 = 89.03 → 89 → 0.2119140625
		{tensor.BF16, true, []float64{0.57421875, 0.2119140625, 0.2119140625}, 0},
		// bf16 without precise computes in bf16 (MLX's CPU kernel):
		//   e1 = bf16(e^-1 = 0.3678794) = 0.3671875 (1.4715·2^-2, 0.4715·128 = 60.35 → 60)
		//   s = bf16(1 + 0.3671875) = 1.3671875 (exact), then bf16(1.3671875 + 0.3671875) = 1.734375 (exact)
		//   inv = bf16(1/1.734375 = 0.576577) = 0.578125 (1.153153·2^-1, 0.153153·128 = 19.6 → 20)
		//   out = [0.578125, bf16(0.3671875·0.578125 = 0.2122803) = 0.2119140625 (1.69824·2^-3, 89.37 → 89)]
		{tensor.BF16, false, []float64{0.578125, 0.2119140625, 0.2119140625}, 0},
	}
	for _, c := range cases {
		t.Run(name(c.dt, c.precise), func(t *testing.T) {
			b := open(t)
			x := arr(b, c.dt, tensor.Shape{3}, 1, 0, 0)
			checkTol(t, b, b.Softmax(x, -1, c.precise), c.dt, tensor.Shape{3}, c.tol, c.want...)
		})
	}
	b := open(t)
	// Along axis 0 of [[0 1] [0 1]]: every column is [0.5 0.5].
	check(t, b, b.Softmax(arr(b, tensor.F32, tensor.Shape{2, 2}, 0, 1, 0, 1), 0, false), tensor.F32, tensor.Shape{2, 2}, 0.5, 0.5, 0.5, 0.5)
	// A -inf entry gets probability 0.
	check(t, b, b.Softmax(arr(b, tensor.F32, tensor.Shape{2}, math.Inf(-1), 0), 0, false), tensor.F32, tensor.Shape{2}, 0, 1)
	// Integers give float32.
	check(t, b, b.Softmax(arr(b, tensor.I32, tensor.Shape{2}, 5, 5), 0, false), tensor.F32, tensor.Shape{2}, 0.5, 0.5)
	high := openWith(t, backend.Options{Precision: "high"})
	// high ignores precise and rounds once: same as the precise row above.
	check(t, high, high.Softmax(arr(high, tensor.BF16, tensor.Shape{3}, 1, 0, 0), 0, false), tensor.BF16, tensor.Shape{3}, 0.57421875, 0.2119140625, 0.2119140625)
}
