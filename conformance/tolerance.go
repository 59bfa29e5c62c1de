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
	// TokensUntilNoise checks generated tokens only up to the first step where
	// the oracle's margin is within its own measured error (bf16 greedy cases
	// on backends other than MLX itself).
	TokensUntilNoise bool
	// Reason says where the numbers come from.
	Reason string
}

// InfoClass marks outputs that record facts about the oracle's run (such as
// top-2 margins) rather than values a backend must reproduce.
const InfoClass = "oracle_info"

// bitExact is the budget of a backend that declares itself oracle-exact
// (backend.Backend.OracleExact) on every case: tier 1 of the design, the same
// libmlx on the same device running the same ops in the same order must give
// the same bits.
var bitExact = Budget{Exact: true, Reason: "tier 1: the backend declares that it runs the oracle's ops, in its order and dtypes, on the device the fixtures were made on"}

// budgetFor is BudgetFor with the backend's declared tier applied.
func budgetFor(oracleExact bool, class, dtype string) (Budget, error) {
	b, err := BudgetFor(class, dtype)
	if err != nil || !oracleExact {
		return b, err
	}
	return bitExact, nil
}

// key is (tolerance class, dtype); dtype "*" matches any.
type key struct{ class, dtype string }

// budgets is the one table of tolerances. Every op case carries a float64
// reference, so op classes default to "at least as accurate as MLX"; the
// rows below are the exceptions and the model-level classes.
var budgets = map[key]Budget{
	{"*", "*"}:                      {RefFactor: 1, Reason: "every op: no less accurate than MLX itself against the float64 reference, plus one output ulp (both sides round to the output dtype)"},
	{"*", "float32"}:                {RefFactor: 2, Reason: "float32 ops: the same precision as MLX's CPU summed in another order (pairwise/blocked vs sequential); the worst element may land up to twice as far from float64 (measured worst ratio 1.8, SDPA one query)"},
	{"quantized_matmul", "float32"}: {RefFactor: 3, Reason: "the fused form scale·Σ(q·x) + bias·Σx (issue 5's fast kernel, Metal's qmv) cancels between its two terms; MLX's CPU dequantizes then sums sequentially. Measured worst ratio 2.5 (b5g128)"},

	{"quantize", "*"}: {Exact: true, Reason: "codes, scales and biases are a deterministic function of the input; MLX's CPU computes them in float32 and we do the same"},

	{"reshape", "*"}:      {Exact: true, Reason: "moves data without arithmetic: every element must come back with its bits"},
	{"transpose", "*"}:    {Exact: true, Reason: "as reshape"},
	{"slice", "*"}:        {Exact: true, Reason: "as reshape"},
	{"slice_update", "*"}: {Exact: true, Reason: "as reshape"},
	{"concatenate", "*"}:  {Exact: true, Reason: "as reshape (mixed dtypes are converted exactly: f16 into f32)"},
	{"take", "*"}:         {Exact: true, Reason: "as reshape"},
	{"zeros", "*"}:        {Exact: true, Reason: "a constant"},
	{"full", "*"}:         {Exact: true, Reason: "a constant: the value rounded once to the dtype, to nearest even"},
	{"astype", "*"}:       {Exact: true, Reason: "a conversion has one right answer (round to nearest even, truncation toward zero, wrap); the fixtures hold only values where MLX defines it"},
	{"where", "*"}:        {Exact: true, Reason: "selects without arithmetic (mixed dtypes converted exactly)"},
	{"maximum", "*"}:      {Exact: true, Reason: "selects one operand (NaN propagates): no rounding"},
	{"minimum", "*"}:      {Exact: true, Reason: "as maximum"},
	{"negative", "*"}:     {Exact: true, Reason: "flips the sign bit: no rounding"},
	{"abs", "*"}:          {Exact: true, Reason: "clears the sign bit: no rounding"},

	{"apply_top_p", "*"}:        {Exact: true, Reason: "host-side emulation of sample_utils with MLX's dtype arithmetic: must match bit for bit"},
	{"apply_min_p", "*"}:        {Exact: true, Reason: "as apply_top_p"},
	{"apply_top_k", "*"}:        {Exact: true, Reason: "as apply_top_p"},
	{"temperature", "*"}:        {Exact: true, Reason: "as apply_top_p (1/temp rounded to the dtype first, as a weakly-typed Python float)"},
	{"repetition_penalty", "*"}: {Exact: true, Reason: "as apply_top_p"},
	{"random_uniform", "*"}:     {Exact: true, Reason: "threefry words and their float32 conversion are exact"},

	{"model_tokens", "float32"}:  {Exact: true, Reason: "greedy tokens must equal the oracle's; the oracle only records prompts whose top-2 margins exceed 1e-3, far above float32 noise"},
	{"model_tokens", "bfloat16"}: {TokensUntilNoise: true, Reason: "MLX's CPU bf16 logprobs are off by up to ~4 from the float32 run of the same weights (oracle_logprob_error); tokens are checked until the oracle's margin falls within twice that"},
	{"model_logits", "float32"}:  {Abs: 5e-4, Reason: "float32 end to end: summation order alone (~sqrt(K)·2^-24 relative per op over ~30 ops, 3 layers, 1000-way head); measured worst 1.1e-4 on logits of scale ~50"},
	{"model_hidden", "float32"}:  {Abs: 1e-4, Reason: "as model_logits, before the head, on a residual stream of scale ~4 (measured worst below 1e-5)"},
	{"model_logits", "bfloat16"}: {RefFactor: 1, Reason: "no less accurate than MLX against the float32 run of the same bf16 weights (ref.*), plus one bf16 ulp at the logit scale"},
	{"model_hidden", "bfloat16"}: {RefFactor: 1, Reason: "as model_logits"},
}

// BudgetFor returns the budget for a tolerance class and dtype.
func BudgetFor(class, dtype string) (Budget, error) {
	for _, k := range []key{{class, dtype}, {class, "*"}, {"*", dtype}, {"*", "*"}} {
		if b, ok := budgets[k]; ok {
			return b, nil
		}
	}
	return Budget{}, fmt.Errorf("no tolerance for class %q dtype %q", class, dtype)
}
