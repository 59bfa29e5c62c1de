//go:build mlx && mlxc_system

package metal

// Build tag mlxc_system: the system's libmlxc and its headers (macOS:
// `brew install mlx-c`). Other locations go in CGO_CFLAGS / CGO_LDFLAGS.

// #cgo darwin CFLAGS: -I/opt/homebrew/include
// #cgo darwin LDFLAGS: -L/opt/homebrew/lib
// #cgo LDFLAGS: -lmlxc
import "C"
