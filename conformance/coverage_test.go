package conformance_test

import (
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/conformance"
)

// TestEveryMethodHasCases fails when a method of the op interfaces of
// backend.Backend (or Memory's Zeros and Full) has no op in
// conformance.MethodOps, when one of its ops has no runner, or when one of
// its ops has no case in the committed fixtures.
func TestEveryMethodHasCases(t *testing.T) {
	cases, err := conformance.Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	cov := conformance.Coverage(cases)
	methods := 0
	for _, it := range conformance.OpInterfaces {
		methods += it.NumMethod()
	}
	if want := methods + 2; len(cov) != want {
		t.Errorf("got %d methods in the coverage, want %d (the op interfaces' %d, Zeros and Full)", len(cov), want, methods)
	}
	supported := conformance.Supported()
	for _, m := range cov {
		if len(m.Ops) == 0 {
			t.Errorf("%s.%s: no fixture op in conformance.MethodOps", m.Interface, m.Method)
		}
		for _, op := range m.Ops {
			if !slices.Contains(supported, op.Op) {
				t.Errorf("%s.%s: op %q has no runner", m.Interface, m.Method, op.Op)
			}
			if op.Cases == 0 {
				t.Errorf("%s.%s: op %q has no case in testdata/manifest.json", m.Interface, m.Method, op.Op)
			}
		}
	}
}
