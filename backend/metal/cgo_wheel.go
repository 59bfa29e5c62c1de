//go:build mlx && !mlxc_system

package metal

// The default build: mlxgo's own mlx-c subset (mlxc.cpp, declared in
// mlxc/include/mlx/c/mlx.h) over libmlx from the pinned MLX wheel, reached
// through the .venv/mlx symlink that `make venv` creates.

// #cgo CFLAGS: -I${SRCDIR}/mlxc/include
// #cgo CXXFLAGS: -std=c++20 -I${SRCDIR}/mlxc/include -I${SRCDIR}/../../.venv/mlx/include
// #cgo LDFLAGS: -L${SRCDIR}/../../.venv/mlx/lib -lmlx -Wl,-rpath,${SRCDIR}/../../.venv/mlx/lib -lstdc++
import "C"
