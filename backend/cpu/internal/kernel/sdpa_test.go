package kernel

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// repeatKV materialises GQA: [b, hk, s, d] → [b, hk·rep, s, d].
func repeatKV(x []float32, b, hk, s, d, rep int) []float32 {
	out := make([]float32, 0, len(x)*rep)
	for bi := range b {
		for kh := range hk {
			head := x[(bi*hk+kh)*s*d : (bi*hk+kh+1)*s*d]
			for range rep {
				out = append(out, head...)
			}
		}
	}
	return out
}

// sdpa64 is the naive float64 oracle: softmax(scale·q·kᵀ + mask)·v with
// repeated heads and an explicit visibility function.
func sdpa64(q, k, v []float32, b, h, l, s, d int, scale float64, visible func(bi, hh, i, j int) bool) []float64 {
	out := make([]float64, b*h*l*d)
	for bi := range b {
		for hh := range h {
			for i := range l {
				w := make([]float64, s)
				mx := math.Inf(-1)
				for j := range s {
					if !visible(bi, hh, i, j) {
						w[j] = math.Inf(-1)
						continue
					}
					var sc float64
					for t := range d {
						sc += float64(q[((bi*h+hh)*l+i)*d+t]) * float64(k[((bi*h+hh)*s+j)*d+t])
					}
					w[j] = sc * scale
					mx = max(mx, w[j])
				}
				var sum float64
				for j := range w {
					w[j] = math.Exp(w[j] - mx)
					sum += w[j]
				}
				for j := range s {
					for t := range d {
						out[((bi*h+hh)*l+i)*d+t] += w[j] / sum * float64(v[((bi*h+hh)*s+j)*d+t])
					}
				}
			}
		}
	}
	return out
}

func TestSDPA(t *testing.T) {
	type shape struct{ b, h, hk, l, s, d int }
	shapes := []shape{{1, 4, 4, 1, 9, 16}, {2, 8, 2, 3, 17, 32}, {1, 6, 3, 7, 7, 8}, {2, 4, 1, 33, 40, 16}, {1, 16, 2, 37, 70, 32}}
	for _, path := range sdpaPaths() {
		for _, sh := range shapes {
			for _, kind := range []MaskKind{MaskNone, MaskCausal, MaskBool, MaskAdd} {
				for _, dt := range testDTypes[:2] {
					for _, acc := range []Acc{AccF32, AccF64} {
						name := fmt.Sprintf("sdpa/%s/%s/mask%d/acc%d/b%dh%dhk%d/%s", path.name, dt.name, kind, acc, sh.b, sh.h, sh.hk, dims(sh.l, sh.s, sh.d))
						t.Run(name, func(t *testing.T) {
							path.run(t, func() { testSDPACase(t, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, kind, dt.round, acc) })
						})
					}
				}
			}
		}
	}
}

