package minicpm5

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// NewCache returns an empty cache per layer (mlx_lm's make_cache: a KVCache
// for every full-attention layer). Release each when done.
func (m *Model) NewCache() []nn.KVCache {
	c := make([]nn.KVCache, len(m.Layers))
	for i := range c {
		c[i] = nn.NewFullKVCache(m.b)
	}
	return c
}

// NewCacheWith returns an empty cache per layer of the kind o selects (the
// full cache for the zero value, a rotating one for o.MaxKVSize > 0, as
// mlx_lm's make_prompt_cache(model, max_kv_size)). o must pass Check.
func (m *Model) NewCacheWith(o nn.CacheOptions) []nn.KVCache {
	c := make([]nn.KVCache, len(m.Layers))
	for i := range c {
		c[i] = o.New(m.b)
	}
	return c
}

// CacheView is a Model whose NewCache makes caches of the kind Options
// select: what generate.Generate and generate sessions take to run on
// other caches. It shares the Model's weights; close the Model, not it.
type CacheView struct {
	*Model
	Options nn.CacheOptions
}

// WithCache returns m as a CacheView of o, or an error naming the option
// out of range.
func (m *Model) WithCache(o nn.CacheOptions) (CacheView, error) {
	if err := o.Check(); err != nil {
		return CacheView{}, err
	}
	if o.Turbo != (turboquant.Scheme{}) {
		if err := turboquant.CheckHeadDim(m.cfg.HeadDim); err != nil {
			return CacheView{}, fmt.Errorf("KV cache %s: %w (the model's head_dim, config.json)", o.Turbo, err)
		}
	}
	if o.KVBits > 0 && m.cfg.HeadDim%o.KVGroupSize != 0 {
		return CacheView{}, fmt.Errorf("KV group size %d does not divide the model's head_dim %d", o.KVGroupSize, m.cfg.HeadDim)
	}
	return CacheView{Model: m, Options: o}, nil
}

// NewCache returns an empty cache per layer of the kind v.Options select.
func (v CacheView) NewCache() []nn.KVCache { return v.NewCacheWith(v.Options) }

// Prefill runs one prompt through cache in chunks of at most chunk tokens
// (mlx_lm's prefill_step_size), evaluating every cache's State and the
// chunk's logits after each chunk, and returns the logits of every position,
// [1, len(ids), vocab]: the chunks' logits concatenated. Chunked and one-shot
// prefill compute the same thing.
func (m *Model) Prefill(ids []int32, cache []nn.KVCache, chunk int) (backend.Array, error) {
	if err := m.checkPrompt(ids, cache, chunk); err != nil {
		return nil, err
	}
	var parts []backend.Array
	for start := 0; start < len(ids); start += chunk {
		logits, err := m.chunk(ids[start:min(start+chunk, len(ids))], cache, ForwardOptions{})
		if err != nil {
			m.b.Release(parts...)
			return nil, err
		}
		parts = append(parts, logits)
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return m.concatenate(parts)
}

// PrefillLast runs a prompt the way mlx_lm's generate_step does and returns
// the logits of its last position, [1, 1, vocab]: every token but the last
// goes through cache in chunks of at most chunk tokens without the head
// (generate.Prefill: the caches' State evaluated after each chunk), then the
// last token alone.
func (m *Model) PrefillLast(ids []int32, cache []nn.KVCache, chunk int) (backend.Array, error) {
	if err := m.checkPrompt(ids, cache, chunk); err != nil {
		return nil, err
	}
	n := len(ids) - 1
	if err := generate.Prefill[nn.KVCache](m, cache, ids[:n], chunk); err != nil {
		return nil, err
	}
	return m.chunk(ids[n:], cache, ForwardOptions{})
}

// chunk runs one chunk and evaluates the caches and the logits.
func (m *Model) chunk(ids []int32, cache []nn.KVCache, opts ForwardOptions) (backend.Array, error) {
	x := m.b.FromHost(tensor.FromInt32(tensor.Shape{1, len(ids)}, ids))
	out, err := m.Forward(x, cache, opts)
	m.b.Release(x)
	if err != nil {
		return nil, err
	}
	eval := []backend.Array{}
	for _, c := range cache {
		eval = append(eval, c.State()...)
	}
	if out.Logits != nil {
		eval = append(eval, out.Logits)
	}
	if err := m.b.Eval(eval...); err != nil {
		m.b.Release(out.Logits)
		return nil, err
	}
	return out.Logits, nil
}

func (m *Model) concatenate(parts []backend.Array) (logits backend.Array, err error) {
	defer m.b.Release(parts...)
	defer backend.Recover(&err)
	logits = m.b.Concatenate(1, parts...)
	if err := m.b.Eval(logits); err != nil {
		m.b.Release(logits)
		return nil, err
	}
	return logits, nil
}

func (m *Model) checkPrompt(ids []int32, cache []nn.KVCache, chunk int) error {
	if len(ids) == 0 {
		return fmt.Errorf("model: empty prompt")
	}
	if chunk <= 0 {
		return fmt.Errorf("model: prefill chunk size %d, want > 0", chunk)
	}
	if cache == nil {
		return fmt.Errorf("model: prefill needs a cache (NewCache)")
	}
	for i, id := range ids {
		if id < 0 || int(id) >= m.cfg.VocabSize {
			return fmt.Errorf("model: prompt token %d is %d, want 0 <= id < vocab_size %d", i, id, m.cfg.VocabSize)
		}
	}
	return nil
}

func (m *Model) checkForward(ids backend.Array, cache []nn.KVCache, opts ForwardOptions) error {
	s := ids.Shape()
	if len(s) != 2 || s[0] < 1 || s[1] < 1 {
		return fmt.Errorf("model: ids shape %v, want [B, L] with B, L >= 1", s)
	}
	if d := ids.DType(); d.IsFloat() || d == tensor.Bool {
		return fmt.Errorf("model: ids dtype %v, want an integer dtype", d)
	}
	if cache != nil && len(cache) != len(m.Layers) {
		return fmt.Errorf("model: %d caches for %d layers", len(cache), len(m.Layers))
	}
	for i, c := range cache {
		if c == nil {
			return fmt.Errorf("model: cache %d is nil", i)
		}
	}
	if opts.LogitsRows != nil && len(opts.LogitsRows) == 0 && !opts.NoLogits {
		return fmt.Errorf("model: LogitsRows is empty; set NoLogits to skip the head")
	}
	for i, r := range opts.LogitsRows {
		if r < 0 || r >= s[1] {
			return fmt.Errorf("model: LogitsRows[%d] is %d, want 0 <= row < L = %d", i, r, s[1])
		}
	}
	return nil
}

// Config returns the checkpoint's config.
func (m *Model) Config() *checkpoint.Config { return m.cfg }

// Warnings returns what the checkpoint loader noticed and mlx_lm accepts
// silently (config fields, weights' dtypes): commands print them once.
func (m *Model) Warnings() []string { return m.warnings }

// Backend returns the backend the model runs on.
func (m *Model) Backend() backend.Backend { return m.b }

// DType returns the activation dtype (the embedding's).
func (m *Model) DType() tensor.DType { return m.dtype }

// Close releases the weights' arrays and, when Load opened it, the
// checkpoint. Closing twice is allowed.
func (m *Model) Close() error {
	m.b.Release(m.arrays...)
	m.arrays = nil
	if m.rope != nil {
		m.rope.Release()
	}
	var err error
	if m.ck != nil {
		err = m.ck.Close()
		m.ck = nil
	}
	return err
}
