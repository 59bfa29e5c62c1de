package minicpm5

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

var _ generate.Model[nn.KVCache] = (*Model)(nil)

// Append runs ids ([1, L], integer) through the model, appending them to
// cache, without the head: a prefill chunk (generate.Model).
func (m *Model) Append(ids backend.Array, cache []nn.KVCache) error {
	_, err := m.Forward(ids, cache, ForwardOptions{NoLogits: true})
	return err
}

// LastLogits runs ids ([1, L], integer) through the model, appending them to
// cache, and returns the logits of the last position, [1, 1, vocab], with
// the head applied to that position only (generate.Model).
func (m *Model) LastLogits(ids backend.Array, cache []nn.KVCache) (backend.Array, error) {
	var rows []int
	if s := ids.Shape(); len(s) == 2 && s[1] > 1 {
		rows = []int{s[1] - 1}
	}
	out, err := m.Forward(ids, cache, ForwardOptions{LogitsRows: rows})
	return out.Logits, err
}

// CacheDTypes returns the dtype of the keys and values each layer's cache
// holds. It is the activation dtype promoted through the layers' weights, as
// MLX promotes (a checkpoint with float32 norms and float16 scales computes
// and caches float32 from the first norm on), found by running token 0
// through a fresh cache that is then released. Call it outside b.Do.
func (m *Model) CacheDTypes() ([]tensor.DType, error) { return m.cacheDTypes(m.NewCache) }

// CacheDTypes is Model.CacheDTypes for the caches of v's kind (the dtype
// nn.CacheOptions.KVDType stores float32 keys in).
func (v CacheView) CacheDTypes() ([]tensor.DType, error) { return v.cacheDTypes(v.NewCache) }

// cacheDTypes is CacheDTypes through the caches newCache makes.
func (m *Model) cacheDTypes(newCache func() []nn.KVCache) ([]tensor.DType, error) {
	var dts []tensor.DType
	err := m.b.Do(func() (err error) {
		defer backend.Recover(&err)
		cache := newCache()
		defer func() {
			for _, c := range cache {
				c.Release()
			}
		}()
		ids := m.b.FromHost(tensor.FromInt32(tensor.Shape{1, 1}, []int32{0}))
		defer m.b.Release(ids)
		if _, err := m.Forward(ids, cache, ForwardOptions{NoLogits: true}); err != nil {
			return err
		}
		for _, c := range cache {
			dts = append(dts, c.State()[0].DType())
		}
		return nil
	})
	return dts, err
}
