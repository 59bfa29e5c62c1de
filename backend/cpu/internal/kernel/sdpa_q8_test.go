//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// q8ScoresGo is the portable twin of sdpaQ8Scores: the same integer sums
// and the same float32 operations in the same order.
func q8ScoresGo(a *q8ScoreArgs) {
	d4 := a.d / 4
	sc := unsafe.Slice(a.sc, a.rows*sdpaBK)
	q8 := unsafe.Slice(a.q8, a.rows*d4)
	qd := unsafe.Slice(a.qd, a.rows*a.gpr)
	qs := unsafe.Slice(a.qs, a.rows*a.gpr)
	qi := unsafe.Slice(a.qi, a.rows*a.gpr)
	kt := unsafe.Slice(a.kt, 2*d4*16)
	ks := unsafe.Slice(a.ks, a.gpr*sdpaBK)
	kb := unsafe.Slice(a.kb, a.gpr*sdpaBK)
	for rg := range a.rows / 4 {
		for k := range 4 {
			r := rg*4 + k
			for j := range sdpaBK {
				h, i := j/16, j%16
				var s float32
				for g := range a.gpr {
					x := (rg*a.gpr+g)*4 + k
					acc := qi[x]
					for t4 := g * a.gs4; t4 < (g+1)*a.gs4; t4++ {
						kw := uint32(kt[(h*d4+t4)*16+i])
						qw := uint32(q8[(rg*d4+t4)*4+k])
						for b := range 4 {
							acc += int32(uint8(kw>>(8*b))) * int32(int8(qw>>(8*b)))
						}
					}
					t := float32(acc) * qd[x]
					t = float32(t * ks[g*sdpaBK+j])
					s = s + t
					s = s + float32(kb[g*sdpaBK+j]*qs[x])
				}
				sc[r*sdpaBK+j] = s
			}
		}
	}
}

// qpv8Go is the portable twin of sdpaQPV8: per row acc·f, then per key in
// order acc += p·(float32(s·c) + b) with a fused multiply-add (fma32).
func qpv8Go(a *qpvArgs) {
	acc := unsafe.Slice(a.acc, 8*a.dv)
	p := unsafe.Slice(a.p, 8*sdpaBK)
	f := unsafe.Slice(a.f, 8)
	vs := unsafe.Slice(a.vs, a.n*a.gpr)
	vb := unsafe.Slice(a.vb, a.n*a.gpr)
	for r := range 8 {
		for t := range a.dv {
			acc[r*a.dv+t] *= f[r]
		}
	}
	for x := range a.n {
		row := unsafe.Slice((*uint8)(unsafe.Add(a.v, uintptr(x)*a.vstride)), a.dv)
		for t, c := range row {
			g := t >> a.gsShift
			v := float32(float32(c)*vs[x*a.gpr+g]) + vb[x*a.gpr+g]
			for r := range 8 {
				acc[r*a.dv+t] = fma32(p[r*sdpaBK+x], v, acc[r*a.dv+t])
			}
		}
	}
}

func needQ8(t *testing.T) {
	t.Helper()
	if !asmQ8 || !asmF32 {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; the 8-bit SDPA key kernels cannot run")
	}
}

// TestSDPAQ8KT: the transpose of 16 rows of codes puts dword t4 of row i at
// t4·16 + i (XORed), for rows wider than d, into a guard-padded buffer.
func TestSDPAQ8KT(t *testing.T) {
	needQ8(t)
	r := newRand(11)
	for _, d := range []int{64, 128, 256} {
		for _, xor := range []int{0, 0x80808080} {
			stride := d + 20
			src := make([]byte, 16*stride)
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			n := d / 4 * 16
			whole := make([]int32, n+64)
			for i := range whole {
				whole[i] = 0x5a5a5a5a
			}
			sdpaQ8KT(&whole[32], unsafe.Pointer(&src[0]), uintptr(stride), d, xor)
			for i, w := range whole {
				if (i < 32 || i >= 32+n) && w != 0x5a5a5a5a {
					t.Fatalf("d %d: guard %d overwritten", d, i)
				}
			}
			for t4 := range d / 4 {
				for i := range 16 {
					o := i*stride + 4*t4
					want := uint32(src[o]) | uint32(src[o+1])<<8 | uint32(src[o+2])<<16 | uint32(src[o+3])<<24
					want ^= uint32(xor)
					if got := uint32(whole[32+t4*16+i]); got != want {
						t.Fatalf("d %d xor %#x: dword %d of row %d: got %#08x, want %#08x", d, xor, t4, i, got, want)
					}
				}
			}
		}
	}
}

