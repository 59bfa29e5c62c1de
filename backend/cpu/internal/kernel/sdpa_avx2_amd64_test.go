//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/tensor"
)

// The AVX2 SDPA kernels, each held bit for bit to a Go model of the
// operations its doc comment names (the same model holds the AVX-512
// kernels where the CPU has them, so the two sets agree), and the whole
// SDPA on the AVX2 path against the reference and, with AVX-512, against
// the AVX-512 path bit for bit.

func needSDPA2(t *testing.T) {
	t.Helper()
	if !sdpaAVX2 {
		t.Skip("SKIPPED: this CPU lacks AVX2, FMA or F16C; the AVX2 SDPA kernels cannot run")
	}
}

// fma32 is the float32 fused multiply-add a·b + c with one rounding. The
// product is exact in float64; s = p + c rounds once to float64 with error
// e (TwoSum). Rounding s to float32 gives the right answer unless s lies
// exactly halfway between two float32 values and e ≠ 0 (any other float64
// is at least one float64 ulp from a float32 midpoint, more than |e|); then
// e's sign decides.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bb := s - p
	e := (p - (s - bb)) + (float64(c) - bb)
	r := float32(s)
	if e == 0 || float64(r) == s {
		return r
	}
	other := math.Nextafter32(r, float32(math.Inf(1)))
	if float64(r) > s {
		other = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if s != (float64(r)+float64(other))/2 {
		return r
	}
	if (e > 0) == (other > r) {
		return other
	}
	return r
}

// TestFMA32: fma32 on hand-made cases around the float32 midpoint 1 +
// 2^-24 (between 1 and 1+2^-23), with u = 2^-23: a product of exactly
// 2^-24 ties to even (1); 2^-24+2^-47 is above it (1+u). With c = 1+u (odd)
// and the product (1+u)·(2^-24−2^-47) = 2^-24 − 2^-70, the exact sum lies
// 2^-70 below the midpoint 1+u+2^-24 and rounds to 1+u, while the float64
// sum rounds to the midpoint itself and a second rounding would give the
// even 1+2u: the case TwoSum settles.
func TestFMA32(t *testing.T) {
	u := float32(math.Ldexp(1, -23))
	h := float32(math.Ldexp(1, -24))
	for _, c := range []struct {
		a, b, c, want float32
	}{
		{h, 1, 1, 1},
		{1 + u, h, 1, 1 + u},
		{-(1 + u), -h, 1, 1 + u},
		{1 + u, h - h*u, 1 + u, 1 + u},
		{-(1 + u), h - h*u, -(1 + u), -(1 + u)},
		{3, 5, 7, 22},
		{float32(math.Inf(1)), 1, 1, float32(math.Inf(1))},
	} {
		if g := fma32(c.a, c.b, c.c); g != c.want {
			t.Errorf("fma32(%v, %v, %v): got %v, want %v", c.a, c.b, c.c, g, c.want)
		}
	}
	r := newRand(1)
	for range 1000 {
		// Small integers: every result is exact.
		a, b, c := float32(r.IntN(2000)-1000), float32(r.IntN(2000)-1000), float32(r.IntN(2000)-1000)
		if g, w := fma32(a, b, c), a*b+c; g != w {
			t.Fatalf("fma32(%v, %v, %v): got %v, want %v", a, b, c, g, w)
		}
	}
}

