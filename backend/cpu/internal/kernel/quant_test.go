package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

var allBits = []int{2, 3, 4, 5, 6, 8}
var allGroups = []int{32, 64, 128}

// quantInput returns rows×cols weights whose groups cover the shapes that
// exercise the scale/bias rules: normal, all positive, all negative,
// symmetric (the far extreme clamps), constant, tiny (q0 == 0) and zero.
func quantInput(r *rand.Rand, rows, cols, gs int, round Rounder) []float32 {
	w := randVec(r, rows*cols, 0.05, round)
	for g := 0; g < rows*cols/gs; g++ {
		grp := w[g*gs : (g+1)*gs]
		switch g % 7 {
		case 1:
			for i := range grp {
				grp[i] = round(float32(math.Abs(float64(grp[i]))) + 0.01)
			}
		case 2:
			for i := range grp {
				grp[i] = round(-float32(math.Abs(float64(grp[i]))) - 0.3)
			}
		case 3:
			grp[0], grp[1] = 1, -1
			for i := 2; i < gs; i++ {
				grp[i] = round(float32(r.Float64()*2 - 1))
			}
		case 4:
			for i := range grp {
				grp[i] = round(0.3)
			}
		case 5:
			for i := range grp {
				grp[i] = round(float32(r.NormFloat64() * 1e-9))
			}
		case 6:
			clear(grp)
		}
	}
	return w
}

// TestQuantizeError checks |w − ŵ| for Quantize then Dequantize in float32.
//
// Bound (exact arithmetic, s and b the float32 scale and bias of the group,
// n = 2^bits − 1): b is the group's extreme of larger magnitude ("edge"), so
// every element has real code c = (w − b)/s ≥ 0, and c ≤ n·|s0|/|s| where s0 =
// range/n is the scale before the q0 step; |q0| = rint(|edge|/|s0|) ≤
// |edge|/|s0| + 1/2 gives |s0|/|s| ≤ 1 + |s0|/(2|edge|) and, as |edge| ≥
// range/2 = n|s0|/2, c ≤ n + 1. (When q0 == 0, b = 0, |c| ≤ 1/2 and the code is 0.) So an element rounds to its nearest code
// (error ≤ |s|/2) unless c > n + 1/2, where clamping to n costs at most
// (c − n)|s| ≤ |s|: the "scale/2" rule holds for every element except the far
// extreme of a group whose q0 rounded up, which can reach |s| (the symmetric
// groups below hit it: [−1, 1] at 4 bits gives s = −1/8, b = 1 and ŵ(−1) =
// −0.875). When q0 == 0, b = 0 and every |w| < |s|/2. Float32 rounding adds
// at most a few ulps: the code's argument (w−b)/s is off by ≤ 2^-23·c, which
// can move a rint tie by n·2^-23 codes, and fl(fl(s·q)+b) adds 2^-24(|s·q| +
// |ŵ|); the slack 2^-21·(n|s| + |w| + |b|) covers both.
func TestQuantizeError(t *testing.T) {
	for _, bits := range allBits {
		for _, gs := range allGroups {
			rows, cols := 5, 2*128*7/gs*gs/2
			cols = max(cols, 7*gs)
			t.Run(fmt.Sprintf("b%dg%d/%s", bits, gs, dims(rows, cols)), func(t *testing.T) {
				r := newRand(uint64(bits*7 + gs))
				w := quantInput(r, rows, cols, gs, Identity)
				wq := make([]uint32, rows*WordsPerRow(cols, bits))
				sc := make([]float32, rows*cols/gs)
				bi := make([]float32, rows*cols/gs)
				Quantize(wq, sc, bi, w, rows, cols, gs, bits, Identity)
				deq := make([]float32, rows*cols)
				Dequantize(deq, wq, sc, bi, rows, cols, gs, bits, Identity)
				n := float64(int(1)<<bits - 1)
				clamped := 0
				for i, v := range w {
					g := i / gs
					s, b := float64(sc[g]), float64(bi[g])
					c := (float64(v) - b) / s
					lo := -1e-6
					if b == 0 { // q0 == 0: every |w| < |s|/2 and the code is 0
						lo = -0.5 - 1e-6
					}
					if c < lo || c > n+1+1e-6 {
						t.Fatalf("real code %v outside [%v, n+1] (bias %v, index %d)", c, lo, b, i)
					}
					bound := math.Abs(s) / 2
					if c > n+0.5 {
						bound = math.Abs(s)
						clamped++
					}
					bound += math.Ldexp(n*math.Abs(s)+math.Abs(float64(v))+math.Abs(b), -21)
					if e := math.Abs(float64(deq[i]) - float64(v)); e > bound {
						t.Errorf("|w − ŵ| = %g, want ≤ %g (w %v, ŵ %v, s %v, b %v, index %d)", e, bound, v, deq[i], s, b, i)
						return
					}
				}
				if clamped == 0 && bits == 4 {
					t.Errorf("no element clamped at the far extreme; the symmetric groups should produce some")
				}
			})
		}
	}
}

