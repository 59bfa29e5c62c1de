package conformance

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// Result is the verdict on one output of one case on one backend.
type Result struct {
	Case    string  `json:"case"`
	Backend string  `json:"backend"`
	Output  string  `json:"output"`
	Metric  string  `json:"metric"`           // what was measured, e.g. "max_abs", "ref_max_abs", "exact"
	Value   float64 `json:"value"`            // the measured value
	Budget  float64 `json:"budget"`           // the largest value allowed
	Index   int     `json:"index"`            // flat index of the worst element (-1 if none)
	Got     float64 `json:"got"`              // our value there
	Want    float64 `json:"want"`             // the oracle's value there
	Pass    bool    `json:"pass"`             //
	Detail  string  `json:"detail,omitempty"` // extra facts or the error
}

func (r Result) String() string {
	status := "ok  "
	if !r.Pass {
		status = "FAIL"
	}
	s := fmt.Sprintf("%s %s [%s] %s: %s=%.4g (budget %.4g)", status, r.Case, r.Backend, r.Output, r.Metric, r.Value, r.Budget)
	if r.Index >= 0 {
		s += fmt.Sprintf(" worst at %d: got %.9g, want %.9g", r.Index, r.Got, r.Want)
	}
	if r.Detail != "" {
		s += " — " + r.Detail
	}
	return s
}

// failure builds a failed Result carrying an error.
func failure(caseName, backendName, output string, err error) Result {
	return Result{Case: caseName, Backend: backendName, Output: output, Metric: "error", Index: -1, Detail: err.Error()}
}

// compare holds got to want (and, when present, to the float64 reference ref)
// under budget b. Checks run in ggml's order: shape and dtype, NaN, Inf, then
// the metric.
func compare(caseName, backendName, output string, got, want, ref *tensor.Dense, b Budget) Result {
	r := Result{Case: caseName, Backend: backendName, Output: output, Index: -1}
	if !got.Shape.Equal(want.Shape) {
		r.Metric = "shape"
		r.Detail = fmt.Sprintf("got shape %v, want %v", got.Shape, want.Shape)
		return r
	}
	if got.DType != want.DType {
		r.Metric = "dtype"
		r.Detail = fmt.Sprintf("got dtype %v, want %v", got.DType, want.DType)
		return r
	}
	g, w := got.ToFloat64(), want.ToFloat64()
	for i := range g {
		gn, wn := math.IsNaN(g[i]), math.IsNaN(w[i])
		if gn != wn {
			r.Metric, r.Index, r.Got, r.Want = "nan", i, g[i], w[i]
			r.Detail = "NaN in one output only"
			return r
		}
		if gi, wi := math.IsInf(g[i], 0), math.IsInf(w[i], 0); (gi || wi) && g[i] != w[i] {
			r.Metric, r.Index, r.Got, r.Want = "inf", i, g[i], w[i]
			r.Detail = "infinity disagrees"
			return r
		}
	}
	finite := func(i int) bool { return !math.IsNaN(w[i]) && !math.IsInf(w[i], 0) }

	if b.Exact && got.DType.IsFloat() {
		// Bit for bit: -0 and +0 differ, as do NaN payloads.
		r.Metric, r.Budget = "bit_mismatches", 0
		n := got.DType.Size()
		for i := range g {
			if string(got.Data[i*n:(i+1)*n]) != string(want.Data[i*n:(i+1)*n]) {
				if r.Index < 0 {
					r.Index, r.Got, r.Want = i, g[i], w[i]
				}
				r.Value++
			}
		}
		r.Pass = r.Value == 0
		return r
	}
	if b.Exact || !got.DType.IsFloat() {
		r.Metric, r.Budget = "mismatches", 0
		for i := range g {
			if g[i] != w[i] && !(math.IsNaN(g[i]) && math.IsNaN(w[i])) {
				if r.Index < 0 {
					r.Index, r.Got, r.Want = i, g[i], w[i]
				}
				r.Value++
			}
		}
		r.Pass = r.Value == 0
		return r
	}

	if ref != nil && b.RefFactor > 0 {
		// Held to the float64 reference: our worst error may not exceed
		// RefFactor times the oracle's own worst error, plus one unit in the
		// last place of the output dtype at the largest reference magnitude
		// (both sides round to that dtype, so a tie in accuracy can still
		// land one ulp apart).
		rf := ref.ToFloat64()
		var ours, theirs, scale float64
		for i := range g {
			if !finite(i) {
				continue
			}
			if e := math.Abs(g[i] - rf[i]); e > ours {
				ours, r.Index, r.Got, r.Want = e, i, g[i], w[i]
			}
			theirs = math.Max(theirs, math.Abs(w[i]-rf[i]))
			scale = math.Max(scale, math.Abs(rf[i]))
		}
		r.Metric = "ref_max_abs"
		r.Value = ours
		r.Budget = b.RefFactor*theirs + ulp(scale, got.DType)
		r.Detail = fmt.Sprintf("oracle's own error vs float64: %.3g", theirs)
		r.Pass = ours <= r.Budget
		return r
	}

	// Held to the oracle directly: |got-want| <= Abs + Rel*|want| everywhere.
	r.Metric = "max_abs"
	var worstExcess = math.Inf(-1)
	for i := range g {
		if !finite(i) {
			continue
		}
		d := math.Abs(g[i] - w[i])
		allowed := b.Abs + b.Rel*math.Abs(w[i])
		if d-allowed > worstExcess {
			worstExcess, r.Index, r.Got, r.Want, r.Value, r.Budget = d-allowed, i, g[i], w[i], d, allowed
		}
	}
	r.Pass = worstExcess <= 0
	return r
}