// TestSDPAQ8GT: the key-major to group-major copy of the scales.
func TestSDPAQ8GT(t *testing.T) {
	needQ8(t)
	for _, gpr := range []int{1, 2, 4, 8} {
		src := make([]float32, 32*gpr)
		for i := range src {
			src[i] = float32(i)
		}
		got, whole := guarded(32 * gpr)
		sdpaQ8GT(&got[0], &src[0], 32, gpr)
		checkGuards(t, whole, "dst")
		for g := range gpr {
			for j := range 32 {
				if got[g*32+j] != src[j*gpr+g] {
					t.Fatalf("gpr %d: [%d][%d] = %v, want %v", gpr, g, j, got[g*32+j], src[j*gpr+g])
				}
			}
		}
	}
}

// TestSDPAQ8ScoresTwin: sdpaQ8Scores gives q8ScoresGo's bits on random
// codes, scales, biases, query sums and initial sums, for several row
// counts, head sizes and group sizes, into a guard-padded score buffer.
func TestSDPAQ8ScoresTwin(t *testing.T) {
	needQ8(t)
	r := newRand(12)
	for _, d := range []int{64, 128, 256} {
		for _, gs := range []int{32, 64, 128} {
			if d%gs != 0 {
				continue
			}
			for _, rows := range []int{4, 8, 20} {
				gpr := d / gs
				a := q8ScoreArgs{rows: rows, d: d, gpr: gpr, gs4: gs / 4}
				q8 := make([]int32, rows*d/4)
				for i := range q8 {
					q8[i] = int32(r.Uint32() & 0x7f7f7f7f) // codes in [0, 127]; signs below
					if r.IntN(2) == 0 {
						q8[i] = int32(uint32(q8[i]) | 0x80008000) // some negative codes (−128 + x)
					}
				}
				qi := make([]int32, rows*gpr)
				for i := range qi {
					qi[i] = int32(r.IntN(1<<16)) - 1<<15
				}
				kt := make([]int32, 2*d/4*16)
				for i := range kt {
					kt[i] = int32(r.Uint32())
				}
				qd, qs := randVec(r, rows*gpr, 0.01, Identity), randVec(r, rows*gpr, 4, Identity)
				ks, kb := randVec(r, 32*gpr, 0.01, Identity), randVec(r, 32*gpr, 1, Identity)
				a.q8, a.qi, a.kt, a.qd, a.qs, a.ks, a.kb = &q8[0], &qi[0], &kt[0], &qd[0], &qs[0], &ks[0], &kb[0]
				want := make([]float32, rows*32)
				a.sc = &want[0]
				q8ScoresGo(&a)
				got, whole := guarded(rows * 32)
				a.sc = &got[0]
				sdpaQ8Scores(&a)
				checkGuards(t, whole, "scores")
				expectSame(t, got, want, fmt.Sprintf("d %d gs %d rows %d", d, gs, rows))
			}
		}
	}
}

