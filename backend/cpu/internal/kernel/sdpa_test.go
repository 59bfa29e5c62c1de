package kernel

import (
	"fmt"
	"math"
	"slices"
	"testing"
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
	shapes := []shape{{1, 4, 4, 1, 9, 16}, {2, 8, 2, 3, 17, 32}, {1, 6, 3, 7, 7, 8}, {2, 4, 1, 33, 40, 16}}
	for _, sh := range shapes {
		for _, kind := range []MaskKind{MaskNone, MaskCausal, MaskBool, MaskAdd} {
			for _, dt := range testDTypes[:2] {
				for _, acc := range []Acc{AccF32, AccF64} {
					name := fmt.Sprintf("sdpa/%s/mask%d/acc%d/b%dh%dhk%d/%s", dt.name, kind, acc, sh.b, sh.h, sh.hk, dims(sh.l, sh.s, sh.d))
					t.Run(name, func(t *testing.T) { testSDPACase(t, sh.b, sh.h, sh.hk, sh.l, sh.s, sh.d, kind, dt.round, acc) })
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