// TestSDPA2KTKernel: sdpa2KT transposes 32 rows and converts exactly, and
// sdpa2Cvt converts exactly, in every storage kind, d a multiple of 8.
func TestSDPA2KTKernel(t *testing.T) {
	needSDPA2(t)
	const stride = 83
	r := newRand(4)
	src := randVec(r, sdpaBK*stride, 1, Identity)
	bf := make([]uint16, len(src))
	for i, x := range src {
		bf[i] = uint16(math.Float32bits(x) >> 16)
	}
	for _, d := range []int{8, 40, 64} {
		for _, kind := range []int{sdpaF32, sdpaBF16, sdpaF16} {
			t.Run(fmt.Sprintf("d%d/kind%d", d, kind), func(t *testing.T) {
				vec := F32Vec(src)
				ptr := unsafe.Pointer(&src[0])
				es := uintptr(4)
				switch kind {
				case sdpaBF16:
					vec, ptr, es = BF16Vec(bf), unsafe.Pointer(&bf[0]), 2
				case sdpaF16:
					vec, ptr, es = F16Vec(bf), unsafe.Pointer(&bf[0]), 2
				}
				dst, dw := guarded(d * sdpaBK)
				sdpa2KT(&dst[0], ptr, stride*es, d, kind)
				checkGuards(t, dw, "kt")
				cvt, cw := guarded(sdpaBK * d)
				sdpa2Cvt(&cvt[0], d, ptr, stride*es, sdpaBK, d, kind)
				checkGuards(t, cw, "cvt")
				for row := range sdpaBK {
					for c := range d {
						want := vec.At(row*stride + c)
						if g := dst[c*sdpaBK+row]; math.Float32bits(g) != math.Float32bits(want) && !(g != g && want != want) {
							t.Fatalf("kt[%d][%d] = %v, want %v", c, row, g, want)
						}
						if g := cvt[row*d+c]; math.Float32bits(g) != math.Float32bits(want) && !(g != g && want != want) {
							t.Fatalf("cvt[%d][%d] = %v, want %v", row, c, g, want)
						}
					}
				}
			})
		}
	}
}

// sdpaKernelSets lists the assembly kernel sets this CPU runs.
func sdpaKernelSets() []int {
	var vs []int
	if asmF32 && sdpaHaveAsm {
		vs = append(vs, sdpa512)
	}
	if sdpaAVX2 {
		vs = append(vs, sdpa256)
	}
	return vs
}

var sdpaSetNames = map[int]string{sdpa512: "avx512", sdpa256: "avx2", sdpaGo: "portable"}

// TestSDPAScoresModel: each kernel set's scores are, lane by lane, the
// fused multiply-add chain Σ_t q_t·k_jt from 0 in order of t (fma32), bit
// for bit.
func TestSDPAScoresModel(t *testing.T) {
	for _, vk := range sdpaKernelSets() {
		for _, rows := range []int{3, 4, 12} {
			if rows == 3 && vk != sdpa512 {
				continue // sdpaScores3 is AVX-512's alone
			}
			for _, d := range []int{16, 64} {
				t.Run(fmt.Sprintf("%s/rows%d/d%d", sdpaSetNames[vk], rows, d), func(t *testing.T) {
					r := newRand(uint64(rows*100 + d))
					q := randVec(r, rows*d, 1, Identity)
					kt := randVec(r, d*sdpaBK, 1, Identity)
					s, sw := guarded(rows * sdpaBK)
					switch {
					case rows == 3:
						sdpaScores3(&s[0], &q[0], &kt[0], d)
					case vk == sdpa512:
						sdpaScores(&s[0], &q[0], &kt[0], rows, d)
					default:
						sdpa2Scores(&s[0], &q[0], &kt[0], rows, d)
					}
					checkGuards(t, sw, "s")
					for row := range rows {
						for j := range sdpaBK {
							var acc float32
							for tt := range d {
								acc = fma32(q[row*d+tt], kt[tt*sdpaBK+j], acc)
							}
							if g := s[row*sdpaBK+j]; math.Float32bits(g) != math.Float32bits(acc) {
								t.Fatalf("row %d key %d: got %v, want %v", row, j, g, acc)
							}
						}
					}
				})
			}
		}
	}
}

// x86max is VMAXPS's lane: a when a > b, else b (so b when either is NaN).
func x86max(a, b float32) float32 {
	if a > b {
		return a
	}
	return b
}

