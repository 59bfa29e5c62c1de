package kernel

import "math"

// MaskKind selects how SDPA masks keys.
type MaskKind int

// The mask kinds.
const (
	MaskNone   MaskKind = iota // every query sees every key
	MaskCausal                 // key j visible to query i iff j <= i + s - l (lower-right aligned)
	MaskBool                   // Bool[idx] true = attend
	MaskAdd                    // Add[idx] added to the score
)

// Mask selects the keys each query attends to. For MaskBool and MaskAdd the
// element of (batch bi, query head hi, query i, key j) is at
// bi·Strides[0] + hi·Strides[1] + i·Strides[2] + j·Strides[3]; a zero stride
// broadcasts that axis.
type Mask struct {
	Kind    MaskKind
	Bool    []bool
	Add     []float32
	Strides [4]int
}

// index returns the element offset of (bi, hi, i, j).
func (m *Mask) index(bi, hi, i, j int) int {
	return bi*m.Strides[0] + hi*m.Strides[1] + i*m.Strides[2] + j*m.Strides[3]
}

func checkSDPA(dst, q, k, v []float32, b, h, hk, l, s, d, dv int, m *Mask) {
	const name = "SDPA"
	check(b >= 0 && l >= 0 && h > 0 && hk > 0 && s > 0 && d > 0 && dv > 0, name, "sizes b=%d h=%d hk=%d l=%d s=%d d=%d dv=%d", b, h, hk, l, s, d, dv)
	check(h%hk == 0, name, "%d query heads is not a multiple of %d KV heads", h, hk)
	need(name, "q", len(q), b*h*l*d)
	need(name, "k", len(k), b*hk*s*d)
	need(name, "v", len(v), b*hk*s*dv)
	need(name, "dst", len(dst), b*h*l*dv)
	switch m.Kind {
	case MaskNone, MaskCausal:
	case MaskBool, MaskAdd:
		for a, st := range m.Strides {
			check(st >= 0, name, "mask stride %d is %d, want >= 0", a, st)
		}
		n := len(m.Bool)
		if m.Kind == MaskAdd {
			n = len(m.Add)
		}
		if b > 0 && l > 0 {
			need(name, "mask", n, m.index(b-1, h-1, l-1, s-1)+1)
		}
	default:
		check(false, name, "unknown mask kind %d", m.Kind)
	}
}

// visible reports whether key j is visible to query i of (bi, hi), and the
// additive bias of its score.
func (m *Mask) visible(bi, hi, i, j, l, s int) (bool, float32) {
	switch m.Kind {
	case MaskCausal:
		return j <= i+s-l, 0
	case MaskBool:
		return m.Bool[m.index(bi, hi, i, j)], 0
	case MaskAdd:
		return true, m.Add[m.index(bi, hi, i, j)]
	}
	return true, 0
}

// SDPARef is the reference of [SDPA]: one goroutine, one query row at a time,
// written as the formula with explicit index arithmetic.
func SDPARef(dst, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m Mask, round Rounder, acc Acc) {
	checkSDPA(dst, q, k, v, b, h, hk, l, s, d, dv, &m)
	if acc == AccF64 {
		sdpaRef[float64](dst, q, k, v, b, h, hk, l, s, d, dv, scale, &m, roundOr(round))
	} else {
		sdpaRef[float32](dst, q, k, v, b, h, hk, l, s, d, dv, scale, &m, roundOr(round))
	}
}

func exp[A float](x A) A { return A(math.Exp(float64(x))) }

func sdpaRef[A float](dst, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder) {
	rep := h / hk
	score := make([]A, s)
	seen := make([]bool, s)
	out := make([]A, dv)
	for bi := range b {
		for hi := range h {
			kh := hi / rep
			for i := range l {
				qo := ((bi*h+hi)*l + i) * d
				anySeen := false
				mx := A(math.Inf(-1))
				for j := range s {
					ok, add := m.visible(bi, hi, i, j, l, s)
					seen[j] = ok
					if !ok {
						continue
					}
					anySeen = true
					ko := ((bi*hk+kh)*s + j) * d
					var sc A
					for t := range d {
						sc += A(A(A(scale)*A(q[qo+t])) * A(k[ko+t]))
					}
					sc += A(add)
					score[j] = sc
					if sc > mx {
						mx = sc
					}
				}
				if !anySeen { // MLX fills masked scores with the dtype's lowest value: a uniform softmax
					for j := range s {
						seen[j], score[j] = true, 0
					}
					mx = 0
				}
				var sum A
				clear(out)
				for j := range s {
					if !seen[j] {
						continue
					}
					e := exp(score[j] - mx)
					sum += e
					vo := ((bi*hk+kh)*s + j) * dv
					for t := range dv {
						out[t] += A(e * A(v[vo+t]))
					}
				}
				do := ((bi*h+hi)*l + i) * dv
				for t := range dv {
					dst[do+t] = round(float32(out[t] / sum))
				}
			}
		}
	}
}

