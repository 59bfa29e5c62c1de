//go:build !amd64 && !arm64

package goroutine

// Supported reports whether Current is available on this architecture.
const Supported = false

// Current is not available here; callers check Supported and use another
// identity (the MLX backend asks C for the thread's).
func Current() uintptr { panic("goroutine.Current: not supported on this architecture") }