func testSDPACase(t *testing.T, b, h, hk, l, s, d int, kind MaskKind, round Rounder, acc Acc) {
	r := newRand(uint64(b*1000 + h*100 + l*10 + s + int(kind)))
	dv := d
	q, k, v := randVec(r, b*h*l*d, 1, round), randVec(r, b*hk*s*d, 1, round), randVec(r, b*hk*s*dv, 1, round)
	q0, k0, v0 := slices.Clone(q), slices.Clone(k), slices.Clone(v)
	scale := float32(1 / math.Sqrt(float64(d)))
	m := Mask{Kind: kind}
	visible := func(bi, hh, i, j int) bool { return true }
	switch kind {
	case MaskCausal:
		visible = func(bi, hh, i, j int) bool { return j <= i+s-l }
	case MaskBool: // a [B, 1, L, S] mask broadcast over heads
		m.Bool = make([]bool, b*l*s)
		for i := range m.Bool {
			m.Bool[i] = r.IntN(3) > 0
		}
		m.Strides = [4]int{l * s, 0, s, 1}
		visible = func(bi, hh, i, j int) bool { return m.Bool[bi*l*s+i*s+j] }
	case MaskAdd: // a [1, H, 1, S] additive mask with some −Inf
		m.Add = make([]float32, h*s)
		for i := range m.Add {
			m.Add[i] = round(float32(r.NormFloat64()))
			if r.IntN(4) == 0 {
				m.Add[i] = float32(math.Inf(-1))
			}
		}
		m.Add[0] = 0 // head 0 always sees key 0: no all −Inf row
		for hh := range h {
			m.Add[hh*s] = 0
		}
		m.Strides = [4]int{0, s, 0, 1}
	}
	want := make([]float32, b*h*l*dv)
	SDPARef(want, q, k, v, b, h, hk, l, s, d, dv, scale, m, round, acc)
	got, whole := guarded(b * h * l * dv)
	withThreads(3, func() { SDPA(got, q, k, v, b, h, hk, l, s, d, dv, scale, m, round, acc) })
	if acc == AccF64 {
		expectSame(t, got, want, "fast vs ref") // the same operations in the same order
	} else {
		checkSDPABound(t, got, want, q, k, v, b, h, hk, l, s, d, dv, scale, &m, round)
	}
	checkGuards(t, whole, "dst")
	unchanged(t, q, q0, "q")
	unchanged(t, k, k0, "k")
	unchanged(t, v, v0, "v")

	// GQA equals materialised repeated heads, bit for bit.
	rep := h / hk
	kr, vr := repeatKV(k, b, hk, s, d, rep), repeatKV(v, b, hk, s, dv, rep)
	full := make([]float32, len(want))
	SDPARef(full, q, kr, vr, b, h, h, l, s, d, dv, scale, m, round, acc)
	expectSame(t, want, full, "reference: GQA vs repeated heads")
	withThreads(2, func() { SDPA(full, q, kr, vr, b, h, h, l, s, d, dv, scale, m, round, acc) })
	expectSame(t, got, full, "GQA vs repeated heads")

	// Causal equals the explicit lower-right bool mask, bit for bit.
	if kind == MaskCausal {
		bm := Mask{Kind: MaskBool, Bool: make([]bool, l*s), Strides: [4]int{0, 0, s, 1}}
		for i := range l {
			for j := range s {
				bm.Bool[i*s+j] = j <= i+s-l
			}
		}
		explicit := make([]float32, len(want))
		SDPA(explicit, q, k, v, b, h, hk, l, s, d, dv, scale, bm, round, acc)
		expectSame(t, got, explicit, "causal vs explicit bool mask")
	}

	// Against float64 (rows with no visible key are tested separately).
	if kind == MaskAdd {
		visible = func(bi, hh, i, j int) bool { return !math.IsInf(float64(m.Add[hh*s+j]), -1) }
	}
	y64 := sdpa64(q, kr, vr, b, h, l, s, d, float64(scale), func(bi, hh, i, j int) bool { return visible(bi, hh, i, j) })
	if kind == MaskAdd {
		y64 = sdpa64add(q, kr, vr, b, h, l, s, d, float64(scale), m.Add)
	}
	u := ulpOf(1, round) / 2
	for i, w := range y64 {
		if w != w {
			continue // fully masked row
		}
		// Scores carry d·2^-24 relative error, the weights and sums s·2^-24;
		// outputs are bounded by max|v| ≤ ~5, so an absolute bound suffices.
		// The fast form and the reference both hold it.
		bound := float64(d+s+8)*math.Ldexp(1, -24)*8 + u*math.Abs(w)
		if e := math.Abs(float64(got[i]) - w); e > bound {
			t.Errorf("got %v, want %v ± %g (index %d)", got[i], w, bound, i)
			break
		}
		if e := math.Abs(float64(want[i]) - w); e > bound {
			t.Errorf("reference: got %v, want %v ± %g (index %d)", want[i], w, bound, i)
			break
		}
	}
}

// sdpa64add is sdpa64 with a [1, H, 1, S] additive mask.
func sdpa64add(q, k, v []float32, b, h, l, s, d int, scale float64, add []float32) []float64 {
	out := make([]float64, b*h*l*d)
	for bi := range b {
		for hh := range h {
			for i := range l {
				w := make([]float64, s)
				mx := math.Inf(-1)
				for j := range s {
					var sc float64
					for t := range d {
						sc += float64(q[((bi*h+hh)*l+i)*d+t]) * float64(k[((bi*h+hh)*s+j)*d+t])
					}
					w[j] = sc*scale + float64(add[hh*s+j])
					mx = max(mx, w[j])
				}
				var sum float64
				for j := range w {
					w[j] = math.Exp(w[j] - mx)
					sum += w[j]
				}
				for j := range s {
					for t := range d {
						out[((bi*h+hh)*l+i)*d+t] += w[j] / sum * float64(v[((bi*h+hh)*s+j)*d+t])
					}
				}
			}
		}
	}
	return out
}

// TestSDPAFullyMasked: MLX fills masked scores with the dtype's lowest value,
// so a row that sees no key gets the plain mean of v over all keys (checked
// against mx.fast.scaled_dot_product_attention on CPU: a bool row of all
// False and causal with l > s both give the mean); an additive mask of all
// −Inf gives NaN.
func TestSDPAFullyMasked(t *testing.T) {
	for _, path := range sdpaPaths() {
		t.Run(path.name, func(t *testing.T) { path.run(t, func() { testSDPAFullyMasked(t) }) })
	}
}