func TestQuantizeFastVsRef(t *testing.T) {
	for _, dt := range testDTypes {
		for _, bits := range allBits {
			for _, gs := range allGroups {
				rows, cols := 13, 3*gs
				t.Run(fmt.Sprintf("%s/b%dg%d/%s", dt.name, bits, gs, dims(rows, cols)), func(t *testing.T) {
					r := newRand(uint64(bits*131 + gs))
					w := quantInput(r, rows, cols, gs, dt.round)
					w0 := slices.Clone(w)
					nw, ng := rows*WordsPerRow(cols, bits), rows*cols/gs
					wqRef, scRef, biRef := make([]uint32, nw), make([]float32, ng), make([]float32, ng)
					QuantizeRef(wqRef, scRef, biRef, w, rows, cols, gs, bits, dt.round)
					wq := make([]uint32, nw+2)
					wq[0], wq[nw+1] = 0xabcdef01, 0xabcdef01
					sc, scWhole := guarded(ng)
					bi, biWhole := guarded(ng)
					withThreads(4, func() { Quantize(wq[1:nw+1], sc, bi, w, rows, cols, gs, bits, dt.round) })
					if wq[0] != 0xabcdef01 || wq[nw+1] != 0xabcdef01 {
						t.Errorf("Quantize wrote outside wq")
					}
					if !slices.Equal(wq[1:nw+1], wqRef) {
						t.Errorf("packed codes differ from the reference")
					}
					expectSame(t, sc, scRef, "scales")
					expectSame(t, bi, biRef, "biases")
					checkGuards(t, scWhole, "scales")
					checkGuards(t, biWhole, "biases")
					unchanged(t, w, w0, "w")
					for i, s := range sc {
						if s != dt.round(s) || bi[i] != dt.round(bi[i]) {
							t.Fatalf("scale %v or bias %v not rounded to %s (group %d)", s, bi[i], dt.name, i)
						}
					}

					deqRef := make([]float32, rows*cols)
					DequantizeRef(deqRef, wqRef, scRef, biRef, rows, cols, gs, bits, dt.round)
					deq, deqWhole := guarded(rows * cols)
					withThreads(3, func() { Dequantize(deq, wqRef, scRef, biRef, rows, cols, gs, bits, dt.round) })
					expectSame(t, deq, deqRef, "dequantized")
					checkGuards(t, deqWhole, "dequantized")
				})
			}
		}
	}
}

