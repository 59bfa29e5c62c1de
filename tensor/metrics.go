package tensor

import (
	"fmt"
	"math"
	"sort"
)

// The metrics compare a (got) with b (want), element by element. Mismatched
// lengths are a programmer error and panic.
//
// Special values: two NaNs agree (difference 0), as do two equal infinities;
// a NaN against anything else, or an infinity against a different value,
// is an infinite difference. So a NaN where a number was wanted is reported
// as the worst element rather than silently ignored.

func sameLen(fn string, a, b []float64) {
	if len(a) != len(b) {
		panic(fmt.Sprintf("tensor.%s: len(a)=%d, len(b)=%d", fn, len(a), len(b)))
	}
}

// absDiff is |a-b| with the special-value rules above.
func absDiff(a, b float64) float64 {
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn, a == b:
		return 0
	case an || bn:
		return math.Inf(1)
	}
	return math.Abs(a - b) // +Inf when exactly one is infinite or they are opposite infinities
}

// MaxAbs returns the largest |a[i]-b[i]| and the first index where it occurs
// (idx -1 for empty input).
func MaxAbs(a, b []float64) (max float64, idx int) {
	sameLen("MaxAbs", a, b)
	idx = -1
	for i := range a {
		if d := absDiff(a[i], b[i]); idx < 0 || d > max {
			max, idx = d, i
		}
	}
	return max, idx
}

// MaxRel returns the largest |a[i]-b[i]| / max(|b[i]|, floor) and the first
// index where it occurs (idx -1 for empty input). A zero difference counts as
// 0 even when the denominator is 0; a nonzero one over a zero denominator is +Inf.
func MaxRel(a, b []float64, floor float64) (max float64, idx int) {
	sameLen("MaxRel", a, b)
	idx = -1
	for i := range a {
		d := absDiff(a[i], b[i])
		if d != 0 && !math.IsInf(d, 1) {
			d /= math.Max(math.Abs(b[i]), floor) // x/0 = +Inf for x > 0
		}
		if idx < 0 || d > max {
			max, idx = d, i
		}
	}
	return max, idx
}

// roundTo rounds x to dt (F64, F32, F16 or BF16) with a single round to
// nearest even, returning the bits and the width of the format.
func roundTo(x float64, dt DType) (bits uint64, width uint) {
	switch dt {
	case F64:
		return math.Float64bits(x), 64
	case F32:
		return uint64(math.Float32bits(float32(x))), 32
	case F16:
		return uint64(Float32ToF16(float64ToFloat32Odd(x))), 16
	case BF16:
		f := float64ToFloat32Odd(x)
		if f != f {
			return bf16NaN, 16
		}
		return uint64(Float32ToBF16(f)), 16
	}
	panic(fmt.Sprintf("tensor.ULPDistance: dtype %v is not F64, F32, F16 or BF16", dt))
}

// ULPDistance returns how many representable values of dt (F64, F32, F16 or
// BF16) lie between a and b, after rounding each to dt with a single round to
// nearest even from float64 (no double rounding through float32). Adjacent
// values are 1 apart; +0 and -0 are 0 apart; the smallest subnormals of
// opposite sign are 2 apart; ±Inf is 1 beyond the largest finite value.
// NaN: two NaNs are 0 apart and a NaN against anything else is
// math.MaxUint64. It panics for other dtypes.
func ULPDistance(a, b float64, dt DType) uint64 {
	ab, w := roundTo(a, dt)
	bb, _ := roundTo(b, dt)
	an, bn := math.IsNaN(a), math.IsNaN(b)
	switch {
	case an && bn:
		return 0
	case an || bn:
		return math.MaxUint64
	}
	sign := uint64(1) << (w - 1)
	am, bm := ab&^sign, bb&^sign // magnitudes count representable values from 0
	if ab&sign == bb&sign {
		if am > bm {
			return am - bm
		}
		return bm - am
	}
	return am + bm
}

// ULPs returns ULPDistance(a[i], b[i], dt) for every i.
func ULPs(a, b []float64, dt DType) []uint64 {
	sameLen("ULPs", a, b)
	out := make([]uint64, len(a))
	for i := range a {
		out[i] = ULPDistance(a[i], b[i], dt)
	}
	return out
}

