package cpu

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

func TestRMSNorm(t *testing.T) {
	b := open(t)
	// x = [3 4]: mean(x²) = (9+16)/2 = 12.5, rsqrt(12.5) = 0.28284271;
	// x·inv = [0.84852814, 1.13137085]; weight [1 2] → [0.84852814, 2.2627417]
	x := arr(b, tensor.F32, tensor.Shape{1, 2}, 3, 4)
	w := arr(b, tensor.F32, tensor.Shape{2}, 1, 2)
	checkTol(t, b, b.RMSNorm(x, w, 0), tensor.F32, tensor.Shape{1, 2}, 1e-6, 0.848528137423857, 2.262741699796952)
	// two rows; the second is [0 0] with eps 1: inv = 1, output 0
	x2 := arr(b, tensor.F32, tensor.Shape{2, 2}, 3, 4, 0, 0)
	checkTol(t, b, b.RMSNorm(x2, w, 1), tensor.F32, tensor.Shape{2, 2}, 1e-6,
		3/math.Sqrt(13.5), 8/math.Sqrt(13.5), 0, 0)
	// bf16 x with f32 weight promotes to f32; nil weight means ones
	xb := arr(b, tensor.BF16, tensor.Shape{2}, 3, 4)
	if got := b.RMSNorm(xb, w, 0).DType(); got != tensor.F32 {
		t.Errorf("bf16 x, f32 weight: got dtype %v, want F32", got)
	}
	// bf16 output: 0.848528 = 1.697056·2^-1, 0.697056·128 = 89.2 → 89 → 0.84765625;
	// 1.131371 = 1.131371·2^0, 0.131371·128 = 16.8 → 17 → 1.1328125
	check(t, b, b.RMSNorm(xb, nil, 0), tensor.BF16, tensor.Shape{2}, 0.84765625, 1.1328125)
	opPanic(t, func() { b.RMSNorm(x, arr(b, tensor.F32, tensor.Shape{3}, 1, 1, 1), 0) })
}

func TestRoPE(t *testing.T) {
	c1, s1 := math.Cos(1), math.Sin(1)
	c3, s3 := math.Cos(3), math.Sin(3)
	cases := []struct {
		name   string
		offset func(b *Backend) backend.Offset
		want   []float64
	}{
		// x [B=2, H=1, L=1, D=2] = [1 0] per row, dims 2: θ = position·Base^0 = position;
		// [1 0] rotates to [cos θ, sin θ]
		{"scalar1", func(*Backend) backend.Offset { return backend.Offset{Scalar: 1} }, []float64{c1, s1, c1, s1}},
		{"rows1,3", func(b *Backend) backend.Offset {
			return backend.Offset{Rows: arr(b, tensor.I32, tensor.Shape{2}, 1, 3)}
		}, []float64{c1, s1, c3, s3}},
		{"zero", func(*Backend) backend.Offset { return backend.Offset{} }, []float64{1, 0, 1, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := open(t)
			x := arr(b, tensor.F32, tensor.Shape{2, 1, 1, 2}, 1, 0, 1, 0)
			p := backend.RoPE{Dims: 2, Base: 10000, Scale: 1}
			checkTol(t, b, b.RoPE(x, p, c.offset(b)), tensor.F32, tensor.Shape{2, 1, 1, 2}, 1e-6, c.want...)
		})
	}
	b := open(t)
	// Freqs: inv_freq = 1/Freqs[0] = 0.5, position 2 (offset 0, token 2 of L=3) → θ = 1.
	// D = 3 with dims 2: the third feature passes through.
	x := arr(b, tensor.F32, tensor.Shape{1, 3, 3}, 1, 0, 7, 1, 0, 7, 1, 0, 7)
	p := backend.RoPE{Dims: 2, Scale: 1, Freqs: arr(b, tensor.F32, tensor.Shape{1}, 2)}
	c05, s05 := math.Cos(0.5), math.Sin(0.5)
	checkTol(t, b, b.RoPE(x, p, backend.Offset{}), tensor.F32, tensor.Shape{1, 3, 3}, 1e-6,
		1, 0, 7, c05, s05, 7, c1, s1, 7)
	opPanic(t, func() { b.RoPE(x, backend.RoPE{Dims: 3, Base: 10000, Scale: 1}, backend.Offset{}) })
	opPanic(t, func() {
		b.RoPE(b.Zeros(tensor.Shape{2, 2}, tensor.F32), backend.RoPE{Dims: 2, Base: 1, Scale: 1}, backend.Offset{})
	})
	opPanic(t, func() {
		b.RoPE(x, backend.RoPE{Dims: 2, Base: 1, Scale: 1}, backend.Offset{Rows: arr(b, tensor.I32, tensor.Shape{2}, 0, 0)})
	})
}