func testSDPAFullyMasked(t *testing.T) {
	const b, h, l, s, d = 1, 2, 4, 2, 8 // causal with l > s: queries 0 and 1 see nothing
	r := newRand(21)
	q, k, v := randVec(r, b*h*l*d, 1, Identity), randVec(r, b*h*s*d, 1, Identity), randVec(r, b*h*s*d, 1, Identity)
	got := make([]float32, b*h*l*d)
	SDPA(got, q, k, v, b, h, h, l, s, d, d, 1, Mask{Kind: MaskCausal}, Identity, AccF32)
	for hh := range h {
		for i := range 2 {
			for c := range d {
				mean := (v[(hh*s+0)*d+c] + v[(hh*s+1)*d+c]) / 2
				if g := got[(hh*l+i)*d+c]; math.Abs(float64(g-mean)) > 1e-6 {
					t.Errorf("causal l>s: got %v, want mean %v (head %d query %d dim %d)", g, mean, hh, i, c)
				}
			}
		}
	}
	add := Mask{Kind: MaskAdd, Add: []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}, Strides: [4]int{0, 0, 0, 1}}
	SDPA(got, q, k, v, b, h, h, l, s, d, d, 1, add, Identity, AccF32)
	for i, g := range got {
		if g == g {
			t.Fatalf("all −Inf additive mask: got %v, want NaN (index %d)", g, i)
		}
	}
}

// TestSDPANaN: a NaN in one query row poisons only that row's output; a NaN
// in a value vector poisons every row that sees its key.
func TestSDPANaN(t *testing.T) {
	for _, path := range sdpaPaths() {
		t.Run(path.name, func(t *testing.T) { path.run(t, func() { testSDPANaN(t) }) })
	}
}

func testSDPANaN(t *testing.T) {
	const b, h, l, s, d = 1, 1, 3, 3, 4
	r := newRand(8)
	q, k, v := randVec(r, l*d, 1, Identity), randVec(r, s*d, 1, Identity), randVec(r, s*d, 1, Identity)
	q[1*d+2] = float32(math.NaN())
	got := make([]float32, l*d)
	SDPA(got, q, k, v, b, h, h, l, s, d, d, 1, Mask{}, Identity, AccF32)
	for i, g := range got {
		if (g != g) != (i/d == 1) {
			t.Errorf("NaN query: got %v, want NaN only in row 1 (index %d)", g, i)
		}
	}
	q[1*d+2] = 0
	v[2*d+1] = float32(math.NaN()) // key 2: causal rows 0 and 1 do not see it
	SDPA(got, q, k, v, b, h, h, l, s, d, d, 1, Mask{Kind: MaskCausal}, Identity, AccF32)
	for i, g := range got {
		if (g != g) != (i/d == 2 && i%d == 1) {
			t.Errorf("NaN value: got %v, want NaN only at row 2 dim 1 (index %d)", g, i)
		}
	}
}

// sdpaPath is one implementation of the float32 SDPA: the AVX-512 kernels,
// the AVX2 kernels or the portable loops.
type sdpaPath struct {
	name string
	vk   int // sdpa512, sdpa256 or sdpaGo
}

// sdpaPaths lists the float32 paths to test: the portable loops always, the
// AVX-512 and AVX2 kernels too (skipped, loudly, on CPUs without them).
func sdpaPaths() []sdpaPath {
	return []sdpaPath{{"avx512", sdpa512}, {"avx2", sdpa256}, {"portable", sdpaGo}}
}

// set selects the path (for shapes the kernels take) and returns the
// function restoring the old selection; ok is false when this CPU cannot
// run it.
func (p sdpaPath) set() (restore func(), ok bool) {
	old512, old2 := asmF32, sdpaAVX2
	switch p.vk {
	case sdpa512:
		if !old512 || !sdpaHaveAsm {
			return nil, false
		}
	case sdpa256:
		if !old2 {
			return nil, false
		}
		asmF32 = false
	default:
		asmF32, sdpaAVX2 = false, false
	}
	return func() { asmF32, sdpaAVX2 = old512, old2 }, true
}

// run runs fn with the path selected.
func (p sdpaPath) run(t *testing.T, fn func()) {
	t.Helper()
	restore, ok := p.set()
	if !ok {
		t.Skipf("SKIPPED: this CPU lacks the instructions of the %s SDPA kernels", p.name)
	}
	defer restore()
	fn()
}

