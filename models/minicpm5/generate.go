package minicpm5

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
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
