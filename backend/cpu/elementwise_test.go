package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

var nan = math.NaN()

func TestBinary(t *testing.T) {
	F32, I32, U8, BF16 := tensor.F32, tensor.I32, tensor.U8, tensor.BF16
	cases := []struct {
		op     backend.BinaryOp
		dt     tensor.DType
		a, b   []float64
		wantDT tensor.DType
		want   []float64
	}{
		{backend.Add, F32, []float64{1, 2.5}, []float64{3, -0.5}, F32, []float64{4, 2}},
		{backend.Subtract, F32, []float64{1, 2.5}, []float64{3, -0.5}, F32, []float64{-2, 3}},
		{backend.Multiply, F32, []float64{1.5, -2}, []float64{4, 3}, F32, []float64{6, -6}},
		{backend.Divide, F32, []float64{1, 3}, []float64{4, 2}, F32, []float64{0.25, 1.5}},
		// 1/3 in float32 is 0.3333333432674408 (0x3EAAAAAB).
		{backend.Divide, F32, []float64{1}, []float64{3}, F32, []float64{float64(float32(1.0 / 3))}},
		// Integer divide promotes to float32 (MLX at_least_float): 7/2 = 3.5.
		{backend.Divide, I32, []float64{7}, []float64{2}, F32, []float64{3.5}},
		{backend.Maximum, F32, []float64{1, nan, 2}, []float64{2, 1, nan}, F32, []float64{2, nan, nan}},
		{backend.Minimum, F32, []float64{1, nan, 2}, []float64{2, 1, nan}, F32, []float64{1, nan, nan}},
		{backend.Equal, F32, []float64{1, nan, 2}, []float64{1, nan, 3}, tensor.Bool, []float64{1, 0, 0}},
		{backend.Less, F32, []float64{1, 2, nan}, []float64{2, 2, 1}, tensor.Bool, []float64{1, 0, 0}},
		{backend.Greater, I32, []float64{-1, 3}, []float64{-2, 3}, tensor.Bool, []float64{1, 0}},
		// bf16: 1 + 2^-8 is not representable; RNE ties to even gives 1.
		{backend.Add, BF16, []float64{1}, []float64{1.0 / 256}, BF16, []float64{1}},
		// 1 + 3·2^-8 = 1.01171875 ties between 1.0078125 and 1.015625: even is 1.015625.
		{backend.Add, BF16, []float64{1}, []float64{3.0 / 256}, BF16, []float64{1.015625}},
		// uint8 wraps: 250 + 10 = 260 → 4; 3 − 5 → 254.
		{backend.Add, U8, []float64{250}, []float64{10}, U8, []float64{4}},
		{backend.Subtract, U8, []float64{3}, []float64{5}, U8, []float64{254}},
		// int32 multiply wraps: 65536·65536 = 2^32 → 0.
		{backend.Multiply, I32, []float64{65536}, []float64{65536}, I32, []float64{0}},
		{backend.Maximum, I32, []float64{-5}, []float64{-7}, I32, []float64{-5}},
		// Bool: add is or, multiply is and, subtract is xor (MLX).
		{backend.Add, tensor.Bool, []float64{1, 0}, []float64{1, 0}, tensor.Bool, []float64{1, 0}},
		{backend.Multiply, tensor.Bool, []float64{1, 1}, []float64{1, 0}, tensor.Bool, []float64{1, 0}},
		{backend.Subtract, tensor.Bool, []float64{1, 1}, []float64{0, 1}, tensor.Bool, []float64{1, 0}},
	}
	for _, c := range cases {
		t.Run(name(c.op, c.dt, c.a), func(t *testing.T) {
			b := open(t)
			n := tensor.Shape{len(c.a)}
			out := b.Binary(c.op, arr(b, c.dt, n, c.a...), arr(b, c.dt, n, c.b...))
			check(t, b, out, c.wantDT, n, c.want...)
		})
	}
}

