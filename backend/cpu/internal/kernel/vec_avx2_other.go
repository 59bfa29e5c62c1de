//go:build !amd64

package kernel

// No AVX2 kernels on this platform: simdF16 stays false, so these are
// never called.

func f16ToFloat32sAsm(dst []float32, src []uint16) int { panic("kernel: no AVX2 on this platform") }
func float32sToF16Asm(dst []uint16, src []float32) int { panic("kernel: no AVX2 on this platform") }
func roundF16sAsm(v []float32) int                     { panic("kernel: no AVX2 on this platform") }
