//go:build !amd64

package kernel

func convBF16ToF32(dst *float32, src *uint16, n int) { panic("kernel: no AVX2 on this platform") }
func convF32ToBF16(dst *uint16, src *float32, n int) { panic("kernel: no AVX2 on this platform") }
func convRoundBF16(v *float32, n int)                { panic("kernel: no AVX2 on this platform") }
func convAdd(dst, a, b *float32, n, bf16 int)        { panic("kernel: no AVX2 on this platform") }
