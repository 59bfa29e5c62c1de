package kernel

import (
	"fmt"

	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// quantStore is a quantized KV cache of [b, hk, capS, n] values with
// random codes, scales and biases (in storage dtype dt), padded rows
// (wordPad extra words, a scale stride of n/gs+2) and garbage in every
// unused word and slot; plain holds the float32 values of its first s
// positions by the definition of QuantKV, computed with codeAt.
type quantStore struct {
	kv    KV
	plain []float32 // [b, hk, s, n]
}

func newQuantStore(r *rand.Rand, dt string, b, hk, s, capS, n, gs, bits int) quantStore {
	wpr := WordsPerRow(n, bits) + 3
	gpr := n/gs + 2
	q := &QuantKV{W: make([]uint32, b*hk*capS*wpr), BStride: hk * capS * wpr, HStride: capS * wpr, RowStride: wpr, GroupSize: gs, Bits: bits}
	for i := range q.W {
		q.W[i] = r.Uint32()
	}
	vals := func(scale float64, shift float64) KV {
		x := randVec(r, b*hk*capS*gpr, scale, Identity)
		for i := range x {
			x[i] += float32(shift)
		}
		kv := toStorage(x, dt, b, hk, capS, gpr, capS, gpr)
		return kv
	}
	// Scales of about 2^-bits, biases about -1/2: values of order 1.
	q.Scales, q.Biases = vals(1/float64(int(1)<<bits), 0), vals(0.3, -0.5)
	out := quantStore{kv: KV{Q: q}, plain: make([]float32, b*hk*s*n)}
	for bi := range b {
		for h := range hk {
			for j := range s {
				row := q.W[q.wrow(bi, h, j):]
				for t := range n {
					sc := q.Scales.Vec.At(q.Scales.row(bi, h, j) + t/gs)
					bs := q.Biases.Vec.At(q.Biases.row(bi, h, j) + t/gs)
					out.plain[((bi*hk+h)*s+j)*n+t] = float32(sc*float32(codeAt(row, t, bits))) + bs
				}
			}
		}
	}
	return out
}

// TestQuantRows: the expansion of quantized rows, portable and AVX2, gives
// the values of QuantKV's definition (the plain code extraction) bit for
// bit, for every bit width, group size and scale dtype, into a
// guard-padded destination with a row stride wider than the row.
func TestQuantRows(t *testing.T) {
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, dt := range []string{"f32", "bf16", "f16"} {
				for _, asm := range []bool{false, true} {
					name := fmt.Sprintf("b%dg%d/%s/asm%v", bits, gs, dt, asm)
					t.Run(name, func(t *testing.T) {
						if asm && !sdpaAVX2 {
							t.Skip("SKIPPED: this CPU lacks AVX2, FMA or F16C")
						}
						old := sdpaAVX2
						sdpaAVX2 = asm
						defer func() { sdpaAVX2 = old }()
						const b, hk, s, capS, n, rows = 2, 2, 37, 40, 256, 33
						r := newRand(uint64(bits*1000 + gs))
						st := newQuantStore(r, dt, b, hk, s, capS, n, gs, bits)
						if asm && !quantRowsAsm(st.kv.Q) && (bits == 4 || bits == 8) {
							t.Fatalf("quantRowsAsm false for %d bits", bits)
						}
						dstride := n + 5
						got, whole := guarded((rows-1)*dstride + n)
						quantRows(got, dstride, st.kv.Q, 1, 1, 3, rows, n)
						checkGuards(t, whole, "dst")
						for x := range rows {
							want := st.plain[((1*hk+1)*s+3+x)*n:][:n]
							expectSame(t, got[x*dstride:][:n], want, fmt.Sprintf("row %d", x))
						}
					})
				}
			}
		}
	}
}

