package minicpm5

import (
	"strconv"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// Block is one transformer layer, mlx_lm's TransformerBlock.
type Block struct {
	B                      backend.Backend
	SelfAttn               *nn.Attention
	MLP                    *nn.MLP
	InputLayernorm         *nn.RMSNorm
	PostAttentionLayernorm *nn.RMSNorm
}

// Forward runs the block in a scope of its own, keeping its output and the
// cache's arrays.
func (l *Block) Forward(x backend.Array, mask backend.Mask, cache nn.KVCache) backend.Array {
	return l.ForwardTap(x, mask, cache, nil)
}

// ForwardTap is Forward that also hands tap (when not nil) the block's
// intermediates in graph order: "input_norm", the attention's taps (see
// nn.Attention.ForwardTap), "residual" (x plus the attention output),
// "post_norm", the MLP's taps prefixed "mlp." and "out".
func (l *Block) ForwardTap(x backend.Array, mask backend.Mask, cache nn.KVCache, tap nn.Tap) backend.Array {
	s := l.B.Scope()
	defer s.Close()
	xn := l.InputLayernorm.Forward(x)
	if tap != nil {
		tap("input_norm", xn)
	}
	r := l.SelfAttn.ForwardTap(xn, mask, cache, tap)
	h := l.B.Binary(backend.Add, x, r)
	if tap != nil {
		tap("residual", h)
	}
	hn := l.PostAttentionLayernorm.Forward(h)
	if tap != nil {
		tap("post_norm", hn)
	}
	r = l.MLP.ForwardTap(hn, nn.Prefixed(tap, "mlp."))
	out := l.B.Binary(backend.Add, h, r)
	if tap != nil {
		tap("out", out)
	}
	if cache != nil {
		s.Keep(cache.State()...)
	}
	return s.Keep(out)
}

// Model is MiniCPM5 (mlx_lm's llama Model): embeddings, blocks, final norm
// and an output head that is lm_head or, when tied, the embedding table.
type Model struct {
	EmbedTokens nn.Embedder
	Layers      []*Block
	Norm        *nn.RMSNorm
	LMHead      nn.Linear // nil when tie_word_embeddings

	b      backend.Backend
	cfg    *checkpoint.Config
	dtype  tensor.DType
	rope   *nn.RoPE
	arrays []backend.Array        // borrowed weights, released by Close
	ck     *checkpoint.Checkpoint // closed by Close when Load opened it
	// warnings are the checkpoint's (checkpoint.Checkpoint.Warnings).
	warnings []string
}

// ForwardOptions select what Forward returns.
type ForwardOptions struct {
	// LogitsRows are the positions (0..L-1) the head is applied to, in the
	// order given; nil means every position.
	LogitsRows []int
	// NoLogits skips the head: Output.Logits is nil (a prefill chunk whose
	// logits nobody reads, as in mlx_lm's generate_step).
	NoLogits bool
	// CaptureHidden fills Output.Hidden and Output.Norm.
	CaptureHidden bool
	// Tap, when not nil, receives every named intermediate in graph order
	// (numerical debugging, see package debug): "embed", then for each
	// layer i "layers.{i}." followed by the names of Block.ForwardTap, then
	// "norm" and "logits". Arrays handed to it are freed when their scope
	// closes: copy what you keep. nil (the default) costs nothing.
	Tap nn.Tap
	// Block, when not nil, runs block i in place of its ForwardTap on
	// the residual stream h (a trainer's gradient checkpoint: mlx_lm's
	// grad_checkpoint wraps every block's call). Only with a nil cache
	// and a nil Tap.
	Block func(i int, block *Block, h backend.Array, mask backend.Mask) backend.Array
}

// Output is what Forward returns. Its arrays belong to the caller, who
// releases them.
type Output struct {
	Logits backend.Array   // [B, len(LogitsRows) or L, vocab] in the model's dtype
	Hidden []backend.Array // the residual stream after each block, [B, L, hidden]
	Norm   backend.Array   // after the final norm, [B, L, hidden]
}

// Forward runs ids (integer [B, L]) through the model. With cache (one per
// layer, see NewCache) positions continue from the caches' offset and the
// new keys and values are stored; with a nil cache the sequence starts at
// position 0 and nothing is kept (mlx_lm's cache=None). It opens a backend
// scope and keeps only the outputs and the caches' arrays; call it with no
// scope of yours open, or keep the caches' State yourself.
func (m *Model) Forward(ids backend.Array, cache []nn.KVCache, opts ForwardOptions) (out Output, err error) {
	defer backend.Recover(&err)
	if err := m.checkForward(ids, cache, opts); err != nil {
		return Output{}, err
	}
	s := m.b.Scope()
	defer s.Close()

	tap := opts.Tap
	h := m.EmbedTokens.Forward(ids)
	if tap != nil {
		tap("embed", h)
	}
	mask := m.mask(h, cache)
	for i, layer := range m.Layers {
		var lt nn.Tap
		if tap != nil {
			lt = nn.Prefixed(tap, "layers."+strconv.Itoa(i)+".")
		}
		prev := h
		if opts.Block != nil && cache == nil && tap == nil {
			h = opts.Block(i, layer, h, mask)
		} else {
			h = layer.ForwardTap(h, mask, layerCache(cache, i), lt)
		}
		switch {
		case opts.CaptureHidden:
			out.Hidden = append(out.Hidden, h)
		case tap == nil:
			// Nothing else holds the previous hidden state: free it now
			// rather than at the end of the forward (24 of them at once).
			m.b.Release(prev)
		}
	}
	h = m.Norm.Forward(h)
	if tap != nil {
		tap("norm", h)
	}
	if opts.CaptureHidden {
		out.Norm = h
	}
	if !opts.NoLogits {
		out.Logits = m.head(m.rows(h, opts.LogitsRows))
		if tap != nil {
			tap("logits", out.Logits)
		}
	}

	for _, c := range cache {
		s.Keep(c.State()...)
	}
	for _, x := range append(out.Hidden, out.Norm, out.Logits) {
		if x != nil {
			s.Keep(x)
		}
	}
	return out, nil
}

func (m *Model) mask(h backend.Array, cache []nn.KVCache) backend.Mask {
	L := h.Shape()[1]
	if cache != nil {
		return cache[0].Mask(L)
	}
	if L == 1 {
		return backend.NoMask{}
	}
	return backend.CausalMask{}
}

func layerCache(cache []nn.KVCache, i int) nn.KVCache {
	if cache == nil {
		return nil
	}
	return cache[i]
}

func (m *Model) head(h backend.Array) backend.Array {
	if m.LMHead == nil {
		return m.EmbedTokens.AsLinear(h)
	}
	return m.LMHead.Forward(h)
}

// rows takes the positions rows of h [B, L, D]: a slice when they are
// consecutive, a gather otherwise.
func (m *Model) rows(h backend.Array, rows []int) backend.Array {
	if rows == nil {
		return h
	}
	B, D := h.Shape()[0], h.Shape()[2]
	consecutive := true
	for i := range rows {
		consecutive = consecutive && rows[i] == rows[0]+i
	}
	if consecutive {
		return m.b.Slice(h, []int{0, rows[0], 0}, []int{B, rows[0] + len(rows), D})
	}
	idx := make([]int32, len(rows))
	for i, r := range rows {
		idx[i] = int32(r)
	}
	return m.b.Take(h, m.b.FromHost(tensor.FromInt32(tensor.Shape{len(idx)}, idx)), 1)
}
