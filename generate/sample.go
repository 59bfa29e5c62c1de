package generate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/mlxgo/mlxgo/internal/mlxmath"
	"github.com/mlxgo/mlxgo/tensor"
)

// SamplerOptions are mlx_lm's make_sampler arguments. The zero value is greedy
// decoding. Parameters are float64 because mlx_lm's are Python floats: each
// is converted to float32 and then rounded to the logprobs dtype at the point
// where MLX would meet it with an array (a weakly typed scalar).
type SamplerOptions struct {
	// Temp is the temperature; 0 selects greedy (argmax) decoding.
	Temp float64
	// TopP enables nucleus filtering when 0 < TopP < 1.
	TopP float64
	// MinP enables min-p filtering when non-zero; it must lie in [0, 1].
	MinP float64
	// MinTokensToKeep is how many top tokens min-p never removes; 0 means 1.
	MinTokensToKeep int
	// TopK keeps only the K most likely tokens when K > 0 (K < vocabulary).
	TopK int
	// XTCProbability enables XTC when > 0. XTC is not implemented: a
	// positive value makes NewSampler fail.
	XTCProbability float64
	// XTCThreshold is XTC's probability threshold (mlx_lm's default 0.1).
	XTCThreshold float64
	// Seed seeds the random state as mx.random.seed(Seed) does.
	Seed uint64
}

// Sampler turns a row of log-probabilities into a token, as the sampler
// make_sampler returns does: greedy argmax at temperature 0, otherwise the
// fixed chain top-p → min-p → top-k followed by categorical sampling of
// logprobs·(1/temp). It runs on the host over one [V] row (see the package
// doc), emulating MLX's dtype arithmetic. A Sampler is not safe for
// concurrent use: it owns its random state.
type Sampler struct {
	opts SamplerOptions
	rng  *RNG
}

// NewSampler validates o and returns a sampler seeded with o.Seed.
func NewSampler(o SamplerOptions) (*Sampler, error) {
	if o.Temp < 0 || math.IsNaN(o.Temp) || math.IsInf(o.Temp, 0) {
		return nil, fmt.Errorf("sampler: temp is %v, want a finite value >= 0 (0 = greedy)", o.Temp)
	}
	if o.MinTokensToKeep == 0 {
		o.MinTokensToKeep = 1
	}
	if o.Temp != 0 {
		if o.MinP != 0 && !(o.MinP >= 0 && o.MinP <= 1) {
			return nil, fmt.Errorf("sampler: min_p is %v, want a value in [0, 1]", o.MinP)
		}
		if o.MinTokensToKeep < 1 {
			return nil, fmt.Errorf("sampler: min_tokens_to_keep is %d, want a positive integer", o.MinTokensToKeep)
		}
		if o.TopK < 0 {
			return nil, fmt.Errorf("sampler: top_k is %d, want 0 (off) or a positive integer", o.TopK)
		}
		if o.XTCProbability > 0 {
			return nil, errors.New("sampler: XTC sampling (xtc_probability > 0) is not implemented by mlxgo")
		}
	}
	return &Sampler{opts: o, rng: NewRNG(o.Seed)}, nil
}

// Greedy reports whether the sampler is plain argmax (temperature 0). A
// greedy sampler consumes no random numbers.
func (s *Sampler) Greedy() bool { return s.opts.Temp == 0 }

// Sample returns the token for one row of log-probabilities whose values are
// exactly representable in dt (the model's logits dtype: BF16, F16 or F32).
// lp is not modified.
func (s *Sampler) Sample(lp []float32, dt tensor.DType) (int32, error) {
	if err := checkRow(lp, dt); err != nil {
		return 0, err
	}
	if s.Greedy() {
		return int32(Argmax(lp)), nil
	}
	return s.draw(lp, dt, s.rng.Next())
}

// checkRow is Sample's check of its row.
func checkRow(lp []float32, dt tensor.DType) error {
	if len(lp) == 0 {
		return errors.New("sampler: empty logprobs row")
	}
	if rounder(dt) == nil {
		return fmt.Errorf("sampler: logprobs dtype %v, want BF16, F16 or F32", dt)
	}
	return nil
}

// draw is Sample's non-greedy path on a checked row with the random key
// already taken from the sampler's state (the batch generator takes the
// keys of its rows in row order, then draws the rows in parallel).
func (s *Sampler) draw(lp []float32, dt tensor.DType, key [2]uint32) (int32, error) {
	return s.drawIn(append([]float32(nil), lp...), dt, key)
}

