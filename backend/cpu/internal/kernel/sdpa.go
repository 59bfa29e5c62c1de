package kernel

import (
	"math"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
)

// sdpa_amd64.s, the AVX-512 SDPA and elementwise kernels, is written by
// sdpa_gen.go (on any platform; TestGenerated checks it is current).
//
//go:generate go run sdpa_gen.go -o sdpa_amd64.s

// MaskKind selects how SDPA masks keys.
type MaskKind int

// The mask kinds.
const (
	MaskNone   MaskKind = iota // every query sees every key
	MaskCausal                 // key j visible to query i iff j <= i + s - l (lower-right aligned)
	MaskBool                   // Bool[idx] true = attend
	MaskAdd                    // Add[idx] added to the score
	MaskPrefix                 // key j visible to query i iff j <= i and j < Prefix or j in i's block (l == s)
)

// Mask selects the keys each query attends to. For MaskBool and MaskAdd the
// element of (batch bi, query head hi, query i, key j) is at
// bi·Strides[0] + hi·Strides[1] + i·Strides[2] + j·Strides[3]; a zero stride
// broadcasts that axis. MaskPrefix is a prefix-shared sequence
// (backend.PrefixMask): positions [0, Prefix) are the prefix, then blocks
// ending at Ends (ascending, the last at s); a query sees the keys up to
// its own position in the prefix and in its own block.
type Mask struct {
	Kind    MaskKind
	Bool    []bool
	Add     []float32
	Strides [4]int
	Prefix  int
	Ends    []int
}

// blockStart is the first key query i sees after the prefix under
// MaskPrefix: the start of its block (0 for a query in the prefix).
func (m *Mask) blockStart(i int) int {
	if i < m.Prefix {
		return 0
	}
	s := m.Prefix
	for _, e := range m.Ends {
		if i < e {
			return s
		}
		s = e
	}
	return s
}

// visible0 is MaskPrefix's visibility of key j to query i.
func (m *Mask) visible0(i, j int) bool {
	return j <= i && (j < m.Prefix || j >= m.blockStart(i))
}

// blockEnd is the end of the block holding position j >= Prefix under
// MaskPrefix.
func (m *Mask) blockEnd(j int) int {
	for _, e := range m.Ends {
		if j < e {
			return e
		}
	}
	return j + 1
}

// index returns the element offset of (bi, hi, i, j).
func (m *Mask) index(bi, hi, i, j int) int {
	return bi*m.Strides[0] + hi*m.Strides[1] + i*m.Strides[2] + j*m.Strides[3]
}

// KV is the keys or the values of [SDPAKV], read in place in their storage
// dtype: element (batch bi, KV head h, position j, t) is
// Vec.At(bi·BStride + h·HStride + j·RowStride + t). A KV cache passes its
// whole buffer with s the filled length, so HStride may exceed s·RowStride.
// When Q is not nil the rows are quantized instead (see [QuantKV]) and Vec
// and the strides are unused; likewise when Rows is not nil (a storage the
// caller decodes, see [RowSource]).
type KV struct {
	Vec                         Vec
	BStride, HStride, RowStride int
	Q                           *QuantKV
	Rows                        RowSource
}

// RowSource is the keys or the values of [SDPAKV] in a storage of the
// caller's own (a KV cache codec), which the kernel asks for a block of at
// most 32 rows at a time, as it expands a [QuantKV]: the result is bit for
// bit SDPAKV on the float32 values the source writes, in float32 storage.
// The source must hold b·hk rows of s positions (the kernel does not check
// it) and be safe for concurrent calls (workers read blocks in parallel).
type RowSource interface {
	// DecodeRows writes the n values of each of rows rows of (batch bi,
	// KV head h) from position j0 to dst, row r at r·dstride.
	DecodeRows(dst []float32, dstride, bi, h, j0, rows, n int)
}

// expanded reports whether kv's rows are expanded into scratch (quantized
// or decoded by a RowSource) rather than read in place.
func (kv *KV) expanded() bool { return kv.Q != nil || kv.Rows != nil }

// expandRows writes rows rows of n values of an expanded kv from position
// j0 of (bi, h) to dst (row r at r·dstride).
func expandRows(dst []float32, dstride int, kv *KV, bi, h, j0, rows, n int) {
	if kv.Rows != nil {
		if rows > 0 {
			kv.Rows.DecodeRows(dst, dstride, bi, h, j0, rows, n)
		}
		return
	}
	quantRows(dst, dstride, kv.Q, bi, h, j0, rows, n)
}

