//go:build amd64

package kernel

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestAVX2GemmEqualsRows holds the m-blocked kernels (qmm_avx2_amd64.s) to
// the one-row kernels they replace (qavxF32B*, qavxQ8B*, qavxG8B*) bit for
// bit: 2-, 3-, 4-, 5-, 6- and 8-bit weights, groups of 32, 64 and 128, the
// three forms (reference, fast one-row order, and for 4 and 8 bits the
// fast GEMM order), rows of x with every remainder of four and of three,
// float32, bfloat16 and float16 scales in turn over them (each dtype
// meets several row counts), one and several chunks of groups, x and the
// output inside NaN guards, rounded and unrounded, 1 and 3 threads.
func TestAVX2GemmEqualsRows(t *testing.T) {
	needAVX2(t)
	defer func(v, w int) { avxGemmOddRows, avxGemmMinRows = v, w }(avxGemmOddRows, avxGemmMinRows)
	avxGemmOddRows, avxGemmMinRows = 2, 2
	dts := []string{"f32", "bf16", "f16"}
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, k := range []int{576, 1536} {
				if k%gs != 0 {
					continue
				}
				for _, form := range []string{"f32", "q8", "gemm"} {
					if form == "gemm" && bits != 4 && bits != 8 {
						continue // the int8 GEMM takes 4- and 8-bit weights
					}
					for i, m := range []int{2, 3, 4, 5, 7, 8, 9, 17} {
						n := 43
						if m == 9 {
							n = 136
						}
						c := avxCase{bits, gs, dts[(i+k/576)%3]}
						name := fmt.Sprintf("b%dg%d/%s/%s/%s", c.bits, c.gs, c.dt, dims(m, n, k), form)
						t.Run(name, func(t *testing.T) { noAVX512(func() { testAVX2GemmEqualsRows(t, c, m, n, k, form, name) }) })
					}
				}
			}
		}
	}
}

func testAVX2GemmEqualsRows(t *testing.T, c avxCase, m, n, k int, form, name string) {
	_, wq, sc, bi, sb, bb := qmvInputs(uint64(n*31+k+c.bits*7+c.gs), n, k, c.gs, c.bits)
	scv, biv := avxVecs(c.dt, sc, bi, sb, bb)
	xall := randVec(newRand(uint64(k+m)), m*k+2*guardN, 1, tensor.RoundBF16)
	for i := range guardN {
		xall[i], xall[len(xall)-1-i] = sentinel, sentinel
	}
	x := xall[guardN : guardN+m*k]
	q8, gemm := form != "f32", form == "gemm"
	for _, round := range []Rounder{Identity, tensor.RoundBF16} {
		want := make([]float32, m*n)
		avxGemmOn = false
		ok := avxRun(want, x, wq, scv, biv, m, n, k, c.gs, c.bits, round, q8, gemm)
		avxGemmOn = true
		if !ok {
			t.Fatal("avxRun did not take this combination")
		}
		for _, th := range []int{1, 3} {
			got, whole := guarded(m * n)
			withThreads(th, func() {
				ok = avxRun(got, x, wq, scv, biv, m, n, k, c.gs, c.bits, round, q8, gemm)
			})
			if !ok {
				t.Fatal("avxRun did not take this combination")
			}
			checkGuards(t, whole, name)
			expectSame(t, got, want, fmt.Sprintf("%s threads %d", name, th))
		}
	}
}

// TestAVX2GemmEqualsPortableLoops holds the m-blocked kernels, through
// QuantizedMatmulTVec, to the portable loops with the AVX2 kernels off
// (dotF32 + dotBias, dotQ8 + dotBias, q8GemmGo) on a few shapes, so the
// chain to the definitions does not rest on the one-row kernels alone.
func TestAVX2GemmEqualsPortableLoops(t *testing.T) {
	needAVX2(t)
	for _, c := range []avxCase{{4, 32, "f16"}, {4, 64, "bf16"}, {8, 32, "f32"}, {8, 128, "bf16"}} {
		for _, k := range []int{576, 1536} {
			if k%c.gs != 0 {
				continue
			}
			for _, acc := range []Acc{AccF32, AccQ8} {
				for _, m := range []int{5, 12} {
					n := 40
					name := fmt.Sprintf("b%dg%d/%s/%s/acc%d", c.bits, c.gs, c.dt, dims(m, n, k), acc)
					t.Run(name, func(t *testing.T) {
						noAVX512(func() {
							_, wq, sc, bi, sb, bb := qmvInputs(uint64(k+c.bits), n, k, c.gs, c.bits)
							scv, biv := avxVecs(c.dt, sc, bi, sb, bb)
							x := randVec(newRand(uint64(m)), m*k, 1, tensor.RoundBF16)
							want, got := make([]float32, m*n), make([]float32, m*n)
							avxOn = false
							QuantizedMatmulTVec(want, x, wq, scv, biv, m, n, k, c.gs, c.bits, Identity, acc)
							avxOn = true
							QuantizedMatmulTVec(got, x, wq, scv, biv, m, n, k, c.gs, c.bits, Identity, acc)
							expectSame(t, got, want, name)
						})
					})
				}
			}
		}
	}
}

