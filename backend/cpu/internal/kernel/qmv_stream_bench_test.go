//go:build amd64

package kernel

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkQMVStream runs the matvecs of decode steps in graph order, on 1
// and 2 threads, and reports the weight bytes read per second (per CPU
// second with one thread): what decode can reach when nothing but the
// matmuls runs. Each model's layers hold more than the last-level cache:
// smollm2-135m is SmolLM2-135M's 30 layers (q, k, v, o, gate, up, down at
// width 576, 4-bit group 32, float16 scales: 66 MB); llama-1b is two of
// Llama-3.2-1B's layers (width 2048, 4-bit group 32, bfloat16: 76 MB);
// qwen-0.5b four of Qwen2.5-0.5B's (width 896, 8-bit group 32, bfloat16:
// 67 MB). On CPUs with AVX-512 VNNI the int8 rows run twice, with and
// without the int8 kernels' prefetch (-pf1, -pf0).
func BenchmarkQMVStream(b *testing.B) {
	needAVX2(b)
	type model struct {
		name             string
		layers, gs, bits int
		dt               string
		shapes           [][2]int // [n, k] of q, k, v, o, gate, up, down
	}
	models := []model{
		{"smollm2-135m", 30, 32, 4, "f16", [][2]int{{576, 576}, {192, 576}, {192, 576}, {576, 576}, {1536, 576}, {1536, 576}, {576, 1536}}},
		{"llama-1b", 2, 32, 4, "bf16", [][2]int{{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048}, {8192, 2048}, {8192, 2048}, {2048, 8192}}},
		{"qwen-0.5b", 4, 32, 8, "bf16", [][2]int{{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}}},
	}
	for _, md := range models {
		gs, bits := md.gs, md.bits
		var mats []streamMat
		var bytes int64
		kmax := 0
		for l := range md.layers {
			for i, sh := range md.shapes {
				n, k := sh[0], sh[1]
				_, wq, sc, bi, sb, bb := qmvInputs(uint64(100*l+i), n, k, gs, bits)
				scv, biv := avxVecs(md.dt, sc, bi, sb, bb)
				mats = append(mats, streamMat{n, k, wq, scv, biv})
				bytes += int64(4*len(wq) + 2*2*len(sc))
				kmax = max(kmax, n, k)
			}
		}
		x := make([]float32, kmax)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		dst := make([]float32, kmax)
		for _, acc := range []Acc{AccF32, AccQ8} {
			// On AVX-512 VNNI CPUs the int8 kernels run in both forms
			// (qmvQ8PF, on by default): -pf1 prefetching, -pf0 not.
			forms := []string{""}
			if acc == AccQ8 && asmQ8 {
				forms = []string{"-pf0", "-pf1"}
			}
			for _, form := range forms {
				for _, th := range []int{1, 2} {
					b.Run(fmt.Sprintf("%s/acc%d%s/threads%d", md.name, acc, form, th), func(b *testing.B) {
						if form != "" {
							old := qmvQ8PF
							defer func() { qmvQ8PF = old }()
							qmvQ8PF = form == "-pf1"
						}
						runStream(b, th, mats, x, dst, gs, bits, acc, bytes)
					})
				}
			}
		}
	}
}

// streamMat is one weight matrix of the streaming benchmarks.
type streamMat struct {
	n, k   int
	wq     []uint32
	sc, bi Vec
}

// runStream runs the matvecs of mats in turn, one row of x each, b.N times
// on th threads (runThreads).
func runStream(b *testing.B, th int, mats []streamMat, x, dst []float32, gs, bits int, acc Acc, bytes int64) {
	runThreads(b, th, bytes, func() {
		for _, m := range mats {
			QuantizedMatmulTVec(dst, x[:m.k], m.wq, m.sc, m.bi, 1, m.n, m.k, gs, bits, Identity, acc)
		}
	})
}

