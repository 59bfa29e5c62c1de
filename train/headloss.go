package train

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// The loss through the quantized head, in row chunks (the seed's fused
// cross-entropy, written with the backend's ops): the final norm, the
// head's matmul (the quantized lm_head, or the tied quantized embedding
// table, as the checkpoint has it) and default_loss's cross-entropy run on
// chunk rows of the flattened [B·T, hidden] stream at a time, so no more
// than [chunk, vocab] logits exist at once; only each row's float32
// cross-entropy is kept, and their sum is default_loss's. Every op of a
// row's value is the plain loss's, row by row, and the rows' sum is the
// same reduction over the same vector, so the loss is the plain loss's bit
// for bit on a backend whose norm and matmul give a row the same value
// whatever the rows around it (TestHeadLoss checks both backends).
//
// DefaultLossChunk is the chunk a trainer uses when asked for the chunked
// loss without a size: the rows that make one chunk's logits 2^24 values
// (64 MiB in float32): 341 rows for SmolLM2's 49,152 tokens, 128 for
// MiniCPM5's 130,560.
func DefaultLossChunk(vocab int) int {
	return max(1, (1<<24)/max(vocab, 1))
}

// headLoss is default_loss over the stream h [B, T, hidden] after the last
// layer, chunk rows at a time. Under a transform each chunk is a
// Differentiator.Checkpoint, so the backward recomputes its logits one
// chunk at a time instead of keeping them all.
func headLoss(b backend.Backend, d backend.Differentiator, m *minicpm5.Model, h backend.Array, ld lossData, mask backend.Array, chunk int) (loss, ntoks backend.Array, err error) {
	hf := b.Reshape(h, ld.B*ld.T, -1)
	maskF := b.Reshape(mask, -1)
	var parts []backend.Array
	for r0 := 0; r0 < ld.B*ld.T; r0 += chunk {
		r1 := min(r0+chunk, ld.B*ld.T)
		// The mask is an input, not a capture: MLX calls the function
		// again in its backward, after this scope's arrays are gone.
		fn := d.Checkpoint(chunkCE(b, d, m, ld.tg[r0:r1]))
		out, err := fn([]backend.Array{b.Slice(hf, []int{r0, 0}, []int{r1, hf.Shape()[1]}), b.Slice(maskF, []int{r0}, []int{r1})})
		if err != nil {
			return nil, nil, err
		}
		parts = append(parts, out[0])
	}
	return meanCE(b, concat(b, parts), mask)
}

func concat(b backend.Backend, parts []backend.Array) backend.Array {
	if len(parts) == 1 {
		return parts[0]
	}
	return b.Concatenate(0, parts...)
}

// chunkCE is the function of one chunk: rows [C, hidden] of the stream
// and their mask [C] to their float32 cross-entropies [C] (targets tg),
// keeping nothing else.
func chunkCE(b backend.Backend, d backend.Differentiator, m *minicpm5.Model, tg []int32) backend.Func {
	return func(in []backend.Array) ([]backend.Array, error) {
		s := b.Scope()
		defer s.Close()
		logits := m.Head(m.Norm.Forward(in[0]))
		return []backend.Array{s.Keep(ceRows(b, d, logits, tg, in[1]))}, nil
	}
}

// headGrad is the head's part of a segmented backward: the loss, its
// token count, and the loss's gradient with respect to the stream h
// [B, T, hidden] after the last layer. With chunk > 0 it takes one VJP a
// chunk, evaluated before the next, so that at most one chunk's logits
// exist; with chunk 0 one VJP of the plain loss (full logits).
func headGrad(b backend.Backend, d backend.Differentiator, m *minicpm5.Model, h backend.Array, ld lossData, mask backend.Array, chunk int) (loss, ntoks, dh backend.Array, err error) {
	one := b.Full(tensor.Shape{}, 1, tensor.F32)
	if chunk <= 0 {
		fn := func(in []backend.Array) ([]backend.Array, error) {
			logits := m.Head(m.Norm.Forward(in[0]))
			l, n, err := meanCE(b, b.Reshape(ceRows(b, d, logits, ld.tg, mask), -1), mask)
			return []backend.Array{l, n}, err
		}
		outs, vjps, err := d.VJP(fn, []backend.Array{h}, []backend.Array{one, nil})
		if err != nil {
			return nil, nil, nil, err
		}
		return outs[0], outs[1], vjps[0], nil
	}
	// The cotangent of each row's cross-entropy: the VJP of the mean
	// (sum / ntoks) at its sum, the value the plain backward gives them.
	ntoks = b.Sum(b.Reshape(mask, -1), 0, false)
	_, ds, err := d.VJP(func(in []backend.Array) ([]backend.Array, error) {
		return []backend.Array{b.Binary(backend.Divide, in[0], ntoks)}, nil
	}, []backend.Array{b.Zeros(tensor.Shape{}, tensor.F32)}, []backend.Array{one})
	if err != nil {
		return nil, nil, nil, err
	}
	N := ld.B * ld.T
	hf := b.Reshape(h, N, -1)
	D := hf.Shape()[1]
	maskF := b.Reshape(mask, -1)
	var parts, dparts []backend.Array
	for r0 := 0; r0 < N; r0 += chunk {
		r1 := min(r0+chunk, N)
		cot := b.Binary(backend.Multiply, ds[0], b.Full(tensor.Shape{r1 - r0}, 1, tensor.F32))
		ce, mc := chunkCE(b, d, m, ld.tg[r0:r1]), b.Slice(maskF, []int{r0}, []int{r1})
		fn := func(in []backend.Array) ([]backend.Array, error) { return ce([]backend.Array{in[0], mc}) }
		outs, vjps, err := d.VJP(fn, []backend.Array{b.Slice(hf, []int{r0, 0}, []int{r1, D})}, []backend.Array{cot})
		if err != nil {
			return nil, nil, nil, err
		}
		if err := b.Eval(outs[0], vjps[0]); err != nil {
			return nil, nil, nil, fmt.Errorf("train: loss chunk of rows %d..%d: %w", r0, r1, err)
		}
		parts, dparts = append(parts, outs[0]), append(dparts, vjps[0])
	}
	loss, ntoks, _ = meanCE(b, concat(b, parts), mask)
	return loss, ntoks, b.Reshape(concat(b, dparts), ld.B, ld.T, D), nil
}
