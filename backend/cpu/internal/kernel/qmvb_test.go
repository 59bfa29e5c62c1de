//go:build amd64

package kernel

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestQMVBatchEqualsOneRow holds the batched int8 kernels (qmvb_amd64.s)
// to the one-row kernel run on each row of x alone, bit for bit (rounded
// and unrounded), for every vector shape, float32, bf16 and f16 scales, 2 to 4
// rows of x (padded to 4), more rows in passes of 4, and row
// counts that do not fill a worker's share; and checks that the batched
// kernels ran (with them off the int8 GEMM gives other bits).
func TestQMVBatchEqualsOneRow(t *testing.T) {
	if !asmQ8 {
		t.Skip("SKIPPED: this CPU lacks AVX512-VNNI; the int8 kernels are not installed")
	}
	type tc struct{ bits, gs, k int }
	var shapes []tc
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, k := range []int{256, 1536} {
				if vecKernel(k, gs, bits, true) == 'a' {
					shapes = append(shapes, tc{bits, gs, k})
				}
			}
		}
	}
	if len(shapes) != 10 {
		t.Fatalf("got %d vector shapes, want 10", len(shapes))
	}
	old := qmvBatchMax
	qmvBatchMax = 16
	defer func() { qmvBatchMax = old }()
	differs := 0
	for _, sh := range shapes {
		for _, m := range []int{2, 3, 4, 5, 8, 11} {
			for _, n := range []int{1, 5, 131} {
				for _, dt := range []string{"f32", "bf16", "f16"} {
					name := fmt.Sprintf("b%dg%d/%s/%s", sh.bits, sh.gs, dims(m, n, sh.k), dt)
					t.Run(name, func(t *testing.T) {
						_, wq, sc, bi, sb, bb := qmvInputs(uint64(m*131+n*31+sh.k+sh.bits*7+sh.gs), n, sh.k, sh.gs, sh.bits)
						r := newRand(uint64(m + n))
						x, xwhole := guarded(m * sh.k)
						copy(x, randVec(r, m*sh.k, 1, tensor.RoundBF16))
						scv, biv := avxVecs(dt, sc, bi, sb, bb)
						for _, round := range []Rounder{tensor.RoundBF16, Identity} {
							want := make([]float32, m*n)
							for i := range m {
								QuantizedMatmulTVec(want[i*n:(i+1)*n], x[i*sh.k:(i+1)*sh.k], wq, scv, biv, 1, n, sh.k, sh.gs, sh.bits, round, AccQ8)
							}
							for _, th := range []int{1, 2, 5} {
								got, whole := guarded(m * n)
								withThreads(th, func() {
									QuantizedMatmulTVec(got, x, wq, scv, biv, m, n, sh.k, sh.gs, sh.bits, round, AccQ8)
								})
								checkGuards(t, whole, name)
								expectSame(t, got, want, fmt.Sprintf("%s threads %d", name, th))
							}
							// The int8 GEMM in its own order (not the one-row
							// order of gemmDot), from two rows up.
							qmvbOn, qmvBatchMax, gemmDotOn = false, 1, false
							gemm := make([]float32, m*n)
							QuantizedMatmulTVec(gemm, x, wq, scv, biv, m, n, sh.k, sh.gs, sh.bits, round, AccQ8)
							qmvbOn, qmvBatchMax, gemmDotOn = true, 16, true
							if firstDiff(gemm, want) >= 0 {
								differs++
							}
						}
						checkGuards(t, xwhole, name+" x")
					})
				}
			}
		}
	}
	if differs == 0 {
		t.Error("the int8 GEMM gave the one-row bits in every case: the test cannot tell the batched kernels ran")
	}
}

