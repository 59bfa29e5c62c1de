//go:build !amd64

package kernel

// qmvRows is the one-row-of-x quantized matmul of qmv_amd64.go; there are
// no such kernels on this platform, so it reports false and the general
// path runs.
func qmvRows(dst, x []float32, wq []uint32, sc, bi Vec, n, k, gs, bits int, round Rounder, q8 bool) bool {
	return false
}

// avxRows is the AVX2 quantized matmul of qmv_avx2_amd64.go; there are no
// such kernels on this platform, so it reports false.
func avxRows(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder, q8 bool) bool {
	return false
}

// avxGemmQ8 is the AVX2 int8 GEMM of qmv_avx2_amd64.go; none here.
func avxGemmQ8(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder) bool {
	return false
}

// qmvbOn switches the batched one-row kernels on where they exist (the
// tests switch it off); there are none here.
var qmvbOn = true

// qmvBatch is the batched one-row int8 kernel of qmvb_amd64.go; none here.
func qmvBatch(dst, x []float32, wq []uint32, sc, bi Vec, m, n, k, gs, bits int, round Rounder) bool {
	return false
}
