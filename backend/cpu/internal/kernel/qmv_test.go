//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/internal/mmap"
	"github.com/mlxgo/mlxgo/tensor"
)

// qmvInputs returns the inputs of a one-row quantized matmul inside
// buffers with guardN elements of garbage before and after each (NaN
// scales and biases, random weight words): a kernel reading past its
// slices changes the results. Scales and biases are bf16 values, given as
// float32 and as bf16 bits.
func qmvInputs(seed uint64, n, k, gs, bits int) (x []float32, wq []uint32, sc, bi []float32, sb, bb []uint16) {
	r := newRand(seed)
	wpr, ng := WordsPerRow(k, bits), n*k/gs
	wall := make([]uint32, n*wpr+2*guardN)
	for i := range wall {
		wall[i] = r.Uint32()
	}
	wq = wall[guardN : guardN+n*wpr]
	nan := math.Float32frombits(0x7fc0dead)
	fall := func() []float32 {
		v := make([]float32, ng+2*guardN)
		for i := range v {
			v[i] = nan
		}
		return v[guardN : guardN+ng]
	}
	uall := func() []uint16 {
		v := make([]uint16, ng+2*guardN)
		for i := range v {
			v[i] = 0x7fc1 // a bf16 NaN
		}
		return v[guardN : guardN+ng]
	}
	sc, bi, sb, bb = fall(), fall(), uall(), uall()
	for i := range ng {
		sc[i] = tensor.RoundBF16(float32(r.Float64()*0.02 + 0.001))
		bi[i] = tensor.RoundBF16(float32(-r.Float64() * 0.1))
		sb[i], bb[i] = tensor.Float32ToBF16(sc[i]), tensor.Float32ToBF16(bi[i])
	}
	xall := randVec(r, k+2*guardN, 1, tensor.RoundBF16)
	return xall[guardN : guardN+k], wq, sc, bi, sb, bb
}

// TestQMVEqualsRowKernels holds the one-row kernels (qmv_amd64.s) to the
// general path (the per-row kernels of qmm_amd64.s) bit for bit, for both
// precisions, bit widths, the group sizes of the vector kernels, float32,
// bf16 and f16 scales, row counts that leave a partial tile, with several
// chunks per worker (one tile, or a few: the spread prefetch's sub-ranges
// and the next chunk in range), with and without qmvSpreadPF.
func TestQMVEqualsRowKernels(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the one-row kernels are not installed")
	}
	type tc struct{ bits, gs, k int }
	var shapes []tc
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, k := range []int{256, 768, 1536} {
				if vecKernel(k, gs, bits, false) == 'a' {
					shapes = append(shapes, tc{bits, gs, k})
				}
			}
		}
	}
	if len(shapes) != 15 {
		t.Fatalf("got %d vector shapes, want 15 (4-bit g64/g128 and 8-bit g32/g64/g128, three k each)", len(shapes))
	}
	for _, sh := range shapes {
		for _, n := range []int{1, 3, 4, 5, 38, 131} {
			for _, acc := range []Acc{AccF32, AccQ8} {
				for _, dt := range []string{"f32", "bf16", "f16"} {
					for _, chunk := range []int{64 << 10, 8 << 10, 1} {
						name := fmt.Sprintf("b%dg%d/%s/acc%d/%s/chunk%d", sh.bits, sh.gs, dims(1, n, sh.k), acc, dt, chunk)
						t.Run(name, func(t *testing.T) {
							if acc == AccQ8 && !asmQ8 {
								t.Skip("SKIPPED: this CPU lacks AVX512-VNNI; the int8 kernels are not installed")
							}
							withQ8PF(t, acc, func(t *testing.T) {
								x, wq, sc, bi, sb, bb := qmvInputs(uint64(n*31+sh.k+sh.bits*7+sh.gs), n, sh.k, sh.gs, sh.bits)
								scv, biv := avxVecs(dt, sc, bi, sb, bb)
								old := qmvChunk
								qmvChunk = chunk
								defer func() { qmvChunk = old }()
								want := make([]float32, n)
								qmvOn = false
								QuantizedMatmulTVec(want, x, wq, scv, biv, 1, n, sh.k, sh.gs, sh.bits, tensor.RoundBF16, acc)
								qmvOn = true
								// 2 and 5 workers: one range per worker, a worker
								// done with its own range helps with the others.
								for _, th := range []int{2, 5} {
									for _, spread := range []bool{true, false} {
										qmvSpreadPF = spread
										got, whole := guarded(n)
										withThreads(th, func() {
											QuantizedMatmulTVec(got, x, wq, scv, biv, 1, n, sh.k, sh.gs, sh.bits, tensor.RoundBF16, acc)
										})
										qmvSpreadPF = true
										checkGuards(t, whole, name)
										expectSame(t, got, want, fmt.Sprintf("%s threads %d spread %v", name, th, spread))
									}
								}
								// Unrounded: the kernel's float32 results themselves.
								got32, want32 := make([]float32, n), make([]float32, n)
								QuantizedMatmulTVec(got32, x, wq, scv, biv, 1, n, sh.k, sh.gs, sh.bits, Identity, acc)
								qmvOn = false
								QuantizedMatmulTVec(want32, x, wq, scv, biv, 1, n, sh.k, sh.gs, sh.bits, Identity, acc)
								qmvOn = true
								expectSame(t, got32, want32, name+" float32")
							})
						})
					}
				}
			}
		}
	}
}

