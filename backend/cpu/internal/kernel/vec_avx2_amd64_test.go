//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/tensor"
)

// needVA skips loudly when the CPU lacks AVX2, FMA or F16C (or
// GODEBUG=cpu.avx2=off switched them off).
func needVA(t *testing.T) {
	t.Helper()
	if !vaOK {
		t.Skip("SKIPPED: no AVX2+FMA+F16C (or GODEBUG=cpu.avx2=off): the AVX2 kernels are not tested")
	}
}

// vaKinds are the rounding kinds of the AVX2 kernels with their scalar
// Rounder and roundKind byte.
var vaKinds = []struct {
	name  string
	round Rounder
	kind  byte
}{{"f32", Identity, 'i'}, {"bf16", tensor.RoundBF16, 'b'}, {"f16", tensor.RoundF16, 'h'}}

// vaSpans are (start, length) windows of the inputs: every length 0..40
// (whole vectors of 8, the 24-lane loop, and tails) at a few starts, and
// all of them.
func vaSpans(total int) [][2]int {
	sp := [][2]int{{0, total}}
	for n := range 41 {
		for at := range 3 {
			sp = append(sp, [2]int{977*n + at, n})
		}
	}
	return sp
}

// bitsEq fails the test unless got and want have the same bits.
func bitsEq(t *testing.T, got, want float32, format string, args ...any) {
	t.Helper()
	if math.Float32bits(got) != math.Float32bits(want) {
		t.Fatalf("%s: got %v (%#08x), want %v (%#08x)", fmt.Sprintf(format, args...), got, math.Float32bits(got), want, math.Float32bits(want))
	}
}

// shifted returns xs permuted (index i·7919+13), a second operand that
// pairs every pattern with others.
func shifted(xs []float32) []float32 {
	s := make([]float32, len(xs))
	for i := range s {
		s[i] = xs[(i*7919+13)%len(xs)]
	}
	return s
}

// TestVAExp holds vaExp to mlxmath.Exp bit for bit on sdpaExpInputs (every
// bf16 pattern, the ±88 cut-offs, half-integer points of x·log2e, random
// bits and values), on guard-padded windows of every length up to 40.
func TestVAExp(t *testing.T) {
	needVA(t)
	xs := sdpaExpInputs()
	for _, sp := range vaSpans(len(xs)) {
		t.Run(fmt.Sprintf("%d+%d", sp[0], sp[1]), func(t *testing.T) {
			src := xs[sp[0] : sp[0]+sp[1]]
			got, whole := guarded(len(src))
			n := vaExpSlice(got, src)
			if n != len(src)&^7 {
				t.Fatalf("vaExpSlice handled %d values, want %d", n, len(src)&^7)
			}
			for i := range n {
				bitsEq(t, got[i], mlxmath.Exp(src[i]), "exp(%#08x) (index %d)", math.Float32bits(src[i]), i)
			}
			for i := n; i < len(got); i++ {
				if math.Float32bits(got[i]) != math.Float32bits(sentinel) {
					t.Fatalf("vaExpSlice wrote index %d past its %d values", i, n)
				}
			}
			checkGuards(t, whole, "dst")
		})
	}
}

// TestVASwiGLU holds vaSwiGLU to swiglu (swiglu.go) bit for bit in each
// rounding kind: gates are sdpaExpInputs (every bf16 pattern: NaNs of both
// signs, infinities, subnormals, zeros; random bits and values), ups the
// same values permuted; NaN results must match in their bits too.
func TestVASwiGLU(t *testing.T) {
	needVA(t)
	xs := sdpaExpInputs()
	up := shifted(xs)
	for _, k := range vaKinds {
		for _, sp := range vaSpans(len(xs)) {
			t.Run(fmt.Sprintf("%s/%d+%d", k.name, sp[0], sp[1]), func(t *testing.T) {
				g, u := xs[sp[0]:sp[0]+sp[1]], up[sp[0]:sp[0]+sp[1]]
				got, whole := guarded(len(g))
				n := vaSwiGLUSlice(got, g, u, k.kind)
				if n != len(g)&^7 {
					t.Fatalf("vaSwiGLUSlice handled %d values, want %d", n, len(g)&^7)
				}
				for i := range n {
					bitsEq(t, got[i], swiglu(g[i], u[i], k.round), "swiglu(%#08x, %#08x) (index %d)", math.Float32bits(g[i]), math.Float32bits(u[i]), i)
				}
				checkGuards(t, whole, "dst")
			})
		}
	}
}

