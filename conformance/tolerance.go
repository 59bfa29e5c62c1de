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

	{"apply_top_p", "*"}:        {Exact: true, Reason: "host-side emulation of sample_utils with MLX's dtype arithmetic: must match bit for bit"},
	{"apply_min_p", "*"}:        {Exact: true, Reason: "as apply_top_p"},
	{"apply_top_k", "*"}:        {Exact: true, Reason: "as apply_top_p"},
	{"temperature", "*"}:        {Exact: true, Reason: "as apply_top_p (1/temp rounded to the dtype first, as a weakly-typed Python float)"},
	{"repetition_penalty", "*"}: {Exact: true, Reason: "as apply_top_p"},
	{"random_uniform", "*"}:     {Exact: true, Reason: "threefry words and their float32 conversion are exact"},

	// backend/backendtest, the contract suite: a backend's op against the
	// suite's float64 evaluation of the op's definition on the same (rounded)
	// inputs, with no oracle in the loop. A value passes when
	// |got-want| <= Abs + Rel·(|want| + m), m the case's magnitude scale
	// named in the row (0 where none is named); NaN must meet NaN and an
	// infinity an equal infinity. Rel is in units of the output dtype's
	// unit roundoff u (2^-24 float32, 2^-11 float16, 2^-8 bfloat16);
	// Abs is the dtype's smallest subnormal, for results that underflow.
	{"contract/exact", "*"}:                   {Exact: true, Reason: "shaping ops, AsType, Where, Max, Argmax, comparisons, integer arithmetic, Zeros and Full move or select values, or are defined exactly"},
	{"contract/unary", "float32"}:             {Rel: 16 * 0x1p-24, Abs: 0x1p-149, Reason: "one op in float32, rounded to the dtype. MLX's CPU exp (a polynomial, which the cpu backend reproduces) is off by up to 13.2 u in float32 (exp and sigmoid of int32 inputs up to ±20, measured on both backends); in half types silu rounds its sigmoid first: measured 4.0 u (f16), 3.9 u (bf16); sin and cos: m = 1"},
	{"contract/unary", "float16"}:             {Rel: 6 * 0x1p-11, Abs: 0x1p-24, Reason: "one op in float32, rounded to the dtype. MLX's CPU exp (a polynomial, which the cpu backend reproduces) is off by up to 13.2 u in float32 (exp and sigmoid of int32 inputs up to ±20, measured on both backends); in half types silu rounds its sigmoid first: measured 4.0 u (f16), 3.9 u (bf16); sin and cos: m = 1"},
	{"contract/unary", "bfloat16"}:            {Rel: 6 * 0x1p-8, Abs: 0x1p-133, Reason: "one op in float32, rounded to the dtype. MLX's CPU exp (a polynomial, which the cpu backend reproduces) is off by up to 13.2 u in float32 (exp and sigmoid of int32 inputs up to ±20, measured on both backends); in half types silu rounds its sigmoid first: measured 4.0 u (f16), 3.9 u (bf16); sin and cos: m = 1"},
	{"contract/binary", "float32"}:            {Rel: 2 * 0x1p-24, Abs: 0x1p-149, Reason: "one float32 operation rounded to the output dtype: u when rounded once, u + 2^-24 when half types round twice (float32, then the dtype); measured 1.0 u"},
	{"contract/binary", "float16"}:            {Rel: 2 * 0x1p-11, Abs: 0x1p-24, Reason: "one float32 operation rounded to the output dtype: u when rounded once, u + 2^-24 when half types round twice (float32, then the dtype); measured 1.0 u"},
	{"contract/binary", "bfloat16"}:           {Rel: 2 * 0x1p-8, Abs: 0x1p-133, Reason: "one float32 operation rounded to the output dtype: u when rounded once, u + 2^-24 when half types round twice (float32, then the dtype); measured 1.0 u"},
	{"contract/sum", "float32"}:               {Rel: 2 * 0x1p-24, Abs: 0x1p-149, Reason: "m = Σ|x| of the lane (lanes of up to 6): float32 accumulation, up to (n-1)·2^-24·m, and one rounding to the dtype; measured 0.72 u (f32), 0.45 u (f16), 0.35 u (bf16)"},
	{"contract/sum", "float16"}:               {Rel: 2 * 0x1p-11, Abs: 0x1p-24, Reason: "m = Σ|x| of the lane (lanes of up to 6): float32 accumulation, up to (n-1)·2^-24·m, and one rounding to the dtype; measured 0.72 u (f32), 0.45 u (f16), 0.35 u (bf16)"},
	{"contract/sum", "bfloat16"}:              {Rel: 2 * 0x1p-8, Abs: 0x1p-133, Reason: "m = Σ|x| of the lane (lanes of up to 6): float32 accumulation, up to (n-1)·2^-24·m, and one rounding to the dtype; measured 0.72 u (f32), 0.45 u (f16), 0.35 u (bf16)"},
	{"contract/logsumexp", "float32"}:         {Rel: 2 * 0x1p-24, Abs: 0x1p-149, Reason: "m = 1 (the error of a log is absolute): float32 exp and sum, one rounding; measured 0.83 u (f32), 0.68 u (f16), 0.78 u (bf16)"},
	{"contract/logsumexp", "float16"}:         {Rel: 2 * 0x1p-11, Abs: 0x1p-24, Reason: "m = 1 (the error of a log is absolute): float32 exp and sum, one rounding; measured 0.83 u (f32), 0.68 u (f16), 0.78 u (bf16)"},
	{"contract/logsumexp", "bfloat16"}:        {Rel: 2 * 0x1p-8, Abs: 0x1p-133, Reason: "m = 1 (the error of a log is absolute): float32 exp and sum, one rounding; measured 0.83 u (f32), 0.68 u (f16), 0.78 u (bf16)"},
	{"contract/softmax", "float32"}:           {Rel: 4 * 0x1p-24, Abs: 0x1p-149, Reason: "m = p·|x - max| per element (x - max is rounded before exp: in float32, or in the dtype without precise); measured 2.4 u (f32), 2.2 u (f16), 2.1 u (bf16)"},
	{"contract/softmax", "float16"}:           {Rel: 4 * 0x1p-11, Abs: 0x1p-24, Reason: "m = p·|x - max| per element (x - max is rounded before exp: in float32, or in the dtype without precise); measured 2.4 u (f32), 2.2 u (f16), 2.1 u (bf16)"},
	{"contract/softmax", "bfloat16"}:          {Rel: 4 * 0x1p-8, Abs: 0x1p-133, Reason: "m = p·|x - max| per element (x - max is rounded before exp: in float32, or in the dtype without precise); measured 2.4 u (f32), 2.2 u (f16), 2.1 u (bf16)"},
	{"contract/matmul", "float32"}:            {Rel: 4 * 0x1p-24, Abs: 0x1p-149, Reason: "m = Σ|a·b| of the element (K < 40): float32 accumulation and one rounding; measured 1.23 u (f32), 0.32 u (f16), 0.26 u (bf16)"},
	{"contract/matmul", "float16"}:            {Rel: 1 * 0x1p-11, Abs: 0x1p-24, Reason: "m = Σ|a·b| of the element (K < 40): float32 accumulation and one rounding; measured 1.23 u (f32), 0.32 u (f16), 0.26 u (bf16)"},
	{"contract/matmul", "bfloat16"}:           {Rel: 1 * 0x1p-8, Abs: 0x1p-133, Reason: "m = Σ|a·b| of the element (K < 40): float32 accumulation and one rounding; measured 1.23 u (f32), 0.32 u (f16), 0.26 u (bf16)"},
	{"contract/rmsnorm", "float32"}:           {Rel: 8 * 0x1p-24, Abs: 0x1p-149, Reason: "float32 statistics over up to 70 elements, then T(x·inv) and T(w·that): two roundings in the dtype; measured 3.8 u (f32), 1.9 u (f16), 1.8 u (bf16)"},
	{"contract/rmsnorm", "float16"}:           {Rel: 3 * 0x1p-11, Abs: 0x1p-24, Reason: "float32 statistics over up to 70 elements, then T(x·inv) and T(w·that): two roundings in the dtype; measured 3.8 u (f32), 1.9 u (f16), 1.8 u (bf16)"},
	{"contract/rmsnorm", "bfloat16"}:          {Rel: 3 * 0x1p-8, Abs: 0x1p-133, Reason: "float32 statistics over up to 70 elements, then T(x·inv) and T(w·that): two roundings in the dtype; measured 3.8 u (f32), 1.9 u (f16), 1.8 u (bf16)"},
	{"contract/rope", "float32"}:              {Rel: 16 * 0x1p-24, Abs: 0x1p-149, Reason: "m = |x1| + |x2| of the pair: θ = position·inv_freq in float32 (|θ| up to 25 rad, so its rounding alone is up to 25·2^-24) and the rotation rounded to the dtype; measured 6.5 u (f32, MLX), 0.75 u (f16), 1.0 u (bf16)"},
	{"contract/rope", "float16"}:              {Rel: 2 * 0x1p-11, Abs: 0x1p-24, Reason: "m = |x1| + |x2| of the pair: θ = position·inv_freq in float32 (|θ| up to 25 rad, so its rounding alone is up to 25·2^-24) and the rotation rounded to the dtype; measured 6.5 u (f32, MLX), 0.75 u (f16), 1.0 u (bf16)"},
	{"contract/rope", "bfloat16"}:             {Rel: 2 * 0x1p-8, Abs: 0x1p-133, Reason: "m = |x1| + |x2| of the pair: θ = position·inv_freq in float32 (|θ| up to 25 rad, so its rounding alone is up to 25·2^-24) and the rotation rounded to the dtype; measured 6.5 u (f32, MLX), 0.75 u (f16), 1.0 u (bf16)"},
	{"contract/sdpa", "float32"}:              {Rel: 4 * 0x1p-24, Abs: 0x1p-149, Reason: "m = max|v| of the head: float32 scores, softmax and weighted sum (MLX's CPU rounds steps to the dtype); measured 1.36 u (f32), 1.2 u (f16), 0.73 u (bf16)"},
	{"contract/sdpa", "float16"}:              {Rel: 3 * 0x1p-11, Abs: 0x1p-24, Reason: "m = max|v| of the head: float32 scores, softmax and weighted sum (MLX's CPU rounds steps to the dtype); measured 1.36 u (f32), 1.2 u (f16), 0.73 u (bf16)"},
	{"contract/sdpa", "bfloat16"}:             {Rel: 3 * 0x1p-8, Abs: 0x1p-133, Reason: "m = max|v| of the head: float32 scores, softmax and weighted sum (MLX's CPU rounds steps to the dtype); measured 1.36 u (f32), 1.2 u (f16), 0.73 u (bf16)"},
	{"contract/swiglu", "float32"}:            {Rel: 8 * 0x1p-24, Abs: 0x1p-149, Reason: "m = |gate·up|·2^-14 (a float16 sigmoid below 2^-14 is subnormal): MLX's compiled steps σ via its exp, silu and the product each rounded to the dtype; measured 5.9 u (f32), 2.3 u (f16), 2.0 u (bf16)"},
	{"contract/swiglu", "float16"}:            {Rel: 4 * 0x1p-11, Abs: 0x1p-24, Reason: "m = |gate·up|·2^-14 (a float16 sigmoid below 2^-14 is subnormal): MLX's compiled steps σ via its exp, silu and the product each rounded to the dtype; measured 5.9 u (f32), 2.3 u (f16), 2.0 u (bf16)"},
	{"contract/swiglu", "bfloat16"}:           {Rel: 4 * 0x1p-8, Abs: 0x1p-133, Reason: "m = |gate·up|·2^-14 (a float16 sigmoid below 2^-14 is subnormal): MLX's compiled steps σ via its exp, silu and the product each rounded to the dtype; measured 5.9 u (f32), 2.3 u (f16), 2.0 u (bf16)"},
	{"contract/dequantize", "float32"}:        {Rel: 2 * 0x1p-24, Abs: 0x1p-149, Reason: "m = |s·q| + |b|: T(T(s·q) + b) is within (1+u)·u·(|want| + m); measured 0.85 u"},
	{"contract/dequantize", "float16"}:        {Rel: 2 * 0x1p-11, Abs: 0x1p-24, Reason: "m = |s·q| + |b|: T(T(s·q) + b) is within (1+u)·u·(|want| + m); measured 0.85 u"},
	{"contract/dequantize", "bfloat16"}:       {Rel: 2 * 0x1p-8, Abs: 0x1p-133, Reason: "m = |s·q| + |b|: T(T(s·q) + b) is within (1+u)·u·(|want| + m); measured 0.85 u"},
	{"contract/quantized_matmul", "float32"}:  {Rel: 4 * 0x1p-24, Abs: 0x1p-149, Reason: "m = Σ|x·ŵ| against the exactly dequantized weights: float32 accumulation (fused or dequantize-then-sum) and one rounding; measured 1.9 u (f32), 1.3 u (f16), 2.0 u (bf16)"},
	{"contract/quantized_matmul", "float16"}:  {Rel: 3 * 0x1p-11, Abs: 0x1p-24, Reason: "m = Σ|x·ŵ| against the exactly dequantized weights: float32 accumulation (fused or dequantize-then-sum) and one rounding; measured 1.9 u (f32), 1.3 u (f16), 2.0 u (bf16)"},
	{"contract/quantized_matmul", "bfloat16"}: {Rel: 3 * 0x1p-8, Abs: 0x1p-133, Reason: "m = Σ|x·ŵ| against the exactly dequantized weights: float32 accumulation (fused or dequantize-then-sum) and one rounding; measured 1.9 u (f32), 1.3 u (f16), 2.0 u (bf16)"},

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