// TestSDPAQPV8Twin: sdpaQPV8 gives qpv8Go's bits (acc·f, then a fused
// multiply-add per key of the expanded value) on random codes with a row
// stride wider than the row, partial blocks and group sizes 32 to 128.
func TestSDPAQPV8Twin(t *testing.T) {
	needSDPAAsm(t)
	r := newRand(13)
	for _, dv := range []int{32, 64, 128, 256} {
		for _, gs := range []int{32, 64, 128} {
			if dv%gs != 0 {
				continue
			}
			for _, n := range []int{0, 1, 17, 32} {
				gpr := dv / gs
				shift := 5
				for 1<<shift < gs {
					shift++
				}
				vstride := dv + 12
				codes := make([]byte, max(n, 1)*vstride)
				for i := range codes {
					codes[i] = byte(r.Uint32())
				}
				p := randVec(r, 8*32, 1, Identity)
				f := randVec(r, 8, 1, Identity)
				vs, vb := randVec(r, max(n, 1)*gpr, 0.01, Identity), randVec(r, max(n, 1)*gpr, 1, Identity)
				acc0 := randVec(r, 8*dv, 3, Identity)
				want := append([]float32(nil), acc0...)
				a := qpvArgs{acc: &want[0], p: &p[0], f: &f[0], v: unsafe.Pointer(&codes[0]), vstride: uintptr(vstride),
					vs: &vs[0], vb: &vb[0], n: n, dv: dv, gpr: gpr, gsShift: shift}
				qpv8Go(&a)
				got, whole := guarded(8 * dv)
				copy(got, acc0)
				a.acc = &got[0]
				sdpaQPV8(&a)
				checkGuards(t, whole, "acc")
				expectSame(t, got, want, fmt.Sprintf("dv %d gs %d n %d", dv, gs, n))
			}
		}
	}
}

// q8OutputBound returns, for each output element of SDPAKV(AccQ8) on 8-bit
// keys (codes c_jt, group scales s_jg and biases b_jg as keyParts returns
// them: for a QuantKV the unsigned codes and its biases, for a
// Q8KeySource the signed codes and s·z; the keys' float32 values are
// kPlain) and values vPlain, its largest distance from the float32
// reference on those values: per query row, with qs = scale·q quantized per
// key group g as in sdpa_q8.go (qd_g = max|qs_t|/127), a score moves by at
// most
//
//	E_j = Σ_g |s_jg|·(qd_g/2)·Σ_t |c_jt|  +  2^-20·(Σ_g (|s_jg|·Σ_t |c_jt|·max|qs_g| + |b_jg|·Σ_t |qs_t|) + A_j)
//
// (the query's rounding, then float32 rounding of the group terms and the
// keys' own rounding, float32(c+z)·s against s·c + s·z, with a wide
// margin; A_j = Σ_t |qs_t·k_jt|); with E the largest E_j plus the
// reference's own score error 2(d+2)u·A, the softmax weights move
// relatively by at most e^{2E} − 1, so the output moves by at most
// V·(e^{2E} − 1), V the largest |v| of the row's keys; to that come
// checkSDPABound's float32 terms and two ulps of the output dtype.
func q8OutputBound(q, kPlain, vPlain []float32, keyParts func(bi, kh, j int) (c, s, b []float64), b, h, hk, l, s, d, dv, gs int, scale float32, m *Mask, round Rounder, want []float32) []float64 {
	rep := h / hk
	u := math.Ldexp(1, -24)
	gpr := d / gs
	out := make([]float64, len(want))
	for bi := range b {
		for hq := range h {
			kh := hq / rep
			for i := range l {
				qo := ((bi*h+hq)*l + i) * d
				qs := make([]float64, d)
				for t := range d {
					qs[t] = float64(scale * q[qo+t])
				}
				qd, qa, qabs := make([]float64, gpr), make([]float64, gpr), make([]float64, gpr)
				for g := range gpr {
					for t := g * gs; t < (g+1)*gs; t++ {
						qa[g] = max(qa[g], math.Abs(qs[t]))
						qabs[g] += math.Abs(qs[t])
					}
					qd[g] = qa[g] / 127
				}
				var e, a, vm float64
				for j := range s {
					if ok, _ := m.visible(bi, hq, i, j, l, s); !ok {
						continue
					}
					c, sc, bs := keyParts(bi, kh, j)
					var ej, aj float64
					for t := range d {
						aj += math.Abs(qs[t] * float64(kPlain[((bi*hk+kh)*s+j)*d+t]))
					}
					for g := range gpr {
						var csum float64
						for t := g * gs; t < (g+1)*gs; t++ {
							csum += math.Abs(c[t])
						}
						ej += math.Abs(sc[g])*qd[g]/2*csum + math.Ldexp(math.Abs(sc[g])*csum*qa[g]+math.Abs(bs[g])*qabs[g], -20)
					}
					ej += math.Ldexp(aj, -20)
					e, a = max(e, ej), max(a, aj)
					for t := range dv {
						vm = max(vm, math.Abs(float64(vPlain[((bi*hk+kh)*s+j)*dv+t])))
					}
				}
				e += 2 * float64(d+2) * u * a
				o := ((bi*h+hq)*l + i) * dv
				for t := range dv {
					out[o+t] = vm*math.Expm1(2*e) + vm*u*(8*float64(d+4)*a+4*float64(s+s/32+8)) + 2*ulpOf(want[o+t], round)
				}
			}
		}
	}
	return out
}