// drawIn is draw on a row it may overwrite (a copy of the caller's, or a
// batch row nobody reads after the draw): the filters work in place.
func (s *Sampler) drawIn(x []float32, dt tensor.DType, key [2]uint32) (int32, error) {
	o := s.opts
	if 0 < o.TopP && o.TopP < 1 {
		if !topP16(x, o.TopP, dt) {
			ApplyTopP(x, o.TopP)
		}
	}
	if o.MinP != 0 {
		ApplyMinP(x, o.MinP, o.MinTokensToKeep, dt)
	}
	if o.TopK > 0 {
		if o.TopK >= len(x) {
			return 0, fmt.Errorf("sampler: top_k is %d, want an integer in (0, %d) for this vocabulary", o.TopK, len(x))
		}
		ApplyTopK(x, o.TopK)
	}
	ScaleTemp(x, o.Temp, dt)
	return int32(categoricalIn(x, x, key)), nil
}

// Argmax returns the index of the largest value, the smallest index on ties
// (MLX's argmax rule; mlx_lm's greedy sampler). NaNs never win, except a
// NaN first value, which nothing beats (index 0). The largest value is found
// first (rowMax), then its first index.
func Argmax(x []float32) int {
	if len(x) == 0 || x[0] != x[0] {
		return 0
	}
	best := rowMax(x)
	i := 0
	if vecIndex != nil {
		var found bool
		if i, found = vecIndex(x, best); found {
			return i
		}
	}
	for ; i < len(x); i++ {
		if x[i] == best {
			return i
		}
	}
	return 0
}

// rowMax is the largest value of x other than NaNs, x[0] not being one: in
// four independent running maxima (each lane of them with AVX-512), the
// value x[Argmax(x)] (the maximum of a set whatever the order; of two
// zeros either, which compare equal).
func rowMax(x []float32) float32 {
	m0 := x[0]
	i := 0
	if vecMax != nil {
		m0, i = vecMax(x, m0)
	}
	m1, m2, m3 := m0, m0, m0
	for ; i+4 <= len(x); i += 4 {
		w := x[i : i+4 : i+4]
		if w[0] > m0 {
			m0 = w[0]
		}
		if w[1] > m1 {
			m1 = w[1]
		}
		if w[2] > m2 {
			m2 = w[2]
		}
		if w[3] > m3 {
			m3 = w[3]
		}
	}
	for ; i < len(x); i++ {
		if x[i] > m0 {
			m0 = x[i]
		}
	}
	for _, v := range [...]float32{m1, m2, m3} {
		if v > m0 {
			m0 = v
		}
	}
	return m0
}

// Vector forms of the sampler's row scans (sample_simd_amd64.go), nil where
// the CPU or the build has none. vecMax continues the running maximum m
// (NaNs never win) over the longest multiple of 16 values of x and returns
// it and how many values it read; vecIndex returns the first index in the
// longest multiple of 16 values of x whose value equals v, and whether it
// found one (if not, the index the caller's scan goes on from); vecSub
// writes dst[i] = src[i] − m (float32) over the longest multiple of 16
// values and returns how many.
var (
	vecMax   func(x []float32, m float32) (float32, int)
	vecIndex func(x []float32, v float32) (int, bool)
	vecSub   func(dst, src []float32, m float32) int
	// vecMaskBelow sets the values below t to −Inf over the longest
	// multiple of 16 values of x and returns how many it read.
	vecMaskBelow func(x []float32, t float32) int
)

var negInf = float32(math.Inf(-1))

// ApplyTopP is mlx_lm's apply_top_p on one row, in place: sort ascending,
// p = exp(float32(sorted)) (MLX's CPU exp), the exclusive reverse cumulative
// sum "mass above" in float32 (sequential, from the end), total = mass[0] +
// p[0]; the number of dropped tokens d counts mass ≥ float32(topP)·total, and
// every value below sorted[d] becomes −Inf (ties with the threshold stay).
// The comparisons are on the original dtype's values, so no rounding occurs.
func ApplyTopP(x []float32, topP float64) {
	n := len(x)
	sorted := append([]float32(nil), x...)
	slices.Sort(sorted) // ascending (a row with NaNs has no defined order, here or in MLX)
	p := make([]float32, n)
	mlxmath.ExpSlice(p, sorted)
	mass := make([]float32, n)
	for i := n - 2; i >= 0; i-- {
		mass[i] = mass[i+1] + p[i+1]
	}
	total := mass[0] + p[0]
	thr := float32(topP) * total
	d := 0
	for _, m := range mass {
		if m >= thr {
			d++
		}
	}
	if d >= n {
		// Only when every probability underflows to 0: MLX would read past
		// the end; we leave the row unchanged.
		return
	}
	maskBelow(x, sorted[d])
}

