//go:build goexperiment.simd && amd64

package generate

import (
	"simd/archsimd"

	"github.com/mlxgo/mlxgo/tensor"
)

// With GOEXPERIMENT=simd on a CPU with AVX-512, ScaleTemp's bfloat16 and
// float16 loops run 16 values at a time (scaleBF16AVX512, scaleF16AVX512;
// with the row scans of sample_simd_amd64.go, BenchmarkSample's float16
// temperature sample went from 517-537 to 267-305 µs on Zen 4, and with
// tensor.Float32ToF16's fast path its top-p sample from 2.07-2.41 to
// 1.04-1.13 ms).
//
// The shifts take their counts from vectors (ShiftRight, VPSRLVD), not
// ShiftAllRight: for a shift by a constant the Go 1.26 compiler loads the
// count into an X register with a legacy SSE MOVQ inside the loop, and on
// the Intel Xeon of 2026-12-06 (family 6, model 207) a legacy SSE
// instruction after AVX-512 code costs about 280 TSC ticks (a C probe:
// 278-283 ticks an iteration with it, 1.2-1.4 with the VEX form). There,
// ScaleTemp over 130560 bfloat16 logits took 1.06 ms with ShiftAllRight
// and 15.5 us with ShiftRight; BenchmarkSample temp/BF16 1.30 -> 0.23 ms,
// temp/F16 2.35 -> 0.23 ms; the server's eight-client decode step of the
// MiniCPM5-1B synth 36.1 -> 35.3 ms (two alternating pairs).
func init() {
	if archsimd.X86.AVX512() {
		scaleBF16, scaleF16 = scaleBF16AVX512, scaleF16AVX512
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
	sh16 := archsimd.BroadcastUint32x16(16)
	for i := 0; i < n; i += 16 {
		v := archsimd.LoadFloat32x16Slice(x[i:]).Mul(iv)
		u := v.AsUint32x16()
		r := u.ShiftRight(sh16).And(one).Add(half).Add(u).And(high).AsFloat32x16()
		nan.Merge(r, v.IsNaN()).StoreSlice(x[i:])
	}
	return n
}

// scaleF16AVX512 is scaleF16's loop over the longest multiple of 16 values
// of x: each value times inv in float32, rounded to float16 as
// tensor.RoundF16's common case does (products between 2^-14 and the
// largest float16, rounded to nearest even on the raw bits), infinities
// and zeros kept (a row after top-p or top-k holds many −Inf). A block of
// 16 with any other product (a float16 subnormal, a NaN, an overflow) is
// rounded value by value by tensor.RoundF16 itself. It returns how many
// values it did.
func scaleF16AVX512(x []float32, inv float32) int {
	n := len(x) &^ 15
	iv := archsimd.BroadcastFloat32x16(inv)
	expMask := archsimd.BroadcastUint32x16(0xff)
	lowest, span := archsimd.BroadcastUint32x16(113), archsimd.BroadcastUint32x16(30)
	largest := archsimd.BroadcastUint32x16(142)
	one, half, low := archsimd.BroadcastUint32x16(1), archsimd.BroadcastUint32x16(0xfff), archsimd.BroadcastUint32x16(0x1fff)
	magnitude, inf, zero := archsimd.BroadcastUint32x16(0x7fffffff), archsimd.BroadcastUint32x16(0x7f800000), archsimd.BroadcastUint32x16(0)
	sh13, sh23 := archsimd.BroadcastUint32x16(13), archsimd.BroadcastUint32x16(23)
	for i := 0; i < n; i += 16 {
		v := archsimd.LoadFloat32x16Slice(x[i:]).Mul(iv)
		u := v.AsUint32x16()
		normal := u.ShiftRight(sh23).And(expMask).Sub(lowest).Less(span) // 2^-14 <= |v| < 2^16
		r := u.Add(half).Add(u.ShiftRight(sh13).And(one)).AndNot(low)
		rounded := normal.And(r.ShiftRight(sh23).And(expMask).LessEqual(largest)) // still below 2^16
		abs := u.And(magnitude)
		kept := abs.Equal(inf).Or(abs.Equal(zero)) // infinities and zeros are float16 values already
		if rounded.Or(kept).ToBits() == 0xffff {
			r.AsFloat32x16().Merge(v, rounded).StoreSlice(x[i:])
			continue
		}
		var w [16]float32
		v.Store(&w)
		for j, p := range w {
			x[i+j] = tensor.RoundF16(p)
		}
	}
	return n
}
