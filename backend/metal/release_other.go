//go:build mlx && !linux

package metal

// dropCopiedPages does nothing here: on macOS MLX's Metal allocator aliases
// borrowed memory, and other systems have no /proc/self/maps to tell a file
// mapping apart (see release_linux.go).
func dropCopiedPages(data []byte) {}