// softmaxModel is the online-softmax step of sdpaSoftmax and sdpa2Softmax
// on one row of 32 scores, with their reduction trees: lanes j and j+16,
// then j and j+8, then j and j+4, then (0, 2) and (1, 3) for the maximum,
// (0, 1) and (2, 3) for the sum; f = exp(m − M) and the shift M, 1 and 0
// when M is −Inf; weights exp(s_j − shift); l = f·l + Σ.
func softmaxModel(s []float32, m, l *float32) (f float32) {
	var a [16]float32
	for i := range 16 {
		a[i] = x86max(s[i], s[i+16])
	}
	for i := range 8 {
		a[i] = x86max(a[i], a[i+8])
	}
	for i := range 4 {
		a[i] = x86max(a[i], a[i+4])
	}
	rowMax := x86max(x86max(a[0], a[2]), x86max(a[1], a[3]))
	big := x86max(rowMax, *m)
	f, shift := mlxmath.Exp(*m-big), big
	if math.IsInf(float64(big), -1) {
		f, shift = 1, 0
	}
	for j := range s {
		s[j] = mlxmath.Exp(s[j] - shift)
	}
	for i := range 16 {
		a[i] = s[i] + s[i+16]
	}
	for i := range 8 {
		a[i] += a[i+8]
	}
	for i := range 4 {
		a[i] += a[i+4]
	}
	sum := (a[0] + a[1]) + (a[2] + a[3])
	*l = f*(*l) + sum
	*m = big
	return f
}

// TestSDPASoftmaxModel: each kernel set's softmax step gives softmaxModel's
// maxima, factors, weights and sums bit for bit (any NaN matching any NaN),
// on fresh and running states, rows of all −Inf, underflowing weights, NaN
// and +Inf scores; rows past the group padding stay untouched.
func TestSDPASoftmaxModel(t *testing.T) {
	for _, vk := range sdpaKernelSets() {
		for _, rows := range []int{64, 19, 3} {
			t.Run(fmt.Sprintf("%s/rows%d", sdpaSetNames[vk], rows), func(t *testing.T) {
				grp := 8
				if vk == sdpa512 {
					grp = 16
				}
				r := newRand(uint64(17 + rows))
				ninf := float32(math.Inf(-1))
				pad := (rows+grp-1)/grp*grp + 16
				s, sw := guarded(pad * sdpaBK)
				m, mw := guarded(pad)
				l, lw := guarded(pad)
				f, fw := guarded(pad)
				n := pad - 16
				s, m, l, f = s[:n*sdpaBK], m[:n], l[:n], f[:n]
				for i := range s[:rows*sdpaBK] {
					// Scores of spread 2: many weights of similar size,
					// whose sum depends on the order of the additions.
					s[i] = float32(r.NormFloat64() * 2)
					if r.IntN(6) == 0 {
						s[i] = ninf
					}
				}
				for x := range rows {
					switch x % 6 {
					case 0:
						m[x], l[x] = ninf, 0
					case 1:
						m[x], l[x] = float32(r.NormFloat64()*8), float32(r.Float64()*10)
					case 2:
						for j := range sdpaBK {
							s[x*sdpaBK+j] = ninf
						}
						m[x], l[x] = ninf, 0
						if x%12 == 8 {
							m[x], l[x] = 3, 2
						}
					case 3:
						m[x], l[x] = 120, 1
					case 4: // a NaN score
						s[x*sdpaBK+r.IntN(sdpaBK)] = float32(math.NaN())
						m[x], l[x] = 1, 1
					case 5: // a +Inf score
						s[x*sdpaBK+r.IntN(sdpaBK)] = float32(math.Inf(1))
						m[x], l[x] = ninf, 0
					}
				}
				ws, wm, wl := append([]float32(nil), s[:rows*sdpaBK]...), append([]float32(nil), m[:rows]...), append([]float32(nil), l[:rows]...)
				wf := make([]float32, rows)
				for x := range rows {
					wf[x] = softmaxModel(ws[x*sdpaBK:(x+1)*sdpaBK], &wm[x], &wl[x])
				}
				if vk == sdpa512 {
					sdpaSoftmax(&s[0], &m[0], &l[0], &f[0], rows)
				} else {
					sdpa2Softmax(&s[0], &m[0], &l[0], &f[0], rows)
				}
				expectSame(t, s[:rows*sdpaBK], ws, "weights")
				expectSame(t, m[:rows], wm, "m")
				expectSame(t, l[:rows], wl, "l")
				expectSame(t, f[:rows], wf, "f")
				for _, g := range []struct {
					name  string
					whole []float32
					n     int
				}{{"s", sw, n * sdpaBK}, {"m", mw, n}, {"l", lw, n}, {"f", fw, n}} {
					for i, v := range g.whole[guardN+g.n:] {
						if math.Float32bits(v) != math.Float32bits(sentinel) {
							t.Fatalf("%s: element %d past the padded rows was overwritten", g.name, g.n+i)
						}
					}
				}
			})
		}
	}
}

