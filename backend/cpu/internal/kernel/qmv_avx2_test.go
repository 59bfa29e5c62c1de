//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// needAVX2 skips (loudly) on CPUs without the AVX2 kernels.
func needAVX2(t testing.TB) {
	t.Helper()
	if !avxQMM {
		t.Skip("SKIPPED: this CPU lacks AVX2/FMA; the AVX2 kernels are not installed")
	}
}

// noAVX512 runs fn with the AVX-512 and archsimd matmul kernels switched
// off, so that on an AVX-512 machine every combination takes the AVX2 or
// the portable path the way it does on an AVX2-only CPU.
func noAVX512(fn func()) {
	f, q, sf, sq := asmF32, asmQ8, simdDotF32, simdDotQ8
	asmF32, asmQ8, simdDotF32, simdDotQ8 = false, false, nil, nil
	defer func() { asmF32, asmQ8, simdDotF32, simdDotQ8 = f, q, sf, sq }()
	fn()
}

// avxCase is one combination the AVX2 kernels cover.
type avxCase struct {
	bits, gs int
	dt       string // scale and bias storage: f32, bf16, f16
}

// avxCases lists every combination of bits 2, 3, 4, 5, 6 and 8, groups of
// 32, 64 and 128 and the three scale dtypes.
func avxCases() []avxCase {
	var cs []avxCase
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, dt := range []string{"f32", "bf16", "f16"} {
				cs = append(cs, avxCase{bits, gs, dt})
			}
		}
	}
	return cs
}

// avxVecs returns the scales and biases of qmvInputs in storage dtype dt.
func avxVecs(dt string, sc, bi []float32, sb, bb []uint16) (Vec, Vec) {
	switch dt {
	case "bf16":
		return BF16Vec(sb), BF16Vec(bb)
	case "f16":
		f16 := func(v []float32) []uint16 {
			all := make([]uint16, len(v)+2*guardN)
			for i := range all {
				all[i] = 0x7e01 // a float16 NaN in the guards
			}
			u := all[guardN : guardN+len(v)]
			for i, f := range v {
				u[i] = tensor.Float32ToF16(f) // (a few biases round to subnormals)
			}
			return u
		}
		return F16Vec(f16(sc)), F16Vec(f16(bi))
	}
	return F32Vec(sc), F32Vec(bi)
}

// zmmTakes reports the combinations that, with AVX-512, take the AVX-512
// forms of the AVX2 kernels: 4-bit group 32 (the other 4- and 8-bit ones
// take the AVX-512 kernels of qmv_amd64.s and qmm_amd64.s).
func zmmTakes(c avxCase) bool { return c.bits == 4 && c.gs == 32 }

// TestAVX2EqualsPortable holds the AVX2 kernels (qmv_avx2_amd64.s) to the
// portable loops (dotF32 or dotQ8, + dotBias) bit for bit, for every covered
// bits × group × scale dtype, both precisions, one and (float32) three rows
// of x, row counts with a
// partial tile of eight, inputs inside NaN guards, rounded and unrounded
// results, and 1 or 3 threads.
func TestAVX2EqualsPortable(t *testing.T) {
	needAVX2(t)
	for _, c := range avxCases() {
		for _, k := range []int{256, 576, 1536} {
			if k%c.gs != 0 {
				continue
			}
			for _, n := range []int{8, 43, 136} {
				for _, m := range []int{1, 3} {
					for _, acc := range []Acc{AccF32, AccQ8} {
						if acc == AccQ8 && m > 1 && gemmQ8(k, c.gs, c.bits) {
							continue // the int8 GEMM: TestAVX2GemmEqualsPortable
						}
						name := fmt.Sprintf("b%dg%d/%s/%s/acc%d", c.bits, c.gs, c.dt, dims(m, n, k), acc)
						t.Run(name, func(t *testing.T) { noAVX512(func() { testAVX2EqualsPortable(t, c, m, n, k, acc, name) }) })
						if zmmTakes(c) {
							// AVX-512 left on: the AVX-512 forms of the
							// 4-bit kernels (qzmmF32B4, qzmmQ8B4).
							t.Run(name+"/zmm", func(t *testing.T) {
								if !asmF32 || acc == AccQ8 && !asmQ8 {
									t.Skip("SKIPPED: this CPU lacks AVX-512 (VNNI for AccQ8); the AVX-512 forms are not installed")
								}
								testAVX2EqualsPortable(t, c, m, n, k, acc, name+"/zmm")
							})
						}
					}
				}
			}
		}
	}
}

