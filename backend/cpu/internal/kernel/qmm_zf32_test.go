//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// needZF32 skips, saying so, where the AVX-512 float32 m-blocked kernels
// cannot run.
func needZF32(t testing.TB) {
	t.Helper()
	needAVX2(t)
	if !asmF32 {
		t.Skip("SKIPPED: the CPU has no AVX-512 F/BW/DQ/VL; the AVX-512 float32 m-blocked kernels are not run")
	}
}

// TestZF32GemmEqualsRows holds the AVX-512 float32 m-blocked kernels
// (qmm_zf32_amd64.s) bit for bit to the AVX2 m-blocked kernels and to the
// one-row kernels (the m-blocked kernels off), and through
// QuantizedMatmulTVec to the portable loops (every AVX2 and AVX-512 path
// off: dotF32 + dotBias), on the combinations that reach them on an
// AVX-512 CPU (4-bit group 32 at any k; 4-bit group 64 and 8-bit group 32
// where k is not a multiple of the AVX-512 one-row kernels' block):
// weight rows of odd and even tile counts (an odd last pair), rows of x
// with every remainder of four, float32, bfloat16 and float16 scales, one
// and several chunks of groups, x and the output inside NaN guards,
// rounded and unrounded, 1 and 3 threads; and one row of x in both
// precisions against the portable loops. x is bfloat16 (every code·x
// product exact: the fused kernels, counted) and float32 (the unfused
// ones).
func TestZF32GemmEqualsRows(t *testing.T) {
	needZF32(t)
	defer func(v int) { avxGemmMinRows = v }(avxGemmMinRows)
	avxGemmMinRows = 2
	dts := []string{"f32", "bf16", "f16"}
	for _, c := range []struct{ bits, gs, k int }{
		{4, 32, 576}, {4, 32, 1536}, {4, 32, 2080}, {4, 64, 576}, {4, 64, 1344}, {8, 32, 608}, {8, 32, 1376},
	} {
		if vecKernel(c.k, c.gs, c.bits, false) != 0 {
			t.Fatalf("b%dg%d k %d: the AVX-512 one-row kernels take it; the test would not reach avxRun", c.bits, c.gs, c.k)
		}
		for i, m := range []int{2, 3, 4, 5, 7, 8, 9, 17} {
			n := []int{43, 136, 24, 16}[i%4]
			dt := dts[(i+c.k/32)%3]
			name := fmt.Sprintf("b%dg%d/%s/%s", c.bits, c.gs, dt, dims(m, n, c.k))
			for _, xr := range []Rounder{tensor.RoundBF16, Identity} {
				xname := name + "/x " + map[bool]string{true: "bf16", false: "f32"}[xr != nil && xr(1.1) != 1.1]
				t.Run(xname, func(t *testing.T) { testZF32(t, c.bits, c.gs, dt, m, n, c.k, xr, xname) })
			}
		}
	}
}