// TestVANormScale holds vaNormScale to rmsNormRow's scalar last step bit for
// bit in each rounding kind, x every bf16 pattern and more (sdpaExpInputs),
// w the same permuted, at several inv (subnormal, huge, zero, +Inf and
// NaNs, as a row holding a NaN or an Inf gives).
func TestVANormScale(t *testing.T) {
	needVA(t)
	xs := sdpaExpInputs()
	w := shifted(xs)
	invs := []float32{0.37, 3e-39, 7e30, 0, float32(math.Inf(1)), float32(math.NaN()), -float32(math.NaN())}
	for _, k := range vaKinds {
		for _, inv := range invs {
			for _, sp := range vaSpans(len(xs))[:8] {
				t.Run(fmt.Sprintf("%s/inv%v/%d+%d", k.name, inv, sp[0], sp[1]), func(t *testing.T) {
					x, ww := xs[sp[0]:sp[0]+sp[1]], w[sp[0]:sp[0]+sp[1]]
					got, whole := guarded(len(x))
					n := vaNormScaleSlice(got, x, ww, inv, k.kind)
					if n != len(x)&^7 {
						t.Fatalf("vaNormScaleSlice handled %d values, want %d", n, len(x)&^7)
					}
					for i := range n {
						want := k.round(float32(ww[i] * k.round(float32(x[i]*inv))))
						bitsEq(t, got[i], want, "w %#08x, x %#08x, inv %v (index %d)", math.Float32bits(ww[i]), math.Float32bits(x[i]), inv, i)
					}
					checkGuards(t, whole, "dst")
				})
			}
		}
	}
}

// f16Inputs returns float32 values around every float16 rounding decision:
// for every float16 pattern h, its value and, for each neighbouring
// midpoint (halfway to the next float16 up in magnitude), the midpoint and
// the float32 values one and two ulps either side; every float32 exponent
// with mantissas 0, 1, the top bit, all ones and a few random, both signs
// (infinities, signalling and quiet NaNs with payloads in the low and high
// bits, float32 subnormals, the float16 overflow edge 65504..65520); and
// random bit patterns.
func f16Inputs() []float32 {
	var xs []float32
	add := func(u uint32) { xs = append(xs, math.Float32frombits(u)) }
	for h := range uint32(1 << 16) {
		f := tensor.F16ToFloat32(uint16(h))
		add(math.Float32bits(f))
		if h&0x7c00 == 0x7c00 {
			continue
		}
		next := tensor.F16ToFloat32(uint16(h + 1)) // next up in magnitude (h+1 of 0x7bff is Inf)
		mid := float32((float64(f) + float64(next)) / 2)
		m := math.Float32bits(mid)
		for d := uint32(0); d <= 2; d++ {
			add(m + d)
			add(m - d)
		}
	}
	r := newRand(16)
	for s := range uint32(2) {
		for e := range uint32(256) {
			for _, m := range []uint32{0, 1, 2, 0x400000, 0x7fffff, 0x1fff, 0x2000, 0x3fff, r.Uint32() & 0x7fffff, r.Uint32() & 0x7fffff} {
				add(s<<31 | e<<23 | m)
			}
		}
	}
	for _, v := range []float32{65504, 65519, 65519.996, 65520, 65520.004, 65536, 6.1035156e-05, 5.9604645e-08, 2.9802322e-08, 2.9802326e-08} {
		add(math.Float32bits(v))
		add(math.Float32bits(-v))
	}
	for range 1 << 18 {
		add(r.Uint32())
	}
	return xs
}