func testAVX2EqualsPortable(t *testing.T, c avxCase, m, n, k int, acc Acc, name string) {
	_, wq, sc, bi, sb, bb := qmvInputs(uint64(n*31+k+c.bits*7+c.gs), n, k, c.gs, c.bits)
	scv, biv := avxVecs(c.dt, sc, bi, sb, bb)
	xall := randVec(newRand(uint64(k+m)), m*k+2*guardN, 1, tensor.RoundBF16)
	x := xall[guardN : guardN+m*k]
	if !avxRows(make([]float32, m*n), x, wq, scv, biv, m, n, k, c.gs, c.bits, Identity, acc == AccQ8) {
		t.Fatal("avxRows did not take this combination")
	}
	for _, round := range []Rounder{Identity, tensor.RoundBF16} {
		want := make([]float32, m*n)
		avxOn = false
		QuantizedMatmulTVec(want, x, wq, scv, biv, m, n, k, c.gs, c.bits, round, acc)
		avxOn = true
		for _, th := range []int{1, 3} {
			got, whole := guarded(m * n)
			withThreads(th, func() {
				QuantizedMatmulTVec(got, x, wq, scv, biv, m, n, k, c.gs, c.bits, round, acc)
			})
			checkGuards(t, whole, name)
			expectSame(t, got, want, fmt.Sprintf("%s threads %d", name, th))
		}
	}
}

// TestAVX2GemmEqualsPortable holds the AVX2 int8 GEMM kernels to
// q8GemmGo bit for bit, for 4- and 8-bit weights, every group and scale
// dtype, two and nine rows of x, inside NaN guards.
func TestAVX2GemmEqualsPortable(t *testing.T) {
	needAVX2(t)
	for _, c := range avxCases() {
		if c.bits != 4 && c.bits != 8 {
			continue
		}
		for _, k := range []int{256, 1536} {
			for _, n := range []int{8, 43, 136} {
				for _, m := range []int{2, 9} {
					name := fmt.Sprintf("b%dg%d/%s/%s", c.bits, c.gs, c.dt, dims(m, n, k))
					t.Run(name, func(t *testing.T) {
						if !gemmQ8(k, c.gs, c.bits) {
							t.Fatalf("gemmQ8 refuses %s", name)
						}
						_, wq, sc, bi, sb, bb := qmvInputs(uint64(n*31+k+c.bits*7+c.gs), n, k, c.gs, c.bits)
						scv, biv := avxVecs(c.dt, sc, bi, sb, bb)
						xall := randVec(newRand(uint64(k+m)), m*k+2*guardN, 1, tensor.RoundBF16)
						x := xall[guardN : guardN+m*k]
						for _, round := range []Rounder{Identity, tensor.RoundBF16} {
							want := make([]float32, m*n)
							q8GemmGo(want, x, wq, scv, biv, m, n, k, c.gs, c.bits, round)
							for _, th := range []int{1, 3} {
								got, whole := guarded(m * n)
								var ok bool
								withThreads(th, func() {
									ok = avxGemmQ8(got, x, wq, scv, biv, m, n, k, c.gs, c.bits, round)
								})
								if !ok {
									t.Fatal("avxGemmQ8 did not take this combination")
								}
								checkGuards(t, whole, name)
								expectSame(t, got, want, fmt.Sprintf("%s threads %d", name, th))
							}
						}
					})
				}
			}
		}
	}
}

// TestAVX2SpecialX repeats TestAVX2EqualsPortable's comparison with x
// holding ±Inf, NaN, ±0 and subnormals.
func TestAVX2SpecialX(t *testing.T) {
	needAVX2(t)
	noAVX512(func() { testAVX2SpecialX(t) })
}