// runThreads runs step b.N times on th threads, bytes a step, and with one
// thread reports the bytes per CPU second ("GB/s-cpu"). Only the one-thread
// run locks its OS thread (for the thread's CPU time): a locked caller's
// yields while it waits for the workers hand its thread off and back
// (futex sleeps), which read Zen 4's two-thread dense stream at 14-19 GB/s
// against 35-40 unlocked.
func runThreads(b *testing.B, th int, bytes int64, step func()) {
	b.SetBytes(bytes)
	withThreads(th, func() {
		if th == 1 {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		t0 := threadCPU()
		for b.Loop() {
			step()
		}
		if sec := (threadCPU() - t0).Seconds(); th == 1 && sec > 0 {
			b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s-cpu")
		}
	})
}

// BenchmarkAVXOneRowPF measures avxOneRow's spread prefetch of the next
// chunk's scales and biases against the kernels' own (avxSpreadPF off), in
// alternating runs on one thread: two of Llama-3.2-1B's layers (4-bit
// group 32, bfloat16 scales, 76 MB) streamed from memory, in weight bytes
// per CPU second.
func BenchmarkAVXOneRowPF(b *testing.B) {
	needAVX2(b)
	const layers, gs, bits = 2, 32, 4
	shapes := [][2]int{{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048}, {8192, 2048}, {8192, 2048}, {2048, 8192}}
	var mats []streamMat
	var bytes int64
	for l := range layers {
		for i, sh := range shapes {
			n, k := sh[0], sh[1]
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(100*l+i), n, k, gs, bits)
			scv, biv := avxVecs("bf16", sc, bi, sb, bb)
			mats = append(mats, streamMat{n, k, wq, scv, biv})
			bytes += int64(4*len(wq) + 4*len(sc))
		}
	}
	x := make([]float32, 8192)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	dst := make([]float32, 8192)
	defer func(on bool) { avxSpreadPF = on }(avxSpreadPF)
	for _, acc := range []Acc{AccF32, AccQ8} {
		for rep := range 3 {
			for _, on := range []bool{false, true} {
				b.Run(fmt.Sprintf("acc%d/spread=%v/run%d", acc, on, rep), func(b *testing.B) {
					avxSpreadPF = on
					runStream(b, 1, mats, x, dst, gs, bits, acc, bytes)
				})
			}
		}
	}
}

// BenchmarkQMVSpreadPF measures qmvSpreadPF (the one-row kernels of
// qmv_amd64.s with the scales and biases of the next chunk prefetched
// between calls) against one call per chunk, in alternating runs on one
// thread, streamed from memory, in weight bytes per CPU second: four of
// Qwen2.5-0.5B's layers (8-bit group 32), three of MiniCPM5-1B's at 4 bits
// and two at 8 (group 64), bfloat16 scales.
func BenchmarkQMVSpreadPF(b *testing.B) {
	if !asmF32 {
		b.Skip("SKIPPED: this CPU lacks AVX-512; the one-row kernels are not installed")
	}
	type model struct {
		name             string
		layers, gs, bits int
		shapes           [][2]int
	}
	cpm := [][2]int{{2048, 1536}, {256, 1536}, {256, 1536}, {1536, 2048}, {4608, 1536}, {4608, 1536}, {1536, 4608}}
	defer func(on bool) { qmvSpreadPF = on }(qmvSpreadPF)
	for _, md := range []model{
		{"qwen-0.5b-b8g32", 4, 32, 8, [][2]int{{896, 896}, {128, 896}, {128, 896}, {896, 896}, {4864, 896}, {4864, 896}, {896, 4864}}},
		{"minicpm5-b4g64", 3, 64, 4, cpm},
		{"minicpm5-b8g64", 2, 64, 8, cpm},
	} {
		type mat struct {
			n, k   int
			wq     []uint32
			sc, bi Vec
		}
		var mats []mat
		var bytes int64
		for l := range md.layers {
			for i, sh := range md.shapes {
				n, k := sh[0], sh[1]
				_, wq, sc, bi, sb, bb := qmvInputs(uint64(100*l+i), n, k, md.gs, md.bits)
				scv, biv := avxVecs("bf16", sc, bi, sb, bb)
				mats = append(mats, mat{n, k, wq, scv, biv})
				bytes += int64(4*len(wq) + 4*len(sc))
			}
		}
		x := make([]float32, 8192)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		dst := make([]float32, 8192)
		for _, acc := range []Acc{AccF32, AccQ8} {
			for rep := range 3 {
				for _, on := range []bool{false, true} {
					b.Run(fmt.Sprintf("%s/acc%d/spread=%v/run%d", md.name, acc, on, rep), func(b *testing.B) {
						qmvSpreadPF = on
						b.SetBytes(bytes)
						withThreads(1, func() {
							runtime.LockOSThread()
							defer runtime.UnlockOSThread()
							t0 := threadCPU()
							for b.Loop() {
								for _, m := range mats {
									QuantizedMatmulTVec(dst, x[:m.k], m.wq, m.sc, m.bi, 1, m.n, m.k, md.gs, md.bits, Identity, acc)
								}
							}
							if sec := (threadCPU() - t0).Seconds(); sec > 0 {
								b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s-cpu")
							}
						})
					})
				}
			}
		}
	}
}

