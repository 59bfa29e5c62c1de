//go:build !amd64

package kernel

// prefKernel is never called: refPacks is false off amd64.
func prefKernel(p *packedW) func(*prefArgs) {
	panic("kernel: no packed reference kernels on this platform")
}