// dequantMatmul64 is the oracle of the quantized matmuls: the float32
// dequantized weight (Dequantize with identity rounding) times x in float64.
// W is [rows, cols] quantized along cols; transpose selects y = x·Wᵀ
// (rows = n, cols = k) or y = x·W (rows = k, cols = n). It also returns
// Σ|x|·(|s·q| + |b|) per output, the scale of the rounding error.
func dequantMatmul64(x []float32, wq []uint32, sc, bi []float32, m, n, k, gs, bits int, transpose bool) (y, mag []float64) {
	rows, cols := k, n
	if transpose {
		rows, cols = n, k
	}
	w := make([]float32, rows*cols)
	Dequantize(w, wq, sc, bi, rows, cols, gs, bits, Identity)
	codes := make([]uint8, rows*cols)
	for ri := range rows {
		UnpackRow(codes[ri*cols:], wq[ri*WordsPerRow(cols, bits):], cols, bits)
	}
	y, mag = make([]float64, m*n), make([]float64, m*n)
	for r := range m {
		for j := range n {
			var s, a float64
			for kk := range k {
				ri, ci := kk, j
				if transpose {
					ri, ci = j, kk
				}
				g := ri*(cols/gs) + ci/gs
				xv := float64(x[r*k+kk])
				s += xv * float64(w[ri*cols+ci])
				a += math.Abs(xv) * (math.Abs(float64(sc[g])*float64(codes[ri*cols+ci])) + math.Abs(float64(bi[g])))
			}
			y[r*n+j], mag[r*n+j] = s, a
		}
	}
	return y, mag
}

func TestQuantizedMatmul(t *testing.T) {
	type qmmFn func(dst, x []float32, wq []uint32, sc, bi []float32, m, n, k, gs, bits int, round Rounder, acc Acc)
	kinds := []struct {
		name      string
		transpose bool
		fast, ref qmmFn
	}{
		{"qmm_t", true, QuantizedMatmulT, QuantizedMatmulTRef},
		{"qmm_n", false, QuantizedMatmulN, QuantizedMatmulNRef},
	}
	for _, kind := range kinds {
		for _, bits := range allBits {
			for _, gs := range allGroups {
				for _, m := range []int{1, 3, 7, 33} {
					// Odd n for transpose (k is the quantized axis); for
					// transpose=false n is the quantized axis and k is odd.
					n, k := 37, 2*gs
					if !kind.transpose {
						n, k = 3*gs, 37
					}
					if gs == 64 && kind.transpose {
						k = 384 // a realistic multi-group row
						if m == 3 {
							k = 192 // not whole 128-code vector blocks at 4 bits
						}
					}
					name := fmt.Sprintf("%s/b%dg%d/%s", kind.name, bits, gs, dims(m, n, k))
					t.Run(name, func(t *testing.T) {
						testQMMCase(t, kind.transpose, kind.fast, kind.ref, m, n, k, gs, bits)
					})
				}
			}
		}
	}
}

