//go:build mlx

package conformance_test

// With -tags mlx the tests also run every fixture on the MLX backend.
import _ "github.com/mlxgo/mlxgo/backend/metal"