func TestBinaryBroadcast(t *testing.T) {
	cases := []struct {
		as, bs tensor.Shape
		a, b   []float64
		out    tensor.Shape
		want   []float64
	}{
		// [2,1] + [3] → [2,3]: row i adds a[i] to every b[j].
		{tensor.Shape{2, 1}, tensor.Shape{3}, []float64{10, 20}, []float64{1, 2, 3}, tensor.Shape{2, 3}, []float64{11, 12, 13, 21, 22, 23}},
		// scalar + [2,2]
		{tensor.Shape{}, tensor.Shape{2, 2}, []float64{1}, []float64{1, 2, 3, 4}, tensor.Shape{2, 2}, []float64{2, 3, 4, 5}},
		// [1,2,1] + [2,1,2] → [2,2,2]: out[i,j,k] = a[j] + b[i,k]
		{tensor.Shape{1, 2, 1}, tensor.Shape{2, 1, 2}, []float64{100, 200}, []float64{1, 2, 3, 4}, tensor.Shape{2, 2, 2},
			[]float64{101, 102, 201, 202, 103, 104, 203, 204}},
	}
	for _, c := range cases {
		t.Run(name(c.as, c.bs), func(t *testing.T) {
			b := open(t)
			out := b.Binary(backend.Add, arr(b, tensor.F32, c.as, c.a...), arr(b, tensor.F32, c.bs, c.b...))
			check(t, b, out, tensor.F32, c.out, c.want...)
		})
	}
	b := open(t)
	opPanic(t, func() {
		b.Binary(backend.Add, b.Zeros(tensor.Shape{2}, tensor.F32), b.Zeros(tensor.Shape{3}, tensor.F32))
	})
}

func TestBinaryPromotion(t *testing.T) {
	cases := []struct {
		a, b tensor.DType
		av   float64
		want tensor.DType
		sum  float64 // av + 1
	}{
		{tensor.BF16, tensor.F16, 1.5, tensor.F32, 2.5},
		{tensor.I32, tensor.BF16, 1.5, tensor.BF16, 2}, // 1.5 → int32 1 (astype truncates), 1 + 1 = 2
		// int32 257 → bf16 is 256 (RNE: 257 = 1.00390625·2^8, 8 mantissa bits keep 1.0), + 1 → 257 → 256
		{tensor.I32, tensor.BF16, 257, tensor.BF16, 256},
		{tensor.F16, tensor.F32, 0.5, tensor.F32, 1.5},
		{tensor.U8, tensor.I8, 200, tensor.I16, 201},
		{tensor.U32, tensor.I32, 7, tensor.I64, 8},
		{tensor.Bool, tensor.F16, 1, tensor.F16, 2},
		{tensor.F64, tensor.BF16, 0.1, tensor.F64, 1.1},
	}
	for _, c := range cases {
		t.Run(name(c.a, c.b), func(t *testing.T) {
			b := open(t)
			out := b.Binary(backend.Add, arr(b, c.a, tensor.Shape{1}, c.av), arr(b, c.b, tensor.Shape{1}, 1))
			check(t, b, out, c.want, tensor.Shape{1}, c.sum)
		})
	}
}

func TestUnary(t *testing.T) {
	F32, BF16 := tensor.F32, tensor.BF16
	cases := []struct {
		op     backend.UnaryOp
		dt     tensor.DType
		in     []float64
		wantDT tensor.DType
		want   []float64
		tol    float64
	}{
		{backend.Exp, F32, []float64{0, 1}, F32, []float64{1, math.E}, 1e-6},
		{backend.Exp, tensor.I32, []float64{0}, F32, []float64{1}, 0},
		{backend.Log, F32, []float64{1, math.E}, F32, []float64{0, 1}, 1e-7},
		{backend.Negative, F32, []float64{2, -0.5}, F32, []float64{-2, 0.5}, 0},
		{backend.Negative, tensor.I8, []float64{-128, 3}, tensor.I8, []float64{-128, -3}, 0}, // −(−128) wraps
		{backend.Abs, F32, []float64{-2, 3}, F32, []float64{2, 3}, 0},
		{backend.Abs, tensor.I32, []float64{-2, 3}, tensor.I32, []float64{2, 3}, 0},
		{backend.Sqrt, F32, []float64{4, 2}, F32, []float64{2, float64(float32(math.Sqrt2))}, 0},
		{backend.Rsqrt, F32, []float64{4, 0.25}, F32, []float64{0.5, 2}, 0},
		{backend.Square, F32, []float64{-3, 1.5}, F32, []float64{9, 2.25}, 0},
		{backend.Square, tensor.I32, []float64{-3}, tensor.I32, []float64{9}, 0},
		// sigmoid(0): e = exp(0) = 1, y = 1/2, x ≥ 0 → 1 − 1/2 = 0.5.
		// sigmoid(−100): e = exp(100) = +Inf in float32 (> 88), y = 1/(1+Inf) = 0.
		// sigmoid(100) = 1 − 0 = 1.
		{backend.Sigmoid, F32, []float64{0, -100, 100}, F32, []float64{0.5, 0, 1}, 0},
		// sigmoid(2) = 1/(1+e^-2) = 0.8807970779778823
		{backend.Sigmoid, F32, []float64{2}, F32, []float64{0.8807970779778823}, 1e-7},
		// bf16 sigmoid(2): e = bf16(e^2 = 7.389) = 7.375 (7.389 = 1.847·4, 0.847·128 = 108.4 → 108 → 1.84375·4),
		// y = 1/8.375 = 0.119403, 1 − y = 0.880597 → bf16: 0.880597 = 1.761194·2^-1, 0.761194·128 = 97.43 → 97 → 0.87890625
		{backend.Sigmoid, BF16, []float64{2}, BF16, []float64{0.87890625}, 0},
		// silu(0) = 0; silu(−100) = −100·0 = 0 (negative zero); silu(2) = 2·0.880797 = 1.761594
		{backend.SiLU, F32, []float64{0, -100, 2}, F32, []float64{0, 0, 1.7615941559557646}, 1e-6},
		// bf16 silu(2) = bf16(2 · bf16 sigmoid(2)) = bf16(2·0.87890625) = 1.7578125 (exact)
		{backend.SiLU, BF16, []float64{2}, BF16, []float64{1.7578125}, 0},
		{backend.Tanh, F32, []float64{0, 1}, F32, []float64{0, math.Tanh(1)}, 1e-7},
		{backend.Sin, F32, []float64{0, math.Pi / 2}, F32, []float64{0, 1}, 1e-7},
		{backend.Cos, F32, []float64{0}, F32, []float64{1}, 0},
		{backend.Exp, F32, []float64{nan}, F32, []float64{nan}, 0},
	}
	for _, c := range cases {
		t.Run(name(c.op, c.dt, c.in), func(t *testing.T) {
			b := open(t)
			n := tensor.Shape{len(c.in)}
			checkTol(t, b, b.Unary(c.op, arr(b, c.dt, n, c.in...)), c.wantDT, n, c.tol, c.want...)
		})
	}
	b := open(t)
	opPanic(t, func() { b.Unary(backend.Negative, b.Zeros(tensor.Shape{1}, tensor.Bool)) })
}