// TestQ8GemmDotEqualsRows holds the int8 GEMM in the one-row order
// (q8gemmDot, 4-bit weights in groups of 32) to each row of x run alone
// (the one-row kernels, qzmmQ8B4, and the portable dotQ8 + dotBias loops
// with the AVX2 kernels off) bit for bit: k with and without a partial last
// chunk of 16 words (576 = 4.5 chunks, as SmolLM2's hidden size), partial
// panels of weight rows, partial tiles of x rows and several tiles,
// float32, bfloat16 and float16 scales, rounded and unrounded, 1, 2 and 5
// threads, x (with NaN, ±Inf, zeros and subnormals in one row) and the
// output inside NaN guards; and checks that the GEMM in its own order
// differs, so the comparison shows which kernel ran.
func TestQ8GemmDotEqualsRows(t *testing.T) {
	if !asmQ8 {
		t.Skip("SKIPPED: this CPU lacks AVX512-VNNI; q8gemmDot is not installed")
	}
	const gs, bits = 32, 4
	differs := 0
	for _, k := range []int{96, 576, 1536} {
		for _, n := range []int{5, 16, 43, 136} {
			for i, m := range []int{2, 3, 8, 9, 17} {
				dt := []string{"f32", "bf16", "f16"}[(i+n)%3]
				name := fmt.Sprintf("k%d/%s/%s", k, dims(m, n, k), dt)
				t.Run(name, func(t *testing.T) {
					_, wq, sc, bi, sb, bb := qmvInputs(uint64(m*131+n*31+k), n, k, gs, bits)
					scv, biv := avxVecs(dt, sc, bi, sb, bb)
					x, xwhole := guarded(m * k)
					copy(x, randVec(newRand(uint64(m+n+k)), m*k, 1, tensor.RoundBF16))
					if m > 2 {
						copy(x[k:2*k], q8Special(uint64(k), k)) // row 1
					}
					for _, round := range []Rounder{tensor.RoundBF16, Identity} {
						want, port := make([]float32, m*n), make([]float32, m*n)
						for r := range m {
							QuantizedMatmulTVec(want[r*n:(r+1)*n], x[r*k:(r+1)*k], wq, scv, biv, 1, n, k, gs, bits, round, AccQ8)
							avxOn = false
							QuantizedMatmulTVec(port[r*n:(r+1)*n], x[r*k:(r+1)*k], wq, scv, biv, 1, n, k, gs, bits, round, AccQ8)
							avxOn = true
						}
						expectSame(t, port, want, name+": one-row kernels against the portable loops")
						for _, th := range []int{1, 2, 5} {
							got, whole := guarded(m * n)
							withThreads(th, func() {
								QuantizedMatmulTVec(got, x, wq, scv, biv, m, n, k, gs, bits, round, AccQ8)
							})
							checkGuards(t, whole, name)
							expectSame(t, got, want, fmt.Sprintf("%s threads %d", name, th))
						}
						if k%128 == 0 {
							gemm := make([]float32, m*n)
							q8GemmGo(gemm, x, wq, scv, biv, m, n, k, gs, bits, round)
							if firstDiff(gemm, want) >= 0 {
								differs++
							}
						}
					}
					checkGuards(t, xwhole, name+" x")
				})
			}
		}
	}
	if differs == 0 {
		t.Error("the GEMM's own order gave the one-row bits in every case: the test cannot tell the orders apart")
	}
}

// BenchmarkQMVBatch compares, on one thread, the batched one-row int8
// kernels with the int8 GEMM for a few rows of x (a decode batch) on a
// MiniCPM5-1B-sized projection (4-bit, group 64, bf16 scales), and the
// one-row kernel once per row: metric "ns/row" is the time per row of x,
// "ns-cpu/row" the thread's CPU time per row (the machine may be shared).
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench QMVBatch
func BenchmarkQMVBatch(b *testing.B) {
	if !asmQ8 {
		b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
	}
	const n, k, gs, bits = 4096, 1536, 64, 4
	_, wq, _, _, sb, bb := qmvInputs(1, n, k, gs, bits)
	scv, biv := BF16Vec(sb), BF16Vec(bb)
	for _, m := range []int{2, 4, 6, 8} {
		x := randVec(newRand(2), m*k, 1, tensor.RoundBF16)
		dst := make([]float32, m*n)
		for _, path := range []string{"batched", "gemm", "rows"} {
			b.Run(fmt.Sprintf("m%d/%s", m, path), func(b *testing.B) {
				old := qmvBatchMax
				qmvbOn, qmvBatchMax = path == "batched", 8 // m = 6 and 8: two passes of four
				defer func() { qmvbOn, qmvBatchMax = true, old }()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				t0 := threadCPU()
				withThreads(1, func() {
					for b.Loop() {
						if path == "rows" {
							for r := range m {
								QuantizedMatmulTVec(dst[r*n:(r+1)*n], x[r*k:(r+1)*k], wq, scv, biv, 1, n, k, gs, bits, tensor.RoundBF16, AccQ8)
							}
							continue
						}
						QuantizedMatmulTVec(dst, x, wq, scv, biv, m, n, k, gs, bits, tensor.RoundBF16, AccQ8)
					}
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*m), "ns/row")
				if cpu := threadCPU() - t0; cpu > 0 {
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*m), "ns-cpu/row")
				}
			})
		}
	}
}