// checkSDPABound holds a float32 SDPA result got to the reference want row
// by row. Both evaluate the same formula in float32 with MLX's exp, in
// different orders (the fast path sums scores with fused multiply-adds,
// rescales an online softmax per block of keys and merges chunks). With u =
// 2^-24, A the largest Σ_t|scale·q_t·k_jt| and V the largest |v_j| over the
// row's visible keys, a score differs by at most 2(d+2)uA between the two;
// weights shift relatively by twice that (the max moves too, and the
// rescaling subtractions round at |s_j − M| ≤ 2A), the two sums of weights
// and of weighted values each by (s + s/32 + 8)u relatively per side, and
// the stored output by one ulp of the dtype. So
//
//	|got − want| ≤ V·u·(8(d+4)A + 4(s + s/32 + 8)) + ulp(want)
//
// Rows that see no key are exact (the mean of v in the reference's order).
func checkSDPABound(t *testing.T, got, want, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder) {
	t.Helper()
	rep := h / hk
	u := math.Ldexp(1, -24)
	for bi := range b {
		for hq := range h {
			kh := hq / rep
			for i := range l {
				row := ((bi*h+hq)*l + i) * dv
				var a, vm float64
				seen := false
				for j := range s {
					ok, add := m.visible(bi, hq, i, j, l, s)
					if !ok || math.IsInf(float64(add), -1) {
						continue
					}
					seen = true
					var sc float64
					for tt := range d {
						sc += math.Abs(float64(scale * q[((bi*h+hq)*l+i)*d+tt] * k[((bi*hk+kh)*s+j)*d+tt]))
					}
					a = max(a, sc+math.Abs(float64(add)))
					for tt := range dv {
						vm = max(vm, math.Abs(float64(v[((bi*hk+kh)*s+j)*dv+tt])))
					}
				}
				for tt := range dv {
					g, w := got[row+tt], want[row+tt]
					if !seen {
						if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
							t.Errorf("row with no visible key: got %v, want %v (batch %d head %d query %d dim %d)", g, w, bi, hq, i, tt)
							return
						}
						continue
					}
					bound := vm*u*(8*float64(d+4)*a+4*float64(s+s/32+8)) + ulpOf(w, round)
					if e := math.Abs(float64(g) - float64(w)); !(e <= bound) && !(g != g && w != w) {
						t.Errorf("got %v, want %v ± %.3g (batch %d head %d query %d dim %d)", g, w, bound, bi, hq, i, tt)
						return
					}
				}
			}
		}
	}
}

// toStorage returns x rounded to dt as bf16 or f16 bits laid out as a KV
// cache: [b, hk, cap, rowStride] with the values at [.., :s, :n] and
// garbage (NaN) elsewhere, and its KV.
func toStorage(x []float32, dt string, b, hk, s, n, capS, rowStride int) KV {
	bs, hs := hk*capS*rowStride, capS*rowStride
	kv := KV{BStride: bs, HStride: hs, RowStride: rowStride}
	total := b * bs
	switch dt {
	case "f32":
		buf := make([]float32, total)
		for i := range buf {
			buf[i] = float32(math.NaN())
		}
		for bi := range b {
			for h := range hk {
				for j := range s {
					copy(buf[bi*bs+h*hs+j*rowStride:][:n], x[((bi*hk+h)*s+j)*n:][:n])
				}
			}
		}
		kv.Vec = F32Vec(buf)
	case "bf16", "f16":
		buf := make([]uint16, total)
		for i := range buf {
			buf[i] = 0x7fc1 // NaN in both encodings
		}
		for bi := range b {
			for h := range hk {
				for j := range s {
					for t := range n {
						f := x[((bi*hk+h)*s+j)*n+t]
						if dt == "bf16" {
							buf[bi*bs+h*hs+j*rowStride+t] = uint16(math.Float32bits(f) >> 16)
						} else {
							buf[bi*bs+h*hs+j*rowStride+t] = tensor.Float32ToF16(f)
						}
					}
				}
			}
		}
		kv.Vec = BF16Vec(buf)
		if dt == "f16" {
			kv.Vec = F16Vec(buf)
		}
	}
	return kv
}

// sdpaStorages are the storage kinds of keys and values the tests read in
// place (toStorage's names) with the rounding of their values.
var sdpaStorages = []struct {
	name  string
	round Rounder
}{{"f32", Identity}, {"bf16", tensor.RoundBF16}, {"f16", tensor.RoundF16}}

// TestSDPAKV: keys and values read in place from a strided cache (HStride >
// s·RowStride, RowStride > d, NaN in the unused parts) in float32, bf16 and
// f16 storage give the same bits as SDPA on dense float32 copies of the
// same values (the conversion is exact and the arithmetic the same).
func TestSDPAKV(t *testing.T) {
	type shape struct{ b, h, hk, l, s, d, dv int }
	shapes := []shape{{1, 16, 2, 1, 45, 32, 32}, {2, 8, 2, 5, 77, 16, 48}, {1, 4, 4, 9, 33, 8, 8}, {1, 8, 1, 3, 600, 64, 64}}
	for _, path := range sdpaPaths() {
		for _, sh := range shapes {
			for _, dt := range sdpaStorages {
				for _, kind := range []MaskKind{MaskCausal, MaskNone} {
					name := fmt.Sprintf("%s/%s/mask%d/b%dh%dhk%d/%s", path.name, dt.name, kind, sh.b, sh.h, sh.hk, dims(sh.l, sh.s, sh.d, sh.dv))
					t.Run(name, func(t *testing.T) {
						path.run(t, func() {
							r := newRand(uint64(sh.s*7 + sh.d))
							q := randVec(r, sh.b*sh.h*sh.l*sh.d, 1, dt.round)
							k := randVec(r, sh.b*sh.hk*sh.s*sh.d, 1, dt.round)
							v := randVec(r, sh.b*sh.hk*sh.s*sh.dv, 1, dt.round)
							capS := sh.s + 19
							kk := toStorage(k, dt.name, sh.b, sh.hk, sh.s, sh.d, capS, sh.d+3)
							vv := toStorage(v, dt.name, sh.b, sh.hk, sh.s, sh.dv, capS, sh.dv+16)
							m := Mask{Kind: kind}
							want := make([]float32, sh.b*sh.h*sh.l*sh.dv)
							SDPA(want, q, k, v, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, 0.3, m, dt.round, AccF32)
							for _, acc := range []Acc{AccF32, AccF64} {
								if acc == AccF64 {
									SDPA(want, q, k, v, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, 0.3, m, dt.round, acc)
								}
								got, whole := guarded(len(want))
								withThreads(2, func() {
									SDPAKV(got, q, kk, vv, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, sh.dv, 0.3, m, dt.round, acc)
								})
								checkGuards(t, whole, "dst")
								expectSame(t, got, want, fmt.Sprintf("SDPAKV vs SDPA on dense values (acc%d)", acc))
							}
						})
					})
				}
			}
		}
	}
}

