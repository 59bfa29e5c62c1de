package train

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/checkpoint"
)

// ActivationEstimate is the estimated memory of a segmented training
// step's activations (weights, adapters and optimizer state left out),
// in bytes, each part counted in float32 for B rows of T tokens:
//
//	Boundaries: the streams kept at the ranges' boundaries and the
//	            gradient passed between ranges, (⌈adapted/N⌉ + 2)·B·T·hidden·4;
//	Segment:    one range's intermediates under its VJP, per layer and
//	            token 12 of hidden's width (norms, residuals, o_proj and
//	            down_proj with their LoRA terms), 7 of the attention's
//	            (heads + 2·kv_heads)·head_dim (q, k, v with their LoRA
//	            terms, RoPE, the attention's output) and 9 of
//	            intermediate (gate and up with their LoRA terms, SwiGLU):
//	            N·B·T·(12·hidden + 7·(heads + 2·kv_heads)·head_dim + 9·intermediate)·4;
//	Attention:  one layer's attention backward, which keeps about ten
//	            score-sized arrays: 10·B·heads·T²·4;
//	Head:       one loss chunk's logits and what its VJP makes of them,
//	            6·chunk·vocab·4.
//
// The coefficients count the arrays the CPU backend's tape keeps;
// TestActivationEstimate holds the estimate above the CPU backend's
// measured peaks (and within 4× of them). MLX, which frees a lazy
// graph's arrays as it evaluates it, peaks lower.
type ActivationEstimate struct {
	Boundaries, Segment, Attention, Head int64
}

// Total is the estimate's sum.
func (e ActivationEstimate) Total() int64 { return e.Boundaries + e.Segment + e.Attention + e.Head }

// EstimateActivations estimates a segmented step's activations for
// segments of n layers over adapted layers, B rows of T tokens and loss
// chunks of chunk rows (0: the full logits, B·T rows).
func EstimateActivations(cfg *checkpoint.Config, adapted, n, B, T, chunk int) ActivationEstimate {
	R := int64(B) * int64(T)
	D, I := int64(cfg.HiddenSize), int64(cfg.IntermediateSize)
	Q := int64(cfg.NumAttentionHeads+2*cfg.NumKeyValueHeads) * int64(cfg.HeadDim)
	if chunk <= 0 || int64(chunk) > R {
		chunk = int(R)
	}
	nseg := int64((adapted + n - 1) / n)
	return ActivationEstimate{
		Boundaries: (nseg + 2) * R * D * 4,
		Segment:    int64(n) * R * (12*D + 7*Q + 9*I) * 4,
		Attention:  10 * int64(B) * int64(cfg.NumAttentionHeads) * int64(T) * int64(T) * 4,
		Head:       6 * int64(chunk) * int64(cfg.VocabSize) * 4,
	}
}

// SegmentLayersFor returns the largest segment size n (1..adapted) whose
// ActivationEstimate fits in budget bytes, and its estimate; an error
// naming the smallest estimate when none does.
func SegmentLayersFor(budget int64, cfg *checkpoint.Config, adapted, B, T, chunk int) (int, ActivationEstimate, error) {
	for n := adapted; n >= 1; n-- {
		if e := EstimateActivations(cfg, adapted, n, B, T, chunk); e.Total() <= budget {
			return n, e, nil
		}
	}
	e := EstimateActivations(cfg, adapted, 1, B, T, chunk)
	return 0, e, fmt.Errorf("train: --train-memory-budget %d bytes is below the estimate for segments of one layer at batch %d × %d tokens: %d bytes (%d of boundary states, %d for the layer, %d for its attention backward, %d for a loss chunk)",
		budget, B, T, e.Total(), e.Boundaries, e.Segment, e.Attention, e.Head)
}

// ParseBytes reads a byte count: digits, optionally followed by K, M or
// G (or KiB, MiB, GiB: powers of 1024).
func ParseBytes(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = rest, u.mult
			break
		}
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a positive byte count (digits, optionally followed by K, M or G)", s)
	}
	return v * mult, nil
}

// planSegments sets the trainer's segment size and loss chunk from c
// (after the adapters exist): --segment-layers as given, or the size
// --train-memory-budget allows at c.BatchSize rows of c.MaxSeqLength
// tokens; segmenting, the loss chunk defaults to DefaultLossChunk. It
// refuses what cannot be combined.
func planSegments(t *Trainer, c Config, out io.Writer) error {
	m := t.Model
	switch {
	case c.SegmentLayers < 0:
		return fmt.Errorf("train: --segment-layers %d: want a positive number of layers (or 0: no segments)", c.SegmentLayers)
	case c.SegmentLayers > len(m.Layers):
		return fmt.Errorf("train: --segment-layers %d: the model has %d layers", c.SegmentLayers, len(m.Layers))
	case c.LossChunk < 0:
		return fmt.Errorf("train: --loss-chunk %d: want a positive number of rows (or 0)", c.LossChunk)
	case c.SegmentLayers > 0 && c.TrainMemoryBudget != "":
		return fmt.Errorf("train: --segment-layers and --train-memory-budget both given: give one")
	}
	t.LossChunk = c.LossChunk
	if c.SegmentLayers == 0 && c.TrainMemoryBudget == "" {
		return nil
	}
	if c.GradCheckpoint {
		return fmt.Errorf("train: --grad-checkpoint with a segmented backward: give one (segments already recompute their layers)")
	}
	if c.LoRAParameters.Dropout > 0 {
		return fmt.Errorf("train: lora_parameters.dropout %g with a segmented backward is not implemented (a recomputed segment would draw new dropout masks)", c.LoRAParameters.Dropout)
	}
	if t.LossChunk == 0 {
		t.LossChunk = DefaultLossChunk(m.VocabSize())
	}
	_, first, err := t.slotLayers(t.params())
	if err != nil {
		return err
	}
	adapted := len(m.Layers) - first
	n := c.SegmentLayers
	if c.TrainMemoryBudget != "" {
		budget, err := ParseBytes(c.TrainMemoryBudget)
		if err != nil {
			return fmt.Errorf("train: --train-memory-budget: %w", err)
		}
		if n, _, err = SegmentLayersFor(budget, m.Config(), adapted, c.BatchSize, c.MaxSeqLength, t.LossChunk); err != nil {
			return err
		}
	}
	t.SegmentLayers = n
	e := EstimateActivations(m.Config(), adapted, n, c.BatchSize, c.MaxSeqLength, t.LossChunk)
	fmt.Fprintf(out, "Segmented backward: %d adapted layers in segments of %d, loss chunks of %d rows; activations estimated at %.3f GB for batches of %d × %d tokens\n",
		adapted, n, t.LossChunk, float64(e.Total())/1e9, c.BatchSize, c.MaxSeqLength)
	return nil
}
