package debug

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/mlxgo/mlxgo/tensor"
)

// Num is a float64 that marshals to JSON as a number, or as the string
// "inf", "-inf" or "nan".
type Num float64

// MarshalJSON writes n, with non-finite values as strings.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	switch {
	case math.IsNaN(f):
		return []byte(`"nan"`), nil
	case math.IsInf(f, 1):
		return []byte(`"inf"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-inf"`), nil
	}
	return json.Marshal(f)
}

// Element is one element of a tap: its coordinates and both values.
type Element struct {
	Index []int  `json:"index"`
	A     Num    `json:"a"`
	B     Num    `json:"b"`
	Abs   Num    `json:"abs_diff"`
	ULPs  uint64 `json:"ulps"`
}

// TapStat is the comparison of one tap, A against B (B is the reference of
// the relative metrics).
type TapStat struct {
	Name   string `json:"name"`
	Class  string `json:"class"`
	Layer  int    `json:"layer"` // -1 for embed, norm and logits
	DType  string `json:"dtype"` // the dtype the ULPs count in
	Shape  []int  `json:"shape"`
	MaxAbs Num    `json:"max_abs"`
	MaxRel Num    `json:"max_rel"` // |a-b| / max(|b|, RelFloor·max|b|)
	Scale  Num    `json:"scale"`   // max |b|
	// NormErr is MaxAbs / Scale, the quantity the tolerance bounds.
	NormErr Num       `json:"norm_err"`
	ULP50   uint64    `json:"ulp_p50"`
	ULP99   uint64    `json:"ulp_p99"`
	ULPMax  uint64    `json:"ulp_max"`
	Cosine  Num       `json:"cosine"`
	Limit   Num       `json:"limit"` // bound on NormErr; 0 with Exact
	Exact   bool      `json:"exact"` // bit-identical required
	Pass    bool      `json:"pass"`
	Error   string    `json:"error,omitempty"` // shapes differ, tap missing on one side
	Worst   []Element `json:"worst"`
}

// RelFloor: MaxRel divides by max(|b|, RelFloor·max|b|), so elements near
// zero do not dominate it.
const RelFloor = 1e-3

// CompareOptions tune Compare.
type CompareOptions struct {
	// Exact requires bit-identical taps (two runs of the same
	// implementation); otherwise the per-class table (ToleranceFor) applies.
	Exact bool
	// Worst is how many worst elements to keep per tap (default 5).
	Worst int
}

// Report is a whole comparison.
type Report struct {
	Checkpoint string    `json:"checkpoint"`
	PromptIDs  []int32   `json:"prompt_ids"`
	A          Meta      `json:"a"`
	B          Meta      `json:"b"`
	ALabel     string    `json:"a_label"`
	BLabel     string    `json:"b_label"`
	Exact      bool      `json:"exact"`
	Taps       []TapStat `json:"taps"`
	// FirstFail is the first tap over its tolerance in graph order ("" when
	// all pass); FirstFailOps are the ops that produce it.
	FirstFail string `json:"first_fail"`
	// Warnings are what the checkpoint loader noticed, per side loaded.
	Warnings     []string `json:"warnings,omitempty"`
	FirstFailOps []string `json:"first_fail_ops"`
	// OnlyA and OnlyB list taps present on one side only.
	OnlyA   []string  `json:"only_a,omitempty"`
	OnlyB   []string  `json:"only_b,omitempty"`
	Replays []*Replay `json:"replays,omitempty"`
}

// Pass reports whether every tap is within tolerance.
func (r *Report) Pass() bool { return r.FirstFail == "" }

// Tap returns the named tap's statistics, or nil.
func (r *Report) Tap(name string) *TapStat {
	for i := range r.Taps {
		if r.Taps[i].Name == name {
			return &r.Taps[i]
		}
	}
	return nil
}

// Compare compares every tap of a with the same tap of b, in graph order.
func Compare(a, b *Dump, opts CompareOptions) *Report {
	if opts.Worst <= 0 {
		opts.Worst = 5
	}
	r := &Report{Checkpoint: a.Meta.Checkpoint, PromptIDs: a.Meta.PromptIDs, A: a.Meta, B: b.Meta,
		ALabel: a.Meta.Label(), BLabel: b.Meta.Label(), Exact: opts.Exact}
	for _, n := range b.Names {
		if a.Taps[n] == nil {
			r.OnlyB = append(r.OnlyB, n)
		}
	}
	for _, n := range a.Names {
		bt := b.Taps[n]
		if bt == nil {
			r.OnlyA = append(r.OnlyA, n)
			continue
		}
		st := CompareTap(n, a.Taps[n], bt, opts)
		r.Taps = append(r.Taps, st)
		if !st.Pass && r.FirstFail == "" {
			r.FirstFail = n
			if steps, err := Steps(n); err == nil {
				for _, s := range steps {
					r.FirstFailOps = append(r.FirstFailOps, s.String())
				}
			}
		}
	}
	return r
}