func testZF32(t *testing.T, bits, gs int, dt string, m, n, k int, xr Rounder, name string) {
	_, wq, sc, bi, sb, bb := qmvInputs(uint64(n*37+k+bits), n, k, gs, bits)
	scv, biv := avxVecs(dt, sc, bi, sb, bb)
	xall := randVec(newRand(uint64(k+3*m)), m*k+2*guardN, 1, xr)
	for i := range guardN {
		xall[i], xall[len(xall)-1-i] = sentinel, sentinel
	}
	x := xall[guardN : guardN+m*k]
	for _, round := range []Rounder{Identity, tensor.RoundBF16} {
		run := func(what string, th int, set func(on bool)) []float32 {
			got, whole := guarded(m * n)
			set(false)
			withThreads(th, func() {
				if !avxRun(got, x, wq, scv, biv, m, n, k, gs, bits, round, false, false) {
					t.Fatalf("%s: avxRun did not take this combination", what)
				}
			})
			set(true)
			checkGuards(t, whole, name+" "+what)
			return got
		}
		rows := run("one-row kernels", 1, func(on bool) { avxGemmOn = on })
		ymm := run("AVX2 m-blocked", 1, func(on bool) { zf32On = on })
		expectSame(t, ymm, rows, name+": AVX2 m-blocked against one-row")
		exact := bits == 4 && avxExactX(x) || bits == 8 && avxExactX8(x)
		for _, th := range []int{1, 3} {
			f0 := zfFusedCalls.Load()
			z := run("AVX-512", th, func(bool) {})
			if fused := zfFusedCalls.Load() > f0; fused != exact {
				t.Fatalf("%s threads %d: fused kernels ran: %v, want %v (every code·x product exact)", name, th, fused, exact)
			}
			expectSame(t, z, rows, fmt.Sprintf("%s threads %d: AVX-512 m-blocked against one-row", name, th))
		}
		want, got := make([]float32, m*n), make([]float32, m*n)
		avxOn = false
		QuantizedMatmulTVec(want, x, wq, scv, biv, m, n, k, gs, bits, round, AccF32)
		avxOn = true
		QuantizedMatmulTVec(got, x, wq, scv, biv, m, n, k, gs, bits, round, AccF32)
		expectSame(t, got, want, name+": QuantizedMatmulTVec against the portable loops")
		// One row of x in both precisions (the one-row kernels read the
		// scales as avxStageZ stages them).
		for _, acc := range []Acc{AccF32, AccQ8} {
			want, got := make([]float32, n), make([]float32, n)
			avxOn = false
			QuantizedMatmulTVec(want, x[:k], wq, scv, biv, 1, n, k, gs, bits, round, acc)
			avxOn = true
			QuantizedMatmulTVec(got, x[:k], wq, scv, biv, 1, n, k, gs, bits, round, acc)
			expectSame(t, got, want, fmt.Sprintf("%s: one row, acc %d, against the portable loops", name, acc))
		}
	}
}

// BenchmarkZF32Prefill measures the AVX-512 float32 m-blocked kernels
// ("zmm") against the AVX2 ones ("ymm") in the reference precision on the
// prefill shapes of the benchmark matrix's 4-bit group-32 models ("zmm"
// fused where x is bfloat16, as here; "zmm-unfused" the separate
// multiplies and adds), and
// the Qwen-shaped 8-bit ones ("f32gemm": qmm_gemmf32_amd64.s takes them) (128 rows
// of x, MLXGO_BENCH_ROWS to change it; one thread). GMAC/s-cpu is
// multiply-accumulates per second of the thread's own CPU time (the
// machine may be shared).
func BenchmarkZF32Prefill(b *testing.B) {
	needZF32(b)
	shapes := []struct {
		name           string
		n, k, bits, gs int
		dt             string
	}{
		{"smollm2_up_b4g32", 1536, 576, 4, 32, "f16"},
		{"smollm2_down_b4g32", 576, 1536, 4, 32, "f16"},
		{"llama1b_qkv_b4g32", 2048, 2048, 4, 32, "bf16"},
		{"llama1b_up_b4g32", 8192, 2048, 4, 32, "bf16"},
		{"llama1b_down_b4g32", 2048, 8192, 4, 32, "bf16"},
		{"qwen05b_up_b8g32", 4864, 896, 8, 32, "bf16"},
		{"qwen05b_down_b8g32", 896, 4864, 8, 32, "bf16"},
	}
	m := 128
	if v, err := strconv.Atoi(os.Getenv("MLXGO_BENCH_ROWS")); err == nil && v > 0 {
		m = v
	}
	for _, sz := range shapes {
		_, wq, sc, bi, sb, bb := qmvInputs(1, sz.n, sz.k, sz.gs, sz.bits)
		scv, biv := avxVecs(sz.dt, sc, bi, sb, bb)
		x := randVec(newRand(2), m*sz.k, 1, tensor.RoundBF16)
		y := make([]float32, m*sz.n)
		impls := []string{"ymm", "zmm", "zmm-unfused"}
		if sz.bits != 4 {
			impls = []string{"f32gemm"} // zf32On does not apply: f32gemmB8 takes it
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%s/%s/%s", sz.name, dims(m, sz.n, sz.k), impl), func(b *testing.B) {
				zf32On, avxFused = impl != "ymm", impl != "zmm-unfused"
				defer func() { zf32On, avxFused = true, true }()
				withThreads(1, func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					QuantizedMatmulTVec(y, x, wq, scv, biv, m, sz.n, sz.k, sz.gs, sz.bits, tensor.RoundBF16, AccF32)
					t0 := threadCPU()
					for b.Loop() {
						QuantizedMatmulTVec(y, x, wq, scv, biv, m, sz.n, sz.k, sz.gs, sz.bits, tensor.RoundBF16, AccF32)
					}
					if sec := (threadCPU() - t0).Seconds(); sec > 0 {
						b.ReportMetric(float64(m*sz.n*sz.k)*float64(b.N)/sec/1e9, "GMAC/s-cpu")
					}
				})
			})
		}
	}
}