// BenchmarkQ8GemmDot compares, on one thread, the int8 GEMM in the
// one-row order (q8gemmDot) with the paths it replaced for a few rows of x
// (a decode batch) on SmolLM2-135M's MLP projections (4-bit, group 32,
// float16 scales): "dot" the GEMM in the one-row order, "before" the GEMM
// in its own order (k = 1536) or the one-row kernels and their m-blocked
// AVX2 forms (k = 576, not a multiple of 128), "rows" the one-row kernel
// once per row. Metric "ns/row" is the time per row of x, "ns-cpu/row"
// the thread's CPU time per row (the machine may be shared).
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench Q8GemmDot -cpu 1
func BenchmarkQ8GemmDot(b *testing.B) {
	if !asmQ8 {
		b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
	}
	const gs, bits = 32, 4
	for _, sh := range [][2]int{{1536, 576}, {576, 1536}} {
		n, k := sh[0], sh[1]
		_, wq, sc, bi, sb, bb := qmvInputs(1, n, k, gs, bits)
		scv, biv := avxVecs("f16", sc, bi, sb, bb)
		for _, m := range []int{2, 4, 8} {
			x := randVec(newRand(2), m*k, 1, tensor.RoundBF16)
			dst := make([]float32, m*n)
			for _, path := range []string{"dot", "before", "rows"} {
				b.Run(fmt.Sprintf("%s/m%d/%s", dims(n, k), m, path), func(b *testing.B) {
					gemmDotOn = path == "dot"
					defer func() { gemmDotOn = true }()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					t0 := threadCPU()
					withThreads(1, func() {
						for b.Loop() {
							if path == "rows" {
								for r := range m {
									QuantizedMatmulTVec(dst[r*n:(r+1)*n], x[r*k:(r+1)*k], wq, scv, biv, 1, n, k, gs, bits, tensor.RoundBF16, AccQ8)
								}
								continue
							}
							QuantizedMatmulTVec(dst, x, wq, scv, biv, m, n, k, gs, bits, tensor.RoundBF16, AccQ8)
						}
					})
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*m), "ns/row")
					if cpu := threadCPU() - t0; cpu > 0 {
						b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*m), "ns-cpu/row")
					}
				})
			}
		}
	}
}

