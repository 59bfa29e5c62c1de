package debug

import "github.com/mlxgo/mlxgo/tensor"

// Tolerance bounds a tap's NormErr = max|a-b| / max|b| between two
// implementations that may round differently.
type Tolerance struct {
	Class   string
	DType   string
	NormErr float64 // 0 with Exact
	Exact   bool
	Reason  string
}

type tolKey struct {
	class string
	dt    tensor.DType
}

// tolerances is the one table, per tap class and dtype. The measurements
// quoted are `mlxgo diff` of the CPU backend (reference precision) against
// the oracle's tap dumps of all twelve fixture checkpoints (7-token prompt);
// each bound leaves about 10x over the worst measured value.
var tolerances = map[tolKey]Tolerance{
	{"embed", tensor.F32}:  {NormErr: 0x1p-23, Reason: "gathered rows dequantized with one rounding of scale·q+bias (or copied): at most one float32 ulp of the table's scale; measured 0 (bit-identical) on every checkpoint"},
	{"embed", tensor.BF16}: {NormErr: 0x1p-8, Reason: "as f32, one bf16 rounding (2^-8 relative); measured 0"},

	{"rms_norm", tensor.F32}:  {NormErr: 3e-5, Reason: "float32 end to end: each op rounds once but sums in another order (SIMD/blocked vs MLX's sequential loops), ~sqrt(K)·2^-24 per reduction, compounding over 3 layers; measured worst 2.1e-6 (final norm); 10x margin"},
	{"proj_rope", tensor.F32}: {NormErr: 3e-5, Reason: "as rms_norm: a projection's K-long dot products in another order, then RoPE's sin/cos (float32, both sides); measured worst 1.6e-6"},
	{"proj", tensor.F32}:      {NormErr: 3e-5, Reason: "as rms_norm: K-long dot products summed in another order; measured worst 3.0e-6 (mlp.down, K 384)"},
	{"sdpa", tensor.F32}:      {NormErr: 3e-5, Reason: "as rms_norm: softmax and the weighted sum of values in another order; measured worst 2.0e-6"},
	{"residual", tensor.F32}:  {NormErr: 3e-5, Reason: "one exact-rounded add of two taps that carry the upstream differences; measured worst 1.6e-6"},
	{"swiglu", tensor.F32}:    {NormErr: 3e-5, Reason: "silu(gate)·up, elementwise, amplifies its inputs' differences where gate is large; measured worst 3.0e-6"},
	{"logits", tensor.F32}:    {NormErr: 3e-5, Reason: "the 1000-way head over a residual stream that carries 3 layers of reordering; measured worst 2.3e-6"},

	{"rms_norm", tensor.BF16}:  {NormErr: 0.25, Reason: bf16Reason + "; measured worst 0.058 (final norm)"},
	{"proj_rope", tensor.BF16}: {NormErr: 0.25, Reason: bf16Reason + "; measured worst 0.054 (differences start here, at layer 0's first matmul)"},
	{"proj", tensor.BF16}:      {NormErr: 0.25, Reason: bf16Reason + "; measured worst 0.123 (layers.2.mlp.down of optiq-bf16)"},
	{"sdpa", tensor.BF16}:      {NormErr: 0.25, Reason: bf16Reason + "; MLX also rounds the attention scores to bf16; measured worst 0.062"},
	{"residual", tensor.BF16}:  {NormErr: 0.25, Reason: bf16Reason + "; measured worst 0.060"},
	{"swiglu", tensor.BF16}:    {NormErr: 0.25, Reason: bf16Reason + "; silu(gate)·up rounds three times in bf16; measured worst 0.096"},
	{"logits", tensor.BF16}:    {NormErr: 0.25, Reason: bf16Reason + "; measured worst 0.053"},
}

// bf16Reason explains the bf16 rows.
const bf16Reason = "bf16: MLX's CPU accumulates bf16 quantized matmuls in bf16, so its own error is several percent of a tap's scale while ours (float32 accumulation, one rounding) is 2^-9; the two differ by MLX's error. Bounds are 2x the worst measured against the oracle (about 4x the typical), catching gross faults (a wrong position, scale or op, error ~1) but not a one-ulp one: compare bf16 runs of one implementation in the exact regime, or f32 checkpoints, for those"

// exactTolerance is the budget of two runs of the same implementation.
var exactTolerance = Tolerance{Exact: true, Reason: "same backend at the same precision: a deterministic implementation run twice on the same input must give the same bits (tier 1 of the design)"}

// ToleranceFor returns the bound for a tap class in dtype dt; exact asks for
// bit-identical values (two runs of one implementation).
func ToleranceFor(class string, dt tensor.DType, exact bool) Tolerance {
	if exact {
		t := exactTolerance
		t.Class, t.DType = class, dt.String()
		return t
	}
	if t, ok := tolerances[tolKey{class, dt}]; ok {
		return t
	}
	// F16 and F64 taps have no measured row: use the bf16 row for f16
	// (also 16-bit, finer mantissa) and the f32 row for f64.
	fb := tensor.F32
	if dt == tensor.F16 || dt == tensor.BF16 {
		fb = tensor.BF16
	}
	if t, ok := tolerances[tolKey{class, fb}]; ok {
		t.DType = dt.String()
		t.Reason += " (row of " + fb.String() + ": no measurement for " + dt.String() + ")"
		return t
	}
	return Tolerance{Class: class, DType: dt.String(), NormErr: 0, Exact: true, Reason: "unknown tap class: exact"}
}

// Tolerances returns the table's rows (for documentation and the CLI).
func Tolerances() []Tolerance {
	var out []Tolerance
	for _, c := range []string{"embed", "rms_norm", "proj_rope", "proj", "sdpa", "residual", "swiglu", "logits"} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			if t, ok := tolerances[tolKey{c, dt}]; ok {
				out = append(out, t)
			}
		}
	}
	return out
}

func init() {
	for k, t := range tolerances {
		t.Class, t.DType = k.class, k.dt.String()
		tolerances[k] = t
	}
}