// TestVAF16 holds the F16C conversions to x448/float16 (tensor's scalar
// conversions) bit for bit: vaF16ToF32 on every float16 pattern
// (signalling NaNs included), vaF32ToF16 and vaRoundF16 on f16Inputs, on
// guard-padded windows of every length up to 40.
func TestVAF16(t *testing.T) {
	needVA(t)
	hs := make([]uint16, 1<<16)
	for i := range hs {
		hs[i] = uint16(i)
	}
	xs := f16Inputs()
	for _, sp := range vaSpans(len(hs)) {
		t.Run(fmt.Sprintf("h2f/%d+%d", sp[0], sp[1]), func(t *testing.T) {
			src := hs[sp[0] : sp[0]+sp[1]]
			got, whole := guarded(len(src))
			n := f16ToFloat32sAsm(got, src)
			for i := range n {
				bitsEq(t, got[i], tensor.F16ToFloat32(src[i]), "F16ToFloat32(%#04x) (index %d)", src[i], i)
			}
			checkGuards(t, whole, "dst")
		})
	}
	for _, sp := range vaSpans(len(xs)) {
		t.Run(fmt.Sprintf("f2h/%d+%d", sp[0], sp[1]), func(t *testing.T) {
			src := xs[sp[0] : sp[0]+sp[1]]
			bits := make([]uint16, len(src)+1)
			n := float32sToF16Asm(bits[:len(src)], src)
			rounded, whole := guarded(len(src))
			copy(rounded, src)
			if m := roundF16sAsm(rounded); m != n || n != len(src)&^7 {
				t.Fatalf("converted %d and rounded %d values, want %d", n, m, len(src)&^7)
			}
			for i := range n {
				if want := tensor.Float32ToF16(src[i]); bits[i] != want {
					t.Fatalf("Float32ToF16(%#08x): got %#04x, want %#04x (index %d)", math.Float32bits(src[i]), bits[i], want, i)
				}
				bitsEq(t, rounded[i], tensor.RoundF16(src[i]), "RoundF16(%#08x) (index %d)", math.Float32bits(src[i]), i)
			}
			if bits[len(src)] != 0 {
				t.Fatalf("wrote past len(dst): %#04x", bits[len(src)])
			}
			for i := n; i < len(src); i++ {
				bitsEq(t, rounded[i], src[i], "tail %d left as it was", i)
			}
			checkGuards(t, whole, "v")
		})
	}
}

// dotModel is vaDot's order written out with mlxmath.FMA32: accumulator
// k lane l takes a_i·b_i for i = 32j+8k+l (j over whole blocks of 32),
// then accumulator 0 the remaining whole blocks of 8; the sum is
// ((A0+A1)+(A2+A3)) lane-wise, then lanes (l, l+4) added, then (l, l+2),
// then l0 + l1; the tail past the last multiple of 8 is added one by one.
func dotModel(a, b []float32) float32 {
	var acc [4][8]float32
	n := len(a)
	m := n &^ 7
	i := 0
	for ; i+32 <= m; i += 32 {
		for k := range 4 {
			for l := range 8 {
				j := i + 8*k + l
				acc[k][l] = mlxmath.FMA32(a[j], b[j], acc[k][l])
			}
		}
	}
	for ; i < m; i += 8 {
		for l := range 8 {
			acc[0][l] = mlxmath.FMA32(a[i+l], b[i+l], acc[0][l])
		}
	}
	var v [8]float32
	for l := range 8 {
		v[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l])
	}
	var q [4]float32
	for l := range 4 {
		q[l] = v[l] + v[l+4]
	}
	s := (q[0] + q[2]) + (q[1] + q[3])
	for ; i < n; i++ {
		s += a[i] * b[i]
	}
	return s
}