// BenchmarkAVX2Prefill measures the m-blocked kernels ("gemm") against the
// one-row kernels they replace ("rows") on prefill shapes of the benchmark
// matrix's models, both precisions, 128 rows of x, one thread. GMAC/s-cpu
// is multiply-accumulates per second of the thread's own CPU time (the
// machine may be shared).
func BenchmarkAVX2Prefill(b *testing.B) {
	needAVX2(b)
	shapes := []struct {
		name           string
		n, k, bits, gs int
		dt             string
	}{
		{"smollm2_up_b4g32", 1536, 576, 4, 32, "f16"},
		{"smollm2_down_b4g32", 576, 1536, 4, 32, "f16"},
		{"llama1b_up_b4g32", 8192, 2048, 4, 32, "bf16"},
		{"qwen05b_up_b8g32", 4864, 896, 8, 32, "bf16"},
		{"minicpm_up_b4g64", 4608, 1536, 4, 64, "bf16"},
		{"minicpm_gate_b8g64", 4608, 1536, 8, 64, "bf16"},
	}
	// MLXGO_BENCH_ROWS sets the rows of x (128 by default: a prefill chunk;
	// 2 to 16 are batched decode steps).
	m := 128
	if v, err := strconv.Atoi(os.Getenv("MLXGO_BENCH_ROWS")); err == nil && v > 0 {
		m = v
	}
	for _, sz := range shapes {
		_, wq, sc, bi, sb, bb := qmvInputs(1, sz.n, sz.k, sz.gs, sz.bits)
		scv, biv := avxVecs(sz.dt, sc, bi, sb, bb)
		x := randVec(newRand(2), m*sz.k, 1, tensor.RoundBF16)
		y := make([]float32, m*sz.n)
		for _, acc := range []Acc{AccF32, AccQ8} {
			for _, impl := range []string{"rows", "gemm"} {
				b.Run(fmt.Sprintf("%s/%s/acc%d/%s", sz.name, dims(m, sz.n, sz.k), acc, impl), func(b *testing.B) {
					avxGemmOn, avxGemmMinRows = impl == "gemm", 2
					defer func(v int) { avxGemmOn, avxGemmMinRows = true, v }(avxGemmMinRows)
					withThreads(1, func() {
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
						noAVX512(func() {
							QuantizedMatmulTVec(y, x, wq, scv, biv, m, sz.n, sz.k, sz.gs, sz.bits, tensor.RoundBF16, acc)
							t0 := threadCPU()
							for b.Loop() {
								QuantizedMatmulTVec(y, x, wq, scv, biv, m, sz.n, sz.k, sz.gs, sz.bits, tensor.RoundBF16, acc)
							}
							if sec := (threadCPU() - t0).Seconds(); sec > 0 {
								b.ReportMetric(float64(m*sz.n*sz.k)*float64(b.N)/sec/1e9, "GMAC/s-cpu")
							}
						})
					})
				})
			}
		}
	}
}

// BenchmarkAVX2GemmStream runs the m-blocked kernels as a batched decode
// step does (8 rows of x, MLXGO_BENCH_ROWS to change it, both threads):
// over one matrix again and again ("cache": its weights stay in L2/L3) and
// over a model's worth of distinct matrices in turn ("memory": every call
// reads its weights from DRAM, where the kernels' prefetch of the next
// tiles matters). GMAC per second of wall time.
func BenchmarkAVX2GemmStream(b *testing.B) {
	needAVX2(b)
	m := 8
	if v, err := strconv.Atoi(os.Getenv("MLXGO_BENCH_ROWS")); err == nil && v > 0 {
		m = v
	}
	shapes := []struct {
		name              string
		n, k, gs, bits, c int // c matrices, about 60 MB in all
	}{
		{"smollm2_up_b4g32", 1536, 576, 32, 4, 120},
		{"minicpm_up_b4g64", 4608, 1536, 64, 4, 12},
		{"minicpm_gate_b8g64", 4608, 1536, 64, 8, 6},
	}
	for _, sz := range shapes {
		var wqs [][]uint32
		var scs, bis []Vec
		for i := range sz.c {
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(i), sz.n, sz.k, sz.gs, sz.bits)
			scv, biv := avxVecs("f16", sc, bi, sb, bb)
			wqs, scs, bis = append(wqs, wq), append(scs, scv), append(bis, biv)
		}
		x := randVec(newRand(2), m*sz.k, 1, tensor.RoundBF16)
		y := make([]float32, m*sz.n)
		for _, acc := range []Acc{AccF32, AccQ8} {
			for _, from := range []string{"cache", "memory"} {
				b.Run(fmt.Sprintf("%s/%s/acc%d/%s", sz.name, dims(m, sz.n, sz.k), acc, from), func(b *testing.B) {
					noAVX512(func() {
						i := 0
						for b.Loop() {
							j := 0
							if from == "memory" {
								j = i % sz.c
							}
							i++
							QuantizedMatmulTVec(y, x, wqs[j], scs[j], bis[j], m, sz.n, sz.k, sz.gs, sz.bits, tensor.RoundBF16, acc)
						}
					})
					b.ReportMetric(float64(m*sz.n*sz.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
				})
			}
		}
	}
}