// DenseKV wraps contiguous float32 [b, hk, s, n] values.
func DenseKV(x []float32, hk, s, n int) KV {
	return KV{Vec: F32Vec(x), BStride: hk * s * n, HStride: s * n, RowStride: n}
}

// row returns the element offset of (bi, h, j, 0).
func (kv *KV) row(bi, h, j int) int { return bi*kv.BStride + h*kv.HStride + j*kv.RowStride }

// blockInside reports whether the n values of each of the sdpaBK rows of
// plain storage from position j0 of (bi, h) lie inside kv's storage, so
// that a kernel may read a partial block's sdpaBK rows in place: a KV
// cache's rows past its length (its capacity, or the next head's rows) are
// read then, and the scores of those keys are masked by the caller, as
// those of a copy's zero rows are. Each score depends on its own key row
// alone, so the unmasked scores are the copy's bits.
func (kv *KV) blockInside(bi, h, j0, n int) bool {
	return kv.row(bi, h, j0+sdpaBK-1)+n <= kv.Vec.Len()
}

// checkKV panics unless kv holds b·hk rows of s positions of n values.
// (The checks format their messages only when they fail: a decode step
// calls this for every layer.)
func checkKV(kernel, name string, kv *KV, b, hk, s, n int) {
	if kv.Rows != nil {
		return // the source's own (RowSource)
	}
	if kv.Q != nil {
		checkQuantKV(kernel, name, kv.Q, b, hk, s, n)
		return
	}
	if !(kv.BStride >= 0 && kv.HStride >= 0 && kv.RowStride >= n) {
		check(false, kernel, "%s strides batch=%d head=%d row=%d, want >= 0, >= 0 and >= the row length %d", name, kv.BStride, kv.HStride, kv.RowStride, n)
	}
	if kv.Vec.F32 != nil && kv.Vec.U16 != nil {
		check(false, kernel, "%s holds both float32 and 16-bit storage", name)
	}
	if b > 0 {
		need(kernel, name, kv.Vec.Len(), kv.row(b-1, hk-1, s-1)+n)
	}
}