// TestVADotAxpy holds vaDotSlice to dotModel and vaAxpySlice to one fused
// multiply-add per element (then y += a·x on the tail), bit for bit, for
// every length up to 80 and a few long ones.
func TestVADotAxpy(t *testing.T) {
	needVA(t)
	r := newRand(9)
	lens := []int{1000, 4096 + 13}
	for n := range 81 {
		lens = append(lens, n)
	}
	for _, n := range lens {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			a, b := randVec(r, n, 1, Identity), randVec(r, n, 3, Identity)
			bitsEq(t, vaDotSlice(a, b), dotModel(a, b), "dot of %d", n)
			yv, whole := guarded(n)
			copy(yv, randVec(r, n, 2, Identity))
			want := make([]float32, n)
			const s = float32(0.37)
			for i := range n {
				if i < n&^7 {
					want[i] = mlxmath.FMA32(s, a[i], yv[i])
				} else {
					want[i] = yv[i] + s*a[i]
				}
			}
			vaAxpySlice(yv, s, a)
			for i := range n {
				bitsEq(t, yv[i], want[i], "axpy index %d of %d", i, n)
			}
			checkGuards(t, whole, "y")
		})
	}
}

// TestRoundKind: the vector kernels recognise exactly the three Rounders
// they implement.
func TestRoundKind(t *testing.T) {
	for _, c := range []struct {
		name  string
		round Rounder
		want  byte
	}{
		{"Identity", Identity, 'i'}, {"RoundBF16", tensor.RoundBF16, 'b'}, {"RoundF16", tensor.RoundF16, 'h'},
		{"other", func(f float32) float32 { return f }, 0},
	} {
		if got := roundKind(c.round); got != c.want {
			t.Errorf("roundKind(%s): got %q, want %q", c.name, got, c.want)
		}
	}
}

// withPortable runs fn with every vector hook of the elementwise kernels
// off (the scalar loops), when off is set.
func withPortable(off bool, fn func()) {
	if !off {
		fn()
		return
	}
	e, s, n, d, a, h, c, r := simdExp, simdSwiGLU, simdNormScale, simdDot, simdAxpy, simdF16, convAVX2, simdRoPE
	simdExp, simdSwiGLU, simdNormScale, simdDot, simdAxpy, simdF16, convAVX2, simdRoPE = nil, nil, nil, nil, nil, false, false, nil
	defer func() {
		simdExp, simdSwiGLU, simdNormScale, simdDot, simdAxpy, simdF16, convAVX2, simdRoPE = e, s, n, d, a, h, c, r
	}()
	fn()
}