// TestHighPrecision checks that "high" differs from "reference" where
// float32 rounding inside the op matters, and agrees after the final
// rounding where it does not.
func TestHighPrecision(t *testing.T) {
	ref, high := open(t), openWith(t, backend.Options{Precision: "high"})
	// Σ of 1 and 2^-25 four times: float32 loses each 2^-25 (half an ulp of 1,
	// ties to even), float64 keeps them: 1 + 2^-23 exactly, which is float32.
	in := []float64{1, math.Ldexp(1, -25), math.Ldexp(1, -25), math.Ldexp(1, -25), math.Ldexp(1, -25)}
	r := ref.Sum(arr(ref, tensor.F32, tensor.Shape{5}, in...), 0, false)
	h := high.Sum(arr(high, tensor.F32, tensor.Shape{5}, in...), 0, false)
	check(t, ref, r, tensor.F32, tensor.Shape{}, 1)
	check(t, high, h, tensor.F32, tensor.Shape{}, 1+math.Ldexp(1, -23))
}

func TestAsType(t *testing.T) {
	cases := []struct {
		from, to tensor.DType
		in, want []float64
	}{
		{tensor.F32, tensor.BF16, []float64{1.00390625, 1.01171875}, []float64{1, 1.015625}}, // ties to even
		{tensor.F32, tensor.I32, []float64{-2.7, 2.7}, []float64{-2, 2}},
		{tensor.I32, tensor.Bool, []float64{0, -3}, []float64{0, 1}},
		{tensor.F32, tensor.F32, []float64{1.5}, []float64{1.5}},
	}
	for _, c := range cases {
		t.Run(name(c.from, c.to), func(t *testing.T) {
			b := open(t)
			n := tensor.Shape{len(c.in)}
			check(t, b, b.AsType(arr(b, c.from, n, c.in...), c.to), c.to, n, c.want...)
		})
	}
}

func TestWhere(t *testing.T) {
	b := open(t)
	cond := arr(b, tensor.Bool, tensor.Shape{2, 1}, 1, 0)
	x := arr(b, tensor.BF16, tensor.Shape{3}, 1, 2, 3)
	y := arr(b, tensor.F32, tensor.Shape{}, -1)
	// row 0 takes x, row 1 takes y; bf16 with f32 promotes to f32
	check(t, b, b.Where(cond, x, y), tensor.F32, tensor.Shape{2, 3}, 1, 2, 3, -1, -1, -1)
	opPanic(t, func() { b.Where(cond, b.Zeros(tensor.Shape{3, 2}, tensor.F32), y) })
}

