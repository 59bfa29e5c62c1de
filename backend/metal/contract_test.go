//go:build mlx

package metal_test

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/backendtest"
	"github.com/mlxgo/mlxgo/backend/metal"
)

// TestContract runs the backend contract suite on MLX's CPU device, the
// device the oracle's fixtures come from.
func TestContract(t *testing.T) {
	backendtest.Run(t, func() (backend.Backend, error) { return metal.New(backend.Options{Device: "cpu"}) })
}
