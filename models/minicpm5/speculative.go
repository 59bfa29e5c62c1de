package minicpm5

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
)

var _ generate.WindowModel[nn.KVCache] = (*Model)(nil)

// WindowLogits runs ids ([1, L], integer) through the model, appending them
// to cache, and returns the logits of the last n positions, [1, n, vocab]:
// the verify window of speculative decoding (generate.WindowModel). With
// n = L the head runs over every position, as mlx_lm's model(y) does
// before speculative_generate_step slices the window.
func (m *Model) WindowLogits(ids backend.Array, cache []nn.KVCache, n int) (backend.Array, error) {
	s := ids.Shape()
	if len(s) != 2 || n < 1 || n > s[1] {
		return nil, fmt.Errorf("model: %d logits rows of ids %v, want 1 <= n <= L", n, s)
	}
	var rows []int
	if n < s[1] {
		for r := s[1] - n; r < s[1]; r++ {
			rows = append(rows, r)
		}
	}
	out, err := m.Forward(ids, cache, ForwardOptions{LogitsRows: rows})
	return out.Logits, err
}
