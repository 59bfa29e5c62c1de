//go:build !amd64

package kernel

// denseOn switches the vector kernels on where there are any (tests
// compare with them off); this platform has none.
var denseOn = true

// denseZOn reports the AVX-512 fast kernels switched on: never here.
var denseZOn = false

// denseCovers reports false: no assembly kernels on this platform.
func denseCovers(w Vec) bool { return false }

// denseAsm reports false: no assembly kernels on this platform.
func denseAsm(dst, x []float32, w Vec, m, n, k int, fast bool) bool { return false }

// denseNNAsm reports false: no assembly kernels on this platform.
func denseNNAsm(dst, a, b []float32, m, n, k int) bool { return false }

// densePackable reports false: no packed kernels on this platform.
func densePackable(w Vec) bool { return false }

// denseRefPacked is never called: densePackable is false here.
func denseRefPacked(dst, x []float32, p *densePacked, m int) {
	panic("kernel: no packed dense kernels on this platform")
}

// densePackTile is never called: densePackable is false here.
func densePackTile(tile, w []uint16, k int) int { return 0 }

// denseBF16Path reports false: no bfloat16 kernels on this platform.
func denseBF16Path(k int) bool { return false }

// denseBF16On switches the bfloat16 kernels on where there are any (tests
// toggle it); this platform has none.
var denseBF16On = true