// TestSDPAQuantKV: SDPAKV reading quantized keys and values in place gives
// bit for bit SDPAKV on the float32 values they stand for (QuantKV's
// definition), on every kernel set, for decode (keys split across workers
// or not) and prefill, causal, unmasked and Bool masks with holes, GQA,
// head sizes the vector kernels take and one they do not (40), 4- and
// 8-bit codes with bf16, f16 and f32 scales; and under AccF64.
func TestSDPAQuantKV(t *testing.T) {
	type shape struct{ b, h, hk, l, s, d, dv int }
	shapes := []shape{{1, 16, 2, 1, 600, 128, 128}, {1, 8, 2, 7, 77, 64, 64}, {2, 4, 2, 3, 45, 64, 128}, {1, 6, 3, 2, 40, 32, 32}}
	for _, path := range sdpaPaths() {
		for _, sh := range shapes {
			for _, bits := range []int{4, 8} {
				for _, dt := range []struct {
					name  string
					round Rounder
				}{{"f32", Identity}, {"bf16", tensor.RoundBF16}, {"f16", tensor.RoundF16}} {
					for _, kind := range []MaskKind{MaskCausal, MaskNone, MaskBool} {
						name := fmt.Sprintf("%s/b%d/%s/mask%d/b%dh%dhk%d/%s", path.name, bits, dt.name, kind, sh.b, sh.h, sh.hk, dims(sh.l, sh.s, sh.d, sh.dv))
						t.Run(name, func(t *testing.T) {
							path.run(t, func() {
								r := newRand(uint64(sh.s*7 + sh.d + bits))
								q := randVec(r, sh.b*sh.h*sh.l*sh.d, 1, dt.round)
								gs := 32
								if sh.d%64 == 0 {
									gs = 64
								}
								kq := newQuantStore(r, dt.name, sh.b, sh.hk, sh.s, sh.s+21, sh.d, gs, bits)
								vq := newQuantStore(r, dt.name, sh.b, sh.hk, sh.s, sh.s+21, sh.dv, 32, bits)
								m := Mask{Kind: kind}
								if kind == MaskBool {
									m.Bool = make([]bool, sh.b*sh.l*sh.s)
									for i := range m.Bool {
										m.Bool[i] = r.IntN(3) > 0
									}
									m.Strides = [4]int{sh.l * sh.s, 0, sh.s, 1}
								}
								kd, vd := DenseKV(kq.plain, sh.hk, sh.s, sh.d), DenseKV(vq.plain, sh.hk, sh.s, sh.dv)
								for _, acc := range []Acc{AccF32, AccF64} {
									for _, threads := range []int{1, 3} {
										want := make([]float32, sh.b*sh.h*sh.l*sh.dv)
										got, whole := guarded(len(want))
										withThreads(threads, func() {
											SDPAKV(want, q, kd, vd, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, 0.125, m, dt.round, acc)
											SDPAKV(got, q, kq.kv, vq.kv, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, 0.125, m, dt.round, acc)
										})
										checkGuards(t, whole, "dst")
										expectSame(t, got, want, fmt.Sprintf("quantized vs its float32 values (acc%d, %d workers)", acc, threads))
									}
								}
							})
						})
					}
				}
			}
		}
	}
}

// TestSDPAQuantKVChecks: quantized K or V that do not fit panic with a
// message naming the kernel and the argument.
func TestSDPAQuantKVChecks(t *testing.T) {
	good := func() KV {
		st := newQuantStore(newRand(1), "bf16", 1, 2, 5, 5, 32, 32, 8)
		return st.kv
	}
	cases := []struct {
		name string
		k    func() KV
		want string
	}{
		{"bits", func() KV { k := good(); k.Q.Bits = 7; return k }, "kernel.SDPAKV: bits 7"},
		{"group", func() KV { k := good(); k.Q.GroupSize = 48; return k }, "kernel.SDPAKV: group size 48"},
		{"row stride", func() KV { k := good(); k.Q.RowStride = 7; return k }, "kernel.SDPAKV: k codes strides"},
		{"short codes", func() KV { k := good(); k.Q.W = k.Q.W[:50]; return k }, "kernel.SDPAKV: k codes has 50 elements"},
		{"short scales", func() KV { k := good(); k.Q.Scales.HStride = 100; return k }, "kernel.SDPAKV: k scales has"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.HasPrefix(msg, c.want) {
					t.Errorf("got panic %v, want a message starting %q", r, c.want)
				}
			}()
			dst, q := make([]float32, 4*3*32), make([]float32, 4*3*32)
			SDPAKV(dst, q, c.k(), good(), 1, 4, 2, 3, 5, 32, 32, 1, Mask{Kind: MaskCausal}, Identity, AccF32)
		})
	}
}

