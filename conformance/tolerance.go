package conformance

import (
	"fmt"
	"sort"
	"strings"
)

// Budget is a row of the tolerance table: how close an output must be to
// the value it is held to (the oracle's, a float64 evaluation's, another run
// of the same implementation's). A row sets only the fields of the metric it
// uses; Reason says where its numbers come from and Measured what was
// measured against them.
type Budget struct {
	// Class and DType are the class and dtype the row was looked up for
	// (filled in by BudgetFor; a table row leaves them empty).
	Class, DType string
	// Exact requires identical values (tokens, indices, integer outputs).
	Exact bool
	// RefFactor > 0 holds the output to the case's float64 reference: our
	// worst absolute error may be at most RefFactor times the oracle's own
	// worst error against that reference, plus one ulp of the output dtype.
	RefFactor float64
	// Abs and Rel bound |got-want| <= Abs + Rel*|want| elementwise, used when
	// the case has no float64 reference.
	Abs, Rel float64
	// NormErr bounds max|got-want| / max|want|: the error relative to the
	// output's scale (debug's taps, self-consistency checks of models).
	NormErr float64
	// TokensUntilNoise checks generated tokens only up to the first step where
	// the oracle's margin is within its own measured error (bf16 greedy cases
	// on backends other than MLX itself).
	TokensUntilNoise bool
	// MaxKL > 0 judges rows of logits as next-token distributions: KL(oracle
	// ‖ ours) in nats at most MaxKL at every row and MeanKL on average, and
	// the argmax equal to the oracle's wherever the oracle's top-2 margin
	// exceeds ArgmaxMargin (for arithmetic that is not meant to be close per
	// logit, such as the CPU backend's "fast" precision).
	MaxKL, MeanKL, ArgmaxMargin float64
	// Reason says where the numbers come from.
	Reason string
	// Measured is what was measured against the bound, and on what.
	Measured string
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
	e := bitExact
	e.Class, e.DType = class, dtype
	return e, nil
}

// key is (tolerance class, dtype); dtype "*" matches any.
type key struct{ class, dtype string }