// quantParts is keyParts for a QuantKV: its codes, scales and biases.
func quantParts(kq *QuantKV, d int) func(bi, kh, j int) (c, s, b []float64) {
	return func(bi, kh, j int) (c, s, b []float64) {
		row := kq.W[kq.wrow(bi, kh, j):]
		for t := range d {
			c = append(c, float64(codeAt(row, t, 8)))
		}
		for g := range d / kq.GroupSize {
			s = append(s, float64(kq.Scales.Vec.At(kq.Scales.row(bi, kh, j)+g)))
			b = append(b, float64(kq.Biases.Vec.At(kq.Biases.row(bi, kh, j)+g)))
		}
		return c, s, b
	}
}

// signedKeys is a Q8KeySource of random signed 8-bit codes with float16
// scales and zero points per group (TurboQuant's key format) in a padded
// [b, hk, capS, n] layout; DecodeRows gives float32(c + z)·s.
type signedKeys struct {
	codes         []byte
	bst, hst, rst int
	sc, z         KV
	gs, hk, s, n  int
	plain         []float32 // [b, hk, s, n]
}

func newSignedKeys(r interface{ Uint32() uint32 }, b, hk, s, capS, n, gs int) *signedKeys {
	rst := n + 8
	k := &signedKeys{codes: make([]byte, b*hk*capS*rst), rst: rst, hst: capS * rst, bst: hk * capS * rst, gs: gs, hk: hk, s: s, n: n}
	for i := range k.codes {
		k.codes[i] = byte(r.Uint32())
	}
	gpr := n / gs
	sc, z := make([]float32, b*hk*capS*gpr), make([]float32, b*hk*capS*gpr)
	for i := range sc {
		sc[i] = float32(r.Uint32()%1000+1) / 64000 // about 2^-7
		z[i] = float32(int(r.Uint32()%64) - 32)
	}
	k.sc, k.z = toStorage(sc, "f16", b, hk, capS, gpr, capS, gpr), toStorage(z, "f16", b, hk, capS, gpr, capS, gpr)
	k.plain = make([]float32, b*hk*s*n)
	for bi := range b {
		for h := range hk {
			for j := range s {
				for t := range n {
					c := float32(int8(k.codes[bi*k.bst+h*k.hst+j*rst+t]))
					g := t / gs
					sv := k.sc.Vec.At(k.sc.row(bi, h, j) + g)
					zv := k.z.Vec.At(k.z.row(bi, h, j) + g)
					k.plain[((bi*hk+h)*s+j)*n+t] = float32(c+zv) * sv
				}
			}
		}
	}
	return k
}

func (k *signedKeys) DecodeRows(dst []float32, dstride, bi, h, j0, rows, n int) {
	for x := range rows {
		copy(dst[x*dstride:x*dstride+n], k.plain[((bi*k.hk+h)*k.s+j0+x)*k.n:][:n])
	}
}

func (k *signedKeys) Q8Keys() (codes []byte, bst, hst, rst int, scales, zeros KV, groupSize int) {
	return k.codes, k.bst, k.hst, k.rst, k.sc, k.z, k.gs
}

// parts is keyParts for signedKeys: the signed codes, scales and s·z.
func (k *signedKeys) parts(bi, kh, j int) (c, s, b []float64) {
	for t := range k.n {
		c = append(c, float64(int8(k.codes[bi*k.bst+kh*k.hst+j*k.rst+t])))
	}
	for g := range k.n / k.gs {
		sv := float64(k.sc.Vec.At(k.sc.row(bi, kh, j) + g))
		s = append(s, sv)
		b = append(b, sv*float64(k.z.Vec.At(k.z.row(bi, kh, j)+g)))
	}
	return c, s, b
}