func testQMMCase(t *testing.T, transpose bool, fast, ref func(dst, x []float32, wq []uint32, sc, bi []float32, m, n, k, gs, bits int, round Rounder, acc Acc), m, n, k, gs, bits int) {
	r := newRand(uint64(m*1_000_003 + n*1009 + k*7 + bits*13 + gs))
	for _, dt := range testDTypes[:2] {
		rows, cols := n, k
		if !transpose {
			rows, cols = k, n
		}
		w := quantInput(r, rows, cols, gs, dt.round)
		nw, ng := rows*WordsPerRow(cols, bits), rows*cols/gs
		wq, sc, bi := make([]uint32, nw), make([]float32, ng), make([]float32, ng)
		Quantize(wq, sc, bi, w, rows, cols, gs, bits, dt.round)
		x := randVec(r, m*k, 1, dt.round)
		inputs := [][]float32{slices.Clone(x), slices.Clone(sc), slices.Clone(bi)}
		wq0 := slices.Clone(wq)
		y64, mag := dequantMatmul64(x, wq, sc, bi, m, n, k, gs, bits, transpose)
		accs := []Acc{AccF32, AccF64}
		if transpose {
			accs = append(accs, AccQ8)
		}
		for _, acc := range accs {
			want := make([]float32, m*n)
			ref(want, x, wq, sc, bi, m, n, k, gs, bits, dt.round, acc)
			got, whole := guarded(m * n)
			withThreads(3, func() { fast(got, x, wq, sc, bi, m, n, k, gs, bits, dt.round, acc) })
			what := fmt.Sprintf("%s acc=%d fast vs ref", dt.name, acc)
			checkGuards(t, whole, what)
			if acc == AccQ8 {
				testQ8(t, what, got, want, y64, mag, x, wq, sc, m, n, k, gs, bits, dt.name)
				continue
			}
			if !transpose || acc == AccF64 {
				expectSame(t, got, want, what) // same operations in the same order
			} else {
				// The fast float32 form sums in its own order: both it and
				// the reference are within the bound below of the float64
				// result, so they are within twice that of each other.
				u := math.Ldexp(1, -24)
				terms := float64(k + 4)
				half := u
				if dt.name == "bf16" {
					half = math.Ldexp(1, -8)
				}
				for i := range got {
					bound := 2 * (terms*u/(1-terms*u)*mag[i] + half*math.Abs(y64[i]))
					if e := math.Abs(float64(got[i]) - float64(want[i])); !(e <= bound) {
						t.Errorf("%s: got %v, want %v ± %g (index %d)", what, got[i], want[i], bound, i)
						break
					}
				}
			}
			if transpose && acc == AccF32 {
				// Scales and biases given in their bf16 storage give the same bits.
				if dt.name == "bf16" {
					sb, bb := make([]uint16, len(sc)), make([]uint16, len(bi))
					for i := range sc {
						sb[i], bb[i] = tensor.Float32ToBF16(sc[i]), tensor.Float32ToBF16(bi[i])
					}
					gotV := make([]float32, m*n)
					withThreads(3, func() {
						QuantizedMatmulTVec(gotV, x, wq, BF16Vec(sb), BF16Vec(bb), m, n, k, gs, bits, dt.round, acc)
					})
					expectSame(t, gotV, got, "bf16 Vec scales vs float32 scales")
				}
			}
			// Against the float64 product of the dequantized weight: the
			// float32 accumulation error is at most γ_{k+4}·Σ|x|(|s·q|+|b|)
			// (γ_j = j·u/(1−j·u), u = 2^-24; each output is a sum of k
			// products and 2 per group), the float32 dequantization of the
			// oracle's weight adds 2u·Σ|x||w|, and the final rounding adds
			// half an ulp of the dtype (unit roundoff 2^-24 for f32, 2^-8 for bf16).
			u := math.Ldexp(1, -24)
			terms := float64(k + 4)
			if acc == AccF64 {
				terms = 0.001 // float64 accumulation: only the oracle's dequantization rounding remains
			}
			half := u
			if dt.name == "bf16" {
				half = math.Ldexp(1, -8)
			}
			for i := range got {
				bound := terms*u/(1-terms*u)*mag[i] + 2*u*mag[i] + half*math.Abs(y64[i])
				if e := math.Abs(float64(got[i]) - y64[i]); !(e <= bound) {
					t.Errorf("%s acc=%d: got %v, want %v ± %g (index %d)", dt.name, acc, got[i], y64[i], bound, i)
					break
				}
			}
		}
		unchanged(t, x, inputs[0], "x")
		unchanged(t, sc, inputs[1], "scales")
		unchanged(t, bi, inputs[2], "biases")
		unchanged(t, wq, wq0, "wq")
	}
}

// testQ8 checks the int8 form. Fast vs reference: both compute the same
// integer block sums and differ only in how the float32 terms d·Σ, s·a and
// b·Σx are combined (at most k/32 + 2k/gs + 4 roundings on terms bounded by
// mag·(1 + 1/(2·qmax))). Reference vs the float64 product: quantizing x
// moves each element by at most d_t/2 (d_t = max|x| of its block / qmax),
// which moves the output by at most Σ_i |s·q_i|·d_t/2, plus the float32
// rounding bound of the float form.
func testQ8(t *testing.T, what string, got, want []float32, y64, mag []float64, x []float32, wq []uint32, sc []float32, m, n, k, gs, bits int, dtName string) {
	t.Helper()
	u := math.Ldexp(1, -24)
	half := u
	if dtName == "bf16" {
		half = math.Ldexp(1, -8)
	}
	qmax := float64(q8Max(bits))
	rounds := float64(k/32 + 2*k/gs + 4)
	qerr := make([]float64, m*n)
	codes := make([]uint8, k)
	for j := range n {
		UnpackRow(codes, wq[j*WordsPerRow(k, bits):], k, bits)
		for r := range m {
			var e float64
			for blk := range k / 32 {
				var amax float64
				for _, v := range x[r*k+blk*32 : r*k+blk*32+32] {
					amax = math.Max(amax, math.Abs(float64(v)))
				}
				for i := blk * 32; i < blk*32+32; i++ {
					e += math.Abs(float64(sc[j*(k/gs)+i/gs])*float64(codes[i])) * amax / qmax / 2
				}
			}
			qerr[r*n+j] = e
		}
	}
	for i := range got {
		m1 := mag[i]*(1+1/(2*qmax)) + qerr[i]
		bound := 2*rounds*u*m1 + 2*half*(math.Abs(y64[i])+qerr[i])
		if e := math.Abs(float64(got[i]) - float64(want[i])); !(e <= bound) {
			t.Errorf("%s: got %v, want %v ± %g (index %d)", what, got[i], want[i], bound, i)
			return
		}
		terms := float64(k + 4)
		bound = qerr[i] + terms*u/(1-terms*u)*m1 + 2*u*mag[i] + half*(math.Abs(y64[i])+qerr[i])
		if e := math.Abs(float64(want[i]) - y64[i]); !(e <= bound) {
			t.Errorf("%s: reference got %v, want %v ± %g (index %d)", what, want[i], y64[i], bound, i)
			return
		}
	}
}

