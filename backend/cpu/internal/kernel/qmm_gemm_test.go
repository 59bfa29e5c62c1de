package kernel

import (
	"fmt"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// q8Special returns x values that exercise every branch of quantizeQ8:
// random blocks, an all-zero block, blocks with NaN, ±Inf, subnormals only,
// huge values, ties of the rounding and signed zeros.
func q8Special(seed uint64, n int) []float32 {
	r := newRand(seed)
	x := randVec(r, n, 1, Identity)
	nb := n / 32
	set := func(blk int, f func(i int) float32) {
		if blk < nb {
			for i := range 32 {
				x[blk*32+i] = f(i)
			}
		}
	}
	set(1, func(int) float32 { return 0 })
	set(2, func(i int) float32 { return float32(math.Copysign(0, float64(i%2)-0.5)) })
	at := func(i int, v float32) {
		if i < n {
			x[i] = v
		}
	}
	at(3*32+5, float32(math.NaN()))
	at(4*32+7, float32(math.Inf(1)))
	at(5*32+9, float32(math.Inf(-1)))
	set(6, func(i int) float32 { return math.Float32frombits(uint32(i*1234567) & 0x7fffff) })
	set(7, func(i int) float32 { return float32(i-16) * 1e37 })
	set(8, func(i int) float32 { // amax 127: x·(127/amax) = x, halves are ties
		if i == 31 {
			return 127
		}
		return float32(i) - 15.5
	})
	set(9, func(i int) float32 { return float32(math.NaN()) })
	set(10, func(i int) float32 { return math.Float32frombits(1) })
	return x
}

// TestQ8Quant holds the assembly quantizer to quantizeQ8's scalar loop bit
// for bit, in natural order and in the tile layout with the 4-bit order.
func TestQ8Quant(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the assembly quantizer is not installed")
	}
	for _, nb := range []int{1, 11, 16, 17, 35, 48, 64} {
		for _, perm := range []bool{false, true} {
			t.Run(fmt.Sprintf("nb%d/perm%v", nb, perm), func(t *testing.T) {
				x := q8Special(uint64(nb), nb*32)
				wantQ, wantD := make([]int8, nb*32), make([]float32, nb)
				quantizeQ8Scalar(wantQ, wantD, x, nb*32, 127)
				// Tile layout: block i at 96·i (stride 96 bytes), scale at 3·i.
				gotQ, gotD := make([]int8, nb*96+8), make([]float32, 3*nb+1)
				q8Quant(&x[0], &gotQ[0], &gotD[0], nb, 96, 12, perm)
				for b := range nb {
					if math.Float32bits(gotD[3*b]) != math.Float32bits(wantD[b]) {
						t.Errorf("scale: got %v, want %v (block %d)", gotD[3*b], wantD[b], b)
					}
					for i := range 32 {
						src := i
						if perm {
							src = i&^7 + [8]int{0, 2, 4, 6, 1, 3, 5, 7}[i&7]
						}
						if g, w := gotQ[96*b+i], wantQ[32*b+src]; g != w {
							t.Fatalf("code: got %d, want %d (block %d, index %d)", g, w, b, i)
						}
					}
				}
				got, gotD2 := make([]int8, nb*32), make([]float32, nb)
				quantizeQ8(got, gotD2, x, nb*32, 127)
				for i := range got {
					if got[i] != wantQ[i] {
						t.Fatalf("quantizeQ8: got %d, want %d (index %d)", got[i], wantQ[i], i)
					}
				}
				expectSame(t, gotD2, wantD, "quantizeQ8 scales")
			})
		}
	}
}