// withQ8PF runs fn once, or under AccQ8 twice: with the int8 one-row
// kernels that prefetch and with those that do not (qmvQ8PF).
func withQ8PF(t *testing.T, acc Acc, fn func(t *testing.T)) {
	if acc != AccQ8 {
		fn(t)
		return
	}
	old := qmvQ8PF
	defer func() { qmvQ8PF = old }()
	for _, pf := range []bool{false, true} {
		qmvQ8PF = pf
		t.Run(fmt.Sprintf("prefetch=%v", pf), fn)
	}
}

// TestQMVSpecialX repeats the comparison of TestQMVEqualsRowKernels with
// rows of x holding ±Inf, NaN, ±0, subnormals and an all-zero block.
func TestQMVSpecialX(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the one-row kernels are not installed")
	}
	special := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0,
		float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, 3e38}
	for _, c := range []struct{ bits, gs, k int }{{4, 64, 768}, {4, 128, 512}, {8, 32, 512}, {8, 128, 1536}} {
		for _, acc := range []Acc{AccF32, AccQ8} {
			for si, sv := range special {
				name := fmt.Sprintf("b%dg%d/k%d/acc%d/special%d", c.bits, c.gs, c.k, acc, si)
				t.Run(name, func(t *testing.T) {
					if acc == AccQ8 && !asmQ8 {
						t.Skip("SKIPPED: this CPU lacks AVX512-VNNI; the int8 kernels are not installed")
					}
					const n = 9
					x, wq, _, _, sb, bb := qmvInputs(uint64(si*13+c.k), n, c.k, c.gs, c.bits)
					x[5], x[c.k-1] = sv, -sv
					clear(x[64:96]) // an all-zero block of 32
					withQ8PF(t, acc, func(t *testing.T) {
						got, want := make([]float32, n), make([]float32, n)
						QuantizedMatmulTVec(got, x, wq, BF16Vec(sb), BF16Vec(bb), 1, n, c.k, c.gs, c.bits, tensor.RoundBF16, acc)
						qmvOn = false
						QuantizedMatmulTVec(want, x, wq, BF16Vec(sb), BF16Vec(bb), 1, n, c.k, c.gs, c.bits, tensor.RoundBF16, acc)
						qmvOn = true
						expectSame(t, got, want, name)
					})
				})
			}
		}
	}
}

// TestQMVArgsLayout checks the field offsets of qmvArgs against the ones
// qmv_amd64.s reads (its QMV macro).
func TestQMVArgsLayout(t *testing.T) {
	var a qmvArgs
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"w", unsafe.Offsetof(a.w), 0}, {"s", unsafe.Offsetof(a.s), 8}, {"b", unsafe.Offsetof(a.b), 16},
		{"x", unsafe.Offsetof(a.x), 24}, {"d", unsafe.Offsetof(a.d), 32}, {"xs", unsafe.Offsetof(a.xs), 40},
		{"out", unsafe.Offsetof(a.out), 48}, {"ntile", unsafe.Offsetof(a.ntile), 56},
		{"nstep", unsafe.Offsetof(a.nstep), 64}, {"bps", unsafe.Offsetof(a.bps), 72},
		{"rowb", unsafe.Offsetof(a.rowb), 80}, {"gstr", unsafe.Offsetof(a.gstr), 88},
		{"hoff", unsafe.Offsetof(a.hoff), 96}, {"sstep", unsafe.Offsetof(a.sstep), 104},
		{"nbch", unsafe.Offsetof(a.nbch), 112}, {"bmask", unsafe.Offsetof(a.bmask), 120},
		{"pf", unsafe.Offsetof(a.pf), 128},
	} {
		if f.got != f.want {
			t.Errorf("qmvArgs.%s: got offset %d, want %d (qmv_amd64.s)", f.name, f.got, f.want)
		}
	}
}