func TestSDPA(t *testing.T) {
	ln3 := math.Log(3)
	type tc struct {
		name      string
		q, k, v   backend.Array
		mask      func(b *Backend) backend.Mask
		shape     tensor.Shape
		want      []float64
		wantPanic bool
	}
	build := func(b *Backend) []tc {
		// One query q = [1], keys [0, ln 3], values [4, 8], scale 1:
		// scores [0, ln 3] → softmax [1/4, 3/4] → 4/4 + 3·8/4 = 7.
		q := arr(b, tensor.F32, tensor.Shape{1, 1, 1, 1}, 1)
		k := arr(b, tensor.F32, tensor.Shape{1, 1, 2, 1}, 0, ln3)
		v := arr(b, tensor.F32, tensor.Shape{1, 1, 2, 1}, 4, 8)
		// Two queries with the same keys; causal, L = S = 2: query 0 sees key 0 only (→ 4),
		// query 1 sees both (→ 7).
		q2 := arr(b, tensor.F32, tensor.Shape{1, 1, 2, 1}, 1, 1)
		// GQA: 2 query heads on 1 KV head, both get 7.
		qg := arr(b, tensor.F32, tensor.Shape{1, 2, 1, 1}, 1, 1)
		return []tc{
			{"none", q, k, v, func(*Backend) backend.Mask { return backend.NoMask{} }, tensor.Shape{1, 1, 1, 1}, []float64{7}, false},
			{"nil", q, k, v, func(*Backend) backend.Mask { return nil }, tensor.Shape{1, 1, 1, 1}, []float64{7}, false},
			{"causal", q2, k, v, func(*Backend) backend.Mask { return backend.CausalMask{} }, tensor.Shape{1, 1, 2, 1}, []float64{4, 7}, false},
			// L=1, S=2 causal: the query is the last position and sees both keys.
			{"causal-decode", q, k, v, func(*Backend) backend.Mask { return backend.CausalMask{} }, tensor.Shape{1, 1, 1, 1}, []float64{7}, false},
			{"gqa", qg, k, v, func(*Backend) backend.Mask { return backend.NoMask{} }, tensor.Shape{1, 2, 1, 1}, []float64{7, 7}, false},
			// Bool mask [S] broadcast over B, H, L: hide key 1 → 4.
			{"bool", q2, k, v, func(b *Backend) backend.Mask {
				return backend.ArrayMask{A: arr(b, tensor.Bool, tensor.Shape{2}, 1, 0)}
			}, tensor.Shape{1, 1, 2, 1}, []float64{4, 4}, false},
			// Per-query bool mask [L, S]: query 0 sees key 1 only (→ 8), query 1 both (→ 7).
			{"bool-LS", q2, k, v, func(b *Backend) backend.Mask {
				return backend.ArrayMask{A: arr(b, tensor.Bool, tensor.Shape{2, 2}, 0, 1, 1, 1)}
			}, tensor.Shape{1, 1, 2, 1}, []float64{8, 7}, false},
			// Additive mask [0, -ln 3] cancels key 1's score: softmax [1/2, 1/2] → 6.
			{"add", q, k, v, func(b *Backend) backend.Mask {
				return backend.ArrayMask{A: arr(b, tensor.F32, tensor.Shape{1, 1, 1, 2}, 0, -ln3)}
			}, tensor.Shape{1, 1, 1, 1}, []float64{6}, false},
			{"mask-f64-on-f32", q, k, v, func(b *Backend) backend.Mask {
				return backend.ArrayMask{A: arr(b, tensor.F64, tensor.Shape{2}, 0, 0)}
			}, nil, nil, true},
			{"mask-bad-shape", q, k, v, func(b *Backend) backend.Mask {
				return backend.ArrayMask{A: arr(b, tensor.Bool, tensor.Shape{3}, 1, 1, 1)}
			}, nil, nil, true},
			{"heads-not-multiple", arr(b, tensor.F32, tensor.Shape{1, 3, 1, 1}, 1, 1, 1),
				arr(b, tensor.F32, tensor.Shape{1, 2, 2, 1}, 0, 0, 0, 0), arr(b, tensor.F32, tensor.Shape{1, 2, 2, 1}, 0, 0, 0, 0),
				func(*Backend) backend.Mask { return nil }, nil, nil, true},
		}
	}
	for i, c := range build(open(t)) {
		t.Run(c.name, func(t *testing.T) {
			b := open(t)
			c := build(b)[i]
			if c.wantPanic {
				opPanic(t, func() { b.ScaledDotProductAttention(c.q, c.k, c.v, 1, c.mask(b)) })
				return
			}
			checkTol(t, b, b.ScaledDotProductAttention(c.q, c.k, c.v, 1, c.mask(b)), tensor.F32, c.shape, 1e-5, c.want...)
		})
	}
}

