//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestRefPackedSameBits holds the reference precision on packed 4-bit
// weights (QuantizedMatmulTPacked with AccF32: the call that packs and the
// next that reads the panels alone, and a call with prefOn off, which
// unpacks them) to the unpacked matmul, bit for bit: one to three rows
// by qprefB4 a row at a time (every scale dtype, symmetric matrices whose
// biases are not stored, partial panels, an odd number of panels, words
// past the last chunk of 16) or, where x has a value prefScaleX cannot
// scale exactly, by the unpacking path; more rows by avxRunPacked (the
// m-blocked kernels on panels built from the packed ones, two or three
// workers, so that pairs of tiles start inside a packed panel, and the
// rows past the last tile of eight unpacked); x in bfloat16 and float16
// (exact products: the fused kernels, counted), float32 and with -0,
// ±Inf, NaN, huge and tiny values; each output dtype; the output's guards
// untouched.
//
// The lane-order shapes (4-bit groups of 64 and 128, 8-bit groups of 32,
// 64 and 128: the qpreflB kernels) are held alike: every x takes the
// kernels (no scaling of x), with row counts of the groups that leave the
// last bias chunk partial.
func TestRefPackedSameBits(t *testing.T) {
	if refPacks(512, 16, 4) || refPacks(448, 64, 4) {
		t.Fatal("refPacks takes a shape outside dotF32's 4-bit group-32 order and the lane order")
	}
	if !refPacks(512, 32, 4) {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; the reference precision does not pack")
	}
	for _, sh := range [][3]int{{512, 64, 4}, {1024, 128, 4}, {576, 32, 8}, {896, 64, 8}, {1024, 128, 8}} {
		if !refPacks(sh[0], sh[1], sh[2]) || !laneOrder(sh[0], sh[1], sh[2]) {
			t.Fatalf("k %d, group %d, %d bits: refPacks or laneOrder false", sh[0], sh[1], sh[2])
		}
	}
	cases := []struct{ bits, gs, n, k int }{
		{4, 32, 37, 576}, // three panels (the last partial), a tail of 8 words
		{4, 32, 16, 512}, // one panel
		{4, 32, 64, 2048},
		{4, 32, 88, 512},  // eleven tiles of eight rows: pairs split at odd tiles between workers
		{4, 32, 56, 1024}, // seven
		{4, 64, 37, 1152}, // lane order, two groups a block: 18 groups (the last bias chunk partial)
		{4, 128, 21, 1024},
		{8, 32, 37, 576}, // two groups a block, 18 groups
		{8, 64, 40, 896}, // a group a block, 14 groups
		{8, 128, 16, 2560},
		{8, 32, 19, 2048}, // 64 groups: four whole bias chunks
	}
	xkinds := []struct {
		name   string
		round  Rounder
		edit   func([]float32)
		kernel bool // qprefB4 takes one row
		fused  bool // in its fused form (qprefB4*X)
	}{
		{"bf16", tensor.RoundBF16, nil, true, true},
		{"f16", tensor.RoundF16, nil, true, true},
		{"bf16 edge values", tensor.RoundBF16, func(x []float32) {
			x[4], x[6], x[7], x[12], x[15] = float32(math.Copysign(0, -1)), 0x1p-98, 0x1p123, -0x1p123, 0
		}, true, true},
		{"f32", Identity, nil, true, false},
		{"f32 edge values", Identity, func(x []float32) {
			x[4], x[5], x[6], x[7] = float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.NaN()), 3e38
			x[12], x[15] = float32(math.Inf(-1)), 0x1p-98
		}, true, false},
		{"bf16 tiny", tensor.RoundBF16, func(x []float32) { x[13] = 0x1p-100 }, false, false},
		{"f32 subnormal", Identity, func(x []float32) { x[len(x)-1] = -0x1p-130 }, false, false},
	}
	for _, c := range cases {
		lanes := laneOrder(c.k, c.gs, c.bits)
		for _, m := range []int{1, 2, 5, 17} {
			for _, xk := range xkinds {
				for _, vec := range []string{"f32", "bf16", "f16", "bf16 scales, f32 biases", "symmetric f32", "symmetric bf16", "symmetric f16"} {
					for _, dt := range testDTypes {
						name := fmt.Sprintf("b%d/g%d/%s/x %s/%s/%s", c.bits, c.gs, dims(m, c.n, c.k), xk.name, vec, dt.name)
						t.Run(name, func(t *testing.T) {
							_, wq, sc, bi := qmmTInputs(uint64(m*7+c.n+c.k+c.gs), m, c.n, c.k, c.gs, c.bits)
							x := randVec(newRand(uint64(c.k+m)), m*c.k, 1, xk.round)
							if xk.edit != nil {
								for r := range m {
									xk.edit(x[r*c.k : (r+1)*c.k])
								}
							}
							scv, biv := packedTestVecs(vec, sc, bi, c.bits)
							want := make([]float32, m*c.n)
							QuantizedMatmulTVec(want, x, wq, scv, biv, m, c.n, c.k, c.gs, c.bits, dt.round, AccF32)
							slot := NewPackSlot(nil, nil)
							for _, call := range []string{"packing", "packed", "unpacking"} {
								prefOn = call != "unpacking"
								before, fusedBefore := prefCalls.Load(), avxFusedCalls.Load()
								got, whole := guarded(m * c.n)
								withThreads(2+len(call)%2, func() { // two or three workers
									QuantizedMatmulTPacked(got, x, wq, scv, biv, slot, m, c.n, c.k, c.gs, c.bits, dt.round, AccF32)
								})
								prefOn = true
								if slot.Bytes() == 0 {
									t.Fatalf("%s call: the slot holds nothing", call)
								}
								took, wantTook := prefCalls.Load() > before, m < prefGemmRows() && (xk.kernel || lanes) && call != "unpacking"
								if took != wantTook {
									t.Fatalf("%s call: the packed one-row kernels ran: %v, want %v", call, took, wantTook)
								}
								if fused := avxFusedCalls.Load() > fusedBefore; took && !lanes && fused != xk.fused {
									t.Fatalf("%s call: qprefB4 fused: %v, want %v", call, fused, xk.fused)
								}
								checkGuards(t, whole, name+" "+call)
								expectSame(t, got, want, name+" "+call)
							}
						})
					}
				}
			}
		}
	}
}