// TestQMVUsed checks that the one-row path takes the cases it should and
// declines the others (float16 scales, mixed dtypes, no vector kernel).
func TestQMVUsed(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the one-row kernels are not installed")
	}
	const n, k = 8, 256
	f32, u16 := make([]float32, n*k/64), make([]uint16, n*k/64)
	cases := []struct {
		name   string
		sc, bi Vec
		gs     int
		bits   int
		want   bool
	}{
		{"f32", F32Vec(f32), F32Vec(f32), 64, 4, true},
		{"bf16", BF16Vec(u16), BF16Vec(u16), 64, 8, true},
		{"f16", F16Vec(u16), F16Vec(u16), 64, 4, true},
		{"mixed", F32Vec(f32), BF16Vec(u16), 64, 4, false},
		{"bf16-f16", BF16Vec(u16), F16Vec(u16), 64, 8, false},
		{"g32b4", F32Vec(f32), F32Vec(f32), 32, 4, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst, x := make([]float32, n), make([]float32, k)
			wq := make([]uint32, n*WordsPerRow(k, c.bits))
			sc, bi := c.sc, c.bi
			if c.gs == 32 {
				sc, bi = F32Vec(make([]float32, n*k/32)), F32Vec(make([]float32, n*k/32))
			}
			if got := qmvRows(dst, x, wq, sc, bi, n, k, c.gs, c.bits, Identity, false); got != c.want {
				t.Errorf("qmvRows: got %v, want %v (%s)", got, c.want, c.name)
			}
		})
	}
}

// TestQMVNoAllocs checks that a one-row call allocates nothing once its
// pooled scratch exists.
func TestQMVNoAllocs(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the one-row kernels are not installed")
	}
	const n, k, gs = 1030, 1536, 64
	for _, acc := range []Acc{AccF32, AccQ8} {
		for _, bits := range []int{4, 8} {
			t.Run(fmt.Sprintf("b%d/acc%d", bits, acc), func(t *testing.T) {
				if acc == AccQ8 && !asmQ8 {
					t.Skip("SKIPPED: this CPU lacks AVX512-VNNI; the int8 kernels are not installed")
				}
				x, wq, _, _, sb, bb := qmvInputs(5, n, k, gs, bits)
				dst := make([]float32, n)
				withThreads(2, func() {
					allocs := testing.AllocsPerRun(20, func() {
						if !qmvRows(dst, x, wq, BF16Vec(sb), BF16Vec(bb), n, k, gs, bits, tensor.RoundBF16, acc == AccQ8) {
							t.Fatal("qmvRows declined a bf16 case")
						}
					})
					if allocs != 0 {
						t.Errorf("got %v allocations per call, want 0", allocs)
					}
				})
			})
		}
	}
}

// TestQMVAgainstRef runs the reference comparison of the quantized matmul
// (testQMMCase: QuantizedMatmulTRef within the rounding bound of the
// summation order, the int8 bounds for AccQ8, bf16 storage equal to
// float32 storage) on one-row shapes the one-row kernels take.
func TestQMVAgainstRef(t *testing.T) {
	for _, c := range []struct{ n, k, gs, bits int }{
		{37, 768, 64, 4}, {37, 768, 128, 4}, {41, 512, 32, 8}, {41, 512, 64, 8}, {39, 1536, 128, 8},
	} {
		t.Run(fmt.Sprintf("b%dg%d/%s", c.bits, c.gs, dims(1, c.n, c.k)), func(t *testing.T) {
			testQMMCase(t, true, QuantizedMatmulT, QuantizedMatmulTRef, 1, c.n, c.k, c.gs, c.bits)
		})
	}
}

// qmvLayer is one quantized projection of a benchmark.
type qmvLayer struct {
	n, k, bits int
	wq         []uint32
	sc, bi     []uint16
}

func (l *qmvLayer) bytes() int64 { return int64(4*len(l.wq) + 2*len(l.sc) + 2*len(l.bi)) }