// TestSDPAQ8Bound: SDPAKV in the fast precision (AccQ8) on 8-bit keys (a
// QuantKV's unsigned codes, or a Q8KeySource's signed ones: TurboQuant's
// format) and 8- or 4-bit values stays within q8OutputBound of the float32
// SDPA on the keys' and values' float32 values, for decode (keys split
// across workers or not) and prefill, causal, unmasked and Bool masks, GQA
// 8 and 4, head sizes 64 and 128, group sizes 32 to 128, bf16 and f32
// scales; and it is not the float32 path's result (the key kernel ran).
func TestSDPAQ8Bound(t *testing.T) {
	needQ8(t)
	type shape struct{ b, h, hk, l, s, d, dv, gs int }
	shapes := []shape{{1, 16, 2, 1, 600, 128, 128, 64}, {1, 16, 2, 1, 77, 128, 128, 32}, {1, 8, 2, 7, 300, 64, 64, 64}, {2, 4, 2, 3, 45, 128, 128, 128}}
	for _, sh := range shapes {
		for _, keys := range []string{"quant", "signed"} {
			for _, vbits := range []int{8, 4} {
				for _, dt := range []struct {
					name  string
					round Rounder
				}{{"f32", Identity}, {"bf16", tensor.RoundBF16}} {
					for _, kind := range []MaskKind{MaskCausal, MaskNone, MaskBool} {
						name := fmt.Sprintf("%s/v%d/%s/mask%d/b%dh%dhk%d/%s/g%d", keys, vbits, dt.name, kind, sh.b, sh.h, sh.hk, dims(sh.l, sh.s, sh.d, sh.dv), sh.gs)
						t.Run(name, func(t *testing.T) {
							r := newRand(uint64(sh.s*7 + sh.d + vbits))
							q := randVec(r, sh.b*sh.h*sh.l*sh.d, 1, dt.round)
							var kk KV
							var kPlain []float32
							var parts func(bi, kh, j int) (c, s, b []float64)
							if keys == "quant" {
								kq := newQuantStore(r, dt.name, sh.b, sh.hk, sh.s, sh.s+21, sh.d, sh.gs, 8)
								kk, kPlain, parts = kq.kv, kq.plain, quantParts(kq.kv.Q, sh.d)
							} else {
								sk := newSignedKeys(r, sh.b, sh.hk, sh.s, sh.s+21, sh.d, sh.gs)
								kk, kPlain, parts = KV{Rows: sk}, sk.plain, sk.parts
							}
							vq := newQuantStore(r, dt.name, sh.b, sh.hk, sh.s, sh.s+21, sh.dv, 32, vbits)
							m := Mask{Kind: kind}
							if kind == MaskBool {
								m.Bool = make([]bool, sh.b*sh.l*sh.s)
								for i := range m.Bool {
									m.Bool[i] = r.IntN(3) > 0
								}
								m.Strides = [4]int{sh.l * sh.s, 0, sh.s, 1}
							}
							kd, vd := DenseKV(kPlain, sh.hk, sh.s, sh.d), DenseKV(vq.plain, sh.hk, sh.s, sh.dv)
							want := make([]float32, sh.b*sh.h*sh.l*sh.dv)
							SDPAKV(want, q, kd, vd, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, 0.125, m, dt.round, AccF32)
							bound := q8OutputBound(q, kPlain, vq.plain, parts, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, sh.gs, 0.125, &m, dt.round, want)
							for _, threads := range []int{1, 3} {
								got, whole := guarded(len(want))
								withThreads(threads, func() {
									SDPAKV(got, q, kk, vq.kv, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, 0.125, m, dt.round, AccQ8)
								})
								checkGuards(t, whole, "dst")
								same := true
								for x := range want {
									if math.Float32bits(got[x]) != math.Float32bits(want[x]) {
										same = false
									}
									if e := math.Abs(float64(got[x]) - float64(want[x])); !(e <= bound[x]) {
										t.Fatalf("%d workers: element %d: got %v, want %v ± %.3g", threads, x, got[x], want[x], bound[x])
									}
								}
								if same {
									t.Fatalf("%d workers: AccQ8 gave the float32 path's bits: the 8-bit key kernel did not run", threads)
								}
							}
						})
					}
				}
			}
		}
	}
}