// TestSDPAKVChecks: bad strides and short storage panic with a message
// naming the kernel and the argument.
func TestSDPAKVChecks(t *testing.T) {
	good := func() KV { return DenseKV(make([]float32, 2*5*8), 2, 5, 8) }
	cases := []struct {
		name string
		k    func() KV
		want string
	}{
		{"row stride below d", func() KV { k := good(); k.RowStride = 4; return k }, "kernel.SDPAKV: k strides"},
		{"negative head stride", func() KV { k := good(); k.HStride = -1; return k }, "kernel.SDPAKV: k strides"},
		{"short storage", func() KV { k := good(); k.HStride = 41; return k }, "kernel.SDPAKV: k has 80 elements, want at least"},
		{"two storages", func() KV { k := good(); k.Vec.U16 = make([]uint16, 80); return k }, "kernel.SDPAKV: k holds both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.HasPrefix(msg, c.want) {
					t.Errorf("got panic %v, want a message starting %q", r, c.want)
				}
			}()
			dst, q := make([]float32, 4*3*8), make([]float32, 4*3*8)
			SDPAKV(dst, q, c.k(), good(), 1, 4, 2, 3, 5, 8, 8, 1, Mask{Kind: MaskCausal}, Identity, AccF32)
		})
	}
}

// TestSDPAChunked: a query row's result does not depend on the other rows
// of the call: prefill in chunks (each chunk's queries against the keys up
// to its end, causal) equals one-shot prefill bit for bit, across block
// (32) and chunk (512) boundaries, and for 1, 2 and 3 workers.
func TestSDPAChunked(t *testing.T) {
	type shape struct {
		h, hk, s, d int
		chunks      []int
	}
	for _, path := range sdpaPaths() {
		for _, sh := range []shape{{16, 2, 600, 32, []int{16, 37, 256}}, {4, 4, 100, 16, []int{1, 7, 64}}, {6, 2, 70, 8, []int{1, 32}}, {6, 2, 70, 32, []int{1, 5, 64}}} {
			for _, chunk := range sh.chunks {
				name := fmt.Sprintf("%s/h%dhk%d/s%dd%d/chunk%d", path.name, sh.h, sh.hk, sh.s, sh.d, chunk)
				t.Run(name, func(t *testing.T) {
					path.run(t, func() {
						h, hk, s, d := sh.h, sh.hk, sh.s, sh.d
						r := newRand(uint64(s + chunk))
						q := randVec(r, h*s*d, 1, tensor.RoundBF16)
						k := randVec(r, hk*s*d, 1, tensor.RoundBF16)
						v := randVec(r, hk*s*d, 1, tensor.RoundBF16)
						want := make([]float32, h*s*d)
						withThreads(1, func() {
							SDPA(want, q, k, v, 1, h, hk, s, s, d, d, 0.2, Mask{Kind: MaskCausal}, Identity, AccF32)
						})
						kv := DenseKV(k, hk, s, d)
						vv := DenseKV(v, hk, s, d)
						for _, th := range []int{1, 2, 3} {
							got := sdpaChunked(q, kv, vv, h, hk, s, d, chunk, th, 0.2, Identity, AccF32)
							expectSame(t, got, want, fmt.Sprintf("chunked (%d workers) vs one-shot", th))
						}
					})
				})
			}
		}
	}
}

// sdpaChunked is causal prefill of the s query positions of q ([h, s, d])
// against the keys and values kv and vv in chunks of chunk positions, each
// chunk's queries against the keys up to its end, on th workers.
func sdpaChunked(q []float32, kv, vv KV, h, hk, s, d, chunk, th int, scale float32, round Rounder, acc Acc) []float32 {
	got := make([]float32, h*s*d)
	for c0 := 0; c0 < s; c0 += chunk {
		c1 := min(s, c0+chunk)
		n := c1 - c0
		qc := make([]float32, h*n*d)
		for hq := range h {
			copy(qc[hq*n*d:(hq+1)*n*d], q[(hq*s+c0)*d:(hq*s+c1)*d])
		}
		out := make([]float32, h*n*d)
		withThreads(th, func() {
			SDPAKV(out, qc, kv, vv, 1, h, hk, n, c1, d, d, scale, Mask{Kind: MaskCausal}, round, acc)
		})
		for hq := range h {
			copy(got[(hq*s+c0)*d:(hq*s+c1)*d], out[hq*n*d:(hq+1)*n*d])
		}
	}
	return got
}