// budgets is the one table of tolerances, read by Check (the fixtures), by
// package debug (the "tap." rows, `mlxgo diff`) and by the model tests.
// Every op case carries a float64 reference, so op classes default to "at
// least as accurate as MLX"; the rows below are the exceptions, then the
// model-level classes the oracle's model fixtures name, then the classes of
// tests that hold a model or a kernel to something other than a fixture
// output, then debug's tap classes.
//
// Writing a row: key {class, dtype} (dtype as MLX spells it, "*" for any);
// set only the fields of the metric the row uses; Reason says why the number
// is what it is (the error analysis), Measured what was measured against it
// (the worst value, on which backend, case or checkpoint). A class whose name
// has a family prefix ("tap.") falls back only to its family's wildcard
// ("tap.*"), never to the op rows.
var budgets = map[key]Budget{
	{"*", "*"}:                      {RefFactor: 1, Reason: "every op: no less accurate than MLX itself against the float64 reference, plus one output ulp (both sides round to the output dtype)"},
	{"*", "float32"}:                {RefFactor: 2, Reason: "float32 ops: the same precision as MLX's CPU summed in another order (pairwise/blocked vs sequential); the worst element may land up to twice as far from float64", Measured: "cpu: worst ratio 1.8 (SDPA, one query)"},
	{"quantized_matmul", "float32"}: {RefFactor: 3, Reason: "the fused form scale·Σ(q·x) + bias·Σx (the CPU backend's one-row kernels, Metal's qmv) cancels between its two terms; MLX's CPU dequantizes then sums sequentially", Measured: "cpu: worst ratio 2.5 (b5g128)"},

	{"turboquant", "*"}:                 {Exact: true, Reason: "the TurboQuant codec (codes, float16 scales and zero points, packed bytes, decoded windows) is a deterministic float32 function of its input, specified to the operation order (nn/turboquant): it must equal the independent numpy implementation bit for bit"},
	{"turboquant_attention", "float32"}: {RefFactor: 2, Reason: "attention over the decoded windows (the deferred output un-rotated in float32 after it): the fused SDPA's float32 summed in another order, as the \"*\" float32 row", Measured: "cpu: worst 0.81 of the budget (k4v2/d64/constant attn_deferred: 1.57e-6 against the oracle's own 8.6e-7); mlx: bit for bit"},

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

	{"contract/grad", "float32"}: {Rel: 8 * 0x1p-24, Abs: 0x1p-149, Reason: "m = max|want| of the gradient: a VJP chains a few float32 ops (sums of up to 64 terms, exp, rsqrt), each rounded, whose cancellations make an elementwise relative bound meaningless, so the error is held against the gradient's scale; the backends differentiate differently (the CPU backend's hand-written VJPs, MLX's autodiff)", Measured: "worst 2.7 u (mlx, SDPA dk), 2.0 u (cpu, SDPA dk); elementwise VJPs under 1 u"},

	{"model_tokens", "float32"}:  {Exact: true, Reason: "greedy tokens must equal the oracle's; the oracle only records prompts whose top-2 margins exceed 1e-3, far above float32 noise", Measured: "cpu: every token of the 12 decode and greedy cases of the six f32 checkpoints"},
	{"model_tokens", "bfloat16"}: {TokensUntilNoise: true, Reason: "MLX's CPU bf16 logprobs are off by up to ~4 from the float32 run of the same weights (oracle_logprob_error); tokens are checked until the oracle's margin falls within twice that", Measured: "cpu: every checked token agrees; checked are 0-18 of 32 greedy tokens (fp-bf16: 18) and 1-8 of 8 decode steps"},
	{"model_logits", "float32"}:  {Abs: 5e-4, Reason: "float32 end to end: summation order alone (~sqrt(K)·2^-24 relative per op over ~30 ops, 3 layers, 1000-way head) on logits of scale 30-65", Measured: "cpu: worst 1.18e-4 (optiq-f32 hidden logits); logprobs 9.2e-5"},
	{"model_hidden", "float32"}:  {Abs: 1e-4, Reason: "as model_logits, before the head, on a residual stream of scale 3-15", Measured: "cpu: worst 2.3e-5 (q4g64-f32 and tied-f32 h.2)"},
	{"model_logits", "bfloat16"}: {RefFactor: 1, Reason: "no less accurate than MLX against the float32 run of the same bf16 weights (ref.*), plus one bf16 ulp at the logit scale", Measured: "cpu: at most 0.77 of the budget (fp-bf16 decode logits: 0.443 against 0.577, the oracle's own error 0.327); on the quantized checkpoints our error is 0.2-0.3 of the oracle's; the kv_bits cases, whose attention is the CPU backend's fused quantized one (online softmax, scores and weights in float32 where mlx_lm's quantized_scaled_dot_product_attention rounds both to bf16, so no new term in the bound), at 0.23-0.31 of the budget (0.22-0.37 with the composition)"},
	{"model_hidden", "bfloat16"}: {RefFactor: 1, Reason: "as model_logits", Measured: "cpu: at most 0.67 of the budget (fp-bf16 norm: 0.031 against 0.046)"},

	// Classes of tests that hold a model to something other than the
	// class its fixture names.

	{"model_tokens_unquantized", "bfloat16"}:  {Exact: true, Reason: "on a checkpoint without quantization our bf16 model rounds every op's output to bf16 at MLX's points (only the attention differs: MLX's CPU device rounds scores and probabilities to bf16, we keep float32 as its fused kernels do), so it decides even the tokens whose oracle margin is within the oracle's noise as MLX does; read by TestUnquantizedTokens in place of model_tokens", Measured: "cpu: fp-bf16 greedy 32 of 32 (14 of them beyond the oracle's noise), decode 8 of 8"},
	{"fast_logits", "float32"}:                {MaxKL: 1.5, MeanKL: 0.25, ArgmaxMargin: 2.5, Reason: "the CPU backend's \"fast\" precision rounds the activations of every quantized matmul to int8 per block of 32 (at most max|x_block|/254 each, ~2^-8 relative, like bf16) and sums dense matmuls with FMA in blocks (kernel.DenseFastBound); these tiny random checkpoints amplify that (an ulp flips a few int8 roundings and random attention spreads it: the portable and AVX-512 int8 kernels, equal up to summation order, end 2.4 apart on logits of scale 42), so fast logits are judged as distributions, teacher-forced on the oracle's decode cases, and the argmax is held only where the oracle's margin exceeds that 2.4 (a margin of 0.5 flipped on q4g64-f32 when the AVX2 SDPA replaced the portable one, equal up to summation order, and on llama3rope-f32 when one 32-term sum of the portable softmax was reversed): a broken kernel (a lost bias, a wrong nibble order) moves logits by their whole scale, a KL of several nats. Read by TestFastPrecision in place of model_logits", Measured: "cpu fast (Zen 3, AVX2 kernels, 2026-12-02): KL mean 1.65e-11 (fp-f32, no quantization: only its dense matmuls' FMA sums) to 0.051 (llama3rope-f32), worst row 0.174 nats (q4g64-f32); every argmax with oracle margin > 2.5 agrees (21 rows), 44 of 48 overall; the bounds were set when a kernel measured a worst row of 0.76 (q8g32-f32)"},
	{"model_decode_vs_recompute", "float32"}:  {NormErr: 1e-4, Reason: "logits of a sequence fed token by token through the KV cache against one forward over the whole sequence, same backend: only the shapes differ (matrix-vector vs matrix-matrix kernels, attention over a cache), so at most the summation-order noise of model_logits; read by models/minicpm5 TestDecodeEqualsRecompute", Measured: "cpu: bit-identical (24000 of 24000 logits) on every f32 checkpoint"},
	{"model_decode_vs_recompute", "bfloat16"}: {NormErr: 0x1p-5, Reason: "as float32, with each op's output rounded to bf16: a reordering can move a value by one bf16 ulp (2^-8 relative) per op; 8 ulps at the bottom of the output's binade", Measured: "cpu: bit-identical (24000 of 24000 logits) on every bf16 checkpoint"},
	{"convert_rope_permutation", "float32"}:   {NormErr: 1e-4, Reason: "convert: logits of a checkpoint converted from llama.cpp's row order (traditional RoPE) against ours (non-traditional RoPE on un-permuted rows): mathematically equal, the two RoPE layouts only reorder float32 work", Measured: "cpu: 1.14e-5 on logits of scale 27.6 (4.1e-7 of it); without the permutation 5.55 (TestRoPEPermutation)"},
	{"smollm2_logprobs", "float32"}:           {Abs: 2e-3, Reason: "convert: SmolLM2-135M converted from GGUF against mlx_lm's top-k log-probabilities: both run the same quantized weights in float32 (the F32 norms promote the F16 activations), so the difference is float32 accumulation-order noise through 30 layers; 2e-3 is ~20x the spread the oracle itself measured between two mathematically equal RoPE layouts (max_abs_logprob_diff in cases.json, 9.3e-5)", Measured: "cpu: worst 2.0e-4 over the top 16 of the first 8 steps (TestSmolLM2Greedy)"},

	// Debug's tap classes (`mlxgo diff`, debug.ToleranceFor): NormErr bounds
	// max|a-b| / max|b| of one tap between two implementations that may round
	// differently. Measured: `mlxgo diff` of the CPU backend (reference
	// precision) against the oracle's tap dumps of all twelve fixture
	// checkpoints (7-token prompt); each bound leaves about 10x over the worst
	// measured value.

	{"tap.rerun", "*"}: {Exact: true, Reason: "same backend at the same precision: a deterministic implementation run twice on the same input must give the same bits (tier 1 of the design)", Measured: "cpu: two runs bit-identical at every tap (debug TestSameImplementationAgrees, q4g64-bf16)"},

	{"tap.embed", "float32"}:  {NormErr: 0x1p-23, Reason: "gathered rows dequantized with one rounding of scale·q+bias (or copied): at most one float32 ulp of the table's scale", Measured: "0 (bit-identical) on every checkpoint"},
	{"tap.embed", "bfloat16"}: {NormErr: 0x1p-8, Reason: "as f32, one bf16 rounding (2^-8 relative)", Measured: "0"},

	{"tap.rms_norm", "float32"}:  {NormErr: 3e-5, Reason: "float32 end to end: each op rounds once but sums in another order (SIMD/blocked vs MLX's sequential loops), ~sqrt(K)·2^-24 per reduction, compounding over 3 layers; 10x margin", Measured: "worst 2.1e-6 (final norm)"},
	{"tap.proj_rope", "float32"}: {NormErr: 3e-5, Reason: "as rms_norm: a projection's K-long dot products in another order, then RoPE's sin/cos (float32, both sides)", Measured: "worst 1.6e-6"},
	{"tap.proj", "float32"}:      {NormErr: 3e-5, Reason: "as rms_norm: K-long dot products summed in another order", Measured: "worst 3.0e-6 (mlp.down, K 384)"},
	{"tap.sdpa", "float32"}:      {NormErr: 3e-5, Reason: "as rms_norm: softmax and the weighted sum of values in another order", Measured: "worst 2.0e-6"},
	{"tap.residual", "float32"}:  {NormErr: 3e-5, Reason: "one exact-rounded add of two taps that carry the upstream differences", Measured: "worst 1.6e-6"},
	{"tap.swiglu", "float32"}:    {NormErr: 3e-5, Reason: "silu(gate)·up, elementwise, amplifies its inputs' differences where gate is large", Measured: "worst 3.0e-6"},
	{"tap.logits", "float32"}:    {NormErr: 3e-5, Reason: "the 1000-way head over a residual stream that carries 3 layers of reordering", Measured: "worst 2.3e-6"},

	{"tap.rms_norm", "bfloat16"}:  {NormErr: 0.25, Reason: tapBF16Reason, Measured: "worst 0.058 (final norm)"},
	{"tap.proj_rope", "bfloat16"}: {NormErr: 0.25, Reason: tapBF16Reason, Measured: "worst 0.054 (differences start here, at layer 0's first matmul)"},
	{"tap.proj", "bfloat16"}:      {NormErr: 0.25, Reason: tapBF16Reason, Measured: "worst 0.123 (layers.2.mlp.down of optiq-bf16)"},
	{"tap.sdpa", "bfloat16"}:      {NormErr: 0.25, Reason: tapBF16Reason + "; MLX also rounds the attention scores to bf16", Measured: "worst 0.062"},
	{"tap.residual", "bfloat16"}:  {NormErr: 0.25, Reason: tapBF16Reason, Measured: "worst 0.060"},
	{"tap.swiglu", "bfloat16"}:    {NormErr: 0.25, Reason: tapBF16Reason + "; silu(gate)·up rounds three times in bf16", Measured: "worst 0.096"},
	{"tap.logits", "bfloat16"}:    {NormErr: 0.25, Reason: tapBF16Reason, Measured: "worst 0.053"},
}