// maskBelow sets every value of x below t to −Inf (NaNs, below nothing,
// stay), 16 values at a time where vecMaskBelow runs.
func maskBelow(x []float32, t float32) {
	i := 0
	if vecMaskBelow != nil {
		i = vecMaskBelow(x, t)
	}
	for ; i < len(x); i++ {
		if x[i] < t {
			x[i] = negInf
		}
	}
}

// countsPool holds topP16's histograms (256 KiB each), shared by the
// samplers of every sequence rather than kept by each.
var countsPool = sync.Pool{New: func() any { return new([1 << 16]int32) }}

// topP16 is ApplyTopP for a row whose values are bfloat16 or float16 (dt),
// with the same result, reporting false for other dtypes (the caller then
// runs ApplyTopP). Instead of sorting the row it counts each of the at
// most 65,536 values, then walks them from the largest down: once adding
// every position's exp in that order gives the total (the same float32
// sums in the same order as the sorted row's), and again, from the top,
// until the mass above a position reaches float32(topP)·total, which
// finds sorted[d] without the sort (equal values are interchangeable).
func topP16(x []float32, topP float64, dt tensor.DType) bool {
	var bits func(float32) uint16
	var value func(uint16) float32
	switch dt {
	case tensor.BF16:
		bits = func(v float32) uint16 { return uint16(math.Float32bits(v) >> 16) }
		value = tensor.BF16ToFloat32
	case tensor.F16:
		bits, value = tensor.Float32ToF16, tensor.F16ToFloat32
	default:
		return false
	}
	// key orders the 16-bit patterns as their values (sign-magnitude to
	// unsigned): negatives reversed below the positives. NaNs take keys
	// of their own, as they take places of their own in a sort.
	key := func(b uint16) uint16 {
		if b&0x8000 != 0 {
			return ^b
		}
		return b | 0x8000
	}
	unkey := func(k uint16) uint16 {
		if k&0x8000 != 0 {
			return k &^ 0x8000
		}
		return ^k
	}
	buf := countsPool.Get().(*[1 << 16]int32)
	defer countsPool.Put(buf)
	counts := buf[:]
	clear(counts)
	for _, v := range x {
		counts[key(bits(v))]++
	}
	var total float32
	for k := len(counts) - 1; k >= 0; k-- {
		if c := counts[k]; c > 0 {
			q := mlxmath.Exp(value(unkey(uint16(k))))
			for range c {
				total += q
			}
		}
	}
	thr := float32(topP) * total
	// From the top: position i's mass is what was added before it. The
	// first position (from the top) whose mass reaches thr is d − 1, so
	// sorted[d] is the value of the position before it; d = n (the top
	// position itself) leaves the row unchanged, as ApplyTopP does.
	var mass float32
	var above float32 // the value of the position before, in this walk
	first := true
	for k := len(counts) - 1; k >= 0; k-- {
		c := counts[k]
		if c == 0 {
			continue
		}
		v := value(unkey(uint16(k)))
		q := mlxmath.Exp(v)
		for range c {
			if mass >= thr {
				if first {
					return true
				}
				maskBelow(x, above)
				return true
			}
			mass += q
			above, first = v, false
		}
	}
	// No position's mass reached thr: d = 0 and t = sorted[0], which masks nothing.
	return true
}

// ApplyMinP is mlx_lm's apply_min_p on one row, in place: the threshold
// max(x) + ln(minP) is computed in dt (ln(minP) rounded to dt as a weakly
// typed scalar, the sum rounded to dt), values below it become −Inf, except
// the keep largest values when keep > 1. MLX picks those with argpartition,
// whose choice among equal values is unspecified; here ties go to the
// smallest index.
func ApplyMinP(x []float32, minP float64, keep int, dt tensor.DType) {
	round := rounder(dt)
	top := x[Argmax(x)]
	thr := round(top + round(float32(math.Log(minP))))
	if keep <= 1 {
		maskBelow(x, thr)
		return
	}
	kept := map[int]bool{}
	for _, i := range topIndices(x, keep) {
		kept[i] = true
	}
	for i, v := range x {
		if v < thr && !kept[i] {
			x[i] = negInf
		}
	}
}