// SDPA is mx.fast.scaled_dot_product_attention with the numerics of MLX's
// fused Metal kernels (sdpa_vector.h; mlx_lm_spec.md §3.7): q [b, h, l, d],
// k [b, hk, s, d], v [b, hk, s, dv], dst [b, h, l, dv]; query head hi reads
// KV head hi/(h/hk) (GQA without repeating K and V). For each query row, in
// the accumulator type (float32, or float64 under AccF64):
//
//	score_j = Σ_t (scale·q_t)·k_jt  (+ Add mask)      for visible keys j
//	M       = max_j score_j
//	e_j     = exp(score_j − M)                         (correctly rounded exp)
//	dst     = round(Σ_j e_j·v_j / Σ_j e_j)
//
// Masked keys (causal j > i+s−l, Bool false) are skipped. A row whose keys are
// all masked gets the mean of all of v, which is what MLX computes (it fills
// masked scores with the dtype's lowest finite value, so the softmax is
// uniform); an additive mask of all −Inf gives NaN, as in MLX. Scores and
// probabilities are never rounded to the dtype; only the output is.
// Query rows are split across workers; scratch per worker: s scores, d scaled
// query values and dv accumulators.
func SDPA(dst, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m Mask, round Rounder, acc Acc) {
	checkSDPA(dst, q, k, v, b, h, hk, l, s, d, dv, &m)
	if acc == AccF64 {
		sdpa[float64](dst, q, k, v, b, h, hk, l, s, d, dv, scale, &m, roundOr(round))
	} else {
		sdpa32(dst, q, k, v, b, h, hk, l, s, d, dv, scale, &m, roundOr(round))
	}
}

// sdpa32 is the float32 form of sdpa with the score dot products and the
// value accumulation done by the vector helpers (dot32, axpy32): the same
// formula, summed in their order. Query rows (heads × positions) are split
// across the worker pool; scratch per worker is pooled.
func sdpa32(dst, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder) {
	rep := h / hk
	parallelFor(b*h*l, max(1, 16384/(s*(d+dv))), func(lo, hi int) {
		ws := scratchPool.Get().(*qmmScratch)
		defer scratchPool.Put(ws)
		ws.wt = grow(ws.wt, s+d+dv)
		score, qs, out := ws.wt[:s], ws.wt[s:s+d], ws.wt[s+d:s+d+dv]
		for row := lo; row < hi; row++ {
			i, bh := row%l, row/l
			bi, hh := bh/h, bh%h
			kv := bi*hk + hh/rep
			kb, vb := k[kv*s*d:(kv+1)*s*d], v[kv*s*dv:(kv+1)*s*dv]
			for t, x := range q[row*d : (row+1)*d] {
				qs[t] = scale * x
			}
			mx := float32(math.Inf(-1))
			nSeen := 0
			ninf := float32(math.Inf(-1))
			for j := range s {
				ok, add := m.visible(bi, hh, i, j, l, s)
				if !ok {
					score[j] = ninf
					continue
				}
				nSeen++
				sc := dot32(qs, kb[j*d:(j+1)*d]) + add
				score[j] = sc
				if sc > mx {
					mx = sc
				}
			}
			all := nSeen == 0
			if all { // every key masked: MLX's softmax is uniform
				mx = 0
			}
			var sum float32
			clear(out)
			for j := range s {
				var e float32
				switch {
				case all:
					e = 1
				case score[j] == ninf && !visibleAt(m, bi, hh, i, j, l, s):
					continue
				default:
					e = float32(math.Exp(float64(score[j] - mx)))
				}
				sum += e
				axpy32(out, e, vb[j*dv:(j+1)*dv])
			}
			o := dst[row*dv : (row+1)*dv]
			for t, x := range out {
				o[t] = round(x / sum)
			}
		}
	})
}

// visibleAt reports whether key j is visible (a visible key may still score
// −Inf through an additive mask, which contributes exp(−Inf) = 0 like the
// reference).
func visibleAt(m *Mask, bi, hi, i, j, l, s int) bool {
	ok, _ := m.visible(bi, hi, i, j, l, s)
	return ok
}

func sdpa[A float](dst, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder) {
	rep := h / hk
	parallelFor(b*h*l, max(1, 16384/(s*(d+dv))), func(lo, hi int) {
		score := make([]A, s)
		seen := make([]bool, s)
		qs := make([]A, d)
		out := make([]A, dv)
		for row := lo; row < hi; row++ {
			i, bh := row%l, row/l
			bi, hh := bh/h, bh%h
			kv := bi*hk + hh/rep
			kb, vb := k[kv*s*d:(kv+1)*s*d], v[kv*s*dv:(kv+1)*s*dv]
			for t, x := range q[row*d : (row+1)*d] {
				qs[t] = A(A(scale) * A(x))
			}
			mx := A(math.Inf(-1))
			nSeen := 0
			for j := range s {
				ok, add := m.visible(bi, hh, i, j, l, s)
				seen[j] = ok
				if !ok {
					continue
				}
				nSeen++
				kr := kb[j*d : (j+1)*d]
				var sc A
				for t, x := range qs {
					sc += A(x * A(kr[t]))
				}
				sc += A(add)
				score[j] = sc
				if sc > mx {
					mx = sc
				}
			}
			if nSeen == 0 {
				for j := range s {
					seen[j], score[j] = true, 0
				}
				mx = 0
			}
			var sum A
			clear(out)
			for j := range s {
				if !seen[j] {
					continue
				}
				e := exp(score[j] - mx)
				sum += e
				for t, x := range vb[j*dv : (j+1)*dv] {
					out[t] += A(e * A(x))
				}
			}
			o := dst[row*dv : (row+1)*dv]
			for t, x := range out {
				o[t] = round(float32(x / sum))
			}
		}
	})
}
