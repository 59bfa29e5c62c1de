package conformance

import "testing"

// TestBudgetTable: every row gives its reason and uses exactly one metric;
// every class the fixtures name resolves; a "tap." class never falls back
// to the op rows.
func TestBudgetTable(t *testing.T) {
	for k, b := range budgets {
		if b.Reason == "" {
			t.Errorf("row %v has no Reason", k)
		}
		if b.Class != "" || b.DType != "" {
			t.Errorf("row %v sets Class/DType, which BudgetFor fills in", k)
		}
		n := 0
		for _, set := range []bool{b.Exact, b.RefFactor > 0, b.Abs > 0 || b.Rel > 0, b.NormErr > 0, b.TokensUntilNoise, b.MaxKL > 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			t.Errorf("row %v uses %d metrics, want 1", k, n)
		}
	}
	cases, err := Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, out := range c.Outputs {
			if class := c.ToleranceOf(out); class != InfoClass {
				if _, err := BudgetFor(class, c.DType); err != nil {
					t.Errorf("case %s output %s: %v", c.Name, out, err)
				}
			}
		}
	}
	if b, err := BudgetFor("tap.unknown", "float32"); err == nil {
		t.Errorf("tap.unknown float32: got %+v, want no row (taps do not fall back to op rows)", b)
	}
	if b, err := BudgetFor("tap.proj", "bfloat16"); err != nil || b.NormErr != 0.25 || b.Class != "tap.proj" || b.DType != "bfloat16" {
		t.Errorf("tap.proj bfloat16: got %+v, %v, want NormErr 0.25 with Class and DType set", b, err)
	}
	if b, err := BudgetFor("softmax", "float16"); err != nil || b.RefFactor != 1 {
		t.Errorf("softmax float16: got %+v, %v, want the (*, *) row, RefFactor 1", b, err)
	}
}