func testAVX2SpecialX(t *testing.T) {
	special := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0,
		float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -1e-40}
	n, k := 24, 512
	for _, c := range []avxCase{{4, 32, "f16"}, {8, 64, "bf16"}, {3, 32, "f32"}, {6, 128, "bf16"}} {
		for si, v := range special {
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(si), n, k, c.gs, c.bits)
			scv, biv := avxVecs(c.dt, sc, bi, sb, bb)
			x := randVec(newRand(uint64(si)), k, 1, tensor.RoundBF16)
			for i := si; i < k; i += 37 {
				x[i] = v
			}
			want, got := make([]float32, n), make([]float32, n)
			avxOn = false
			QuantizedMatmulTVec(want, x, wq, scv, biv, 1, n, k, c.gs, c.bits, Identity, AccF32)
			avxOn = true
			QuantizedMatmulTVec(got, x, wq, scv, biv, 1, n, k, c.gs, c.bits, Identity, AccF32)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
					t.Fatalf("b%dg%d %s x=%v: output %d: got %v, want %v", c.bits, c.gs, c.dt, v, i, got[i], want[i])
				}
			}
		}
	}
}

// threadCPU is the calling thread's CPU time (user and system) on Linux
// (RUSAGE_THREAD); 0 where that fails (no metric is reported then).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if runtime.GOOS != "linux" || syscall.Getrusage(1, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAVX2QMV measures the one-row kernels (and, as "portable", the
// loops they replace; as "zmm", their AVX-512 forms where there are some) on SmolLM2's MLP shape and a 4096×1536 layer, in both
// precisions, reporting GB/s of weights, scales and biases read.
func BenchmarkAVX2QMV(b *testing.B) {
	needAVX2(b)
	for _, c := range avxCases() {
		for _, sh := range [][2]int{{1536, 576}, {4096, 1536}} {
			n, k := sh[0], sh[1]
			if k%c.gs != 0 {
				continue
			}
			for _, acc := range []Acc{AccF32, AccQ8} {
				impls := []string{"avx2", "portable"}
				if zmmTakes(c) && asmF32 && (acc == AccF32 || asmQ8) {
					impls = append(impls, "zmm") // qzmmF32B4, qzmmQ8B4
				}
				for _, impl := range impls {
					b.Run(fmt.Sprintf("b%dg%d/%s/%dx%d/acc%d/%s", c.bits, c.gs, c.dt, n, k, acc, impl), func(b *testing.B) {
						x, wq, sc, bi, sb, bb := qmvInputs(1, n, k, c.gs, c.bits)
						scv, biv := avxVecs(c.dt, sc, bi, sb, bb)
						dst := make([]float32, n)
						esz := 4
						if c.dt != "f32" {
							esz = 2
						}
						bytes := int64(4*len(wq) + 2*esz*len(sc))
						b.SetBytes(bytes)
						avxOn = impl != "portable"
						defer func() { avxOn = true }()
						// On a shared machine wall time counts the time the
						// thread waits for a core: "GB/s-cpu" divides by the
						// thread's own CPU time instead (one thread).
						withThreads(1, func() {
							runtime.LockOSThread()
							defer runtime.UnlockOSThread()
							run := noAVX512
							if impl == "zmm" {
								run = func(fn func()) { fn() }
							}
							run(func() {
								QuantizedMatmulTVec(dst, x, wq, scv, biv, 1, n, k, c.gs, c.bits, Identity, acc)
								t0 := threadCPU()
								for b.Loop() {
									QuantizedMatmulTVec(dst, x, wq, scv, biv, 1, n, k, c.gs, c.bits, Identity, acc)
								}
								if sec := (threadCPU() - t0).Seconds(); sec > 0 {
									b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s-cpu")
								}
							})
						})
					})
				}
			}
		}
	}
}

