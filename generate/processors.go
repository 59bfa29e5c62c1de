package generate

import (
	"fmt"
	"math"
	"sort"

	"github.com/mlxgo/mlxgo/tensor"
)

// DefaultContextSize is mlx_lm's default context window of the repetition,
// presence and frequency penalties.
const DefaultContextSize = 20

// ProcessorOptions are mlx_lm's make_logits_processors arguments. The zero
// value makes no processors (as the mlx_lm CLI). Penalties are float64 like
// mlx_lm's Python floats and meet the logits as weakly typed scalars (rounded
// to float32, then to the logits dtype).
type ProcessorOptions struct {
	// LogitBias adds a value to a token's logit (mx.array of float32 values,
	// scatter-added: each value is rounded to the logits dtype, then added).
	LogitBias map[int32]float32
	// RepetitionPenalty, when non-zero, multiplies negative logits of tokens
	// in the context window by the penalty and divides non-negative ones by
	// it, once per distinct token. It must not be negative.
	RepetitionPenalty float64
	// RepetitionContextSize is the window of the repetition penalty; 0
	// means DefaultContextSize. (In mlx_lm a 0 would mean the whole context.)
	RepetitionContextSize int
	// PresencePenalty, when non-zero, subtracts the penalty once from the
	// logit of each distinct token in its context window.
	PresencePenalty float64
	// PresenceContextSize is the presence window; 0 means DefaultContextSize.
	PresenceContextSize int
	// FrequencyPenalty, when non-zero, subtracts the penalty from a token's
	// logit once per occurrence in its context window.
	FrequencyPenalty float64
	// FrequencyContextSize is the frequency window; 0 means DefaultContextSize.
	FrequencyContextSize int
}

// Enabled reports whether any processor is configured.
func (o ProcessorOptions) Enabled() bool {
	return len(o.LogitBias) > 0 || o.RepetitionPenalty != 0 || o.PresencePenalty != 0 || o.FrequencyPenalty != 0
}

func (o ProcessorOptions) validate() error {
	if o.RepetitionPenalty < 0 || math.IsNaN(o.RepetitionPenalty) {
		return fmt.Errorf("logits processors: repetition penalty is %v, want a non-negative value", o.RepetitionPenalty)
	}
	for name, n := range map[string]int{"repetition": o.RepetitionContextSize, "presence": o.PresenceContextSize, "frequency": o.FrequencyContextSize} {
		if n < 0 {
			return fmt.Errorf("logits processors: %s context size is %d, want 0 (default %d) or positive", name, n, DefaultContextSize)
		}
	}
	return nil
}

func window(context []int32, n int) []int32 {
	if n == 0 {
		n = DefaultContextSize
	}
	return context[max(0, len(context)-n):]
}

// Process applies the configured processors to one row of logits, in place,
// in make_logits_processors' order: logit bias, repetition penalty, presence
// penalty, frequency penalty. context is the token history the processors
// see (see Options.PromptContext), logits a [V] row whose values are exactly
// representable in dt; every result is rounded to dt as MLX's ops on a dt
// array are. A token id outside [0, V) is an error naming it.
func (o ProcessorOptions) Process(context []int32, logits []float32, dt tensor.DType) error {
	round := rounder(dt)
	if round == nil {
		return fmt.Errorf("logits processors: logits dtype %v, want BF16, F16 or F32", dt)
	}
	if err := o.validate(); err != nil {
		return err
	}
	v := int32(len(logits))
	check := func(what string, ids []int32) error {
		for _, t := range ids {
			if t < 0 || t >= v {
				return fmt.Errorf("logits processors: %s token %d outside the vocabulary [0, %d)", what, t, v)
			}
		}
		return nil
	}
	if len(o.LogitBias) > 0 {
		ids := make([]int32, 0, len(o.LogitBias))
		for t := range o.LogitBias {
			ids = append(ids, t)
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
		if err := check("logit bias", ids); err != nil {
			return err
		}
		for _, t := range ids {
			logits[t] = round(logits[t] + round(o.LogitBias[t]))
		}
	}
	if len(context) == 0 {
		return nil
	}
	if err := check("context", context); err != nil {
		return err
	}
	if p := o.RepetitionPenalty; p != 0 {
		pt := round(float32(p))
		for _, t := range distinct(window(context, o.RepetitionContextSize)) {
			if l := logits[t]; l < 0 {
				logits[t] = round(l * pt)
			} else {
				logits[t] = round(l / pt)
			}
		}
	}
	if p := o.PresencePenalty; p != 0 {
		pt := round(float32(p))
		for _, t := range distinct(window(context, o.PresenceContextSize)) {
			logits[t] = round(logits[t] - pt)
		}
	}
	if p := o.FrequencyPenalty; p != 0 {
		pt := round(float32(p))
		for _, t := range window(context, o.FrequencyContextSize) {
			logits[t] = round(logits[t] - pt)
		}
	}
	return nil
}

// distinct returns the tokens of ids without repeats, in first-seen order:
// MLX's non-accumulating scatter writes the same value for every repeat, so a
// repeated token is changed once.
func distinct(ids []int32) []int32 {
	seen := make(map[int32]bool, len(ids))
	out := ids[:0:0]
	for _, t := range ids {
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}
