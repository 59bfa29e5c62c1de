//go:build amd64

package kernel

// The AVX2 conversion loops of conv_amd64.s. n is a multiple of 16.

//go:noescape
func convBF16ToF32(dst *float32, src *uint16, n int)

//go:noescape
func convF32ToBF16(dst *uint16, src *float32, n int)

//go:noescape
func convRoundBF16(v *float32, n int)

func init() { convAVX2 = hasAVX2() }

// hasAVX2 reports AVX2 with the OS saving the YMM state (cpuid and xgetbv0
// of qmm_amd64.s).
func hasAVX2() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, c1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if c1&(osxsave|avx) != osxsave|avx || xgetbv0()&6 != 6 {
		return false
	}
	_, b7, _, _ := cpuid(7, 0)
	return b7&(1<<5) != 0
}