func TestSwiGLU(t *testing.T) {
	b := open(t)
	// silu(0)·5 = 0; silu(1)·2 = 2·sigmoid(1) = 2·0.7310586 = 1.4621172
	g := arr(b, tensor.F32, tensor.Shape{2}, 0, 1)
	u := arr(b, tensor.F32, tensor.Shape{2}, 5, 2)
	checkTol(t, b, b.SwiGLU(g, u), tensor.F32, tensor.Shape{2}, 1e-6, 0, 2/(1+math.Exp(-1)))
	// bf16: sigmoid(2) = 0.87890625 and silu(2) = 1.7578125 (see TestUnary); ·1 → 1.7578125
	check(t, b, b.SwiGLU(arr(b, tensor.BF16, tensor.Shape{1}, 2), arr(b, tensor.BF16, tensor.Shape{1}, 1)), tensor.BF16, tensor.Shape{1}, 1.7578125)
	// SwiGLU agrees with SiLU then Multiply, bit for bit (same rounding points).
	gb := arr(b, tensor.BF16, tensor.Shape{5}, -3.1, -0.4, 0.3, 1.7, 6.2)
	ub := arr(b, tensor.BF16, tensor.Shape{5}, 0.9, -1.3, 2.2, 0.05, -0.7)
	want := vals(t, b, b.Binary(backend.Multiply, b.Unary(backend.SiLU, gb), ub))
	check(t, b, b.SwiGLU(gb, ub), tensor.BF16, tensor.Shape{5}, want...)
	opPanic(t, func() { b.SwiGLU(g, arr(b, tensor.F32, tensor.Shape{1}, 1)) })
}