// TestAVX2QuantQ8 holds avxQuantQ8 (through avxPrepQ8) to quantizeQ8Scalar
// and the layouts written out in the loops below, on random blocks with
// NaN, ±Inf, ±0, all-zero blocks, huge and tiny values, and values that
// scale onto ties.
func TestAVX2QuantQ8(t *testing.T) {
	needAVX2(t)
	r := rand.New(rand.NewPCG(7, 11))
	const nb = 40
	x := make([]float32, nb*32)
	for i := range x {
		switch b := i / 32; {
		case b == 0: // all zero
		case b == 1:
			x[i] = float32(i%5) - 2 // scales onto integers and halves
		case b == 2 && i%7 == 0:
			x[i] = float32(math.NaN())
		case b == 3 && i%9 == 0:
			x[i] = float32(math.Inf(1 - 2*(i&1)))
		case b == 4:
			x[i] = float32(math.Copysign(0, -1))
		case b == 5:
			x[i] = float32(r.NormFloat64()) * 1e38
		case b == 6:
			x[i] = float32(r.NormFloat64()) * 1e-40
		case b == 7:
			x[i] = 127.5 / 127 * float32(i%3)
		default:
			x[i] = float32(r.NormFloat64()) * float32(1+i%13)
		}
	}
	wantQ, wantD := make([]int8, len(x)), make([]float32, nb)
	quantizeQ8Scalar(wantQ, wantD, x, len(x), 127)
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		var s avxState
		avxPrepQ8(&s, x, len(x), bits)
		for b := range nb {
			if math.Float32bits(s.dx[b]) != math.Float32bits(wantD[b]) {
				t.Fatalf("bits %d block %d: d = %v, want %v", bits, b, s.dx[b], wantD[b])
			}
		}
		for i, q := range wantQ {
			if s.xqn[i] != q {
				t.Fatalf("bits %d x[%d] = %v: code %d, want %d", bits, i, x[i], s.xqn[i], q)
			}
			var got int
			switch bits {
			case 4:
				blk, j := i/32, i%32
				pos := j / 2
				if j%2 == 1 {
					pos += 16
				}
				got = int(s.xq[32*blk+pos])
			case 8:
				got = int(s.x16[i])
			default:
				got = int(s.x32[i])
			}
			if got != int(q) {
				t.Fatalf("bits %d x[%d]: layout code %d, want %d", bits, i, got, q)
			}
		}
	}
}

// TestAVXExactX holds avxExactX to its rule: every product of a 4-bit code
// and the value exact and finite in float32.
func TestAVXExactX(t *testing.T) {
	for _, c := range []struct {
		name string
		v    float32
		want bool
	}{
		{"zero", 0, true},
		{"negative zero", float32(math.Copysign(0, -1)), true},
		{"one", 1, true},
		{"bfloat16 value", tensor.RoundBF16(-3.14159), true},
		{"float16 value", tensor.RoundF16(0.1), true},
		{"float16 subnormal", tensor.RoundF16(3e-7), true},
		{"bfloat16 subnormal", math.Float32frombits(0x00050000), true},
		{"20 significant bits", math.Float32frombits(0x3f8ffff0), true},
		{"21 significant bits", math.Float32frombits(0x3f8ffff8), false},
		{"float32 subnormal, low bits", math.Float32frombits(0x00000003), false},
		{"just below 2^124", math.Float32frombits(0x7d7ffff0), true},
		{"2^124", float32(math.Ldexp(1, 124)), false},
		{"bfloat16 max", math.Float32frombits(0x7f7f0000), false},
		{"+Inf", float32(math.Inf(1)), false},
		{"-Inf", float32(math.Inf(-1)), false},
		{"NaN", float32(math.NaN()), false},
	} {
		if got := avxExactX([]float32{1, c.v, 2}); got != c.want {
			t.Errorf("%s (0x%08x): avxExactX = %v, want %v", c.name, math.Float32bits(c.v), got, c.want)
		}
	}
}