// TestQuantizedMatmulNaN: a NaN in one row of x makes only that output row NaN.
func TestQuantizedMatmulNaN(t *testing.T) {
	const m, n, k, gs, bits = 3, 5, 64, 32, 4
	r := newRand(5)
	w := randVec(r, n*k, 1, Identity)
	wq, sc, bi := make([]uint32, n*WordsPerRow(k, bits)), make([]float32, n*k/gs), make([]float32, n*k/gs)
	Quantize(wq, sc, bi, w, n, k, gs, bits, Identity)
	x := randVec(r, m*k, 1, Identity)
	x[1*k+7] = float32(math.NaN())
	for _, acc := range []Acc{AccF32, AccQ8} {
		y := make([]float32, m*n)
		QuantizedMatmulT(y, x, wq, sc, bi, m, n, k, gs, bits, Identity, acc)
		for i, v := range y {
			if isNaN := v != v; isNaN != (i/n == 1) {
				t.Errorf("acc=%d: got %v at row %d, want NaN only in row 1 (index %d)", acc, v, i/n, i)
			}
		}
	}
}

// TestQuantizedMatmulNPanel holds QuantizedMatmulN's float32 path on the
// dense reference kernels (qmm_n_amd64.go: panels of expanded weights) to
// its plain twin, QuantizedMatmulNRef, bit for bit, on shapes that cross
// the panel's chunks of k and blocks of rows, with the kernels on and off.
func TestQuantizedMatmulNPanel(t *testing.T) {
	defer func(on bool) { denseOn = on }(denseOn)
	for _, vec := range []bool{true, false} {
		for _, bits := range allBits {
			for _, gs := range allGroups {
				for _, mk := range [][2]int{{70, 600}, {5, 257}, {66, 31}} {
					m, k, n := mk[0], mk[1], 2*gs
					name := fmt.Sprintf("vec%v/b%dg%d/%s", vec, bits, gs, dims(m, n, k))
					t.Run(name, func(t *testing.T) {
						denseOn = vec
						r := newRand(uint64(m*31 + k + bits*7 + gs))
						w := quantInput(r, k, n, gs, Identity)
						wq, sc, bi := make([]uint32, k*WordsPerRow(n, bits)), make([]float32, k*n/gs), make([]float32, k*n/gs)
						Quantize(wq, sc, bi, w, k, n, gs, bits, Identity)
						x := randVec(r, m*k, 1, Identity)
						want := make([]float32, m*n)
						QuantizedMatmulNRef(want, x, wq, sc, bi, m, n, k, gs, bits, tensor.RoundBF16, AccF32)
						got, whole := guarded(m * n)
						withThreads(3, func() { QuantizedMatmulN(got, x, wq, sc, bi, m, n, k, gs, bits, tensor.RoundBF16, AccF32) })
						checkGuards(t, whole, name)
						expectSame(t, got, want, name)
					})
				}
			}
		}
	}
}
