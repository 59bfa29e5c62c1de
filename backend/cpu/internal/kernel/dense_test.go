package kernel

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// denseShapes are the (m, n, k) of the dense matmul tests: m = 1, 2, 7, 33,
// one past denseRB and past denseRefRB; n odd, below, at and past a tile
// of sixteen and a group of four; k below, at and past the eight- and
// sixteen-value blocks and the denseKC panel, and not multiples of 8, and
// k = 0 (empty sums).
var denseShapes = [][3]int{
	{1, 1, 1}, {1, 3, 7}, {2, 17, 0}, {1, 16, 0}, {1, 16, 8}, {1, 17, 13}, {1, 48, 64}, {1, 33, 300}, {1, 64, 576},
	{2, 5, 9}, {2, 16, 256}, {2, 31, 257}, {7, 16, 40}, {7, 21, 37}, {7, 49, 520},
	{33, 16, 24}, {33, 35, 100}, {33, 64, 263}, {70, 19, 65}, {70, 64, 128},
	{1, 9, 33}, {3, 25, 48}, {4, 6, 16}, {5, 13, 31}, {8, 19, 70}, {9, 7, 64}, {130, 13, 600}, {260, 17, 270},
	{3, 27, 64}, {16, 10, 96}, {11, 8, 32}, {24, 33, 960},
}

// denseWeights returns n·k random weights rounded to the dtype, as a Vec
// whose storage has NaN guards on both sides (a kernel reading past the
// matrix turns an output into NaN), and the float32 values.
func denseWeights(t *testing.T, dt string, seed uint64, n, k int) (Vec, []float32) {
	t.Helper()
	r := newRand(seed)
	switch dt {
	case "f32":
		inner, _ := guarded(n * k)
		copy(inner, randVec(r, n*k, 0.5, Identity))
		return F32Vec(inner), inner
	case "bf16", "f16":
		vals := make([]float32, n*k)
		bits := make([]uint16, n*k+2*guardN)
		nan := uint16(0x7fc1)
		if dt == "f16" {
			nan = 0x7e01
		}
		for i := range bits {
			bits[i] = nan
		}
		in := bits[guardN : guardN+n*k]
		for i := range in {
			f := float32(r.NormFloat64() * 0.5)
			if dt == "f16" {
				in[i] = tensor.Float32ToF16(f)
				vals[i] = tensor.F16ToFloat32(in[i])
			} else {
				in[i] = tensor.Float32ToBF16(f)
				vals[i] = math.Float32frombits(uint32(in[i]) << 16)
			}
		}
		if dt == "f16" {
			return F16Vec(in), vals
		}
		return BF16Vec(in), vals
	}
	t.Fatalf("unknown dtype %s", dt)
	return Vec{}, nil
}

// runDense runs DenseMatmulT on guard-padded x and dst, checking dst's
// guards, with the vector kernels on or off.
func runDense(t *testing.T, x []float32, w Vec, m, n, k int, fast, vec bool) []float32 {
	t.Helper()
	defer func(on bool) { denseOn = on }(denseOn)
	denseOn = vec
	xin, _ := guarded(m * k)
	copy(xin, x)
	dst, whole := guarded(m * n)
	DenseMatmulT(dst, xin, w, m, n, k, fast)
	checkGuards(t, whole, "dst")
	return dst
}

// denseZModes returns the settings of denseZOn the tests run: both where
// the CPU has the AVX-512 kernels, else off.
func denseZModes() []bool {
	if denseZOn {
		return []bool{true, false}
	}
	return []bool{false}
}

// TestDenseReference: the reference precision, on the vector kernels (the
// AVX-512 and the AVX2 ones where the CPU has them) and on the portable
// loop, gives the bits of DenseMatmulTRef (the in-order loop) for every
// dtype and shape; a kernel that read past x or W would meet a NaN guard.
func TestDenseReference(t *testing.T) {
	defer func(on bool) { denseZOn = on }(denseZOn)
	for _, z := range denseZModes() {
		denseZOn = z
		testDenseReference(t, fmt.Sprintf("avx512=%v", z))
	}
}

func testDenseReference(t *testing.T, path string) {
	for _, dt := range []string{"f32", "bf16", "f16"} {
		w0, _ := denseWeights(t, dt, 1, 1, 1)
		t.Logf("%s: vector kernels cover it on this CPU (%s): %v", dt, runtime.GOARCH, denseCovers(w0))
		for si, s := range denseShapes {
			m, n, k := s[0], s[1], s[2]
			t.Run(fmt.Sprintf("%s/%s/m%d_n%d_k%d", path, dt, m, n, k), func(t *testing.T) {
				w, _ := denseWeights(t, dt, uint64(10+si), n, k)
				x := randVec(newRand(uint64(100+si)), m*k, 1, Identity)
				want := make([]float32, m*n)
				DenseMatmulTRef(want, x, w, m, n, k)
				for _, vec := range []bool{true, false} {
					got := runDense(t, x, w, m, n, k, false, vec)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("vector %v: output %d (row %d, col %d) = %v (%#x), want %v (%#x)", vec, i, i/n, i%n, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
						}
					}
				}
			})
		}
	}
}

