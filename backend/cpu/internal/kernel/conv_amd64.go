//go:build amd64

package kernel

import "golang.org/x/sys/cpu"

// The AVX2 conversion loops of conv_amd64.s, 16 values an iteration; n
// is a multiple of 16. Each gives the bits of its scalar loop in conv.go.

// convBF16ToF32 sets dst[i] = src[i] << 16 as float32 bits for i < n
// (bf16ToFloat32s' loop).
//
//go:noescape
func convBF16ToF32(dst *float32, src *uint16, n int)

// convF32ToBF16 sets dst[i] to the bfloat16 bits of src[i] for i < n,
// rounded as tensor.Float32ToBF16 (float32sToBF16's loop).
//
//go:noescape
func convF32ToBF16(dst *uint16, src *float32, n int)

// convRoundBF16 rounds v[i] to bfloat16 in place for i < n, as
// tensor.RoundBF16 (roundBF16s' loop).
//
//go:noescape
func convRoundBF16(v *float32, n int)

// convAdd sets dst[i] = a[i] + b[i] in float32 for i < n, rounded to
// bfloat16 as tensor.RoundBF16 when bf16 is 1 (AddRound's loop).
//
//go:noescape
func convAdd(dst, a, b *float32, n, bf16 int)

func init() { convAVX2 = hasAVX2() }

// hasAVX2 reports AVX and AVX2 with the OS saving the YMM state (x/sys/cpu
// sets both flags only when XCR0 has its SSE and AVX bits).
func hasAVX2() bool { return cpu.X86.HasAVX && cpu.X86.HasAVX2 }