// TestSDPADecodeLong: one query against 8192 bf16 keys (the split of keys
// across workers): 1, 2 and 3 workers give the same bits, within the bound
// of the reference and of a float64 oracle.
func TestSDPADecodeLong(t *testing.T) {
	const h, hk, s, d = 16, 2, 8192, 128
	for _, path := range sdpaPaths() {
		t.Run(path.name, func(t *testing.T) {
			path.run(t, func() {
				r := newRand(99)
				q := randVec(r, h*d, 1, tensor.RoundBF16)
				k := randVec(r, hk*s*d, 1, tensor.RoundBF16)
				v := randVec(r, hk*s*d, 1, tensor.RoundBF16)
				kk := toStorage(k, "bf16", 1, hk, s, d, s+64, d)
				vv := toStorage(v, "bf16", 1, hk, s, d, s+64, d)
				scale := float32(1 / math.Sqrt(d))
				m := Mask{Kind: MaskCausal}
				var first []float32
				for _, th := range []int{1, 2, 3} {
					got := make([]float32, h*d)
					withThreads(th, func() { SDPAKV(got, q, kk, vv, 1, h, hk, 1, s, d, d, scale, m, tensor.RoundBF16, AccF32) })
					if first == nil {
						first = got
						continue
					}
					expectSame(t, got, first, fmt.Sprintf("%d workers vs 1", th))
				}
				want := make([]float32, h*d)
				SDPARef(want, q, k, v, 1, h, hk, 1, s, d, d, scale, m, tensor.RoundBF16, AccF32)
				checkSDPABound(t, first, want, q, k, v, 1, h, hk, 1, s, d, d, scale, &m, tensor.RoundBF16)
				rep := h / hk
				y64 := sdpa64(q, repeatKV(k, 1, hk, s, d, rep), repeatKV(v, 1, hk, s, d, rep), 1, h, 1, s, d, float64(scale), func(bi, hh, i, j int) bool { return true })
				for i, w := range y64 {
					// As in testSDPACase: float32 sums off by d·2^-24 (scores)
					// and s·2^-24 (weights) relative, on values |v| ≤ ~5, then
					// one rounding to bf16.
					bound := float64(d+s+8)*math.Ldexp(1, -24)*8 + ulpOf(float32(w), tensor.RoundBF16)
					if e := math.Abs(float64(first[i]) - w); e > bound {
						t.Fatalf("got %v, want %v ± %.3g (index %d)", first[i], w, bound, i)
					}
				}
			})
		})
	}
}

// TestSDPABoolHoles: a Bool mask with scattered holes and fully masked rows,
// and a NaN in the values of a key every row masks, on every path: within
// the bound of the reference, the masked NaN never reaches the output.
func TestSDPABoolHoles(t *testing.T) {
	const b, h, hk, l, s, d = 1, 8, 2, 6, 300, 16
	for _, path := range sdpaPaths() {
		t.Run(path.name, func(t *testing.T) {
			path.run(t, func() {
				r := newRand(3)
				q, k, v := randVec(r, b*h*l*d, 1, Identity), randVec(r, b*hk*s*d, 1, Identity), randVec(r, b*hk*s*d, 1, Identity)
				m := Mask{Kind: MaskBool, Bool: make([]bool, h*l*s), Strides: [4]int{0, l * s, s, 1}}
				for i := range m.Bool {
					m.Bool[i] = r.IntN(5) > 0
				}
				for j := range s { // head 3 query 2 sees nothing
					m.Bool[(3*l+2)*s+j] = false
				}
				for hh := range h { // key 40 is masked everywhere; its values are NaN
					for i := range l {
						m.Bool[(hh*l+i)*s+40] = false
					}
				}
				for kh := range hk {
					v[(kh*s+40)*d+5] = float32(math.NaN())
				}
				got, want := make([]float32, b*h*l*d), make([]float32, b*h*l*d)
				withThreads(2, func() { SDPA(got, q, k, v, b, h, hk, l, s, d, d, 0.25, m, Identity, AccF32) })
				SDPARef(want, q, k, v, b, h, hk, l, s, d, d, 0.25, m, Identity, AccF32)
				for i, g := range got {
					row := i / d
					if (g != g) != (row == 3*l+2 && i%d == 5) { // the mean of all v includes key 40
						t.Fatalf("got %v at index %d: NaN only where a row sees no key (its mean includes the NaN)", g, i)
					}
				}
				checkSDPABound(t, got, want, q, k, v, b, h, hk, l, s, d, d, 0.25, &m, Identity)
			})
		})
	}
}