// TestSDPARows: ScaledDotProductAttentionRows gives, bit for bit, what
// AttendRowsComposed (each row alone through ScaledDotProductAttention)
// gives, in every precision and float dtype, on rows of different
// lengths whose keys and values are views of longer cache buffers; while
// gradients are recorded it gives the composed gradients; and bad
// arguments panic with an OpError.
func TestSDPARows(t *testing.T) {
	const H, Hk, D = 6, 2, 64
	lens := []int{5, 40, 300}
	for _, prec := range []string{"reference", "fast", "high"} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
			for _, L := range []int{1, 2} {
				for _, mask := range []backend.Mask{backend.NoMask{}, backend.CausalMask{}} {
					t.Run(fmt.Sprintf("%s/%v/L%d/%T", prec, dt, L, mask), func(t *testing.T) {
						b := openWith(t, backend.Options{Precision: prec})
						q := randArray(b, 1, dt, len(lens), H, L, D)
						keys, values := make([]backend.Array, len(lens)), make([]backend.Array, len(lens))
						for r, s := range lens {
							kbuf := randArray(b, uint64(10+r), dt, 1, Hk, s+16, D)
							vbuf := randArray(b, uint64(20+r), dt, 1, Hk, s+16, D)
							keys[r] = b.Slice(kbuf, []int{0, 0, 0, 0}, []int{1, Hk, s, D})
							values[r] = b.Slice(vbuf, []int{0, 0, 0, 0}, []int{1, Hk, s, D})
						}
						want := vals(t, b, backend.AttendRowsComposed(b, q, keys, values, 0.125, mask))
						got := b.ScaledDotProductAttentionRows(q, keys, values, 0.125, mask)
						check(t, b, got, dt, tensor.Shape{len(lens), H, L, D}, want...)
						if via := vals(t, b, backend.AttendRows(b, q, keys, values, 0.125, mask)); !slices.Equal(via, want) {
							t.Errorf("AttendRows differs from the composition")
						}
					})
				}
			}
		}
	}
	t.Run("grad", func(t *testing.T) {
		b := open(t)
		q := randArray(b, 1, tensor.F32, 2, 2, 1, 8)
		k0, v0 := randArray(b, 2, tensor.F32, 1, 1, 3, 8), randArray(b, 3, tensor.F32, 1, 1, 3, 8)
		k1, v1 := randArray(b, 4, tensor.F32, 1, 1, 7, 8), randArray(b, 5, tensor.F32, 1, 1, 7, 8)
		loss := func(attend func(backend.Backend, backend.Array, []backend.Array, []backend.Array, float32, backend.Mask) backend.Array) backend.Func {
			return func(in []backend.Array) ([]backend.Array, error) {
				o := attend(b, in[0], []backend.Array{in[1], k1}, []backend.Array{v0, in[2]}, 0.5, nil)
				return []backend.Array{b.Sum(b.Reshape(b.Binary(backend.Multiply, o, o), -1), 0, false)}, nil
			}
		}
		fused := func(bb backend.Backend, q backend.Array, ks, vs []backend.Array, s float32, m backend.Mask) backend.Array {
			return bb.(*Backend).ScaledDotProductAttentionRows(q, ks, vs, s, m)
		}
		in := []backend.Array{q, k0, v1}
		_, gw, err := b.ValueAndGrad(loss(backend.AttendRowsComposed), in, []int{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		_, gg, err := b.ValueAndGrad(loss(fused), in, []int{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		for i := range gw {
			w := vals(t, b, gw[i])
			check(t, b, gg[i], tensor.F32, gw[i].Shape(), w...)
		}
	})
	t.Run("errors", func(t *testing.T) {
		b := open(t)
		q := randArray(b, 1, tensor.F32, 2, 2, 1, 8)
		k := randArray(b, 2, tensor.F32, 1, 1, 3, 8)
		k16 := randArray(b, 2, tensor.F16, 1, 1, 3, 8)
		k2 := randArray(b, 2, tensor.F32, 1, 2, 3, 8)
		kb := randArray(b, 2, tensor.F32, 2, 1, 3, 8)
		q16 := randArray(b, 1, tensor.F16, 2, 2, 1, 8)
		bad := []struct {
			name   string
			q      backend.Array
			ks, vs []backend.Array
			mask   backend.Mask
		}{
			{"one key array for two rows", q, []backend.Array{k}, []backend.Array{k}, nil},
			{"rows of different dtypes", q16, []backend.Array{k, k16}, []backend.Array{k, k16}, nil},
			{"rows of different head counts", q, []backend.Array{k, k2}, []backend.Array{k, k2}, nil},
			{"a row of two batch entries", q, []backend.Array{k, kb}, []backend.Array{k, kb}, nil},
			{"an array mask", q, []backend.Array{k, k}, []backend.Array{k, k}, backend.ArrayMask{A: arr(b, tensor.Bool, tensor.Shape{3}, 1, 1, 1)}},
		}
		for _, c := range bad {
			t.Run(c.name, func(t *testing.T) {
				opPanic(t, func() { b.ScaledDotProductAttentionRows(c.q, c.ks, c.vs, 1, c.mask) })
			})
		}
	})
}
