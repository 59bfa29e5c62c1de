//go:build mlx

package nn_test

// The mlx backend, registered for the tests that run on every backend.
import _ "github.com/mlxgo/mlxgo/backend/metal"
