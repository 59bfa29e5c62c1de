//go:build !amd64

package kernel

// installAsm: no assembly kernels on this platform.
func installAsm() {}

// asmDot is never called: installAsm leaves asmF32 and asmQ8 false.
func asmDot(a *qArgs, bits int, q8 bool) { panic("kernel: no assembly kernels on this platform") }
