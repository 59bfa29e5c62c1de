//go:build !amd64

package kernel

// prefKernel is never called: refPacks is false off amd64.
func prefKernel(p *packedW, fused bool) func(*prefArgs) {
	panic("kernel: no packed reference kernels on this platform")
}

// prefGemmRows and prefGemm are never called: refPacks is false off amd64.
func prefGemmRows() int { return 1 }

func prefGemm(dst, x []float32, p *packedW, m int, round Rounder) bool { return false }

// prefScan is never called: refPacks is false off amd64.
func prefScan(xh, x []float32) (scaled, fused bool) { return prefScaleX(xh, x), false }

// preflKernel is never called: refPacks is false off amd64.
func preflKernel(p *packedW) func(*preflArgs) {
	panic("kernel: no packed reference kernels on this platform")
}