// BenchmarkVecKinds times SwiGLU, RMSNorm, RoPE and ExpSlice on one worker
// over a decode-sized row (SmolLM2-135M: 1536 intermediate, 576 hidden;
// MiniCPM5-1B's 16 query heads of 128 for RoPE) in each
// rounding kind, and a decode SDPA, with the installed vector code ("vec")
// and with the scalar loops ("scalar"): f16 against bf16 is the issue's
// "as fast as".
func BenchmarkVecKinds(b *testing.B) {
	r := newRand(3)
	const ni, nh = 1536, 576
	g, u := randVec(r, ni, 2, Identity), randVec(r, ni, 1, Identity)
	x, w := randVec(r, nh, 1, Identity), randVec(r, nh, 0.1, Identity)
	dst := make([]float32, ni)
	for _, path := range []string{"vec", "scalar"} {
		for _, k := range vaKinds {
			withPortable(path == "scalar", func() {
				b.Run(fmt.Sprintf("SwiGLU/%s/%s", k.name, path), func(b *testing.B) {
					withThreads(1, func() {
						for b.Loop() {
							SwiGLU(dst, g, u, k.round)
						}
					})
				})
				b.Run(fmt.Sprintf("RMSNorm/%s/%s", k.name, path), func(b *testing.B) {
					withThreads(1, func() {
						for b.Loop() {
							RMSNorm(dst, x, w, 1, nh, 1e-5, k.round, AccF32)
						}
					})
				})
				// The queries of one decode row of MiniCPM5-1B (16 heads
				// of 128) at one position.
				b.Run(fmt.Sprintf("RoPE/%s/%s", k.name, path), func(b *testing.B) {
					const h, d = 16, 128
					q, out := randVec(r, h*d, 1, k.round), make([]float32, h*d)
					p := RoPEParams{Dims: d, Base: 10000, Scale: 1}
					withThreads(1, func() {
						for b.Loop() {
							RoPE(out, q, 1, h, 1, d, p, []int{300}, k.round)
						}
					})
				})
			})
		}
		withPortable(path == "scalar", func() {
			// Decode attention of SmolLM2-135M (9 query heads, 3 KV heads,
			// head dim 64) over 256 cached float16 keys: the portable SDPA
			// (dot32, axpy32, ExpSlice) unless the CPU has AVX-512.
			const h, hk, d, s = 9, 3, 64, 256
			q := randVec(r, h*d, 1, tensor.RoundF16)
			kv := make([]uint16, hk*s*d)
			Float32sToF16(kv, randVec(r, hk*s*d, 1, Identity))
			k := KV{Vec: F16Vec(kv), BStride: hk * s * d, HStride: s * d, RowStride: d}
			out := make([]float32, h*d)
			b.Run("SDPA/f16/"+path, func(b *testing.B) {
				withThreads(1, func() {
					for b.Loop() {
						SDPAKV(out, q, k, k, 1, h, hk, 1, s, d, d, 0.125, Mask{}, tensor.RoundF16, AccF32)
					}
				})
			})
			b.Run("Exp/"+path, func(b *testing.B) {
				for b.Loop() {
					ExpSlice(dst, g)
				}
			})
			b.Run("RoundF16s/"+path, func(b *testing.B) {
				for b.Loop() {
					copy(dst, g)
					RoundF16s(dst)
				}
			})
		})
	}
}

// TestVAF16Exhaustive holds vaF32ToF16 and vaRoundF16 to the scalar
// conversions on all 2^32 float32 bit patterns, split across GOMAXPROCS
// goroutines. It takes tens of CPU-seconds, so it runs only with
// MLXGO_EXHAUSTIVE=1 (TestVAF16 covers every rounding decision otherwise).
func TestVAF16Exhaustive(t *testing.T) {
	needVA(t)
	if os.Getenv("MLXGO_EXHAUSTIVE") != "1" {
		t.Skip("SKIPPED: set MLXGO_EXHAUSTIVE=1 to check the float16 conversions on all 2^32 float32 patterns")
	}
	const chunk = 1 << 16
	workers := runtime.GOMAXPROCS(0)
	errs := make(chan string, workers)
	var wg sync.WaitGroup
	for wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := make([]float32, chunk)
			rounded := make([]float32, chunk)
			bits := make([]uint16, chunk)
			for c := uint64(wk); c < 1<<32/chunk; c += uint64(workers) {
				for i := range src {
					src[i] = math.Float32frombits(uint32(c*chunk) + uint32(i))
				}
				copy(rounded, src)
				vaF32ToF16(&bits[0], &src[0], chunk)
				vaRoundF16(&rounded[0], chunk)
				for i, f := range src {
					h := tensor.Float32ToF16(f)
					if bits[i] != h || math.Float32bits(rounded[i]) != math.Float32bits(tensor.F16ToFloat32(h)) {
						errs <- fmt.Sprintf("%#08x: got %#04x and %#08x, want %#04x and %#08x", math.Float32bits(f), bits[i], math.Float32bits(rounded[i]), h, math.Float32bits(tensor.F16ToFloat32(h)))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