// BenchmarkPackedRowStream runs one-row decode through packed panels
// (q8gemvDot, fast precision) over two of Llama-3.2-1B's layers (4-bit
// group 32, bfloat16 scales: 76 MB, packed before the clock starts), on 1
// and 2 threads: the weight bytes per second that Llama-3.2-1B's decode
// can reach.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench PackedRowStream -benchtime 100x
func BenchmarkPackedRowStream(b *testing.B) {
	if !asmQ8 {
		b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
	}
	type mat struct {
		streamMat
		slot *PackSlot
	}
	var mats []mat
	var bytes int64
	for l := range 2 {
		for i, sh := range [][2]int{{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048}, {8192, 2048}, {8192, 2048}, {2048, 8192}} {
			n, k := sh[0], sh[1]
			_, wq, sc, bi, sb, bb := qmvInputs(uint64(100*l+i), n, k, 32, 4)
			scv, biv := avxVecs("bf16", sc, bi, sb, bb)
			mats = append(mats, mat{streamMat{n, k, wq, scv, biv}, NewPackSlot(nil, nil)})
			bytes += int64(4*len(wq) + 2*2*len(sc))
		}
	}
	x := randVec(newRand(3), 8192, 1, tensor.RoundBF16)
	dst := make([]float32, 8192)
	step := func() {
		for _, w := range mats {
			QuantizedMatmulTPacked(dst[:w.n], x[:w.k], w.wq, w.sc, w.bi, w.slot, 1, w.n, w.k, 32, 4, tensor.RoundBF16, AccQ8)
		}
	}
	withThreads(1, step) // packs
	for _, th := range []int{1, 2} {
		b.Run(fmt.Sprintf("llama-1b/threads%d", th), func(b *testing.B) {
			runThreads(b, th, bytes, step)
		})
	}
}