// tapBF16Reason explains the bf16 tap rows.
const tapBF16Reason = "bf16: MLX's CPU accumulates bf16 quantized matmuls in bf16, so its own error is several percent of a tap's scale while ours (float32 accumulation, one rounding) is 2^-9; the two differ by MLX's error. Bounds are 2x the worst measured against the oracle (about 4x the typical), catching gross faults (a wrong position, scale or op, error ~1) but not a one-ulp one: compare bf16 runs of one implementation in the exact regime, or f32 checkpoints, for those"

// wildcard is the class whose rows stand in for class's missing ones: "*"
// for op and model classes, "tap.*" for the "tap." family, whose classes
// must not fall back to the op rows.
func wildcard(class string) string {
	if i := strings.LastIndexByte(class, '.'); i >= 0 {
		return class[:i+1] + "*"
	}
	return "*"
}

// BudgetFor returns the row of the table for a tolerance class and dtype:
// (class, dtype), else (class, "*"), else the wildcard class of its family
// ("*", or "tap.*" for "tap." classes) with dtype, then with "*". The row
// comes back with Class and DType set to the arguments.
func BudgetFor(class, dtype string) (Budget, error) {
	w := wildcard(class)
	for _, k := range []key{{class, dtype}, {class, "*"}, {w, dtype}, {w, "*"}} {
		if b, ok := budgets[k]; ok {
			b.Class, b.DType = class, dtype
			return b, nil
		}
	}
	return Budget{}, fmt.Errorf("no tolerance for class %q dtype %q", class, dtype)
}

// Budgets returns every row of the table, sorted by class and dtype, with
// Class and DType set to the row's key (for documentation and listings).
func Budgets() []Budget {
	out := make([]Budget, 0, len(budgets))
	for k, b := range budgets {
		b.Class, b.DType = k.class, k.dtype
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Class != out[j].Class {
			return out[i].Class < out[j].Class
		}
		return out[i].DType < out[j].DType
	})
	return out
}
