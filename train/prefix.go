package train

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// PrefixLayout is the layout of one prefix-shared preference sequence
// X = [prompt (P tokens) | chosen (Rc) | rejected (Rr)]: the prompt is
// read once for both responses (research notes §2.3).
type PrefixLayout struct{ P, Rc, Rr int }

// T is the sequence's length, P + Rc + Rr.
func (l PrefixLayout) T() int { return l.P + l.Rc + l.Rr }

func (l PrefixLayout) check() error {
	if l.P < 1 || l.Rc < 1 || l.Rr < 1 {
		return fmt.Errorf("train: prefix layout P=%d Rc=%d Rr=%d: the prompt and both responses need at least one token", l.P, l.Rc, l.Rr)
	}
	return nil
}

// Allowed reports whether query i may attend to key j: causally (j ≤ i),
// and a rejected query (i ≥ P+Rc) never to a chosen key (P ≤ j < P+Rc).
// Each response thus sees the prompt and itself, as in its own forward.
func (l PrefixLayout) Allowed(i, j int) bool { return l.Mask().Visible(i, j) }

// Mask is the layout's block-sparse mask: the prompt as the prefix, the
// chosen and rejected responses as its blocks.
func (l PrefixLayout) Mask() backend.PrefixMask {
	return backend.PrefixMask{Prefix: l.P, Blocks: []int{l.Rc, l.Rr}}
}

// Position is token i's RoPE position: i up to the end of the chosen
// block, i − Rc in the rejected block (which starts at P again).
func (l PrefixLayout) Position(i int) int {
	if i >= l.P+l.Rc {
		return i - l.Rc
	}
	return i
}

// PredictingRows are the rows of the hidden states that predict each
// response's tokens: chosen c_k from P−1+k; rejected r_0 from P−1 (the
// prompt's last row, which predicts c_0 too) and r_k (k ≥ 1) from
// P+Rc+k−1.
func (l PrefixLayout) PredictingRows() (chosen, rejected []int) {
	chosen = make([]int, l.Rc)
	for k := range chosen {
		chosen[k] = l.P - 1 + k
	}
	rejected = make([]int, l.Rr)
	rejected[0] = l.P - 1
	for k := 1; k < l.Rr; k++ {
		rejected[k] = l.P + l.Rc + k - 1
	}
	return chosen, rejected
}

// Blocks are the layout's RoPE blocks: the prompt at 0, the chosen block
// at P, the rejected block at P again.
func (l PrefixLayout) Blocks() []nn.RoPEBlock {
	return []nn.RoPEBlock{{Start: 0, Len: l.P, Offset: 0}, {Start: l.P, Len: l.Rc, Offset: l.P}, {Start: l.P + l.Rc, Len: l.Rr, Offset: l.P}}
}

// MaskData is the layout's [T, T] boolean mask, row-major (1: attend).
func (l PrefixLayout) MaskData() []byte { return l.Mask().Dense().Data }

// PrefixCache is the stateless training cache of a prefix-shared forward
// (the seed's PrefixSharedCache): one for every layer of a
// minicpm5.Model.Forward over the whole sequence from position 0. It
// stores nothing (keys and values pass through), masks with the layout's
// block-sparse mask (a backend.PrefixMask, whose attention the CPU
// backend reads a block of keys at a time, skipping those it hides, and
// MLX as causal attentions over the prompt and over each response after
// it) and gives the attention its RoPE blocks. With Dense set it masks
// with the plain ArrayMask of the layout's Bool array (made once, shared
// by every layer) instead: the plain attention, for comparison.
type PrefixCache struct {
	Dense  bool
	b      backend.Backend
	layout PrefixLayout
	mask   backend.Array
}

// NewPrefixCache makes the cache of layout l on b. Release frees its mask.
func NewPrefixCache(b backend.Backend, l PrefixLayout) (*PrefixCache, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	T := l.T()
	m := b.FromHost(&tensor.Dense{DType: tensor.Bool, Shape: tensor.Shape{T, T}, Data: l.MaskData()})
	return &PrefixCache{b: b, layout: l, mask: m}, nil
}

// Caches returns the cache n times, one per layer, for Model.Forward.
func (c *PrefixCache) Caches(n int) []nn.KVCache {
	out := make([]nn.KVCache, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// Offset is 0: the sequence starts at position 0 and nothing is stored.
func (c *PrefixCache) Offset() int { return 0 }

// Update returns k and v as they are.
func (c *PrefixCache) Update(k, v backend.Array) (backend.Array, backend.Array) { return k, v }

// Mask is the layout's block-sparse mask; L must be the layout's length.
func (c *PrefixCache) Mask(L int) backend.Mask {
	if L != c.layout.T() {
		panic(backend.Errorf("PrefixCache.Mask", nil, "%d queries for a prefix layout of %d tokens", L, c.layout.T()))
	}
	if c.Dense {
		return backend.ArrayMask{A: c.mask}
	}
	m := c.layout.Mask()
	m.A = c.mask
	return m
}

// RoPEBlocks are the layout's blocks (nn.BlockPositioner).
func (c *PrefixCache) RoPEBlocks() []nn.RoPEBlock { return c.layout.Blocks() }

// State is nil: the cache keeps nothing across forwards.
func (c *PrefixCache) State() []backend.Array { return nil }

// Trim forgets nothing.
func (c *PrefixCache) Trim(int) int { return 0 }

// Release frees the mask.
func (c *PrefixCache) Release() { c.b.Release(c.mask) }
