package backendtest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/tensor"
)

// Run holds the backends that open returns to the contract of
// backend.Backend. Every subtest opens a fresh backend with open and closes
// it at its end; open is called from the test's goroutine. See the package
// doc for what is checked.
func Run(t *testing.T, open func() (backend.Backend, error)) {
	t.Run("Lifetime", func(t *testing.T) { runLifetime(t, open) })
	t.Run("Ops", func(t *testing.T) { runOps(t, open, nil) })
	t.Run("Gradients", func(t *testing.T) { runGradients(t, open) })
}

// RunApproximate is Run for a mode of a backend that is approximate by
// design in the named ops (their subtest names under Ops, such as
// "QuantizedMatmul") and judged elsewhere: those ops are skipped, loudly,
// with the reason; everything else is held to the full contract. A backend
// offered to users as exact calls Run.
func RunApproximate(t *testing.T, open func() (backend.Backend, error), reason string, ops ...string) {
	skip := map[string]string{}
	for _, op := range ops {
		skip[op] = reason
	}
	t.Run("Lifetime", func(t *testing.T) { runLifetime(t, open) })
	t.Run("Ops", func(t *testing.T) { runOps(t, open, skip) })
	t.Run("Gradients", func(t *testing.T) { runGradients(t, open) })
}

// seed fixes the random shapes and values of every case; a failure message
// names the case, and rerunning reproduces it.
const seed = 20240612

// openB opens a backend for one test and closes it at the end, after checking
// that the test left nothing alive and that the safety net found no leak.
func openB(t *testing.T, open func() (backend.Backend, error)) backend.Backend {
	t.Helper()
	b, err := open()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if s := b.Stats(); s.LiveArrays != 0 || s.LiveBytes != 0 || s.LeakedByGC != 0 {
			t.Errorf("at the end of the test: Stats %+v, want no live array, no live byte and no leak", s)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// inDo runs fn on the backend's thread (Do) inside a scope that is closed
// afterwards, turning an *OpError panic into a test error. fn must report
// failures with t.Errorf, never t.Fatal (on a backend with its own thread,
// t.Fatal would end that thread).
func inDo(t *testing.T, b backend.Backend, fn func()) {
	t.Helper()
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		s := b.Scope()
		defer s.Close()
		fn()
		return nil
	})
	if err != nil {
		t.Errorf("unexpected error: %v", err)
	}
}

// catch runs fn and returns the *OpError it panics with (nil if none);
// another panic propagates.
func catch(fn func()) (oe *backend.OpError) {
	var err error
	func() {
		defer backend.Recover(&err)
		fn()
	}()
	if err != nil {
		errors.As(err, &oe)
	}
	return oe
}

// wantOpError reports an error unless fn panics with an *OpError.
func wantOpError(t *testing.T, what string, fn func()) {
	t.Helper()
	if oe := catch(fn); oe == nil {
		t.Errorf("%s: no *backend.OpError, want one", what)
	} else if oe.Op == "" {
		t.Errorf("%s: the *backend.OpError names no op (%v)", what, oe)
	}
}

// host reads a back as float64 values, reporting an error (and returning
// nil) on failure.
func host(t *testing.T, b backend.Backend, a backend.Array) *tensor.Dense {
	t.Helper()
	d, err := b.ToHost(a)
	if err != nil {
		t.Errorf("ToHost: %v", err)
		return nil
	}
	if !d.Shape.Equal(a.Shape()) || d.DType != a.DType() {
		t.Errorf("ToHost: got %v %v, want the array's %v %v", d.DType, d.Shape, a.DType(), a.Shape())
		return nil
	}
	return d
}

// ---- inputs ----

// gen makes the random inputs of one case.
type gen struct {
	r *rand.Rand
}

func newGen(name string) *gen {
	var h uint64 = seed
	for _, c := range name {
		h = h*1099511628211 + uint64(c)
	}
	return &gen{rand.New(rand.NewPCG(seed, h))}
}

// shape returns a random shape of rank n with dimensions in [lo, hi].
func (g *gen) shape(n, lo, hi int) tensor.Shape {
	s := make(tensor.Shape, n)
	for i := range s {
		s[i] = lo + g.r.IntN(hi-lo+1)
	}
	return s
}

// normal returns n values of mean 0 and standard deviation sd.
func (g *gen) normal(n int, sd float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = g.r.NormFloat64() * sd
	}
	return v
}

// ints returns n integers in [lo, hi].
func (g *gen) ints(n, lo, hi int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(lo + g.r.IntN(hi-lo+1))
	}
	return v
}

// edges returns the edge values of dt: NaN, ±Inf, ±0, the smallest
// subnormal, the largest finite value, ±1.
func edges(dt tensor.DType) []float64 {
	sub, max := 0.0, 0.0
	switch dt {
	case tensor.F32:
		sub, max = math.SmallestNonzeroFloat32, math.MaxFloat32
	case tensor.F16:
		sub, max = math.Ldexp(1, -24), 65504
	case tensor.BF16:
		sub, max = math.Ldexp(1, -133), math.Ldexp(255, 120)
	}
	return []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1), 0, sub, -sub, max, -max, 1, -1}
}

// sprinkle replaces about a fifth of v with edge values of dt.
func (g *gen) sprinkle(v []float64, dt tensor.DType) {
	e := edges(dt)
	for i := range v {
		if g.r.IntN(5) == 0 {
			v[i] = e[g.r.IntN(len(e))]
		}
	}
}

// nd is a host array of float64 values in row-major order: the suite's
// reference arithmetic works on these.
type nd struct {
	shape tensor.Shape
	v     []float64
}

