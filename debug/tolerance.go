package debug

import (
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/tensor"
)

// Tolerance bounds a tap's NormErr = max|a-b| / max|b| between two
// implementations that may round differently: a row of the one tolerance
// table (conformance.BudgetFor), whose tap classes are "tap."+Class(tap).
// Class is the tap class without that prefix; NormErr and Exact are the
// fields a tap's comparison reads.
type Tolerance = conformance.Budget

// tapFamily prefixes a tap class to make its class in the table.
const tapFamily = "tap."

// tapClasses are the classes Class returns, in graph order.
var tapClasses = []string{"embed", "rms_norm", "proj_rope", "proj", "sdpa", "residual", "swiglu", "logits"}

// ToleranceFor returns the bound for a tap class in dtype dt; exact asks for
// bit-identical values (two runs of one implementation: the table's
// "tap.rerun" row). A dtype without a row of its own uses the class's
// bfloat16 row (float16: also 16-bit, finer mantissa) or float32 row
// (float64), saying so in Reason; a class without rows must match exactly.
func ToleranceFor(class string, dt tensor.DType, exact bool) Tolerance {
	row := func(c string, d tensor.DType) (Tolerance, bool) {
		t, err := conformance.BudgetFor(c, d.MLXName())
		t.Class, t.DType = class, dt.String()
		return t, err == nil
	}
	if exact {
		if t, ok := row(tapFamily+"rerun", dt); ok {
			return t
		}
	}
	if t, ok := row(tapFamily+class, dt); ok {
		return t
	}
	fb := tensor.F32
	if dt == tensor.F16 || dt == tensor.BF16 {
		fb = tensor.BF16
	}
	if t, ok := row(tapFamily+class, fb); ok {
		t.Reason += " (row of " + fb.String() + ": no measurement for " + dt.String() + ")"
		return t
	}
	return Tolerance{Class: class, DType: dt.String(), Exact: true, Reason: "unknown tap class: exact"}
}

// Tolerances returns the table's rows for the tap classes, in graph order
// and float32 before bfloat16 (for documentation and the CLI).
func Tolerances() []Tolerance {
	var out []Tolerance
	for _, c := range tapClasses {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, t := range conformance.Budgets() {
				if t.Class == tapFamily+c && t.DType == dt.MLXName() {
					t.Class, t.DType = c, dt.String()
					out = append(out, t)
				}
			}
		}
	}
	return out
}