// TestAVXStageZ holds avxStage with the AVX-512 transposes (avxStageZ) to
// avxStage without them, bit for bit (every 16-bit pattern, NaNs included,
// widened the same way), for bfloat16 and float16 values: rows of 18 (no
// AVX-512 part), 32, 64, 72, 100 and 152 groups (a remainder of whole
// blocks of eight, a padded one, none), one and three tiles from weight row
// 0 and 8, the values ending with the last tile (its tail read inside v),
// the output inside NaN guards.
func TestAVXStageZ(t *testing.T) {
	needZF32(t)
	for _, f16 := range []bool{false, true} {
		if f16 && !avxF16 {
			continue
		}
		for _, gpr := range []int{18, 32, 64, 72, 100, 152} {
			for _, tiles := range []int{1, 3} {
				for _, row0 := range []int{0, 8} {
					name := fmt.Sprintf("f16=%v/gpr%d/tiles%d/row%d", f16, gpr, tiles, row0)
					gpad := (gpr + 7) &^ 7
					r := newRand(uint64(gpr*7 + tiles + row0))
					u := make([]uint16, (row0+8*tiles)*gpr)
					for i := range u {
						u[i] = uint16(r.Uint32())
					}
					v := Vec{U16: u, F16: f16}
					want, wantAll := guarded(8 * tiles * gpad)
					zStageOn = false
					avxStage(want, v, row0, tiles, gpr, gpad)
					zStageOn = true
					got, gotAll := guarded(8 * tiles * gpad)
					avxStage(got, v, row0, tiles, gpr, gpad)
					checkGuards(t, gotAll, name)
					checkGuards(t, wantAll, name)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: staged value %d is %#x, want %#x", name, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
						}
					}
				}
			}
		}
	}
}

// BenchmarkZStageQMV measures one row of x (a decode step's matmul) with
// avxStageZ off and on, on Llama-3.2-1B's 4-bit group-32 shapes with
// bfloat16 scales, both precisions, one thread. GB/s-cpu is weight,
// scale and bias bytes read per second of the thread's own CPU time.
func BenchmarkZStageQMV(b *testing.B) {
	needZF32(b)
	for _, sz := range []struct {
		name string
		n, k int
	}{{"llama1b_up", 8192, 2048}, {"llama1b_down", 2048, 8192}} {
		_, wq, sc, bi, sb, bb := qmvInputs(1, sz.n, sz.k, 32, 4)
		scv, biv := avxVecs("bf16", sc, bi, sb, bb)
		x := randVec(newRand(2), sz.k, 1, tensor.RoundBF16)
		y := make([]float32, sz.n)
		bytes := float64(sz.n*sz.k/2 + 2*2*sz.n*sz.k/32)
		for _, acc := range []Acc{AccF32, AccQ8} {
			for _, impl := range []string{"ymm", "zmm"} {
				b.Run(fmt.Sprintf("%s/acc%d/stage-%s", sz.name, acc, impl), func(b *testing.B) {
					zStageOn = impl == "zmm"
					defer func() { zStageOn = true }()
					withThreads(1, func() {
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						QuantizedMatmulTVec(y, x, wq, scv, biv, 1, sz.n, sz.k, 32, 4, tensor.RoundBF16, acc)
						t0 := threadCPU()
						for b.Loop() {
							QuantizedMatmulTVec(y, x, wq, scv, biv, 1, sz.n, sz.k, 32, 4, tensor.RoundBF16, acc)
						}
						if sec := (threadCPU() - t0).Seconds(); sec > 0 {
							b.ReportMetric(bytes*float64(b.N)/sec/1e9, "GB/s-cpu")
						}
					})
				})
			}
		}
	}
}