// checkSDPA panics unless the sizes, the slices, K, V and the mask fit.
func checkSDPA(name string, dst, q []float32, k, v *KV, b, h, hk, l, s, d, dv int, m *Mask) {
	if !(b >= 0 && l >= 0 && h > 0 && hk > 0 && s > 0 && d > 0 && dv > 0) {
		check(false, name, "sizes b=%d h=%d hk=%d l=%d s=%d d=%d dv=%d", b, h, hk, l, s, d, dv)
	}
	if h%hk != 0 {
		check(false, name, "%d query heads is not a multiple of %d KV heads", h, hk)
	}
	need(name, "q", len(q), b*h*l*d)
	checkKV(name, "k", k, b, hk, s, d)
	checkKV(name, "v", v, b, hk, s, dv)
	need(name, "dst", len(dst), b*h*l*dv)
	switch m.Kind {
	case MaskNone, MaskCausal:
	case MaskPrefix:
		if l != s || m.Prefix < 0 || m.Prefix > s {
			check(false, name, "prefix mask of prefix %d for %d queries over %d keys", m.Prefix, l, s)
		}
		at := m.Prefix
		for _, e := range m.Ends {
			if e <= at {
				check(false, name, "prefix mask block ends %v after prefix %d are not increasing", m.Ends, m.Prefix)
			}
			at = e
		}
		if at != s {
			check(false, name, "prefix mask block ends %v after prefix %d do not end at %d", m.Ends, m.Prefix, s)
		}
	case MaskBool, MaskAdd:
		for a, st := range m.Strides {
			if st < 0 {
				check(false, name, "mask stride %d is %d, want >= 0", a, st)
			}
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
	case MaskPrefix:
		return m.visible0(i, j), 0
	}
	return true, 0
}

// SDPARef is the reference of [SDPA]: one goroutine, one query row at a time,
// written as the formula with explicit index arithmetic.
func SDPARef(dst, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m Mask, round Rounder, acc Acc) {
	kk, vv := DenseKV(k, hk, s, d), DenseKV(v, hk, s, dv)
	checkSDPA("SDPARef", dst, q, &kk, &vv, b, h, hk, l, s, d, dv, &m)
	if acc == AccF64 {
		sdpaRef[float64](dst, q, k, v, b, h, hk, l, s, d, dv, scale, &m, roundOr(round))
	} else {
		sdpaRef[float32](dst, q, k, v, b, h, hk, l, s, d, dv, scale, &m, roundOr(round))
	}
}

// exp is MLX's float32 exp (mlxmath.Exp, what MLX's CPU softmax uses) for
// float32 and math.Exp for float64.
func exp[A float](x A) A {
	if f, ok := any(x).(float32); ok {
		return A(mlxmath.Exp(f))
	}
	return A(math.Exp(float64(x)))
}

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
// fused Metal kernels (mlx/backend/metal/kernels/sdpa_vector.h): q [b, h, l, d],
// k [b, hk, s, d], v [b, hk, s, dv], dst [b, h, l, dv]; query head hi reads
// KV head hi/(h/hk) (GQA without repeating K and V). For each query row, in
// the accumulator type (float32, or float64 under AccF64):
//
//	score_j = Σ_t (scale·q_t)·k_jt  (+ Add mask)      for visible keys j
//	M       = max_j score_j
//	e_j     = exp(score_j − M)
//	dst     = round(Σ_j e_j·v_j / Σ_j e_j)
//
// exp is MLX's float32 exp (mlxmath.Exp, the polynomial of MLX's CPU
// softmax) under AccF32 and math.Exp under AccF64. Masked keys (causal j >
// i+s−l, Bool false, hidden by MaskPrefix) are skipped. A row whose keys are all masked gets the
// mean of all of v, which is what MLX computes (it fills masked scores with
// the dtype's lowest finite value, so the softmax is uniform); an additive
// mask of all −Inf gives NaN, as in MLX. Scores and probabilities are never
// rounded to the dtype; only the output is.
//
// The float32 form is a blocked online softmax (sdpa_fast.go): it sums in
// its own order (fused multiply-adds on AVX-512, a rescale per block of 32
// keys, a merge per chunk of 256) and is held to SDPARef within the
// rounding bound of that order; a query row's result never depends on the
// other rows of the call, so chunked and one-shot prefill agree bit for
// bit. Work is split across workers by (batch, KV head, block of query
// positions), and by chunks of keys when those are few (decode); scratch
// per worker is a few blocks of 32 rows of K and V plus, per query row of
// its block, d scaled query values, 32 scores and two states of dv
// accumulators. The float64 form computes the formula above one query row
// at a time, in the reference's order.
func SDPA(dst, q, k, v []float32, b, h, hk, l, s, d, dv int, scale float32, m Mask, round Rounder, acc Acc) {
	kk, vv := DenseKV(k, hk, s, d), DenseKV(v, hk, s, dv)
	checkSDPA("SDPA", dst, q, &kk, &vv, b, h, hk, l, s, d, dv, &m)
	sdpaKV(dst, q, &kk, &vv, b, h, hk, l, s, d, dv, scale, &m, roundOr(round), acc)
}

// SDPAKV is [SDPA] with keys and values read in place through strides and in
// their storage dtype (a bf16 or f16 KV cache is converted a few rows at a
// time, never as a whole; a quantized one, [QuantKV], is expanded a block
// of 32 rows at a time to the float32 values its definition gives, and a
// [RowSource] is asked for blocks of 32 rows likewise, so the result is bit
// for bit SDPAKV on those values in float32 storage): k
// holds [b, hk, ≥s, d] and v [b, hk, ≥s, dv] as described by [KV];
// positions 0..s-1 are used.
func SDPAKV(dst, q []float32, k, v KV, b, h, hk, l, s, d, dv int, scale float32, m Mask, round Rounder, acc Acc) {
	checkSDPA("SDPAKV", dst, q, &k, &v, b, h, hk, l, s, d, dv, &m)
	sdpaKV(dst, q, &k, &v, b, h, hk, l, s, d, dv, scale, &m, roundOr(round), acc)
}

// SDPAKVRows is SDPAKV over the rows of q ([B, H, L, D], B = len(ks)) when
// each row has keys and values of its own: row r attends to ks[r] and vs[r]
// (plain storage, Vec only: one batch entry of lens[r] positions) under
// mask m (MaskNone or MaskCausal, applied to each row as to a call of its
// own), into dst [B, H, L, Dv]. Row r's output is bit for bit SDPAKV's on
// row r alone; the rows share one parallel pass (a batch's decode step
// over per-row caches, where each row alone is a few microseconds of work).
func SDPAKVRows(dst, q []float32, ks, vs []KV, lens []int, h, hk, l, d, dv int, scale float32, m Mask, round Rounder, acc Acc) {
	B := len(ks)
	check(len(vs) == B && len(lens) == B, "SDPAKVRows", "%d keys, %d values and %d lengths", B, len(vs), len(lens))
	check(m.Kind == MaskNone || m.Kind == MaskCausal, "SDPAKVRows", "mask kind %d, want none or causal", m.Kind)
	need("SDPAKVRows", "q", len(q), B*h*l*d)
	need("SDPAKVRows", "dst", len(dst), B*h*l*dv)
	for r := range B {
		check(ks[r].Q == nil && ks[r].Rows == nil && vs[r].Q == nil && vs[r].Rows == nil, "SDPAKVRows", "row %d: keys and values must be plain storage", r)
		qr, dr := q[r*h*l*d:(r+1)*h*l*d], dst[r*h*l*dv:(r+1)*h*l*dv]
		checkSDPA("SDPAKVRows", dr, qr, &ks[r], &vs[r], 1, h, hk, l, lens[r], d, dv, &m)
	}
	if B == 0 || l == 0 {
		return
	}
	round = roundOr(round)
	if acc == AccF64 {
		for r := range B {
			sdpaKV(dst[r*h*l*dv:], q[r*h*l*d:], &ks[r], &vs[r], 1, h, hk, l, lens[r], d, dv, scale, &m, round, acc)
		}
		return
	}
	jobs, slab := make([]*sdpaJob, B), make([]sdpaJob, B)
	for r := range B {
		jobs[r] = &slab[r]
		jobs[r].init(dst[r*h*l*dv:(r+1)*h*l*dv], q[r*h*l*d:(r+1)*h*l*d], &ks[r], &vs[r], 1, h, hk, l, lens[r], d, dv, scale, &m, round, acc)
	}
	sdpa32Rows(jobs)
}

// sdpaKV runs the float64 or the float32 form on a validated call.
func sdpaKV(dst, q []float32, k, v *KV, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder, acc Acc) {
	if acc == AccF64 {
		// Copies, so that only this path moves them to the heap.
		kc, vc, mc := *k, *v, *m
		sdpa[float64](dst, q, &kc, &vc, b, h, hk, l, s, d, dv, scale, &mc, round)
	} else {
		sdpa32(dst, q, k, v, b, h, hk, l, s, d, dv, scale, m, round, acc)
	}
}

// kvRow returns the n values of (bi, kh, j): a slice of float32 storage, or
// converted (or dequantized) into buf.
func kvRow(kv *KV, bi, kh, j, n int, buf []float32) []float32 {
	if kv.expanded() {
		expandRows(buf, n, kv, bi, kh, j, 1, n)
		return buf[:n]
	}
	o := kv.row(bi, kh, j)
	if kv.Vec.F32 != nil {
		return kv.Vec.F32[o : o+n]
	}
	kv.Vec.load(buf[:n], o)
	return buf[:n]
}

// sdpa is the AccF64 form (A = float64): the reference's loop split over
// query rows, reading K and V through kvRow (scratch per worker: s scores,
// d scaled query values, dv accumulators and one converted row).
func sdpa[A float](dst, q []float32, k, v *KV, b, h, hk, l, s, d, dv int, scale float32, m *Mask, round Rounder) {
	rep := h / hk
	parallelFor(b*h*l, max(1, 16384/(s*(d+dv))), func(lo, hi int) {
		score := make([]A, s)
		seen := make([]bool, s)
		qs := make([]A, d)
		out := make([]A, dv)
		buf := make([]float32, max(d, dv))
		for row := lo; row < hi; row++ {
			i, bh := row%l, row/l
			bi, hh := bh/h, bh%h
			kh := hh / rep
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
				kr := kvRow(k, bi, kh, j, d, buf)
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
				for t, x := range kvRow(v, bi, kh, j, dv, buf) {
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
