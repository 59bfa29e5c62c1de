package conformance

import (
	"fmt"
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
func Check(b backend.Backend, c *Case) []Result {
	name := b.Name()
	run, ok := runners[runnerKey(c)]
	if !ok {
		return []Result{failure(c.Name, name, "*", fmt.Errorf("no runner for %s op %q in this build", c.Kind, c.Op))}
	}
	budget, err := BudgetFor(c.Tolerance, c.DType)
	if err != nil {
		return []Result{failure(c.Name, name, "*", err)}
	}
	arrs, err := c.OpenArrays()
	if err != nil {
		return []Result{failure(c.Name, name, "*", err)}
	}
	defer arrs.Close()

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
	var results []Result
	for _, out := range c.Outputs {
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
		results = append(results, compare(c.Name, name, out, g, want, ref, budget))
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