// ulp is the spacing of dt's representable numbers at magnitude x.
func ulp(x float64, dt tensor.DType) float64 {
	mant := 23
	switch dt {
	case tensor.BF16:
		mant = 7
	case tensor.F16:
		mant = 10
	case tensor.F64:
		mant = 52
	}
	if x == 0 {
		return 0
	}
	_, e := math.Frexp(x)
	return math.Ldexp(1, e-1-mant)
}

// compareKL holds rows of logits (or logprobs), [rows, V], to the oracle's as
// next-token distributions under budget b (b.MaxKL > 0): KL(oracle ‖ ours) in
// nats at most b.MaxKL at every row and b.MeanKL on average (when set),
// and our argmax
// equal to the oracle's at every row where the oracle's top-2 margin exceeds
// b.ArgmaxMargin. Value is the worst row's KL, Index the flat index of the
// first disagreeing argmax that counts (else -1).
func compareKL(caseName, backendName, output string, got, want *tensor.Dense, b Budget) Result {
	r := Result{Case: caseName, Backend: backendName, Output: output, Metric: "kl_max", Budget: b.MaxKL, Index: -1}
	if !got.Shape.Equal(want.Shape) || len(want.Shape) != 2 || want.Shape[1] < 2 {
		r.Metric = "shape"
		r.Detail = fmt.Sprintf("got shape %v, want %v, [rows, V] with V >= 2", got.Shape, want.Shape)
		return r
	}
	g, w := got.ToFloat64(), want.ToFloat64()
	rows, v := want.Shape[0], want.Shape[1]
	var sum float64
	agree, clear, misses := 0, 0, 0
	for i := range rows {
		gr, wr := g[i*v:(i+1)*v], w[i*v:(i+1)*v]
		kl := tensor.KLDivergence(wr, gr)
		sum += kl
		if !(kl <= r.Value) { // NaN sticks
			r.Value = kl
		}
		gi, wi := argmax(gr), argmax(wr)
		if gi == wi {
			agree++
		}
		if top2Margin(wr) > b.ArgmaxMargin {
			clear++
			if gi != wi {
				misses++
				if r.Index < 0 {
					r.Index, r.Got, r.Want = i*v+gi, gr[gi], wr[gi]
				}
			}
		}
	}
	mean := sum / float64(rows)
	r.Pass = r.Value <= b.MaxKL && (b.MeanKL == 0 || mean <= b.MeanKL) && misses == 0
	r.Detail = fmt.Sprintf("KL mean %.3g (budget %.3g) over %d rows; argmax agrees at %d of %d rows, %d of %d with oracle margin > %g",
		mean, b.MeanKL, rows, agree, rows, clear-misses, clear, b.ArgmaxMargin)
	return r
}

// argmax is the index of the largest value, ties to the smaller index.
func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
