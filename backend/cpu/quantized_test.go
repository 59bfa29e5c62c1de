package cpu

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// ramp returns rows×cols values w[r][c] = (c + r) mod 16: every group of 32
// holds 0..15, so with 4 bits MLX's affine scheme is exact:
// wmin = 0, wmax = 15, s = 15/15 = 1; |wmin| ≤ |wmax| so s = −1 and
// edge = 15; q0 = round(15/−1) = −15, s = 15/−15 = −1, bias = 15;
// q = round((w − 15)/−1) = 15 − w, and −1·(15 − w) + 15 = w.
func ramp(rows, cols int) []float64 {
	v := make([]float64, rows*cols)
	for r := range rows {
		for c := range cols {
			v[r*cols+c] = float64((c + r) % 16)
		}
	}
	return v
}

// exactFor returns rows×cols integers in [0, 2^bits − 1] where every group of
// 32 holds both 0 and n = 2^bits − 1, so (as in ramp) s = −1, bias = n and
// the codes n − w reproduce w exactly.
func exactFor(rows, cols, bits int) []float64 {
	n := 1<<bits - 1
	v := make([]float64, rows*cols)
	for r := range rows {
		for c := range cols {
			switch c % 32 {
			case 0:
				v[r*cols+c] = 0
			case 1:
				v[r*cols+c] = float64(n)
			default:
				v[r*cols+c] = float64((c*37 + r*11) % (n + 1))
			}
		}
	}
	return v
}

func TestQuantizeRoundTrip(t *testing.T) {
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		t.Run(name("bits", bits), func(t *testing.T) {
			b := open(t)
			w := exactFor(2, 128, bits)
			q := b.Quantize(arr(b, tensor.BF16, tensor.Shape{2, 128}, w...), 32, bits)
			if got := q.W.Shape(); !got.Equal(tensor.Shape{2, 4 * bits}) {
				t.Errorf("W shape: got %v, want [2 %d] (128·%d/32)", got, 4*bits, bits)
			}
			check(t, b, b.Dequantize(q), tensor.BF16, tensor.Shape{2, 128}, w...)
		})
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, gs := range []int{32, 64} {
			t.Run(name(dt, gs), func(t *testing.T) {
				b := open(t)
				w := ramp(3, 64)
				q := b.Quantize(arr(b, dt, tensor.Shape{3, 64}, w...), gs, 4)
				if got := q.W.Shape(); !got.Equal(tensor.Shape{3, 8}) || q.W.DType() != tensor.U32 {
					t.Errorf("W: got %v %v, want U32 [3 8]", q.W.DType(), got)
				}
				if got := q.Scales.Shape(); !got.Equal(tensor.Shape{3, 64 / gs}) || q.Scales.DType() != dt {
					t.Errorf("scales: got %v %v, want %v [3 %d]", q.Scales.DType(), got, dt, 64/gs)
				}
				check(t, b, b.Dequantize(q), dt, tensor.Shape{3, 64}, w...)
				if r, c := q.Dims(); r != 3 || c != 64 {
					t.Errorf("Dims: got %d×%d, want 3×64", r, c)
				}
			})
		}
	}
}

func TestQuantizedMatmul(t *testing.T) {
	// Integer values (exactFor) keep the quantization, every product and
	// every sum exact in float32, so the result must equal Matmul on the
	// dequantized weight exactly.
	cases := []struct {
		transpose bool
		xShape    tensor.Shape
		wShape    tensor.Shape // logical W as stored: [N, K] transposed, [K, N] not
		bits      int
	}{
		{true, tensor.Shape{2, 64}, tensor.Shape{5, 64}, 4},
		{true, tensor.Shape{2, 3, 64}, tensor.Shape{4, 64}, 8},
		{false, tensor.Shape{3, 4}, tensor.Shape{4, 64}, 4},
		{true, tensor.Shape{1, 64}, tensor.Shape{3, 64}, 2},
		{true, tensor.Shape{1, 64}, tensor.Shape{3, 64}, 3},
		{true, tensor.Shape{1, 64}, tensor.Shape{3, 64}, 5},
		{true, tensor.Shape{1, 64}, tensor.Shape{3, 64}, 6},
		// batched W [2, N, K] with x [2, 1, K]
		{true, tensor.Shape{2, 1, 64}, tensor.Shape{2, 3, 64}, 4},
		// batch broadcast: x [1, 2, K] against W [3, N, K] → [3, 2, N]
		{true, tensor.Shape{1, 2, 64}, tensor.Shape{3, 2, 64}, 4},
	}
	for _, c := range cases {
		t.Run(name(c.transpose, c.xShape, c.wShape, c.bits), func(t *testing.T) {
			b := open(t)
			xv := make([]float64, c.xShape.Size())
			for i := range xv {
				xv[i] = float64(i%5) - 2
			}
			x := arr(b, tensor.BF16, c.xShape, xv...)
			rows := c.wShape.Size() / c.wShape[len(c.wShape)-1]
			w := arr(b, tensor.BF16, c.wShape, exactFor(rows, c.wShape[len(c.wShape)-1], c.bits)...)
			q := b.Quantize(w, 32, c.bits)
			got := b.QuantizedMatmul(x, q, c.transpose)
			dq := b.Dequantize(q)
			if c.transpose {
				n := len(c.wShape)
				axes := make([]int, n)
				for i := range axes {
					axes[i] = i
				}
				axes[n-2], axes[n-1] = n-1, n-2
				dq = b.Transpose(dq, axes...)
			}
			want := b.Matmul(x, dq)
			check(t, b, got, tensor.BF16, want.Shape(), vals(t, b, want)...)
		})
	}
}

