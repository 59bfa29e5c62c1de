//go:build mlx

package main

import _ "github.com/mlxgo/mlxgo/backend/metal"