// TestSDPAQ8NonFinite: an item whose scaled query holds an infinity takes
// the float32 path, so AccQ8 then gives AccF32's bits.
func TestSDPAQ8NonFinite(t *testing.T) {
	needQ8(t)
	const h, hk, s, d = 16, 2, 100, 128
	r := newRand(14)
	q := randVec(r, h*d, 1, Identity)
	q[3] = float32(math.Inf(1))
	q[8*d+5] = float32(math.NaN()) // the second KV head's item too
	kq := newQuantStore(r, "bf16", 1, hk, s, s, d, 64, 8)
	vq := newQuantStore(r, "bf16", 1, hk, s, s, d, 64, 8)
	want := make([]float32, h*d)
	got := make([]float32, h*d)
	SDPAKV(want, q, kq.kv, vq.kv, 1, h, hk, 1, s, d, d, 0.125, Mask{}, Identity, AccF32)
	SDPAKV(got, q, kq.kv, vq.kv, 1, h, hk, 1, s, d, d, 0.125, Mask{}, Identity, AccQ8)
	expectSame(t, got, want, "AccQ8 with a non-finite query")
}

// BenchmarkSDPAQ8Kernels times the 8-bit kernels on one block of 32 keys
// for the 8 query rows of MiniCPM5-1B's GQA group (head_dim 128, group 64),
// in L1: the key transpose (both halves), the scales' transpose (scales
// and biases), the integer scores and the value accumulation.
func BenchmarkSDPAQ8Kernels(b *testing.B) {
	if !asmQ8 || !asmF32 {
		b.Skip("SKIPPED: this CPU lacks AVX-512 VNNI")
	}
	const d, gs, gpr, rows = 128, 64, 2, 8
	r := newRand(15)
	codes := make([]byte, 32*d)
	for i := range codes {
		codes[i] = byte(r.Uint32())
	}
	kt := make([]int32, 2*d/4*16)
	q8 := make([]int32, rows*d/4)
	qi := make([]int32, rows*gpr)
	qd, qs := randVec(r, rows*gpr, 0.01, Identity), randVec(r, rows*gpr, 1, Identity)
	ksr, ks, kb := randVec(r, 32*gpr, 0.01, Identity), make([]float32, 32*gpr), randVec(r, 32*gpr, 1, Identity)
	sc := make([]float32, rows*32)
	acc, f := randVec(r, rows*d, 1, Identity), randVec(r, rows, 1, Identity)
	b.Run("kt", func(b *testing.B) {
		for b.Loop() {
			sdpaQ8KT(&kt[0], unsafe.Pointer(&codes[0]), d, d, 0)
			sdpaQ8KT(&kt[d/4*16], unsafe.Pointer(&codes[16*d]), d, d, 0)
		}
	})
	b.Run("gt", func(b *testing.B) {
		for b.Loop() {
			sdpaQ8GT(&ks[0], &ksr[0], 32, gpr)
			sdpaQ8GT(&ks[0], &ksr[0], 32, gpr)
		}
	})
	b.Run("scores", func(b *testing.B) {
		a := q8ScoreArgs{sc: &sc[0], q8: &q8[0], qd: &qd[0], qs: &qs[0], qi: &qi[0], kt: &kt[0], ks: &ks[0], kb: &kb[0], rows: rows, d: d, gpr: gpr, gs4: gs / 4}
		for b.Loop() {
			sdpaQ8Scores(&a)
		}
	})
	b.Run("pv", func(b *testing.B) {
		a := qpvArgs{acc: &acc[0], p: &sc[0], f: &f[0], v: unsafe.Pointer(&codes[0]), vstride: d, vs: &ksr[0], vb: &kb[0], n: 32, dv: d, gpr: gpr, gsShift: 6}
		for i := range f {
			f[i] = 1
		}
		for b.Loop() {
			sdpaQPV8(&a)
		}
	})
}