// Cosine returns the cosine similarity Σab / (√Σa² √Σb²). Two all-zero vectors
// give 1 (identical); one all-zero vector against a nonzero one gives 0. NaNs
// propagate.
func Cosine(a, b []float64) float64 {
	sameLen("Cosine", a, b)
	var ab, aa, bb float64
	for i := range a {
		ab += a[i] * b[i]
		aa += a[i] * a[i]
		bb += b[i] * b[i]
	}
	switch {
	case aa == 0 && bb == 0:
		return 1
	case aa == 0 || bb == 0:
		return 0
	}
	return ab / (math.Sqrt(aa) * math.Sqrt(bb))
}

// NMSE returns the normalised mean squared error Σ(a-b)² / Σb². When b is all
// zeros it is 0 if a is too and +Inf otherwise. NaNs propagate.
func NMSE(a, b []float64) float64 {
	sameLen("NMSE", a, b)
	var num, den float64
	for i := range a {
		d := a[i] - b[i]
		num += d * d
		den += b[i] * b[i]
	}
	if den == 0 {
		if num == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return num / den
}

// greater orders values for argmax/top-k: NaN is above everything (as numpy's
// argmax returns the first NaN), then the usual order.
func greater(x, y float64) bool {
	if math.IsNaN(x) {
		return !math.IsNaN(y)
	}
	return x > y
}

// argmax returns the smallest index of the largest value (NaN counts as largest).
func argmax(v []float64) int {
	best := 0
	for i := 1; i < len(v); i++ {
		if greater(v[i], v[best]) {
			best = i
		}
	}
	return best
}

// ArgmaxAgree splits a and b into rows×cols row-major matrices and counts the
// rows whose argmax agrees. Ties go to the smallest index; NaN counts as the
// largest value. It panics if rows*cols != len(a) or cols == 0 with rows > 0.
func ArgmaxAgree(a, b []float64, rows, cols int) (agree int) {
	sameLen("ArgmaxAgree", a, b)
	if rows < 0 || cols < 0 || rows*cols != len(a) || (rows > 0 && cols == 0) {
		panic(fmt.Sprintf("tensor.ArgmaxAgree: %d×%d does not match length %d", rows, cols, len(a)))
	}
	for r := 0; r < rows; r++ {
		if argmax(a[r*cols:(r+1)*cols]) == argmax(b[r*cols:(r+1)*cols]) {
			agree++
		}
	}
	return agree
}

// topK returns the indices of the k largest values, ties to the smaller index.
func topK(v []float64, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return greater(v[idx[i]], v[idx[j]]) })
	return idx[:k]
}

// TopKOverlap returns |topk(a) ∩ topk(b)| / k for one row, where topk takes
// the k largest values with ties going to the smaller index and NaN counting
// as largest. It panics unless 1 <= k <= len(a).
func TopKOverlap(a, b []float64, k int) float64 {
	sameLen("TopKOverlap", a, b)
	if k < 1 || k > len(a) {
		panic(fmt.Sprintf("tensor.TopKOverlap: k=%d for a row of %d", k, len(a)))
	}
	in := map[int]bool{}
	for _, i := range topK(a, k) {
		in[i] = true
	}
	n := 0
	for _, i := range topK(b, k) {
		if in[i] {
			n++
		}
	}
	return float64(n) / float64(k)
}

// logSoftmax returns v - logsumexp(v), computed stably as (v-max) - log Σexp(v-max).
func logSoftmax(v []float64) []float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = math.Max(m, x)
	}
	var s float64
	for _, x := range v {
		s += math.Exp(x - m)
	}
	ls := math.Log(s)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = (x - m) - ls // subtract m first: exact for nearby logits, no ulp(|x|) loss
	}
	return out
}

// KLDivergence returns KL(softmax(p) || softmax(q)) = Σ P_i (log P_i - log Q_i)
// for one row of logits p and q, in float64 with log-softmax computed stably.
// Terms with P_i = 0 (logit -Inf or underflow) contribute 0; P_i > 0 where
// Q_i = 0 gives +Inf. NaN logits, or a row that is all -Inf, give NaN. It
// panics on empty input.
func KLDivergence(p, q []float64) float64 {
	sameLen("KLDivergence", p, q)
	if len(p) == 0 {
		panic("tensor.KLDivergence: empty row")
	}
	lp, lq := logSoftmax(p), logSoftmax(q)
	var kl float64
	for i := range lp {
		pi := math.Exp(lp[i])
		if pi == 0 {
			continue
		}
		kl += pi * (lp[i] - lq[i])
	}
	return kl
}
