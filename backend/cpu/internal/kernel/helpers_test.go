package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// dtypes under test: name and Rounder.
var testDTypes = []struct {
	name  string
	round Rounder
}{
	{"f32", Identity},
	{"bf16", tensor.RoundBF16},
	{"f16", tensor.RoundF16},
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6d6c78676f)) }

// randVec returns n normal values times scale, rounded to the dtype.
func randVec(r *rand.Rand, n int, scale float64, round Rounder) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = round(float32(r.NormFloat64() * scale))
	}
	return v
}

const guardN = 7

var sentinel = float32(math.Float32frombits(0x7fa11dea)) // a NaN with a recognisable payload

// guarded returns a slice of n elements inside a buffer with guardN sentinel
// elements before and after, and the whole buffer.
func guarded(n int) (inner, whole []float32) {
	whole = make([]float32, n+2*guardN)
	for i := range whole {
		whole[i] = sentinel
	}
	return whole[guardN : guardN+n], whole
}

// checkGuards fails unless the guard elements still hold the sentinel.
func checkGuards(t *testing.T, whole []float32, name string) {
	t.Helper()
	n := len(whole) - 2*guardN
	for i, v := range whole {
		if i >= guardN && i < guardN+n {
			continue
		}
		if math.Float32bits(v) != math.Float32bits(sentinel) {
			t.Errorf("%s: guard element %d was overwritten: got %v, want the sentinel", name, i-guardN, v)
			return
		}
	}
}

// sameBits reports whether two float32 slices are bit-identical, except that
// any two NaNs match.
func firstDiff(got, want []float32) int {
	for i := range want {
		g, w := got[i], want[i]
		if g != g && w != w {
			continue
		}
		if math.Float32bits(g) != math.Float32bits(w) {
			return i
		}
	}
	return -1
}

func expectSame(t *testing.T, got, want []float32, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d elements, want %d", what, len(got), len(want))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Errorf("%s: got %v (0x%08x), want %v (0x%08x) (index %d)", what, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]), i)
	}
}

// unchanged fails if an input was modified.
func unchanged[T comparable](t *testing.T, got, orig []T, name string) {
	t.Helper()
	if !slices.Equal(got, orig) {
		// NaN inputs are never used where this is called with floats.
		t.Errorf("input %s was modified", name)
	}
}

// withThreads runs fn with the worker count set to n.
func withThreads(n int, fn func()) {
	old := int(threads.Load())
	SetThreads(n)
	defer SetThreads(old)
	fn()
}

func dims(xs ...int) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += "x"
		}
		s += fmt.Sprint(x)
	}
	return s
}