// BenchmarkPackedRowCalls runs one-row decode through packed panels
// (q8gemvDot, fast precision, two threads) over four of Llama-3.2-1B's
// layers (4-bit group 32, bfloat16 scales: 152 MB, more than the last-level
// cache holds), each layer in the calls nn makes of it: q, k and v in one
// pass (QuantizedMatmulTPackedShared), o, gate and up in one pass, down.
// Besides the whole step's bytes per second it reports each kind of call's
// (the time inside the calls of that kind): what a decode token's matmuls
// read per second, call by call, and so what each call's start and end cost
// against a long stream. On Zen 4 (2026-12-05, three runs as the host
// moved) the fused gate and up read 26.2-34.9 GB/s, o 24.5-33.0, down
// 24.0-31.5 and the fused q, k and v 24.3-32.0: in each run the long fused
// call the most, by 5-12%.
//
//	go test ./backend/cpu/internal/kernel/ -run '^$' -bench PackedRowCalls -benchtime 20x
func BenchmarkPackedRowCalls(b *testing.B) {
	if !asmQ8 {
		b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
	}
	const layers, hidden, inter, kvRows = 4, 2048, 8192, 512
	type mat struct {
		streamMat
		slot *PackSlot
	}
	newMat := func(seed uint64, n, k int) mat {
		_, wq, sc, bi, sb, bb := qmvInputs(seed, n, k, 32, 4)
		scv, biv := avxVecs("bf16", sc, bi, sb, bb)
		return mat{streamMat{n, k, wq, scv, biv}, NewPackSlot(nil, nil)}
	}
	matBytes := func(m mat) int64 { // the codes and the packed scales (and biases) a call reads
		p := m.slot.packed()
		return int64(4*len(m.wq) + 2*len(p.sb16) + 4*len(p.sb32))
	}
	shared := func(dst []float32, ms ...mat) []SharedMat {
		out := make([]SharedMat, len(ms))
		for i, m := range ms {
			out[i] = SharedMat{Dst: dst[:m.n], WQ: m.wq, Scales: m.sc, Biases: m.bi, Slot: m.slot, N: m.n}
			dst = dst[m.n:]
		}
		return out
	}
	type call struct {
		kind string
		run  func()
	}
	x := randVec(newRand(3), inter, 1, tensor.RoundBF16)
	dst := make([]float32, 2*inter+hidden)
	var calls []call
	var layerMats []mat
	for l := range layers {
		s := uint64(100 * l)
		q, k, v, o := newMat(s, hidden, hidden), newMat(s+1, kvRows, hidden), newMat(s+2, kvRows, hidden), newMat(s+3, hidden, hidden)
		gate, up, down := newMat(s+4, inter, hidden), newMat(s+5, inter, hidden), newMat(s+6, hidden, inter)
		layerMats = append(layerMats, q, k, v, o, gate, up, down)
		qkv, gu := shared(dst, q, k, v), shared(dst, gate, up)
		one := func(m mat) func() {
			return func() {
				QuantizedMatmulTPacked(dst[:m.n], x[:m.k], m.wq, m.sc, m.bi, m.slot, 1, m.n, m.k, 32, 4, tensor.RoundBF16, AccQ8)
			}
		}
		calls = append(calls,
			call{"qkv", func() { QuantizedMatmulTPackedShared(x[:hidden], qkv, 1, hidden, 32, 4, tensor.RoundBF16, AccQ8) }},
			call{"o", one(o)},
			call{"gateup", func() { QuantizedMatmulTPackedShared(x[:hidden], gu, 1, hidden, 32, 4, tensor.RoundBF16, AccQ8) }},
			call{"down", one(down)})
	}
	step := func() {
		for _, c := range calls {
			c.run()
		}
	}
	withThreads(1, step) // packs
	bytes := map[string]int64{}
	var total int64
	for l := range layers {
		m := layerMats[7*l : 7*l+7]
		bytes["qkv"] += matBytes(m[0]) + matBytes(m[1]) + matBytes(m[2])
		bytes["o"] += matBytes(m[3])
		bytes["gateup"] += matBytes(m[4]) + matBytes(m[5])
		bytes["down"] += matBytes(m[6])
	}
	for _, n := range bytes {
		total += n
	}
	b.Run("llama-1b/threads2", func(b *testing.B) {
		spent := map[string]time.Duration{}
		b.SetBytes(total)
		withThreads(2, func() {
			for b.Loop() {
				for _, c := range calls {
					t0 := time.Now()
					c.run()
					spent[c.kind] += time.Since(t0)
				}
			}
		})
		for kind, d := range spent {
			b.ReportMetric(float64(bytes[kind])*float64(b.N)/d.Seconds()/1e9, "GB/s-"+kind)
		}
	})
}