// BenchmarkRefPackedQMV measures the reference precision's one-row matmul
// on Llama-3.2-1B's 4-bit group-32 shapes (bfloat16 scales, symmetric as
// Q4_0 conversions are) on the original layout ("rows": qzmmF32B4X and the
// staged scales) and on packed panels ("packed": qprefB4), one thread.
// GB/s-cpu is the bytes each reads (the packed form holds no biases) per
// second of the thread's CPU time; "small" fits in L2.
func BenchmarkRefPackedQMV(b *testing.B) {
	if !refPacks(2048, 32, 4) {
		b.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; the reference precision does not pack")
	}
	for _, sz := range []struct {
		name string
		n, k int
	}{{"small", 512, 1024}, {"llama1b_up", 8192, 2048}, {"llama1b_down", 2048, 8192}} {
		_, wq, sc, bi := qmmTInputs(1, 1, sz.n, sz.k, 32, 4)
		scv, biv := packedTestVecs("symmetric bf16", sc, bi, 4)
		x := randVec(newRand(2), sz.k, 1, tensor.RoundBF16)
		y := make([]float32, sz.n)
		for _, impl := range []string{"rows", "packed"} {
			b.Run(sz.name+"/"+impl, func(b *testing.B) {
				var slot *PackSlot
				bytes := float64(sz.n*sz.k/2 + 2*2*sz.n*sz.k/32)
				if impl == "packed" {
					slot = NewPackSlot(nil, nil)
					bytes = float64(sz.n*sz.k/2 + 2*sz.n*sz.k/32)
				}
				withThreads(1, func() {
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					QuantizedMatmulTPacked(y, x, wq, scv, biv, slot, 1, sz.n, sz.k, 32, 4, tensor.RoundBF16, AccF32)
					t0 := threadCPU()
					for b.Loop() {
						QuantizedMatmulTPacked(y, x, wq, scv, biv, slot, 1, sz.n, sz.k, 32, 4, tensor.RoundBF16, AccF32)
					}
					if sec := (threadCPU() - t0).Seconds(); sec > 0 {
						b.ReportMetric(bytes*float64(b.N)/sec/1e9, "GB/s-cpu")
						b.ReportMetric(float64(sz.n*sz.k)*float64(b.N)/sec/1e9, "Gcodes/s-cpu")
					}
				})
				slot.Free()
			})
		}
	}
}

// TestPrefScan holds prefScan's AVX-512 pass (prefScanX) to the Go loops
// it replaces (prefScaleX, avxExactX): the same verdicts and, where x
// scales exactly, the same bits in the lanes qprefB4 reads (s = 4..7 of
// each word), on bfloat16-valued, float16-valued and float32 rows with one
// edge value placed in each lane s of the first, a middle and the last
// word (a tiny value makes the scaling inexact only in lanes 4..7).
func TestPrefScan(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: no AVX-512F; prefScan runs the Go loops alone")
	}
	edges := []float32{0, float32(math.Copysign(0, -1)), 0x1p-99, -0x1p-99, 0x1p-98, 0x1p-140, 0x1p124, -0x1p123,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1 + 0x1p-20, 1.5}
	r := newRand(7)
	for _, n := range []int{16, 32, 48, 2048, 8192} {
		for kind := range 3 {
			base := make([]float32, n)
			for i := range base {
				v := float32(r.NormFloat64())
				switch kind {
				case 0:
					v = math.Float32frombits(math.Float32bits(v) &^ 0xffff)
				case 1:
					v = tensor.RoundF16(v)
				}
				base[i] = v
			}
			for _, e := range append([]float32{1}, edges...) {
				for _, w := range []int{0, n / 16, n/8 - 1} {
					for s := range 8 {
						x := append([]float32(nil), base...)
						if e != 1 {
							x[8*w+s] = e
						}
						got, want := make([]float32, n), make([]float32, n)
						prefScanOn = true
						gs, gf := prefScan(got, x)
						prefScanOn = false
						ws, wf := prefScan(want, x)
						prefScanOn = true
						if gs != ws || gf != wf {
							t.Fatalf("n %d kind %d, x[%d] = %g: prefScanX scaled %v fused %v, the Go loops %v %v", n, kind, 8*w+s, e, gs, gf, ws, wf)
						}
						if !ws {
							continue
						}
						for i := range n {
							if i%8 >= 4 && math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("n %d kind %d, x[%d] = %g: xh[%d] %#x, want %#x", n, kind, 8*w+s, e, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
							}
						}
					}
				}
			}
		}
	}
}