// TestQZMMFused holds qzmmF32B4X (the pair's second product added by
// VFMADD231PS) to qzmmF32B4 and to the portable loops bit for bit where
// avxExactX lets the dispatch take it (x rounded to bfloat16 or float16,
// large values below 2^124), and checks that the dispatch refuses it for
// x with a float32 significand, a value at 2^125 or an infinity: 4-bit
// group 32 (blocks of four groups and the one, two or three groups after
// them: k 672, 576, 864; whole blocks: 1536) and group 64 (three rows of x
// at k 576, a path that reaches it), every scale dtype, inside NaN guards.
func TestQZMMFused(t *testing.T) {
	needZF32(t)
	for _, xc := range []struct {
		name  string
		round Rounder
		edit  func([]float32)
		fused bool
	}{
		{"bf16", tensor.RoundBF16, nil, true},
		{"f16", tensor.RoundF16, nil, true},
		{"bf16 large", tensor.RoundBF16, func(x []float32) { x[5] = tensor.RoundBF16(1.5e37) }, true},
		{"f32", Identity, nil, false},
		{"bf16 2^125", tensor.RoundBF16, func(x []float32) { x[5] = float32(math.Ldexp(1, 125)) }, false},
		{"bf16 +Inf", tensor.RoundBF16, func(x []float32) { x[len(x)-1] = float32(math.Inf(1)) }, false},
	} {
		for _, sh := range []struct{ gs, m, k int }{{32, 1, 576}, {32, 1, 672}, {32, 1, 864}, {32, 1, 1536}, {32, 3, 576}, {32, 3, 864}, {64, 3, 576}} {
			for _, dt := range []string{"f32", "bf16", "f16"} {
				name := fmt.Sprintf("%s/g%d/%s/%s", xc.name, sh.gs, dt, dims(sh.m, 43, sh.k))
				t.Run(name, func(t *testing.T) {
					n, k, m := 43, sh.k, sh.m
					_, wq, sc, bi, sb, bb := qmvInputs(uint64(n+k), n, k, sh.gs, 4)
					scv, biv := avxVecs(dt, sc, bi, sb, bb)
					xall := randVec(newRand(uint64(k+m)), m*k+2*guardN, 1, xc.round)
					x := xall[guardN : guardN+m*k]
					if xc.edit != nil {
						xc.edit(x)
					}
					if got := avxExactX(x); got != xc.fused {
						t.Fatalf("avxExactX = %v, want %v", got, xc.fused)
					}
					run := func(fused, avx bool) []float32 {
						avxFused, avxOn = fused, avx
						defer func() { avxFused, avxOn = true, true }()
						got, whole := guarded(m * n)
						withThreads(3, func() {
							QuantizedMatmulTVec(got, x, wq, scv, biv, m, n, k, sh.gs, 4, Identity, AccF32)
						})
						checkGuards(t, whole, name)
						return got
					}
					before := avxFusedCalls.Load()
					fused := run(true, true)
					if took := avxFusedCalls.Load() > before; took != xc.fused {
						t.Fatalf("the dispatch took qzmmF32B4X: %v, want %v", took, xc.fused)
					}
					expectSame(t, fused, run(false, true), "fused against qzmmF32B4")
					expectSame(t, fused, run(true, false), "fused against the portable loops")
				})
			}
		}
	}
}

// TestAVXBlockX holds avxBlockXAsm to avxBlockX's loop value for value, on
// lengths of whole blocks and blocks with one, two or three groups after
// them, inside NaN guards.
func TestAVXBlockX(t *testing.T) {
	needZF32(t)
	for _, k := range []int{128, 576, 672, 864, 1536} {
		x := randVec(newRand(uint64(k)), k, 1, Identity)
		want := make([]float32, k)
		avxBlockXOn = false
		avxBlockX(want, x)
		avxBlockXOn = true
		got, whole := guarded(k)
		avxBlockX(got, x)
		checkGuards(t, whole, fmt.Sprintf("k %d", k))
		expectSame(t, got, want, fmt.Sprintf("k %d", k))
		// The Go loop itself: register 2i+h, lane 4u+j holds x[32u+8i+4h+j].
		for b := range k / 128 {
			for v := range 8 {
				for u := range 4 {
					for j := range 4 {
						if w, g := x[128*b+32*u+4*v+j], want[128*b+16*v+4*u+j]; g != w {
							t.Fatalf("k %d block %d register %d lane %d: %v, want %v", k, b, v, 4*u+j, g, w)
						}
					}
				}
			}
		}
	}
}
