//go:build amd64

package kernel

import "golang.org/x/sys/cpu"

// The AVX2 conversion loops of conv_amd64.s. n is a multiple of 16.

//go:noescape
func convBF16ToF32(dst *float32, src *uint16, n int)

//go:noescape
func convF32ToBF16(dst *uint16, src *float32, n int)

//go:noescape
func convRoundBF16(v *float32, n int)

func init() { convAVX2 = hasAVX2() }

// hasAVX2 reports AVX and AVX2 with the OS saving the YMM state (x/sys/cpu
// sets both flags only when XCR0 has its SSE and AVX bits).
func hasAVX2() bool { return cpu.X86.HasAVX && cpu.X86.HasAVX2 }
