//go:build mlx && mlxc_system

package metal

import (
	"errors"

	"github.com/mlxgo/mlxgo/backend"
)

// GraphOps needs MLX's C++ graph, which the system's mlx-c does not expose:
// with the tag mlxc_system it returns an error (see graph.go).
func (b *Backend) GraphOps(arrays ...backend.Array) (map[string]int, error) {
	return nil, errors.New("mlx backend: GraphOps needs mlxgo's own mlx-c subset (built without the tag mlxc_system)")
}