// ApplyTopK is mlx_lm's apply_top_k on one row, in place: every value outside
// the k largest becomes −Inf. MLX chooses among equal values at the boundary
// by argpartition (unspecified); here ties go to the smallest index.
// k must be in (0, len(x)).
func ApplyTopK(x []float32, k int) {
	keep := make([]bool, len(x))
	for _, i := range topIndices(x, k) {
		keep[i] = true
	}
	for i := range x {
		if !keep[i] {
			x[i] = negInf
		}
	}
}

// topIndices returns the indices of the k largest values, ties to the smaller index.
func topIndices(x []float32, k int) []int {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return x[idx[a]] > x[idx[b]] })
	return idx[:min(k, len(idx))]
}

// ScaleTemp multiplies the row by 1/temp in place as categorical_sampling
// does: 1/temp is a Python float, rounded to float32 and then to dt (weakly
// typed), and each product is rounded to dt.
func ScaleTemp(x []float32, temp float64, dt tensor.DType) {
	round := rounder(dt)
	inv := round(float32(1 / temp))
	// The rounding called directly (inlined) where the dtype is known: a
	// vocabulary-long row per sampled token (49152 bf16 values, Zen 4: 94
	// -> 61 us against the call through round).
	switch dt {
	case tensor.BF16:
		i := 0
		if scaleBF16 != nil {
			i = scaleBF16(x, inv)
		}
		for ; i < len(x); i++ {
			x[i] = tensor.RoundBF16(x[i] * inv)
		}
	case tensor.F16:
		i := 0
		if scaleF16 != nil {
			i = scaleF16(x, inv)
		}
		for ; i < len(x); i++ {
			x[i] = tensor.RoundF16(x[i] * inv)
		}
	default:
		for i, v := range x {
			x[i] = round(v * inv)
		}
	}
}

// scaleBF16, where the build and the CPU have vector code for it
// (scaletemp_simd_amd64.go), does ScaleTemp's bfloat16 loop over a prefix
// of x, the same bits, and returns its length.
var scaleBF16 func(x []float32, inv float32) int

// scaleF16 is scaleBF16 for float16 rounding (tensor.RoundF16), nil where
// there is none.
var scaleF16 func(x []float32, inv float32) int

// Categorical draws one index from the distribution softmax(logits) with the
// given key, as mx.random.categorical does for a single row since mlx 0.32.1
// (random.cpp categorical_inverse_cdf), in float32 with MLX's CPU exp and
// sequential sums: m = max(x); w = exp(x − m) (or w = [x == m] when m is
// ±Inf); cdf = exclusive cumulative sum of w; u = uniform(key)·sum(w); the
// result is the largest i with cdf[i] ≤ u (searchsorted right, minus one).
func Categorical(logits []float32, key [2]uint32) int {
	return categoricalIn(make([]float32, len(logits)), logits, key)
}

// categoricalIn is Categorical with cdf (len(logits)) for the cumulative
// weights; cdf may be logits itself, which is then overwritten.
func categoricalIn(cdf, logits []float32, key [2]uint32) int {
	sum := categoricalCDF(cdf, logits)
	u := Uniform(key, 1)[0] * sum
	return sort.Search(len(cdf), func(i int) bool { return cdf[i] > u }) - 1
}

// categoricalCDF writes Categorical's exclusive cumulative weights to cdf
// (which may be logits) and returns their sum (a sequential float32 sum,
// as MLX's CPU reduction on x86 does).
func categoricalCDF(cdf, logits []float32) (sum float32) {
	m := logits[0]
	if m == m { // x[Argmax(x)]: a NaN first value wins
		m = rowMax(logits)
	}
	if math.IsInf(float64(m), 0) { // w = [x == m]
		for i, v := range logits {
			cdf[i] = sum
			if v == m {
				sum++
			}
		}
		return sum
	}
	// w = exp(x − m) for the whole row first (mlxmath.ExpSlice, Exp's
	// bits), then the sequential exclusive sum in place.
	i := 0
	if vecSub != nil {
		i = vecSub(cdf, logits, m)
	}
	for ; i < len(logits); i++ {
		cdf[i] = logits[i] - m
	}
	mlxmath.ExpSlice(cdf, cdf)
	for i, w := range cdf {
		cdf[i] = sum
		sum += w
	}
	return sum
}