// TestDenseFast: the fast precision is within DenseFastBoundW of the exact
// sum (float64 over the same float32 products, exact to 2^-53 relative per
// term and added with a 2^-50·Σ|x·w| allowance) for every dtype and shape,
// and a row of x run alone gives the bits it gets among the others (so
// chunked prefill and decode agree with one-shot evaluation), on the
// AVX-512 kernels where the CPU has them (with and without the float32
// copy of 16-bit weight rows, densePackRows, whatever this CPU's default)
// and on the AVX2 ones (and on AVX512_BF16 the bfloat16 kernels take the
// 16-bit weights with k a multiple of 32).
func TestDenseFast(t *testing.T) {
	worst := 0.0
	defer func(on bool, pr int) { denseZOn, densePackRows = on, pr }(denseZOn, densePackRows)
	type mode struct {
		z        bool
		packRows int
	}
	var modes []mode
	for _, z := range denseZModes() {
		modes = append(modes, mode{z, math.MaxInt})
		if z {
			modes = append(modes, mode{z, 16})
		}
	}
	for _, md := range modes {
		denseZOn, densePackRows = md.z, md.packRows
		for _, dt := range []string{"f32", "bf16", "f16"} {
			for si, s := range denseShapes {
				m, n, k := s[0], s[1], s[2]
				t.Run(fmt.Sprintf("avx512=%v/copy=%v/%s/m%d_n%d_k%d", md.z, md.packRows < math.MaxInt, dt, m, n, k), func(t *testing.T) {
					w, wv := denseWeights(t, dt, uint64(10+si), n, k)
					x := randVec(newRand(uint64(100+si)), m*k, 1, Identity)
					got := runDense(t, x, w, m, n, k, true, true)
					for i := 0; i < m && m > 1; i += 3 { // a row alone gives the bits it gets among many
						one := runDense(t, x[i*k:(i+1)*k], w, 1, n, k, true, true)
						for j := range n {
							if math.Float32bits(one[j]) != math.Float32bits(got[i*n+j]) {
								t.Fatalf("row %d alone: output %d = %v, among %d rows %v", i, j, one[j], m, got[i*n+j])
							}
						}
					}
					worst = max(worst, checkDenseFastBound(t, got, x, wv, m, n, k, dt != "f32"))
				})
			}
		}
	}
	t.Logf("worst error: %.3f of the bound", worst)
}

// checkDenseFastBound holds got (m×n) to the float64 sums of x [m, k]
// times wv [n, k] transposed within DenseFastBoundW (plus 2^-50 of the
// sum of magnitudes for the float64 sum's own rounding), and returns the
// largest error as a fraction of its bound.
func checkDenseFastBound(t *testing.T, got, x, wv []float32, m, n, k int, w16 bool) float64 {
	t.Helper()
	worst := 0.0
	for i := range m {
		for j := range n {
			var sum, abs float64
			for l := range k {
				p := float64(x[i*k+l]) * float64(wv[j*k+l])
				sum += p
				abs += math.Abs(p)
			}
			bound := DenseFastBoundW(k, abs, w16) + 0x1p-50*abs
			err := math.Abs(float64(got[i*n+j]) - sum)
			if !(err <= bound) {
				t.Fatalf("output (%d, %d) = %v, exact %v: error %g over the bound %g", i, j, got[i*n+j], sum, err, bound)
			}
			if bound > 0 {
				worst = max(worst, err/bound)
			}
		}
	}
	return worst
}

// TestDenseFastUsesFMA: on a CPU the vector kernels cover, the fast
// precision runs them: on k = 1000 terms whose in-order float32 sum loses
// bits, its results differ from the reference's somewhere.
func TestDenseFastUsesFMA(t *testing.T) {
	w, _ := denseWeights(t, "f32", 7, 16, 1000)
	if !denseCovers(w) {
		t.Skipf("SKIPPED: no vector dense kernels on this CPU (%s)", runtime.GOARCH)
	}
	x := randVec(newRand(8), 2*1000, 1, Identity)
	ref := runDense(t, x, w, 2, 16, 1000, false, true)
	fast := runDense(t, x, w, 2, 16, 1000, true, true)
	diff := 0
	for i := range ref {
		if ref[i] != fast[i] {
			diff++
		}
	}
	if diff == 0 {
		t.Errorf("fast precision gave the reference's bits on all %d outputs: the fast kernel did not run", len(ref))
	}
}

