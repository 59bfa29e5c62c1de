//go:build mlx

package train

// With -tags mlx the tests that iterate the backends also run on MLX.
import _ "github.com/mlxgo/mlxgo/backend/metal"