// TestSDPALongPrefill: causal with l < s across chunks of keys (600 keys,
// d = 128, GQA), bf16 values from a strided bf16 cache, on every path:
// within the bound of the reference and close to a float64 oracle.
func TestSDPALongPrefill(t *testing.T) {
	const h, hk, l, s, d = 8, 2, 40, 600, 128
	for _, path := range sdpaPaths() {
		t.Run(path.name, func(t *testing.T) {
			path.run(t, func() {
				r := newRand(12)
				q := randVec(r, h*l*d, 1, tensor.RoundBF16)
				k := randVec(r, hk*s*d, 1, tensor.RoundBF16)
				v := randVec(r, hk*s*d, 1, tensor.RoundBF16)
				kk := toStorage(k, "bf16", 1, hk, s, d, s+40, d)
				vv := toStorage(v, "bf16", 1, hk, s, d, s+40, d)
				scale := float32(1 / math.Sqrt(d))
				m := Mask{Kind: MaskCausal}
				got, want := make([]float32, h*l*d), make([]float32, h*l*d)
				withThreads(2, func() { SDPAKV(got, q, kk, vv, 1, h, hk, l, s, d, d, scale, m, tensor.RoundBF16, AccF32) })
				SDPARef(want, q, k, v, 1, h, hk, l, s, d, d, scale, m, tensor.RoundBF16, AccF32)
				checkSDPABound(t, got, want, q, k, v, 1, h, hk, l, s, d, d, scale, &m, tensor.RoundBF16)
				rep := h / hk
				y64 := sdpa64(q, repeatKV(k, 1, hk, s, d, rep), repeatKV(v, 1, hk, s, d, rep), 1, h, l, s, d, float64(scale), func(bi, hh, i, j int) bool { return j <= i+s-l })
				for i, w := range y64 {
					// As in testSDPACase: float32 sums off by d·2^-24 (scores)
					// and s·2^-24 (weights) relative, on values |v| ≤ ~5, then
					// one rounding to bf16.
					bound := float64(d+s+8)*math.Ldexp(1, -24)*8 + ulpOf(float32(w), tensor.RoundBF16)
					if e := math.Abs(float64(got[i]) - w); e > bound {
						t.Fatalf("got %v, want %v ± %.3g (index %d)", got[i], w, bound, i)
					}
				}
			})
		})
	}
}

// TestSDPAKVRows: rows attending to keys and values of their own, of
// different lengths (one block, a partial one, several chunks: the lone-row
// call splits those across workers), give each row the bits SDPAKV gives it
// alone, on every kernel path, storage kind and accumulation. A row whose
// keys are shifted by one position must change only its own output.
func TestSDPAKVRows(t *testing.T) {
	type shape struct{ h, hk, l, d, dv int }
	shapes := []shape{{9, 3, 1, 64, 64}, {4, 4, 3, 16, 48}, {8, 2, 1, 8, 8}}
	lens := []int{1, 31, 77, 600, 33}
	for _, path := range sdpaPaths() {
		for _, sh := range shapes {
			for _, dt := range sdpaStorages {
				for _, kind := range []MaskKind{MaskCausal, MaskNone} {
					name := fmt.Sprintf("%s/%s/mask%d/h%dhk%d/%s", path.name, dt.name, kind, sh.h, sh.hk, dims(sh.l, 0, sh.d, sh.dv))
					t.Run(name, func(t *testing.T) {
						path.run(t, func() {
							r := newRand(uint64(sh.h*31 + sh.d))
							B := len(lens)
							q := randVec(r, B*sh.h*sh.l*sh.d, 1, dt.round)
							ks, vs := make([]KV, B), make([]KV, B)
							for i, s := range lens {
								k := randVec(r, sh.hk*s*sh.d, 1, dt.round)
								v := randVec(r, sh.hk*s*sh.dv, 1, dt.round)
								ks[i] = toStorage(k, dt.name, 1, sh.hk, s, sh.d, s+5, sh.d+3)
								vs[i] = toStorage(v, dt.name, 1, sh.hk, s, sh.dv, s+7, sh.dv+16)
							}
							m := Mask{Kind: kind}
							for _, acc := range []Acc{AccF32, AccQ8, AccF64} {
								want := make([]float32, B*sh.h*sh.l*sh.dv)
								rowLen := sh.h * sh.l * sh.dv
								withThreads(2, func() {
									for i, s := range lens {
										SDPAKV(want[i*rowLen:(i+1)*rowLen], q[i*sh.h*sh.l*sh.d:(i+1)*sh.h*sh.l*sh.d], ks[i], vs[i], 1, sh.h, sh.hk, sh.l, s, sh.d, sh.dv, 0.3, m, dt.round, acc)
									}
								})
								got, whole := guarded(len(want))
								withThreads(2, func() {
									SDPAKVRows(got, q, ks, vs, lens, sh.h, sh.hk, sh.l, sh.d, sh.dv, 0.3, m, dt.round, acc)
								})
								checkGuards(t, whole, "dst")
								expectSame(t, got, want, fmt.Sprintf("SDPAKVRows vs SDPAKV row by row (acc%d)", acc))
								// Row 1 reads its keys one position later: row 1 changes, the others do not.
								shifted := slices.Clone(ks)
								shifted[1].Vec = shiftVec(ks[1].Vec, ks[1].RowStride)
								moved, _ := guarded(len(want))
								withThreads(2, func() {
									SDPAKVRows(moved, q, shifted, vs, lens, sh.h, sh.hk, sh.l, sh.d, sh.dv, 0.3, m, dt.round, acc)
								})
								for i := range lens {
									same := firstDiff(moved[i*rowLen:(i+1)*rowLen], want[i*rowLen:(i+1)*rowLen]) < 0
									if same != (i != 1) {
										t.Fatalf("acc%d: after moving row 1's keys, row %d unchanged = %v", acc, i, same)
									}
								}
							}
						})
					})
				}
			}
		}
	}
}