// pvModel is the accumulation of sdpaPV1 for one row: acc_t = f·acc_t,
// then fma32(p_j, v_jt, acc_t) for j in order.
func pvModel(acc, p []float32, f float32, v []float32, vstride int) {
	for t := range acc {
		a := f * acc[t]
		for j, w := range p {
			a = fma32(w, v[j*vstride+t], a)
		}
		acc[t] = a
	}
}

// TestSDPAPVModel: every PV kernel of each set gives each row pvModel's
// bits, so a row's accumulator does not depend on which rows share its
// call.
func TestSDPAPVModel(t *testing.T) {
	for _, vk := range sdpaKernelSets() {
		for _, dv := range []int{16, 48, 64, 144} {
			for _, n := range []int{0, 1, 17, 32} {
				t.Run(fmt.Sprintf("%s/dv%d/n%d", sdpaSetNames[vk], dv, n), func(t *testing.T) {
					r := newRand(uint64(dv*100 + n))
					const vpad = 3 // V rows dv+3 floats apart
					vs := dv + vpad
					v := randVec(r, sdpaBK*vs, 1, Identity)
					p := randVec(r, 4*sdpaBK, 1, Identity)
					acc := randVec(r, 4*dv, 1, Identity)
					f := []float32{0.5, 1, 0.25, 0.9}
					want := append([]float32(nil), acc...)
					for row := range 4 {
						pvModel(want[row*dv:(row+1)*dv], p[row*sdpaBK:row*sdpaBK+n], f[row], v, vs)
					}
					type kern struct {
						rows int
						fn   func(acc, p *float32, v unsafe.Pointer, vstride uintptr, f *float32, n, dv int)
					}
					ks := []kern{{4, sdpa2PV4}, {3, sdpa2PV3}, {2, sdpa2PV2}, {1, sdpa2PV1}}
					if vk == sdpa512 {
						ks = []kern{{4, sdpaPV4}, {1, sdpaPV1}}
					}
					for _, k := range ks {
						for r0 := 0; r0+k.rows <= 4; r0 += k.rows {
							got, gw := guarded(k.rows * dv)
							copy(got, acc[r0*dv:])
							k.fn(&got[0], &p[r0*sdpaBK], unsafe.Pointer(&v[0]), uintptr(4*vs), &f[r0], n, dv)
							checkGuards(t, gw, "acc")
							expectSame(t, got, want[r0*dv:(r0+k.rows)*dv], fmt.Sprintf("%d-row kernel, rows from %d", k.rows, r0))
						}
					}
				})
			}
		}
	}
}