// sliceRows is a RowSource over float32 rows [b, hk, capacity, n] that
// fails the test on a request outside [0, s) or with a short destination
// stride, and records the widest block asked for.
type sliceRows struct {
	t               *testing.T
	x               []float32
	hk, capacity, s int
	mu              sync.Mutex
	widest          int
}

func (r *sliceRows) DecodeRows(dst []float32, dstride, bi, h, j0, rows, n int) {
	if j0 < 0 || j0+rows > r.s || dstride < n || rows < 1 {
		r.t.Errorf("DecodeRows(j0 %d, rows %d, dstride %d, n %d) outside %d positions", j0, rows, dstride, n, r.s)
		return
	}
	r.mu.Lock()
	r.widest = max(r.widest, rows)
	r.mu.Unlock()
	for x := range rows {
		o := ((bi*r.hk+h)*r.capacity + j0 + x) * n
		copy(dst[x*dstride:x*dstride+n], r.x[o:o+n])
	}
}

// TestSDPARowSource: keys and values given by a RowSource are bit for bit
// SDPAKV on the same rows in float32 storage, on every kernel set, for
// decode (split across workers or not) and prefill, causal, unmasked and
// Bool masks with holes, GQA, and under AccF64; the source is asked for
// blocks of at most 32 rows inside the window, and the destination's
// guards stay untouched.
func TestSDPARowSource(t *testing.T) {
	type shape struct{ b, h, hk, l, s, d int }
	shapes := []shape{{1, 16, 2, 1, 600, 128}, {1, 8, 2, 7, 77, 64}, {2, 4, 2, 3, 45, 64}, {1, 6, 3, 2, 40, 40}}
	for _, path := range sdpaPaths() {
		for _, sh := range shapes {
			for _, kind := range []MaskKind{MaskCausal, MaskNone, MaskBool} {
				name := fmt.Sprintf("%s/mask%d/b%dh%dhk%d/%s", path.name, kind, sh.b, sh.h, sh.hk, dims(sh.l, sh.s, sh.d, sh.d))
				t.Run(name, func(t *testing.T) {
					path.run(t, func() {
						r := newRand(uint64(sh.s*5 + sh.d))
						capacity := sh.s + 9
						q := randVec(r, sh.b*sh.h*sh.l*sh.d, 1, tensor.RoundBF16)
						kx := randVec(r, sh.b*sh.hk*capacity*sh.d, 1, tensor.RoundBF16)
						vx := randVec(r, sh.b*sh.hk*capacity*sh.d, 1, tensor.RoundBF16)
						m := Mask{Kind: kind}
						if kind == MaskBool {
							m.Bool = make([]bool, sh.b*sh.l*sh.s)
							for i := range m.Bool {
								m.Bool[i] = r.IntN(3) > 0
							}
							m.Strides = [4]int{sh.l * sh.s, 0, sh.s, 1}
						}
						dense := func(x []float32) KV {
							return KV{Vec: F32Vec(x), BStride: sh.hk * capacity * sh.d, HStride: capacity * sh.d, RowStride: sh.d}
						}
						ks := &sliceRows{t: t, x: kx, hk: sh.hk, capacity: capacity, s: sh.s}
						vs := &sliceRows{t: t, x: vx, hk: sh.hk, capacity: capacity, s: sh.s}
						for _, acc := range []Acc{AccF32, AccF64} {
							for _, threads := range []int{1, 3} {
								want := make([]float32, sh.b*sh.h*sh.l*sh.d)
								got, whole := guarded(len(want))
								withThreads(threads, func() {
									SDPAKV(want, q, dense(kx), dense(vx), sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.d, 0.125, m, tensor.RoundBF16, acc)
									SDPAKV(got, q, KV{Rows: ks}, KV{Rows: vs}, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.d, 0.125, m, tensor.RoundBF16, acc)
								})
								checkGuards(t, whole, "dst")
								expectSame(t, got, want, fmt.Sprintf("row source vs float32 storage (acc%d, %d workers)", acc, threads))
							}
						}
						if ks.widest > sdpaBK || vs.widest > sdpaBK || ks.widest == 0 || vs.widest == 0 {
							t.Errorf("widest blocks asked for: keys %d, values %d rows, want 1..%d", ks.widest, vs.widest, sdpaBK)
						}
					})
				})
			}
		}
	}
}