// lowerPrecision returns the float dtype of a and b with the fewer mantissa
// bits (ULPs are counted in it).
func lowerPrecision(a, b tensor.DType) tensor.DType {
	rank := map[tensor.DType]int{tensor.BF16: 0, tensor.F16: 1, tensor.F32: 2, tensor.F64: 3}
	if rank[b] < rank[a] {
		return b
	}
	return a
}

// CompareTap compares one tap; b is the reference.
func CompareTap(name string, a, b *tensor.Dense, opts CompareOptions) TapStat {
	if opts.Worst <= 0 {
		opts.Worst = 5
	}
	layer, _, _ := ParseTap(name)
	dt := lowerPrecision(a.DType, b.DType)
	st := TapStat{Name: name, Class: Class(name), Layer: layer, DType: dt.String(), Shape: a.Shape, Exact: opts.Exact}
	tol := ToleranceFor(st.Class, dt, opts.Exact)
	st.Limit = Num(tol.NormErr)
	if !a.Shape.Equal(b.Shape) {
		st.Error = fmt.Sprintf("shapes differ: %v vs %v", a.Shape, b.Shape)
		st.MaxAbs, st.MaxRel, st.NormErr, st.Cosine = Num(math.Inf(1)), Num(math.Inf(1)), Num(math.Inf(1)), Num(math.NaN())
		return st
	}
	av, bv := a.ToFloat64(), b.ToFloat64()
	m := metrics(av, bv, dt)
	st.MaxAbs, st.MaxRel, st.Scale, st.NormErr = Num(m.maxAbs), Num(m.maxRel), Num(m.scale), Num(m.normErr)
	st.ULP50, st.ULP99, st.ULPMax, st.Cosine = m.ulp50, m.ulp99, m.ulpMax, Num(m.cosine)
	if opts.Exact {
		st.Pass = m.ulpMax == 0 && m.maxAbs == 0
	} else {
		st.Pass = m.normErr <= tol.NormErr
	}
	st.Worst = worst(av, bv, a.Shape, dt, opts.Worst)
	return st
}

type errMetrics struct {
	maxAbs, maxRel, scale, normErr, cosine float64
	ulp50, ulp99, ulpMax                   uint64
}

func metrics(a, b []float64, dt tensor.DType) errMetrics {
	var m errMetrics
	for _, x := range b {
		if !math.IsInf(x, 0) && !math.IsNaN(x) {
			m.scale = math.Max(m.scale, math.Abs(x))
		}
	}
	m.maxAbs, _ = tensor.MaxAbs(a, b)
	m.maxRel, _ = tensor.MaxRel(a, b, RelFloor*m.scale)
	switch {
	case m.maxAbs == 0:
		m.normErr = 0
	case m.scale == 0:
		m.normErr = math.Inf(1)
	default:
		m.normErr = m.maxAbs / m.scale
	}
	u := tensor.ULPs(a, b, dt)
	sort.Slice(u, func(i, j int) bool { return u[i] < u[j] })
	if n := len(u); n > 0 {
		m.ulp50, m.ulp99, m.ulpMax = u[rank(0.50, n)], u[rank(0.99, n)], u[n-1]
	}
	m.cosine = tensor.Cosine(a, b)
	if m.maxAbs == 0 {
		m.cosine = 1 // identical: not 1 ± an ulp of the sums
	}
	return m
}

// rank is the nearest-rank percentile index: ceil(p·n)-1.
func rank(p float64, n int) int {
	return max(0, min(n-1, int(math.Ceil(p*float64(n)))-1))
}

// worst returns the n elements with the largest |a-b| (NaN against a number
// counts as infinite), largest first, ties to the smaller index.
func worst(a, b []float64, shape tensor.Shape, dt tensor.DType, n int) []Element {
	idx := make([]int, len(a))
	d := make([]float64, len(a))
	for i := range a {
		idx[i] = i
		d[i], _ = tensor.MaxAbs(a[i:i+1], b[i:i+1])
	}
	sort.SliceStable(idx, func(i, j int) bool { return d[idx[i]] > d[idx[j]] })
	var out []Element
	for _, i := range idx[:min(n, len(idx))] {
		if d[i] == 0 {
			break
		}
		out = append(out, Element{Index: coords(i, shape), A: Num(a[i]), B: Num(b[i]), Abs: Num(d[i]), ULPs: tensor.ULPDistance(a[i], b[i], dt)})
	}
	return out
}

// coords converts a row-major flat index to coordinates.
func coords(i int, shape tensor.Shape) []int {
	c := make([]int, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		if shape[k] > 0 {
			c[k] = i % shape[k]
			i /= shape[k]
		}
	}
	return c
}

// formatCoords writes coordinates as "[0,3,5,17]".
func formatCoords(c []int) string {
	s := "["
	for k, v := range c {
		if k > 0 {
			s += ","
		}
		s += strconv.Itoa(v)
	}
	return s + "]"
}