// input makes a backend array of dtype dt, logical shape shape and values v
// (rounded to dt first), laid out in one of three ways chosen at random: plain,
// a transpose of a permuted array, or a slice of a larger array; it returns
// the array and its values as the reference sees them (rounded to dt).
func (g *gen) input(b backend.Backend, dt tensor.DType, shape tensor.Shape, v []float64) (backend.Array, nd) {
	want := nd{shape: shape.Clone(), v: roundAll(v, dt)}
	switch g.r.IntN(3) {
	case 1: // transposed
		if len(shape) >= 2 {
			perm := g.r.Perm(len(shape))
			// Host array P of shape shape[perm]; Transpose(P, inv) has shape
			// shape with P's element at inv-permuted index.
			pshape := make(tensor.Shape, len(shape))
			for i, p := range perm {
				pshape[i] = shape[p]
			}
			pv := transposeND(want, perm).v
			inv := make([]int, len(perm))
			for i, p := range perm {
				inv[p] = i
			}
			p := b.FromHost(dense(dt, pshape, pv))
			return b.Transpose(p, inv...), want
		}
	case 2: // sliced from a larger array
		big := make(tensor.Shape, len(shape))
		start, stop := make([]int, len(shape)), make([]int, len(shape))
		for i, d := range shape {
			lo := g.r.IntN(2)
			big[i] = d + lo + g.r.IntN(2)
			start[i], stop[i] = lo, lo+d
		}
		bv := g.normal(big.Size(), 1)
		bnd := nd{big, bv}
		setSlice(bnd, start, want)
		p := b.FromHost(dense(dt, big, bnd.v))
		return b.Slice(p, start, stop), want
	}
	return b.FromHost(dense(dt, shape, want.v)), want
}

// dense builds a host tensor of dtype dt from values exactly representable
// in it (integers, bools and rounded floats).
func dense(dt tensor.DType, shape tensor.Shape, v []float64) *tensor.Dense {
	return tensor.FromFloat64(shape.Clone(), v).Convert(dt)
}

// ---- the tolerance table ----

// budget returns the suite's row of conformance's tolerance table for an op
// class and dtype. A class without its own row is a suite bug.
func budget(t *testing.T, class string, dt tensor.DType) conformance.Budget {
	t.Helper()
	if !dt.IsFloat() {
		class = "exact" // integer and Bool results are exact in every op
	}
	lastClass = class
	bu, err := conformance.BudgetFor("contract/"+class, dt.MLXName())
	if err != nil || (!bu.Exact && bu.Rel == 0 && bu.Abs == 0) {
		t.Fatalf("no contract row in conformance's tolerance table for %q %v (got %+v, %v)", class, dt, bu, err)
	}
	return bu
}

// compare checks got against want elementwise: dtype and shape first, then
// values. With an exact budget every value must be equal (NaN equal to NaN;
// with bits also the sign of zero); otherwise NaN must meet NaN, infinities
// must be equal, and a finite difference may be at most
// Abs + Rel·(|want| + mag[i]) (mag nil: 0). It reports at most three
// mismatches and returns whether all values passed.
func compare(t *testing.T, what string, got *tensor.Dense, dt tensor.DType, want nd, bu conformance.Budget, bits bool, mag []float64) bool {
	t.Helper()
	if got == nil {
		return false
	}
	if got.DType != dt || !got.Shape.Equal(want.shape) {
		t.Errorf("%s: got %v %v, want %v %v", what, got.DType, got.Shape, dt, want.shape)
		return false
	}
	g := got.ToFloat64()
	bad, worst := 0, 0.0
	for i, w := range want.v {
		x := g[i]
		if r := roundTo(w, dt); math.IsInf(r, 0) && !bu.Exact {
			w = r // the exact result overflows the output dtype
		}
		ok := false
		switch {
		case math.IsNaN(w) || math.IsNaN(x):
			ok = math.IsNaN(w) && math.IsNaN(x)
		case bu.Exact:
			ok = x == w && (!bits || math.Signbit(x) == math.Signbit(w))
		case math.IsInf(w, 0) || math.IsInf(x, 0):
			ok = x == w
		default:
			m := 0.0
			if mag != nil {
				m = mag[i]
			}
			lim := bu.Abs + bu.Rel*(math.Abs(w)+m)
			d := math.Abs(x - w)
			ok = d <= lim
			if lim > 0 && d/lim > worst {
				worst = d / lim
			}
		}
		if !ok {
			bad++
			if bad <= 3 {
				t.Errorf("%s: got %v, want %v (index %d of %v, %v)", what, x, w, i, want.shape, dt)
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d values out of budget", what, bad, len(want.v))
	}
	if measure && worst > 0 {
		t.Logf("measure %s %v: worst error %.3g of the budget (%s)", lastClass, dt, worst, what)
	}
	return bad == 0
}

// lastClass is the tolerance class of the comparison in progress, for the
// measure log.
var lastClass string

// measure logs the worst error of every float comparison as a fraction of
// its budget (MLXGO_CONTRACT_MEASURE=1: how the rows' figures were measured).
var measure = os.Getenv("MLXGO_CONTRACT_MEASURE") != ""

func caseName(parts ...any) string {
	s := ""
	for i, p := range parts {
		if i > 0 {
			s += "/"
		}
		s += fmt.Sprint(p)
	}
	return s
}

// exactBudget is the budget of values defined exactly by the contract (the
// fills of Zeros and Full); the tolerance table's exact rows say the same.
var exactBudget = conformance.Budget{Exact: true}
