//go:build mlx

package generate_test

// With -tags mlx TestBatchOracle also runs on the MLX backend.
import _ "github.com/mlxgo/mlxgo/backend/metal"