// shiftVec returns v's storage starting n elements later (a window one row
// further along the same storage).
func shiftVec(v Vec, n int) Vec {
	switch {
	case v.F32 != nil:
		v.F32 = v.F32[n:]
	default:
		v.U16 = v.U16[n:]
	}
	return v
}

// TestSDPALeftPadded: a left-padded batch (mlx_lm's BatchKVCache: row r's
// keys at the end of a shared buffer, the padding before them hidden by a
// Bool mask) gives each row the bits SDPAKV gives it alone on its own keys
// under the causal mask, at one and three query positions, with a row
// longer than a chunk (several chunks) and a lone padded row (the split
// path); the padding holds values that would change any sum they entered.
func TestSDPALeftPadded(t *testing.T) {
	const h, hk, d, dv = 8, 2, 64, 64
	for _, path := range sdpaPaths() {
		for _, dt := range sdpaStorages {
			for _, lens := range [][]int{{9, 40, 600, 3}, {700}} {
				for _, l := range []int{1, 3} {
					name := fmt.Sprintf("%s/%s/lens%v/l%d", path.name, dt.name, lens, l)
					t.Run(name, func(t *testing.T) {
						path.run(t, func() {
							r := newRand(uint64(len(lens)*7 + l))
							B, S := len(lens), slices.Max(lens)+5
							q := randVec(r, B*h*l*d, 1, dt.round)
							kAll := randVec(r, B*hk*S*d, 1, dt.round)
							vAll := randVec(r, B*hk*S*dv, 1, dt.round)
							for i := range kAll {
								kAll[i] *= 50 // padding keys that a sum would notice
							}
							mask := make([]bool, B*l*S)
							for bi, n := range lens {
								for i := range l {
									for x := S - n; x <= S-l+i; x++ {
										mask[(bi*l+i)*S+x] = true
									}
								}
							}
							for bi, n := range lens { // the rows' own keys are ordinary
								for kh := range hk {
									for x := S - n; x < S; x++ {
										for c := range d {
											kAll[((bi*hk+kh)*S+x)*d+c] /= 50
										}
									}
								}
							}
							m := Mask{Kind: MaskBool, Bool: mask, Strides: [4]int{l * S, 0, S, 1}}
							kv := toStorage(kAll, dt.name, B, hk, S, d, S, d)
							vv := toStorage(vAll, dt.name, B, hk, S, dv, S, dv)
							for _, acc := range []Acc{AccF32, AccQ8} {
								got := make([]float32, B*h*l*dv)
								withThreads(2, func() {
									SDPAKV(got, q, kv, vv, B, h, hk, l, S, d, dv, 0.125, m, dt.round, acc)
								})
								for bi, n := range lens {
									// Row bi alone: its n keys from position 0.
									ko := make([]float32, hk*n*d)
									vo := make([]float32, hk*n*dv)
									for kh := range hk {
										copy(ko[kh*n*d:(kh+1)*n*d], kAll[((bi*hk+kh)*S+S-n)*d:((bi*hk+kh)*S+S)*d])
										copy(vo[kh*n*dv:(kh+1)*n*dv], vAll[((bi*hk+kh)*S+S-n)*dv:((bi*hk+kh)*S+S)*dv])
									}
									want := make([]float32, h*l*dv)
									withThreads(2, func() {
										SDPAKV(want, q[bi*h*l*d:(bi+1)*h*l*d], toStorage(ko, dt.name, 1, hk, n, d, n, d), toStorage(vo, dt.name, 1, hk, n, dv, n, dv),
											1, h, hk, l, n, d, dv, 0.125, Mask{Kind: MaskCausal}, dt.round, acc)
									})
									expectSame(t, got[bi*h*l*dv:(bi+1)*h*l*dv], want, fmt.Sprintf("acc%d row %d (%d keys after %d of padding)", acc, bi, n, S-n))
								}
							}
						})
					})
				}
			}
		}
	}
}
