//go:build !amd64

package kernel

// qmmNAsm reports false: no vector kernels on this platform.
func qmmNAsm(dst, x []float32, wq []uint32, scales, biases []float32, m, n, k, gs, bits int, round Rounder) bool {
	return false
}
