package minicpm5

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
)

var _ generate.BatchModel = (*Model)(nil)

// NewBatchCache returns an empty batch cache per layer with one row per
// entry of leftPadding (mlx_lm's BatchKVCache(left_padding) for every
// layer). Release each when done.
func (m *Model) NewBatchCache(leftPadding []int) []*nn.BatchKVCache {
	c := make([]*nn.BatchKVCache, len(m.Layers))
	for i := range c {
		c[i] = nn.NewBatchKVCache(m.b, leftPadding)
	}
	return c
}

// BatchAppend runs ids ([B, L], integer; B the caches' rows) through the
// model, appending them to cache, without the head: a batched prefill chunk
// (generate.BatchModel).
func (m *Model) BatchAppend(ids backend.Array, cache []*nn.BatchKVCache) error {
	_, err := m.Forward(ids, layerCaches(cache), ForwardOptions{NoLogits: true})
	return err
}

// BatchLogits runs ids ([B, L], integer) through the model, appending them
// to cache, and returns the logits of the last position of every row,
// [B, 1, vocab] (generate.BatchModel).
func (m *Model) BatchLogits(ids backend.Array, cache []*nn.BatchKVCache) (backend.Array, error) {
	var rows []int
	if s := ids.Shape(); len(s) == 2 && s[1] > 1 {
		rows = []int{s[1] - 1}
	}
	out, err := m.Forward(ids, layerCaches(cache), ForwardOptions{LogitsRows: rows})
	return out.Logits, err
}

// VocabSize is the config's vocab_size: token ids must lie in [0, VocabSize).
func (m *Model) VocabSize() int { return m.cfg.VocabSize }

func layerCaches(cache []*nn.BatchKVCache) []nn.KVCache {
	if cache == nil {
		return nil
	}
	out := make([]nn.KVCache, len(cache))
	for i, c := range cache {
		if c != nil {
			out[i] = c
		}
	}
	return out
}

var _ generate.BatchModel = CacheView{}

// NewBatchCache returns an empty batch cache per layer of the kind
// v.Options select (nn.NewBatchCache): mlx_lm's BatchKVCache for the full
// cache, one cache per row for quantized and TurboQuant ones. It panics
// when nn.NewBatchCache refuses the kind or the padding: check with
// CheckBatch first.
func (v CacheView) NewBatchCache(leftPadding []int) []*nn.BatchKVCache {
	c := make([]*nn.BatchKVCache, len(v.Layers))
	for i := range c {
		var err error
		if c[i], err = nn.NewBatchCache(v.b, leftPadding, v.Options); err != nil {
			panic(err)
		}
	}
	return c
}

// CheckBatch returns nn.NewBatchCache's error for v.Options (a kind not
// offered in batches), or nil.
func (v CacheView) CheckBatch() error {
	c, err := nn.NewBatchCache(v.b, []int{0}, v.Options)
	if err == nil {
		c.Release()
	}
	return err
}
