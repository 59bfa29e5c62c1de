package kernel

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func TestRMSNormFastVsRef(t *testing.T) {
	for _, dt := range testDTypes {
		for _, acc := range []Acc{AccF32, AccF64} {
			for _, rows := range []int{1, 3, 4, 7, 8, 33, 40} {
				n := 67
				t.Run(fmt.Sprintf("rms_norm/%s/acc%d/%s", dt.name, acc, dims(rows, n)), func(t *testing.T) {
					r := newRand(uint64(rows))
					x, w := randVec(r, rows*n, 2, dt.round), randVec(r, n, 1, dt.round)
					x0, w0 := slices.Clone(x), slices.Clone(w)
					want := make([]float32, rows*n)
					RMSNormRef(want, x, w, rows, n, 1e-5, dt.round, acc)
					got, whole := guarded(rows * n)
					withThreads(4, func() { RMSNorm(got, x, w, rows, n, 1e-5, dt.round, acc) })
					expectSame(t, got, want, "fast vs ref")
					one := make([]float32, rows*n) // one thread: every row of a group of four in one chunk
					withThreads(1, func() { RMSNorm(one, x, w, rows, n, 1e-5, dt.round, acc) })
					expectSame(t, one, want, "fast on one thread vs ref")
					checkGuards(t, whole, "dst")
					unchanged(t, x, x0, "x")
					unchanged(t, w, w0, "w")
					// Against float64: two roundings to the dtype (relative u
					// each) plus the float32 statistics (n·2^-24 relative on
					// the mean, half that on its rsqrt).
					u := ulpOf(1, dt.round) / 2 // the dtype's unit roundoff
					for ri := range rows {
						var ss float64
						for _, v := range x[ri*n : (ri+1)*n] {
							ss += float64(v) * float64(v)
						}
						inv := 1 / math.Sqrt(ss/float64(n)+1e-5)
						for i := range n {
							ref := float64(w[i]) * float64(x[ri*n+i]) * inv
							bound := (3*u + float64(n)*math.Ldexp(1, -24)) * math.Abs(ref)
							if e := math.Abs(float64(got[ri*n+i]) - ref); e > bound {
								t.Fatalf("got %v, want %v ± %g (row %d, index %d)", got[ri*n+i], ref, bound, ri, i)
							}
						}
					}
				})
			}
		}
	}
}

// TestRMSNormHand: x = [3, 4], w = [1, 2], eps = 0: mean(x²) = (9+16)/2 =
// 12.5, rsqrt = 1/√12.5 = 0.28284271..., so y = [3·0.2828..., 2·4·0.2828...]
// = [0.84852814, 2.26274170] (to float32 rounding).
func TestRMSNormHand(t *testing.T) {
	got := make([]float32, 2)
	RMSNorm(got, []float32{3, 4}, []float32{1, 2}, 1, 2, 0, Identity, AccF32)
	want := []float64{3 / math.Sqrt(12.5), 2 * 4 / math.Sqrt(12.5)}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 2*math.Ldexp(want[i], -23) {
			t.Errorf("got %v, want %v (index %d)", got[i], want[i], i)
		}
	}
}

// TestRMSNormNaN: a NaN in one row makes that row NaN. An Inf makes the sum
// of squares Inf and rsqrt 0, so (as in MLX) the Inf element becomes Inf·0 =
// NaN and the rest of its row ±0. Other rows are untouched.
func TestRMSNormNaN(t *testing.T) {
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		x := randVec(newRand(3), 3*8, 1, Identity)
		x[8+2] = bad
		got := make([]float32, 3*8)
		RMSNorm(got, x, randVec(newRand(4), 8, 1, Identity), 3, 8, 1e-6, Identity, AccF32)
		for i, v := range got {
			wantNaN := i/8 == 1 && (bad != bad || i == 8+2)
			if isNaN := v != v; isNaN != wantNaN {
				t.Errorf("input %v: got %v, want NaN %v (index %d)", bad, v, wantNaN, i)
			}
			if i/8 == 1 && !wantNaN && v != 0 {
				t.Errorf("input %v: got %v, want ±0 (index %d)", bad, v, i)
			}
		}
	}
}

// BenchmarkRMSNorm runs RMSNorm over SmolLM2-135M's rows (576 wide,
// bfloat16) as a decode step of one and of eight rows and a 40-token
// prefill chunk give them, on one thread. ns/row is the time per row.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench RMSNorm
func BenchmarkRMSNorm(b *testing.B) {
	const n = 576
	for _, rows := range []int{1, 8, 40} {
		r := newRand(1)
		x, w := randVec(r, rows*n, 2, tensor.RoundBF16), randVec(r, n, 1, tensor.RoundBF16)
		dst := make([]float32, rows*n)
		b.Run(dims(rows, n), func(b *testing.B) {
			withThreads(1, func() {
				for b.Loop() {
					RMSNorm(dst, x, w, rows, n, 1e-5, tensor.RoundBF16, AccF32)
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
		})
	}
}