// mapLayers writes random projections of the given shapes (group 64, bf16
// scales) to a temporary file and maps it, so the benchmark reads its
// weights from a file mapping as a loaded checkpoint does.
func mapLayers(b *testing.B, shapes [][3]int) []qmvLayer {
	r := newRand(1)
	f, err := os.CreateTemp("", "qmvbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var offs []int64
	var size int64
	for _, c := range shapes {
		n, k, bits := c[0], c[1], c[2]
		w := make([]uint32, n*WordsPerRow(k, bits)+n*k/64) // words, then scales and biases
		for i := range w[:n*WordsPerRow(k, bits)] {
			w[i] = r.Uint32()
		}
		sb := unsafe.Slice((*uint16)(unsafe.Pointer(&w[n*WordsPerRow(k, bits)])), 2*n*k/64)
		for i := range n * k / 64 {
			sb[i] = tensor.Float32ToBF16(float32(r.Float64()*0.01 + 0.001))
			sb[n*k/64+i] = tensor.Float32ToBF16(float32(-r.Float64() * 0.05))
		}
		if _, err := f.Write(unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w))); err != nil {
			b.Fatal(err)
		}
		offs = append(offs, size)
		size += int64(4 * len(w))
	}
	m, _, err := mmap.Map(f, int(size)) // left mapped for the process
	if err != nil {
		b.Fatal(err)
	}
	ls := make([]qmvLayer, len(shapes))
	for i, c := range shapes {
		n, k, bits := c[0], c[1], c[2]
		nw, ng := n*WordsPerRow(k, bits), n*k/64
		ls[i] = qmvLayer{n: n, k: k, bits: bits, wq: unsafe.Slice((*uint32)(unsafe.Pointer(&m[offs[i]])), nw)}
		sb := unsafe.Slice((*uint16)(unsafe.Pointer(&m[offs[i]+int64(4*nw)])), 2*ng)
		ls[i].sc, ls[i].bi = sb[:ng], sb[ng:]
	}
	return ls
}

// BenchmarkQMV runs the projections of a decode step (one row of x, group
// 64, bf16 scales in place, weights in a file mapping) with the one-row
// kernels on and off: "layers" is six transformer blocks of
// MiniCPM5-1B-optiq's shapes (q, k, v, up and down 4-bit, o and gate 8-bit;
// 117 MB, more than the L3 cache, as in a real decode step), lm_head its
// 8-bit output head (200 MB). MB/s is the weight, scale and bias bytes
// read per second of wall time, GB/cpu-s per second of CPU time (steadier
// on a shared machine).
func BenchmarkQMV(b *testing.B) {
	const hid, inter, qdim, kvdim = 1536, 4608, 2048, 256
	var shapes [][3]int
	for range 6 {
		shapes = append(shapes, [3]int{qdim, hid, 4}, [3]int{kvdim, hid, 4}, [3]int{kvdim, hid, 4},
			[3]int{hid, qdim, 8}, [3]int{inter, hid, 8}, [3]int{inter, hid, 4}, [3]int{hid, inter, 4})
	}
	shapes = append(shapes, [3]int{130560, hid, 8})
	ls := mapLayers(b, shapes)
	sets := []struct {
		name   string
		layers []qmvLayer
	}{{"layers", ls[:len(ls)-1]}, {"lm_head", ls[len(ls)-1:]}}
	x := randVec(newRand(2), inter, 1, tensor.RoundBF16)
	y := make([]float32, 130560)
	for _, set := range sets {
		var total int64
		for i := range set.layers {
			total += set.layers[i].bytes()
		}
		for _, acc := range []Acc{AccF32, AccQ8} {
			for _, on := range []bool{true, false} {
				b.Run(fmt.Sprintf("%s/acc%d/qmv=%v", set.name, acc, on), func(b *testing.B) {
					b.SetBytes(total)
					qmvOn = on
					defer func() { qmvOn = true }()
					t0 := cpuTime()
					for b.Loop() {
						for i := range set.layers {
							l := &set.layers[i]
							QuantizedMatmulTVec(y, x[:l.k], l.wq, BF16Vec(l.sc), BF16Vec(l.bi), 1, l.n, l.k, 64, l.bits, tensor.RoundBF16, acc)
						}
					}
					cpu := float64(cpuTime()-t0) / float64(b.N)
					b.ReportMetric(cpu, "cpu-ns/op")
					b.ReportMetric(float64(total)/cpu, "GB/cpu-s")
				})
			}
		}
	}
}

