//go:build goexperiment.simd && amd64

package generate

import "simd/archsimd"

// With GOEXPERIMENT=simd on a CPU with AVX-512, ScaleTemp's bfloat16 loop
// runs 16 values at a time (scaleBF16AVX512).
func init() {
	if archsimd.X86.AVX512() {
		scaleBF16 = scaleBF16AVX512
	}
}

// scaleBF16AVX512 is scaleBF16's loop over the longest multiple of 16
// values of x: each value times inv in float32, rounded to bfloat16 as
// tensor.RoundBF16 does (to nearest even on the raw bits, every NaN the
// canonical one). It returns how many values it did.
func scaleBF16AVX512(x []float32, inv float32) int {
	n := len(x) &^ 15
	iv := archsimd.BroadcastFloat32x16(inv)
	one := archsimd.BroadcastUint32x16(1)
	half := archsimd.BroadcastUint32x16(0x7fff)
	high := archsimd.BroadcastUint32x16(0xffff0000)
	nan := archsimd.BroadcastUint32x16(0x7fc00000).AsFloat32x16()
	for i := 0; i < n; i += 16 {
		v := archsimd.LoadFloat32x16Slice(x[i:]).Mul(iv)
		u := v.AsUint32x16()
		r := u.ShiftAllRight(16).And(one).Add(half).Add(u).And(high).AsFloat32x16()
		nan.Merge(r, v.IsNaN()).StoreSlice(x[i:])
	}
	return n
}