// TestSDPA2OutKernels: sdpa2Out is x/l (rounded with tensor.RoundBF16),
// sdpa2Scale is scale·x and sdpa2MergeAcc is fma(c, f2, acc·f1), bit for
// bit, on the exp test inputs (NaNs, infinities, subnormals, random bit
// patterns).
func TestSDPA2OutKernels(t *testing.T) {
	needSDPA2(t)
	xs := sdpaExpInputs()
	got := make([]float32, len(xs))
	for _, l := range []float32{1, 3, 0.7, 1e-30, float32(math.Inf(1)), 0} {
		for bf16 := range 2 {
			sdpa2Out(&got[0], &xs[0], l, len(xs), bf16)
			for i, x := range xs {
				want := x / l
				if bf16 == 1 {
					want = tensor.RoundBF16(want)
				}
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("sdpa2Out(%v / %v, bf16 %d): got %#08x, want %#08x (index %d)", x, l, bf16, math.Float32bits(got[i]), math.Float32bits(want), i)
				}
			}
		}
		sdpa2Scale(&got[0], &xs[0], l, len(xs))
		for i, x := range xs {
			if want := l * x; math.Float32bits(got[i]) != math.Float32bits(want) && !(got[i] != got[i] && want != want) {
				t.Fatalf("sdpa2Scale(%v · %v): got %#08x, want %#08x (index %d)", l, x, math.Float32bits(got[i]), math.Float32bits(want), i)
			}
		}
	}
	r := newRand(6)
	acc, c := randVec(r, 72, 1, Identity), randVec(r, 72, 1, Identity)
	for _, fs := range [][2]float32{{1, 0.5}, {0.25, 1}, {0, 0.75}} {
		got := append([]float32(nil), acc...)
		sdpa2MergeAcc(&got[0], &c[0], fs[0], fs[1], len(got))
		for i := range got {
			if want := fma32(c[i], fs[1], acc[i]*fs[0]); got[i] != want {
				t.Fatalf("sdpa2MergeAcc(f1 %v, f2 %v): got %v, want %v (index %d)", fs[0], fs[1], got[i], want, i)
			}
		}
	}
}

// sdpaTestMask returns a mask of the kind over [b, h, l, s] queries: Bool
// [B, 1, L, S] with a third of the keys hidden, additive [1, H, 1, S] with
// a quarter at −Inf (key 0 always 0).
func sdpaTestMask(r interface{ IntN(int) int }, kind MaskKind, b, h, l, s int, round Rounder) Mask {
	m := Mask{Kind: kind}
	switch kind {
	case MaskBool:
		m.Bool = make([]bool, b*l*s)
		for i := range m.Bool {
			m.Bool[i] = r.IntN(3) > 0
		}
		m.Strides = [4]int{l * s, 0, s, 1}
	case MaskAdd:
		m.Add = make([]float32, h*s)
		for i := range m.Add {
			m.Add[i] = round(float32(r.IntN(41)-20) / 10)
			if r.IntN(4) == 0 {
				m.Add[i] = float32(math.Inf(-1))
			}
		}
		for hh := range h {
			m.Add[hh*s] = 0
		}
		m.Strides = [4]int{0, s, 0, 1}
	}
	return m
}