func TestQuantizedMatmulPromotion(t *testing.T) {
	b := open(t)
	w := b.Quantize(arr(b, tensor.F16, tensor.Shape{1, 32}, ramp(1, 32)...), 32, 4)
	x := arr(b, tensor.BF16, tensor.Shape{1, 32}, ramp(1, 32)...)
	// Σ c² for c = 0..15, twice: 2·1240 = 2480; bf16 with f16 scales → f32
	check(t, b, b.QuantizedMatmul(x, w, true), tensor.F32, tensor.Shape{1, 1}, 2480)
}

// TestQuantizedEmbedding gathers rows of W, Scales and Biases with Take, as
// nn.QuantizedEmbedding does, and checks they dequantize to the same rows.
func TestQuantizedEmbedding(t *testing.T) {
	b := open(t)
	q := b.Quantize(arr(b, tensor.BF16, tensor.Shape{4, 64}, ramp(4, 64)...), 64, 4)
	ids := arr(b, tensor.I32, tensor.Shape{1, 2}, 3, 1)
	rows := backend.QuantizedArray{
		W: b.Take(q.W, ids, 0), Scales: b.Take(q.Scales, ids, 0), Biases: b.Take(q.Biases, ids, 0),
		GroupSize: 64, Bits: 4,
	}
	got := b.Dequantize(rows)
	want := b.Take(b.Dequantize(q), ids, 0)
	check(t, b, got, tensor.BF16, tensor.Shape{1, 2, 64}, vals(t, b, want)...)
}

func TestQuantizedValidation(t *testing.T) {
	b := open(t)
	w := arr(b, tensor.F32, tensor.Shape{2, 64}, ramp(2, 64)...)
	q := b.Quantize(w, 32, 4)
	x := b.Zeros(tensor.Shape{1, 64}, tensor.F32)
	cases := map[string]func(){
		"bits7":   func() { b.Quantize(w, 32, 7) },
		"group16": func() { b.Quantize(w, 16, 4) },
		"cols":    func() { b.Quantize(arr(b, tensor.F32, tensor.Shape{1, 48}, ramp(1, 48)...), 32, 4) },
		"1-D":     func() { b.Quantize(arr(b, tensor.F32, tensor.Shape{64}, ramp(1, 64)...), 32, 4) },
		"int":     func() { b.Quantize(b.Zeros(tensor.Shape{2, 64}, tensor.I32), 32, 4) },
		"wrong-bits": func() {
			b.Dequantize(backend.QuantizedArray{W: q.W, Scales: q.Scales, Biases: q.Biases, GroupSize: 32, Bits: 8})
		},
		"biases-shape": func() {
			b.Dequantize(backend.QuantizedArray{W: q.W, Scales: q.Scales, Biases: x, GroupSize: 32, Bits: 4})
		},
		"W-not-u32": func() {
			b.Dequantize(backend.QuantizedArray{W: w, Scales: q.Scales, Biases: q.Biases, GroupSize: 32, Bits: 4})
		},
		"x-K":         func() { b.QuantizedMatmul(b.Zeros(tensor.Shape{1, 32}, tensor.F32), q, true) },
		"x-K-notrans": func() { b.QuantizedMatmul(x, q, false) },
	}
	for n, fn := range cases {
		t.Run(n, func(t *testing.T) { opPanic(t, fn) })
	}
}