// BenchmarkBatchStream runs the quantized matmuls of one decode step of a
// batch of 1, 4 or 8 rows (fast precision) in graph order over weights
// larger than the last-level cache: SmolLM2-135M's 30 layers (4-bit group
// 32, float16 scales) and its tied 8-bit group-32 head, and 6 of
// MiniCPM5-1B's 24 layers in the OptiQ mix (o and gate 8-bit, the rest
// 4-bit, group 64, bfloat16 scales) with its 8-bit head. "GB/s-cpu" is
// weight bytes per second of the thread's CPU time (one thread); a batch
// of B rows costs B·(ns/op at rows1)/(ns/op at rowsB) steps of one row.
// MLXGO_BENCH_THREADS=2 runs it on two threads as a decode step does,
// without locking the goroutine to its OS thread (a locked goroutine that
// yields while it waits for the workers hands its processor over through
// futex wake-ups: on Zen 4, 2026-12-05, the eight-row step then took
// longer on two threads than on one, 9.7-11.2 ms against 9.0, where
// unlocked it took 5.2-5.8).
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench BatchStream -cpu 1 -benchtime 20x
func BenchmarkBatchStream(b *testing.B) {
	if !asmQ8 {
		b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
	}
	smol, cpm := streamModels()
	for _, model := range []struct {
		name, dt string
		layers   []layer
	}{{"smollm2", "f16", smol}, {"minicpm5", "bf16", cpm}} {
		type mat struct {
			layer
			wq     []uint32
			sc, bi Vec
		}
		var mats []mat
		var bytes int64
		maxN := 0
		for i, l := range model.layers {
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(i), l.n, l.k, l.gs, l.bits)
			scv, biv := avxVecs(model.dt, sc, bi, sb, bb)
			mats = append(mats, mat{l, wq, scv, biv})
			bytes += int64(4*len(wq) + 2*len(sb) + 2*len(bb))
			maxN = max(maxN, l.n, l.k)
		}
		// Eight rows: through the int8 GEMM ("gemm"), the GEMM on packed
		// weights ("packed", packed before the clock starts) or, where they
		// run, the batched one-row kernels in two passes ("qmvb"); "-l1"
		// and "-l2" force the GEMM's prefetch into L1 or L2 (gemmPFL2).
		for _, run := range []struct {
			m, batchMax int
			path        string
		}{{1, 4, ""}, {1, 4, "/packed"}, {2, 4, ""}, {4, 4, ""}, {8, 4, "/gemm"}, {8, 4, "/packed"}, {8, 8, "/qmvb"},
			{8, 4, "/gemm-l1"}, {8, 4, "/gemm-l2"}, {8, 4, "/packed-l1"}, {8, 4, "/packed-l2"}} {
			m := run.m
			packed := strings.HasPrefix(run.path, "/packed")
			x := randVec(newRand(3), m*maxN, 1, tensor.RoundBF16)
			dst := make([]float32, m*maxN)
			b.Run(fmt.Sprintf("%s/rows%d%s", model.name, m, run.path), func(b *testing.B) {
				defer func(v, l2 int) { qmvBatchMax, gemmPFL2 = v, l2 }(qmvBatchMax, gemmPFL2)
				qmvBatchMax = run.batchMax
				switch {
				case strings.HasSuffix(run.path, "-l1"):
					gemmPFL2 = 0
				case strings.HasSuffix(run.path, "-l2"):
					gemmPFL2 = 1
				}
				b.SetBytes(bytes)
				slots := make([]*PackSlot, len(mats))
				if packed {
					for i := range slots {
						slots[i] = NewPackSlot(nil, nil)
					}
				}
				step := func() {
					for i, w := range mats {
						QuantizedMatmulTPacked(dst[:m*w.n], x[:m*w.k], w.wq, w.sc, w.bi, slots[i], m, w.n, w.k, w.gs, w.bits, tensor.RoundBF16, AccQ8)
					}
				}
				nth := 1
				if v, err := strconv.Atoi(os.Getenv("MLXGO_BENCH_THREADS")); err == nil && v > 0 {
					nth = v
				}
				withThreads(nth, func() {
					if nth == 1 {
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
					}
					step() // packs the weights of "packed"
					t0 := threadCPU()
					for b.Loop() {
						step()
					}
					if sec := (threadCPU() - t0).Seconds(); sec > 0 {
						b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s-cpu")
					}
				})
			})
		}
	}
}

// layer is one quantized matrix of a decode step: n rows of k, groups of
// gs, bits per weight.
type layer struct{ n, k, gs, bits int }

// streamModels are the matrices of one decode step of SmolLM2-135M (30
// blocks of 4-bit group 32, the 8-bit tied head) and of MiniCPM5-1B's
// first 6 blocks (4/8-bit group 64) with its 8-bit head, in order.
func streamModels() (smol, cpm []layer) {
	for range 30 {
		for _, nk := range [][2]int{{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}} {
			smol = append(smol, layer{nk[0], nk[1], 32, 4})
		}
	}
	smol = append(smol, layer{49152, 576, 32, 8})
	for range 6 {
		cpm = append(cpm, layer{2048, 1536, 64, 4}, layer{256, 1536, 64, 4}, layer{256, 1536, 64, 4}, layer{1536, 2048, 64, 8},
			layer{4608, 1536, 64, 8}, layer{4608, 1536, 64, 4}, layer{1536, 4608, 64, 4})
	}
	cpm = append(cpm, layer{130560, 1536, 64, 8})
	return smol, cpm
}

// TestCPUIDFamily holds x86Family (cpuid, behind amdZen5OrLater) to the vendor and
// family that Linux reports in /proc/cpuinfo.
func TestCPUIDFamily(t *testing.T) {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skipf("SKIPPED: no /proc/cpuinfo to compare with (%v)", err)
	}
	field := func(name string) string {
		for line := range strings.Lines(string(info)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == name {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("/proc/cpuinfo has no %q line", name)
		return ""
	}
	vendor, family := x86Family()
	if want := field("vendor_id"); vendor != want {
		t.Errorf("cpuid(0) vendor %q, /proc/cpuinfo %q", vendor, want)
	}
	if want := field("cpu family"); fmt.Sprint(family) != want {
		t.Errorf("cpuid(1) family %d, /proc/cpuinfo %s", family, want)
	}
	if got, want := amdZen5OrLater(), vendor == "AuthenticAMD" && family >= 0x1a; got != want {
		t.Errorf("amdZen5OrLater() = %v for %s family %#x", got, vendor, family)
	}
}
