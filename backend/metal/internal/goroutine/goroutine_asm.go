//go:build amd64 || arm64

package goroutine

// Supported reports whether Current is available on this architecture.
const Supported = true

// Current identifies the calling goroutine: the address of the runtime's
// descriptor of it (its g), read from the register or thread-local slot
// where the runtime keeps it (goroutine_$GOARCH.s). Compare it only for
// equality, and only while the goroutine it was taken from is alive: the
// runtime reuses the descriptors of goroutines that have ended.
func Current() uintptr