// TestQMVPrep holds the assembly rearrangements of x (qmvSums, qmvPermF32,
// qmvQuantQ8B4/B8) to groupSums, permF32, quantizeQ8 and permQ8 bit for
// bit, on rows with NaN, ±Inf, ±0, subnormal and huge values and all-zero
// and all-NaN blocks of 32.
func TestQMVPrep(t *testing.T) {
	if !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512; the assembly rearrangements are not installed")
	}
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)),
		math.SmallestNonzeroFloat32, -1e-40, 3e38, -3e38, 0.5, 1.5, 2.5, -2.5}
	for _, k := range []int{256, 768, 1536} {
		for _, gs := range []int{32, 64, 128} {
			for _, kind := range []string{"normal", "special", "tiny"} {
				name := fmt.Sprintf("k%d/g%d/%s", k, gs, kind)
				t.Run(name, func(t *testing.T) {
					r := newRand(uint64(k + gs))
					x := randVec(r, k, 1, Identity)
					switch kind {
					case "special":
						for i := range x {
							if r.IntN(4) == 0 {
								x[i] = special[r.IntN(len(special))]
							}
						}
						for i := range 32 {
							x[32+i] = 0 // an all-zero block
							x[64+i] = float32(math.NaN())
						}
						x[96] = float32(math.Inf(1)) // a block with +Inf
					case "tiny":
						for i := range x {
							x[i] *= 1e-38
						}
					}
					ng := k / gs
					gpad := (ng + 15) &^ 15
					want := make([]float32, gpad)
					groupSums(want, x, 1, k, gs)
					got := make([]float32, gpad)
					for i := range got {
						got[i] = sentinel
					}
					qmvSums(&got[0], &x[0], ng, gs)
					expectSame(t, got, want, name+" group sums")
					for _, bits := range []int{4, 8} {
						cpl := 32 / bits
						wantP, gotP := make([]float32, k), make([]float32, k)
						permF32(wantP, x, 1, k, bits)
						qmvPermF32(&gotP[0], &x[0], k/(16*cpl), cpl)
						expectSame(t, gotP, wantP, fmt.Sprintf("%s b%d permF32", name, bits))

						xqn, dx := make([]int8, k), make([]float32, k/32)
						quantizeQ8(xqn, dx, x, k, q8Max(bits))
						wantQ, wantD := make([]int8, k), make([]float32, k/cpl)
						permQ8(wantQ, xqn, wantD, dx, 1, k, bits)
						gotQ, gotD := make([]int8, k), make([]float32, k/cpl)
						if bits == 4 {
							qmvQuantQ8B4(&gotQ[0], &gotD[0], &x[0], k/32)
						} else {
							qmvQuantQ8B8(&gotQ[0], &gotD[0], &x[0], k/32)
						}
						for i := range wantQ {
							if gotQ[i] != wantQ[i] {
								t.Errorf("%s b%d: code %d: got %d, want %d", name, bits, i, gotQ[i], wantQ[i])
								break
							}
						}
						expectSame(t, gotD, wantD, fmt.Sprintf("%s b%d lane scales", name, bits))
					}
				})
			}
		}
	}
}

// BenchmarkQMVScaleDtypes runs one 4096×1536 one-row matvec (8-bit group
// 32 and 4-bit group 64, the one-row kernels' half-block layouts) with
// float32, bfloat16 and float16 scales and biases, the one-row kernels on
// and off (off: the per-row kernels of qmm_amd64.s, which float16 scales
// took before qmv_amd64.s read them), on one thread, reporting the weight,
// scale and bias bytes read per second of the thread's CPU time.
func BenchmarkQMVScaleDtypes(b *testing.B) {
	if !asmF32 {
		b.Skip("SKIPPED: this CPU lacks AVX-512; the one-row kernels are not installed")
	}
	for _, c := range []struct{ bits, gs int }{{8, 32}, {4, 64}} {
		const n, k = 4096, 1536
		x, wq, sc, bi, sb, bb := qmvInputs(1, n, k, c.gs, c.bits)
		y := make([]float32, n)
		for _, dt := range []string{"f32", "bf16", "f16"} {
			scv, biv := avxVecs(dt, sc, bi, sb, bb)
			esz := 2
			if scv.F32 != nil {
				esz = 4
			}
			bytes := int64(4*len(wq) + 2*esz*len(sc))
			for _, acc := range []Acc{AccF32, AccQ8} {
				for _, on := range []bool{true, false} {
					b.Run(fmt.Sprintf("b%dg%d/%s/acc%d/qmv=%v", c.bits, c.gs, dt, acc, on), func(b *testing.B) {
						if acc == AccQ8 && !asmQ8 {
							b.Skip("SKIPPED: this CPU lacks AVX512-VNNI")
						}
						b.SetBytes(bytes)
						qmvOn = on
						defer func() { qmvOn = true }()
						withThreads(1, func() {
							runtime.LockOSThread()
							defer runtime.UnlockOSThread()
							t0 := threadCPU()
							for b.Loop() {
								QuantizedMatmulTVec(y, x, wq, scv, biv, 1, n, k, c.gs, c.bits, Identity, acc)
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