// TestQ8Gemm holds the int8 GEMM (assembly where the CPU has VNNI, and the
// portable loop) to qmmTQ8BlockRef bit for bit: partial panels of weight
// rows, partial tiles of x rows, every group size, storage dtype and scale
// type.
func TestQ8Gemm(t *testing.T) {
	// Two to four rows would take the batched one-row kernels or the
	// one-row kernels row by row (qmvBatchMax).
	qmvbOn, qmvBatchMax = false, 1
	defer func(v int) { qmvbOn, qmvBatchMax = true, v }(qmvBatchMax)
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, sz := range [][3]int{{2, 16, 256}, {9, 37, 512}, {17, 70, 384}} {
				m, n, k := sz[0], sz[1], sz[2]
				if !gemmQ8(k, gs, bits) {
					continue
				}
				dot := gemmDot(k, gs, bits) // the one-row order (TestQ8GemmDotEqualsRows): only the portable GEMM here
				for _, dt := range testDTypes {
					name := fmt.Sprintf("b%dg%d/%s/%s", bits, gs, dims(m, n, k), dt.name)
					t.Run(name, func(t *testing.T) {
						x, wq, sc, bi := qmmTInputs(uint64(m*31+n+k+bits+gs), m, n, k, gs, bits)
						x[3] = float32(math.NaN()) // row 0 becomes NaN, the others not
						want := make([]float32, m*n)
						qmmTQ8BlockRef(want, x, wq, sc, bi, m, n, k, gs, bits, dt.round)
						gotP := make([]float32, m*n)
						q8GemmGo(gotP, x, wq, F32Vec(sc), F32Vec(bi), m, n, k, gs, bits, dt.round)
						expectSame(t, gotP, want, name+" portable")
						if dot {
							return
						}
						got, whole := guarded(m * n)
						withThreads(2, func() {
							QuantizedMatmulT(got, x, wq, sc, bi, m, n, k, gs, bits, dt.round, AccQ8)
						})
						checkGuards(t, whole, name)
						expectSame(t, got, want, name)
						sb, bb := make([]uint16, len(sc)), make([]uint16, len(bi))
						for i := range sc {
							sb[i], bb[i] = tensor.Float32ToBF16(sc[i]), tensor.Float32ToBF16(bi[i])
						}
						gotV := make([]float32, m*n)
						QuantizedMatmulTVec(gotV, x, wq, BF16Vec(sb), BF16Vec(bb), m, n, k, gs, bits, dt.round, AccQ8)
						expectSame(t, gotV, want, name+" bf16 scales")
					})
				}
			}
		}
	}
}

// TestQ8GemmVsRows holds the int8 GEMM (m >= 2) to the one-row int8
// arithmetic (qmmTQ8Ref, the order of the m = 1 kernels) within the bound
// written in qmm_gemm.go: both sum the same terms s·d_t·I_t and b·xs_g, in
// float32, in different orders, so |y_gemm - y_row| <= 2·γ_j·Σ|terms|
// with j = k/32 + 2k/gs + 4, γ_j = j·u/(1 - j·u), u = 2^-24 (float32
// outputs). The int8 codes and block sums are the same in both.
func TestQ8GemmVsRows(t *testing.T) {
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			const m, n, k = 9, 37, 1536
			t.Run(fmt.Sprintf("b%dg%d/%s", bits, gs, dims(m, n, k)), func(t *testing.T) {
				x, wq, sc, bi := qmmTInputs(uint64(bits*gs), m, n, k, gs, bits)
				got := make([]float32, m*n)
				QuantizedMatmulT(got, x, wq, sc, bi, m, n, k, gs, bits, Identity, AccQ8)
				want := make([]float32, m*n)
				qmmTQ8Ref(want, x, wq, sc, bi, m, n, k, gs, bits, Identity)
				xq, dx := make([]int8, m*k), make([]float32, m*k/32)
				quantizeQ8(xq, dx, x, m*k, 127)
				xs := make([]float32, m*k/gs)
				groupSums(xs, x, m, k, gs)
				u := math.Ldexp(1, -24)
				j := float64(k/32 + 2*k/gs + 4)
				gamma := j * u / (1 - j*u)
				wpr, gpr := WordsPerRow(k, bits), k/gs
				for r := range m {
					for c := range n {
						var terms float64
						for t := range k / 32 {
							var isum int64
							for i := t * 32; i < (t+1)*32; i++ {
								isum += int64(codeAt(wq[c*wpr:], i, bits)) * int64(xq[r*k+i])
							}
							terms += math.Abs(float64(sc[c*gpr+t*32/gs]) * float64(dx[r*k/32+t]) * float64(isum))
						}
						for g := range gpr {
							terms += math.Abs(float64(bi[c*gpr+g]) * float64(xs[r*gpr+g]))
						}
						i := r*n + c
						if e := math.Abs(float64(got[i]) - float64(want[i])); !(e <= 2*gamma*terms) {
							t.Fatalf("got %v, want %v ± %g (row %d, column %d)", got[i], want[i], 2*gamma*terms, r, c)
						}
					}
				}
			})
		}
	}
}

// TestGroupSumsAVX2 holds groupSumsFlat's AVX2 loop (gsum8: sets of 8
// groups and a scalar tail) to the scalar sums bit for bit (checkGroupSums).
func TestGroupSumsAVX2(t *testing.T) {
	if !gsumAVX2 {
		t.Skip("SKIPPED: this CPU lacks AVX2; groupSumsFlat's AVX2 loop is not installed")
	}
	defer func(old bool) { asmF32 = old }(asmF32)
	asmF32 = false // the AVX-512 loop (gsum16) would take these first
	for _, gs := range []int{8, 16, 32, 64, 128} {
		for _, ng := range []int{5, 8, 37, 96} {
			t.Run(fmt.Sprintf("g%d/n%d", gs, ng), func(t *testing.T) { checkGroupSums(t, gs, ng, uint64(3*gs+ng)) })
		}
	}
}