// BenchmarkDense: GEMV (m = 1) at a shape whose weights stay in L2 (k 256,
// n 512: the kernels' arithmetic rate), SmolLM2-135M's MLP shape (k 576, n
// 1536), SmolLM2-360M's (k 960, n 2560) and a 2048×8192 one, and GEMM (m =
// 64, and 512 for SmolLM2-360M) at the larger ones, per weight dtype and
// precision, and the portable loop (the vector kernels off: the backend's
// matmulNT before them); on AVX-512 CPUs also ref-avx2 and fast-avx2, the
// AVX2 kernels (denseZOn off), for A/B runs in one binary. The bytes are
// the weights read once, so MB/s is the weight stream. On AVX-512 CPUs
// fast-copy and fast-nocopy are fast with and without the float32 copies
// of bfloat16 and float16 weight rows (densePackRows; fast is this CPU's
// default, one of the two), and without the bfloat16 kernels (denseBF16Z),
// which fast runs on AVX512_BF16 for 16-bit weights and k a multiple of 32.
func BenchmarkDense(b *testing.B) {
	type mode struct {
		name         string
		fast, vec, z bool
		packRows     int
		bf16         bool // the denseB kernels where they take the product
	}
	def := densePackRows
	modes := []mode{{"ref", false, true, denseZOn, def, true}, {"fast", true, true, denseZOn, def, true}, {"portable", false, false, false, def, true}}
	if denseZOn {
		modes = append(modes, mode{"ref-avx2", false, true, false, def, true}, mode{"fast-avx2", true, true, false, def, true},
			mode{"fast-copy", true, true, true, 16, false}, mode{"fast-nocopy", true, true, true, math.MaxInt, false})
	}
	for _, sz := range []struct{ m, n, k int }{{1, 512, 256}, {1, 1536, 576}, {1, 2560, 960}, {1, 8192, 2048}, {64, 1536, 576}, {512, 2560, 960}, {512, 960, 2560}, {64, 8192, 2048}} {
		for _, dt := range []string{"f32", "bf16", "f16"} {
			for _, mode := range modes {
				fast := mode.fast
				b.Run(fmt.Sprintf("m%d_k%d_n%d/%s/%s", sz.m, sz.k, sz.n, dt, mode.name), func(b *testing.B) {
					defer func(on, z bool, pr int, bf bool) { denseOn, denseZOn, densePackRows, denseBF16On = on, z, pr, bf }(denseOn, denseZOn, densePackRows, denseBF16On)
					denseOn, denseZOn, densePackRows, denseBF16On = mode.vec, mode.z, mode.packRows, mode.bf16
					r := newRand(1)
					var w Vec
					es := 2
					switch dt {
					case "f32":
						w, es = F32Vec(randVec(r, sz.n*sz.k, 0.5, Identity)), 4
					case "bf16":
						u := make([]uint16, sz.n*sz.k)
						Float32sToBF16(u, randVec(r, sz.n*sz.k, 0.5, Identity))
						w = BF16Vec(u)
					default:
						u := make([]uint16, sz.n*sz.k)
						Float32sToF16(u, randVec(r, sz.n*sz.k, 0.5, Identity))
						w = F16Vec(u)
					}
					x := randVec(r, sz.m*sz.k, 1, Identity)
					dst := make([]float32, sz.m*sz.n)
					b.SetBytes(int64(sz.n * sz.k * es))
					b.ResetTimer()
					for b.Loop() {
						DenseMatmulT(dst, x, w, sz.m, sz.n, sz.k, fast)
					}
				})
			}
		}
	}
}

// TestMatmulNN holds MatmulNN (the dense reference kernels on panels of b)
// to its plain twin MatmulNNRef bit for bit, with the kernels on and off,
// on shapes that cross chunks of k, blocks of rows and partial tiles.
func TestMatmulNN(t *testing.T) {
	defer func(on bool) { denseOn = on }(denseOn)
	r := newRand(17)
	for _, vec := range []bool{true, false} {
		for _, s := range [][3]int{{1, 1, 1}, {3, 8, 5}, {70, 300, 8}, {5, 257, 33}, {130, 40, 16}, {4, 0, 9}} {
			m, k, n := s[0], s[1], s[2]
			name := fmt.Sprintf("vec%v/%s", vec, dims(m, n, k))
			t.Run(name, func(t *testing.T) {
				denseOn = vec
				a, b := randVec(r, m*k, 1, Identity), randVec(r, k*n, 1, Identity)
				want := make([]float32, m*n)
				MatmulNNRef(want, a, b, m, n, k)
				got, whole := guarded(m * n)
				withThreads(3, func() { MatmulNN(got, a, b, m, n, k) })
				checkGuards(t, whole, name)
				expectSame(t, got, want, name)
			})
		}
	}
}