// TestSDPAAVX2Matrix runs SDPAKV on the AVX2 path over K/V storage (f32,
// bf16, f16, read in place from a padded cache with NaN in the unused
// parts), head sizes (64, 128, mixed, and 40, which falls back to the
// portable loops), masks, GQA rep 1, 3 and 4, decode and prefill, into a
// guard-padded output: within the bound of the reference; the same bits
// with 1 and 2 workers (keys split across workers or not); bit for bit the
// portable path where the shape falls back; bit for bit the AVX-512 path
// where the CPU has it.
func TestSDPAAVX2Matrix(t *testing.T) {
	needSDPA2(t)
	type dims struct{ d, dv int }
	for _, dt := range []struct {
		name  string
		round Rounder
	}{{"f32", Identity}, {"bf16", tensor.RoundBF16}, {"f16", tensor.RoundF16}} {
		for _, dd := range []dims{{64, 64}, {128, 128}, {64, 128}, {128, 64}, {40, 40}} {
			for _, kind := range []MaskKind{MaskNone, MaskCausal, MaskBool, MaskAdd} {
				for _, rep := range []int{1, 3, 4} {
					for _, ls := range [][2]int{{1, 300}, {5, 70}} {
						l, s := ls[0], ls[1]
						const b, hk = 1, 2
						h := hk * rep
						name := fmt.Sprintf("%s/d%ddv%d/mask%d/rep%d/l%ds%d", dt.name, dd.d, dd.dv, kind, rep, l, s)
						t.Run(name, func(t *testing.T) {
							r := newRand(uint64(dd.d*7 + dd.dv + int(kind)*13 + rep*101 + l))
							q := randVec(r, b*h*l*dd.d, 1, dt.round)
							k := randVec(r, b*hk*s*dd.d, 1, dt.round)
							v := randVec(r, b*hk*s*dd.dv, 1, dt.round)
							kk := toStorage(k, dt.name, b, hk, s, dd.d, s+9, dd.d+8)
							vv := toStorage(v, dt.name, b, hk, s, dd.dv, s+9, dd.dv+16)
							m := sdpaTestMask(r, kind, b, h, l, s, dt.round)
							scale := float32(1 / math.Sqrt(float64(dd.d)))
							run := func(p sdpaPath, threads int) []float32 {
								restore, ok := p.set()
								if !ok {
									return nil
								}
								defer restore()
								want := p.vk
								if dd.d%16 != 0 || dd.dv%16 != 0 {
									want = sdpaGo
								}
								if vk := sdpaKernels(dd.d, dd.dv); vk != want {
									t.Fatalf("path %s: kernel set %s, want %s", p.name, sdpaSetNames[vk], sdpaSetNames[want])
								}
								got, whole := guarded(b * h * l * dd.dv)
								withThreads(threads, func() {
									SDPAKV(got, q, kk, vv, b, h, hk, l, s, dd.d, dd.dv, scale, m, dt.round, AccF32)
								})
								checkGuards(t, whole, "dst")
								return got
							}
							got := run(sdpaPath{"avx2", sdpa256}, 2)
							want := make([]float32, len(got))
							SDPARef(want, q, k, v, b, h, hk, l, s, dd.d, dd.dv, scale, m, dt.round, AccF32)
							checkSDPABound(t, got, want, q, k, v, b, h, hk, l, s, dd.d, dd.dv, scale, &m, dt.round)
							if dd.d%16 != 0 {
								expectSame(t, got, run(sdpaPath{"portable", sdpaGo}, 2), "fallback vs portable")
							}
							// One worker: no split of the keys (with two, a
							// decode over 300 keys runs its two chunks apart).
							expectSame(t, got, run(sdpaPath{"avx2", sdpa256}, 1), "2 workers vs 1")
							if w512 := run(sdpaPath{"avx512", sdpa512}, 2); w512 != nil {
								expectSame(t, got, w512, "avx2 vs avx512")
							}
						})
					}
				}
			}
		}
	}
}

// TestSDPAKVAllocs: a decode call (SmolLM2's shape, 2 workers) allocates at
// most the job and its closures (3 objects) whether or not the keys are
// split across workers (200 and 600 keys): the checks format messages only
// when they fail, K, V and the mask are copied into the job, and the split's
// states come from a pool.
func TestSDPAKVAllocs(t *testing.T) {
	const h, hk, d = 9, 3, 64
	for _, s := range []int{200, 600} {
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			r := newRand(1)
			q := randVec(r, h*d, 1, tensor.RoundF16)
			kk := DenseKV(randVec(r, hk*s*d, 1, tensor.RoundF16), hk, s, d)
			vv := DenseKV(randVec(r, hk*s*d, 1, tensor.RoundF16), hk, s, d)
			dst := make([]float32, h*d)
			withThreads(2, func() {
				n := testing.AllocsPerRun(100, func() {
					SDPAKV(dst, q, kk, vv, 1, h, hk, 1, s, d, d, 0.125, Mask{Kind: MaskCausal}, tensor.RoundF16, AccF32)
				})
				if n > 3 {
					t.Errorf("got %v allocations a call, want at most 3", n)
				}
			})
		})
	}
}
