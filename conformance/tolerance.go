package conformance

import "fmt"

// Budget says how close a backend's output must be to the oracle's.
type Budget struct {
	// Exact requires identical values (tokens, indices, integer outputs).
	Exact bool
	// RefFactor > 0 holds the output to the case's float64 reference: our
	// worst absolute error may be at most RefFactor times the oracle's own
	// worst error against that reference, plus one ulp of the output dtype.
	RefFactor float64
	// Abs and Rel bound |got-want| <= Abs + Rel*|want| elementwise, used when
	// the case has no float64 reference.
	Abs, Rel float64
	// Reason says where the numbers come from.
	Reason string
}

// key is (tolerance class, dtype); dtype "*" matches any.
type key struct{ class, dtype string }

// budgets is the one table of tolerances. Every op case carries a float64
// reference, so op classes default to "at least as accurate as MLX"; the
// rows below are the exceptions and the model-level classes.
var budgets = map[key]Budget{
	{"*", "*"}: {RefFactor: 1, Reason: "every op: no less accurate than MLX itself against float64 (plus one output ulp for rounding)"},

	{"quantize", "*"}: {Exact: true, Reason: "codes, scales and biases are a deterministic function of the input; MLX's CPU computes them in float32 and we do the same"},

	{"model_tokens", "*"}:        {Exact: true, Reason: "greedy tokens must equal the oracle's; the oracle only records prompts whose top-2 margins are clear of ties"},
	{"model_logits", "float32"}:  {Abs: 2e-4, Rel: 2e-4, Reason: "float32 end to end: differences are summation order only (~1e-6 per op), compounding over 3 layers and a 1000-way head"},
	{"model_hidden", "float32"}:  {Abs: 1e-4, Rel: 1e-4, Reason: "as model_logits, before the head"},
	{"model_logits", "bfloat16"}: {Abs: 0.125, Rel: 0.02, Reason: "MLX's CPU accumulates bf16 matmuls in bf16 while we accumulate in float32; per-op differences of 1 bf16 ulp (2^-8 relative) compound through 3 layers"},
	{"model_hidden", "bfloat16"}: {Abs: 0.0625, Rel: 0.02, Reason: "as model_logits, before the head"},
}

// BudgetFor returns the budget for a tolerance class and dtype.
func BudgetFor(class, dtype string) (Budget, error) {
	for _, k := range []key{{class, dtype}, {class, "*"}, {"*", "*"}} {
		if b, ok := budgets[k]; ok {
			return b, nil
		}
	}
	return Budget{}, fmt.Errorf("no tolerance for class %q dtype %q", class, dtype)
}