// TestBinaryRows holds binaryF32's row loops (binaryRows, and binaryLoop's
// fast cases, binaryFast) to the element-by-element broadcast they
// replace, bit for bit (NaNs included), on shapes that take them and
// shapes that do not.
func TestBinaryRows(t *testing.T) {
	cases := []struct {
		as, bs tensor.Shape
		rows   bool // binaryRows takes it
	}{
		{tensor.Shape{8, 1, 40}, tensor.Shape{8, 1, 1}, true},  // logits - logsumexp
		{tensor.Shape{7, 33}, tensor.Shape{7, 33}, true},       // same shapes (a residual add)
		{tensor.Shape{5, 19}, tensor.Shape{1}, true},           // one value for all
		{tensor.Shape{8, 1, 1}, tensor.Shape{8, 1, 40}, true},  // scalar per row on the left
		{tensor.Shape{3, 4, 32}, tensor.Shape{32}, true},       // a shared vector
		{tensor.Shape{1, 32}, tensor.Shape{5, 2, 32}, true},    // the vector on the left
		{tensor.Shape{2, 3, 16}, tensor.Shape{2, 1, 16}, true}, // a middle axis broadcast
		{tensor.Shape{4, 1, 20}, tensor.Shape{1, 3, 20}, true}, // both broadcast over the outer axes
		{tensor.Shape{2, 3, 17}, tensor.Shape{2, 3, 1}, true},  // odd rows
		{tensor.Shape{2, 8, 4}, tensor.Shape{2, 8, 1}, false},  // rows under minBinaryRow: the walk
		{tensor.Shape{3, 1, 16}, tensor.Shape{3, 16, 1}, true}, // inner rows of 16: a in order, b one value each
		{tensor.Shape{5, 3}, tensor.Shape{5, 1}, false},        // rows of 3
		// Long rows, split over the workers:
		{tensor.Shape{8, 1, 40000}, tensor.Shape{8, 1, 1}, true},     // a batch's logits - logsumexp
		{tensor.Shape{3, 4, 12000}, tensor.Shape{12000}, true},       // a shared vector
		{tensor.Shape{4, 1, 20000}, tensor.Shape{1, 3, 20000}, true}, // both broadcast over the outer axes
	}
	ops := []backend.BinaryOp{backend.Add, backend.Subtract, backend.Multiply, backend.Divide, backend.Maximum, backend.Minimum}
	rng := rand.New(rand.NewPCG(1, 2))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
			if rng.IntN(9) == 0 {
				v[i] = float32(math.NaN())
			}
		}
		return v
	}
	for _, c := range cases {
		shape, ok := broadcastInto(nil, c.as, c.bs)
		if !ok {
			t.Fatalf("%v and %v do not broadcast", c.as, c.bs)
		}
		a, b := vals(c.as.Size()), vals(c.bs.Size())
		for _, op := range ops {
			t.Run(name(c.as, c.bs)+"/"+op.String(), func(t *testing.T) {
				got, want := make([]float32, shape.Size()), make([]float32, shape.Size())
				if binaryRows(op, got, a, b, shape, c.as, c.bs) != c.rows {
					t.Fatalf("binaryRows took it: %v, want %v", !c.rows, c.rows)
				}
				binaryF32(op, got, a, b, shape, c.as, c.bs)
				f := binaryF(op, false)
				broadcast2(shape, c.as, c.bs, func(k, i, j int) { want[k] = float32(f(float64(a[i]), float64(b[j]))) })
				for k := range want {
					if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
						t.Fatalf("element %d: %g, want %g", k, got[k], want[k])
					}
				}
			})
		}
	}
}

// TestReadFloat32 holds ReadFloat32 (backend.HostReader) to what ToHost
// of AsType F32 gives, bit for bit: arrays from the host (raw storage) and
// computed ones (float32 values storage) in every float dtype and int32, a
// transposed view, and a buffer of the wrong size refused.
func TestReadFloat32(t *testing.T) {
	b := open(t)
	in := []float64{1.5, -2.25, 3.0078125, 65504, -0.0001, 7}
	sh := tensor.Shape{2, 3}
	type readCase struct {
		name string
		a    backend.Array
	}
	var cases []readCase
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.I32} {
		x := arr(b, dt, sh, in...)
		cases = append(cases, readCase{dt.String() + "/host", x}, readCase{dt.String() + "/computed", b.Binary(backend.Add, x, x)},
			readCase{dt.String() + "/transposed", b.Transpose(x, 1, 0)})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := b.ToHost(b.AsType(c.a, tensor.F32))
			if err != nil {
				t.Fatal(err)
			}
			want := h.ToFloat32()
			got := make([]float32, len(want))
			if err := b.ReadFloat32(got, c.a); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
				}
			}
			if err := b.ReadFloat32(make([]float32, len(want)+1), c.a); err == nil {
				t.Errorf("a buffer of %d values for %d elements: no error", len(want)+1, len(want))
			}
		})
	}
}
