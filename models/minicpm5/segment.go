package minicpm5

import "github.com/mlxgo/mlxgo/backend"

// The model's segmented training pass (the seed's SegmentedTraining):
// Forward with a nil cache is the same as
//
//	h := m.Embed(ids)
//	h = m.RunLayers(h, 0, k, nil)         // any split 0 ≤ k ≤ len(m.Layers)
//	h = m.RunLayers(h, k, len(m.Layers), nil)
//	logits := m.Head(m.Norm.Forward(h))
//
// bit for bit, so a trainer can run layer ranges one at a time, keep only
// the hidden states at the ranges' boundaries and recompute a range in
// its backward. A range runs over stateless training caches: none, as in
// mlx_lm's cache=None (positions from 0, the causal mask, nothing kept),
// so it can be run again with the same result.

// Embed returns the embeddings of ids (integer [B, L]): [B, L, hidden],
// the residual stream before layer 0.
func (m *Model) Embed(ids backend.Array) backend.Array {
	return m.EmbedTokens.Forward(ids)
}

// RunLayers runs layers lo..hi-1 on the residual stream h [B, L, hidden]
// from position 0 with the training mask (causal; none for L = 1) and
// returns the stream after layer hi-1 (h itself when lo == hi). block,
// when not nil, runs each layer in place of Block.Forward (as
// ForwardOptions.Block). It keeps only its output: h is the caller's,
// the layers' intermediates are freed. It panics (an *backend.OpError)
// on a range outside the model.
func (m *Model) RunLayers(h backend.Array, lo, hi int, block func(i int, l *Block, h backend.Array, mask backend.Mask) backend.Array) backend.Array {
	if lo < 0 || hi > len(m.Layers) || lo > hi {
		panic(backend.Errorf("RunLayers", []backend.Array{h}, "layer range [%d, %d) outside the model's %d layers", lo, hi, len(m.Layers)))
	}
	mask := m.mask(h, nil)
	for i := lo; i < hi; i++ {
		var next backend.Array
		if block != nil {
			next = block(i, m.Layers[i], h, mask)
		} else {
			next = m.Layers[i].Forward(h, mask, nil)
		}
		if i > lo {
			m.b.Release(h)
		}
		h = next
	}
	return h
}

// Head returns the output head applied to x (the final norm's output):
// lm_head, or the embedding table as a linear layer when the checkpoint
// ties them; [..., vocab] in the model's dtype.
func (m *Model) Head(x backend.Array) backend.Array {
	return m.head(x)
}
