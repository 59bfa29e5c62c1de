package conformance

import (
	"fmt"
	"math"
	"sort"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// runner computes a case's outputs on a backend from its input arrays.
type runner func(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error)

// runners maps an op (kind "op") or phase (kind "model", prefixed "model:")
// to the code that runs it. ops.go, sampling.go and model.go fill it.
var runners = map[string]runner{}

func register(op string, r runner) {
	if _, dup := runners[op]; dup {
		panic("conformance: two runners for " + op)
	}
	runners[op] = r
}

// Supported lists the ops and phases this build can run, sorted.
func Supported() []string {
	var out []string
	for k := range runners {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func runnerKey(c *Case) string {
	if c.Kind == "model" {
		return "model:" + c.Op
	}
	return c.Op
}

// Check runs case c on backend b and holds every output to the oracle under
// the case's tolerance. It never panics on a backend bug: an *OpError (or a
// case the build cannot run) comes back as a failed Result.
func Check(b backend.Backend, c *Case) []Result { return CheckAs(b, c, nil) }

// CheckAs is Check with the tolerance classes of the case's outputs renamed
// through classes (the case's class -> the class to hold the output to;
// classes not in the map stay): for a backend or a test held to other rows
// of the table than the ones the fixture names, such as the CPU backend's
// "fast" precision, judged by KL divergence ("fast_logits") rather than per
// logit. Renaming to InfoClass skips an output.
//
// Before running, the case is validated (Validate, and its arrays file against its
// manifest); a panic anywhere in running or comparing it becomes a failure naming the case.
// A case that checks no output is a failure too: it would pass on nothing.
func CheckAs(b backend.Backend, c *Case, classes map[string]string) (results []Result) {
	name := b.Name()
	defer func() {
		if r := recover(); r != nil {
			results = []Result{failure(c.Name, name, "*", fmt.Errorf("conformance: case %s (%s) panicked: %v", c.Name, c.Path, r))}
		}
	}()
	run, ok := runners[runnerKey(c)]
	if !ok {
		return []Result{failure(c.Name, name, "*", fmt.Errorf("no runner for %s op %q in this build", c.Kind, c.Op))}
	}
	if err := Validate(c); err != nil {
		return []Result{failure(c.Name, name, "*", err)}
	}
	arrs, err := c.OpenArrays()
	if err != nil {
		return []Result{failure(c.Name, name, "*", err)}
	}
	defer arrs.Close()
	if err := validateArrays(c, arrs); err != nil {
		return []Result{failure(c.Name, name, "*", err)}
	}

	var got map[string]*tensor.Dense
	err = b.Do(func() (err error) {
		defer backend.Recover(&err)
		s := b.Scope()
		defer s.Close()
		got, err = run(b, c, arrs)
		return err
	})
	if err != nil {
		return []Result{failure(c.Name, name, "*", err)}
	}
	for _, out := range c.Outputs {
		class := c.ToleranceOf(out)
		if to, ok := classes[class]; ok {
			class = to
		}
		if class == InfoClass {
			continue // a fact about the oracle's run, not an output to reproduce
		}
		budget, err := budgetFor(b.OracleExact(), class, c.DType)
		if err != nil {
			results = append(results, failure(c.Name, name, out, err))
			continue
		}
		want, err := arrs.Output(out)
		if err != nil {
			results = append(results, failure(c.Name, name, out, err))
			continue
		}
		g, ok := got[out]
		if !ok {
			results = append(results, failure(c.Name, name, out, fmt.Errorf("runner produced no output %q", out)))
			continue
		}
		var ref *tensor.Dense
		if contains(c.References, out) {
			if ref, err = arrs.Reference(out); err != nil {
				results = append(results, failure(c.Name, name, out, err))
				continue
			}
		}
		if budget.MaxKL > 0 {
			results = append(results, compareKL(c.Name, name, out, g, want, budget))
			continue
		}
		if budget.TokensUntilNoise {
			results = append(results, compareTokensUntilNoise(c, name, out, g, want, arrs))
			continue
		}
		results = append(results, compare(c.Name, name, out, g, want, ref, budget))
	}
	if len(results) == 0 {
		return []Result{failure(c.Name, name, "*", fmt.Errorf("conformance: case %s checks no output (every output is %s)", c.Name, InfoClass))}
	}
	return results
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// host brings arrays back from the backend, keyed by output name.
func host(b backend.Backend, outs map[string]backend.Array) (map[string]*tensor.Dense, error) {
	arrays := make([]backend.Array, 0, len(outs))
	for _, a := range outs {
		arrays = append(arrays, a)
	}
	if err := b.Eval(arrays...); err != nil {
		return nil, err
	}
	res := make(map[string]*tensor.Dense, len(outs))
	for k, a := range outs {
		t, err := b.ToHost(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		res[k] = t
	}
	return res, nil
}

// inputs loads the named inputs onto the backend.
func inputs(b backend.Backend, a *Arrays, names ...string) ([]backend.Array, error) {
	out := make([]backend.Array, len(names))
	for i, n := range names {
		t, err := a.Input(n)
		if err != nil {
			return nil, err
		}
		out[i] = b.FromHost(t)
	}
	return out, nil
}

// compareTokensUntilNoise holds generated tokens to the oracle's up to the
// first step where the oracle's own top-2 margin is within twice its measured
// logprob error (params.oracle_logprob_error, see conformance/README.md): from
// there on, MLX's own rounding could have decided the token, so a backend at
// least as accurate as MLX may differ.
func compareTokensUntilNoise(c *Case, backendName, out string, got, want *tensor.Dense, a *Arrays) Result {
	r := Result{Case: c.Name, Backend: backendName, Output: out, Metric: "tokens_before_noise", Index: -1}
	noise, m, err := oracleNoise(c, a)
	if err != nil {
		return failure(c.Name, backendName, out, err)
	}
	if !got.Shape.Equal(want.Shape) {
		r.Detail = fmt.Sprintf("got shape %v, want %v", got.Shape, want.Shape)
		return r
	}
	g, w := got.ToFloat64(), want.ToFloat64()
	if len(m) != len(w) {
		return failure(c.Name, backendName, out, fmt.Errorf("%d margins for %d tokens", len(m), len(w)))
	}
	checked := len(w)
	for i := range m {
		if m[i] <= 2*noise {
			checked = i
			break
		}
	}
	r.Budget = 0
	for i := 0; i < checked; i++ {
		if g[i] != w[i] {
			r.Index, r.Got, r.Want = i, g[i], w[i]
			r.Value++
		}
	}
	agree := 0
	for i := range w {
		if g[i] == w[i] {
			agree++
		}
	}
	r.Pass = r.Value == 0
	r.Detail = fmt.Sprintf("first %d of %d tokens are above the oracle's noise (2×%.3g) and checked; %d/%d agree overall", checked, len(w), noise, agree, len(w))
	return r
}

// oracleNoise returns the oracle's own logprob error and its top-2 margin
// before each token. Greedy cases record both (params.oracle_logprob_error,
// out.margins); decode cases give them through out.logprobs and ref.logprobs:
// token i (i ≥ 1) was the argmax of step i-1's logprobs, and token 0 was given.
func oracleNoise(c *Case, a *Arrays) (noise float64, margins []float64, err error) {
	if c.Has("oracle_logprob_error") {
		if noise, err = c.Float("oracle_logprob_error"); err != nil {
			return 0, nil, err
		}
		m, err := a.Output("margins")
		if err != nil {
			return 0, nil, err
		}
		return noise, m.ToFloat64(), nil
	}
	lp, err := a.Output("logprobs")
	if err != nil {
		return 0, nil, err
	}
	ref, err := a.Reference("logprobs")
	if err != nil || ref == nil {
		return 0, nil, fmt.Errorf("case %s: no oracle_logprob_error and no ref.logprobs to measure the oracle's noise", c.Name)
	}
	l, rf := lp.ToFloat64(), ref.ToFloat64()
	for i := range l {
		noise = math.Max(noise, math.Abs(l[i]-rf[i]))
	}
	steps, v := lp.Shape[0], lp.Shape[1]
	margins = make([]float64, steps)
	margins[0] = math.Inf(1)
	for i := 1; i < steps; i++ {
		margins[i] = top2Margin(l[(i-1)*v : i*v])
	}
	return noise, margins, nil
}

func top2Margin(x []float64) float64 {
	a, b := math.Inf(-1), math.Inf(-1)
	for _, v := range x {
		if v > a {
			a, b = v, a
		} else if v > b {
			b = v
		}
	}
	return a - b
}