// checkGroupSums holds groupSumsFlat over ng groups of gs values to the
// scalar sequential sums bit for bit, on values with NaN, ±Inf, signed
// zeros and large terms that cancel (so the order of the additions shows).
func checkGroupSums(t *testing.T, gs, ng int, seed uint64) {
	t.Helper()
	x := q8Special(seed, ng*gs)
	for i := range x {
		if i%7 == 3 {
			x[i] *= 1e7
		}
	}
	want := make([]float32, ng)
	for g := range ng {
		var s float32
		for _, v := range x[g*gs : (g+1)*gs] {
			s += v
		}
		want[g] = s
	}
	got, whole := guarded(ng)
	groupSumsFlat(got, x, ng, gs)
	checkGuards(t, whole, "group sums")
	expectSame(t, got, want, "group sums")
}

// TestPrepAsm holds the assembly preparations of x to their scalar loops
// bit for bit: the sequential group sums (gsum16 through groupSumsFlat,
// sets of 16 groups and a scalar tail) and the lane layouts of permF32,
// permF32Tile and permQ8, on values with NaN, ±Inf, signed zeros and
// cancellation.
func TestPrepAsm(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the assembly preparations are not installed")
	}
	for _, gs := range []int{16, 32, 64, 128} {
		for _, ng := range []int{5, 16, 37, 96} {
			t.Run(fmt.Sprintf("sums/g%d/n%d", gs, ng), func(t *testing.T) {
				checkGroupSums(t, gs, ng, uint64(gs+ng))
			})
		}
	}
	for _, bits := range []int{4, 8} {
		for _, m := range []int{1, 3} {
			t.Run(fmt.Sprintf("perm/b%d/m%d", bits, m), func(t *testing.T) {
				const k = 1536
				B := 16 * 32 / bits
				x := q8Special(uint64(bits+m), m*k)
				want := make([]float32, m*k)
				for b := range m * k / B {
					for l := range 16 {
						for p := range 32 / bits {
							want[b*B+p*16+l] = x[b*B+(32/bits)*l+p]
						}
					}
				}
				got, whole := guarded(m * k)
				permF32(got, x, m, k, bits)
				checkGuards(t, whole, "permF32")
				expectSame(t, got, want, "permF32")
				xq, dx := make([]int8, m*k), make([]float32, m*k/32)
				quantizeQ8(xq, dx, x, m*k, 127)
				wantQ, wantL := make([]int8, m*k), make([]float32, m*k/(32/bits))
				for b := range m * k / B {
					for i := range B {
						src := i // 8-bit: natural order
						if bits == 4 {
							src = 2*(i%64) + i/64 // even codes, then odd codes
						}
						wantQ[b*B+i] = xq[b*B+src]
					}
					for l := range 16 {
						wantL[b*16+l] = dx[(b*B+(32/bits)*l)/32]
					}
				}
				gotQ, gotL := make([]int8, m*k), make([]float32, m*k/(32/bits))
				permQ8(gotQ, xq, gotL, dx, m, k, bits)
				for i := range wantQ {
					if gotQ[i] != wantQ[i] {
						t.Fatalf("permQ8: got %d, want %d (index %d)", gotQ[i], wantQ[i], i)
					}
				}
				expectSame(t, gotL, wantL, "permQ8 lane scales")
				tile := make([]float32, 8*k)
				permF32Tile(tile, x[:k], 5, k, bits)
				for b := range k / B {
					expectSame(t, tile[(b*8+5)*B:(b*8+6)*B], want[b*B:(b+1)*B], fmt.Sprintf("permF32Tile block %d", b))
				}
			})
		}
	}
}

// BenchmarkQ8Quant is the int8 GEMM's quantization of x (q8Quant into the
// tile layout of eight rows, 4-bit order) for one row of SmolLM2-135M's
// widths (576: attention and gate/up inputs; 1536: down) and MiniCPM5-1B's
// (1536, 4096); ns/op is one row.
func BenchmarkQ8Quant(b *testing.B) {
	for _, k := range []int{576, 1536, 4096} {
		b.Run(fmt.Sprintf("k%d", k), func(b *testing.B) {
			nb := k / 32
			x := randVec(newRand(uint64(k)), k, 1, Identity)
			xq, d := make([]int8, nb*256), make([]float32, nb*8)
			for b.Loop() {
				q8Quant(&x[0], &xq[0], &d[0], nb, 256, 32, true)
			}
		})
	}
}
