package kernel

import (
	"fmt"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestDecodeLloydRows: the AVX-512 decode of Lloyd-Max code rows gives
// lloydRowsGo's bits for 2-, 3- and 4-bit codes, float32 and bfloat16
// results, rows wider than their codes and scales (padded), random codes,
// float16 scales including subnormals, zero and infinities, into a
// guard-padded destination; and it declines what it does not take.
func TestDecodeLloydRows(t *testing.T) {
	if !lloydAsm {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VBMI; DecodeLloydRows always declines")
	}
	r := newRand(21)
	for _, bits := range []int{2, 3, 4} {
		for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
			for _, n := range []int{32, 64, 128, 256} {
				t.Run(fmt.Sprintf("b%d/%v/n%d", bits, dt, n), func(t *testing.T) {
					const rows = 37
					cstride, sstride, dstride := n*bits/8+5, n/32+3, n+7
					codes := make([]byte, rows*cstride)
					for i := range codes {
						codes[i] = byte(r.Uint32())
					}
					scales := make([]uint16, rows*sstride)
					for i := range scales {
						scales[i] = tensor.Float32ToF16(float32(r.NormFloat64()))
					}
					scales[0], scales[1], scales[sstride] = 0x0001, 0x7c00, 0 // a subnormal, +Inf, zero
					cent := randVec(r, 1<<bits, 1, Identity)
					want := make([]float32, rows*dstride)
					lloydRowsGo(want, dstride, codes, cstride, scales, sstride, rows, n, bits, cent, dt)
					got, whole := guarded(rows * dstride)
					copy(got, want) // the padding columns are not written
					for x := range rows {
						for t := range n {
							got[x*dstride+t] = float32(math.NaN())
						}
					}
					if !DecodeLloydRows(got, dstride, codes, cstride, scales, sstride, rows, n, bits, cent, dt) {
						t.Fatal("declined")
					}
					checkGuards(t, whole, "dst")
					expectSame(t, got, want, "rows")
				})
			}
		}
	}
	dst := make([]float32, 64)
	for _, c := range []struct {
		bits int
		dt   tensor.DType
		n    int
	}{{5, tensor.BF16, 32}, {8, tensor.BF16, 32}, {3, tensor.F16, 32}, {3, tensor.BF16, 48}} {
		if DecodeLloydRows(dst, 64, make([]byte, 64), 32, make([]uint16, 4), 2, 1, c.n, c.bits, make([]float32, 1<<c.bits), c.dt) {
			t.Errorf("bits %d dt %v n %d: accepted, want declined", c.bits, c.dt, c.n)
		}
	}
}

// TestDecodeKeyRows8: the AVX-512 decode of signed 8-bit key rows gives
// keyRows8Go's bits for float32 and bfloat16 results, padded rows, random
// codes, float16 scales and zero points including subnormals, zero and
// infinities, into a guard-padded destination; it declines float16.
func TestDecodeKeyRows8(t *testing.T) {
	if !lloydAsm {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VBMI; DecodeKeyRows8 always declines")
	}
	r := newRand(22)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, n := range []int{32, 64, 128, 256} {
			t.Run(fmt.Sprintf("%v/n%d", dt, n), func(t *testing.T) {
				const rows = 37
				cstride, sstride, zstride, dstride := n+5, n/32+3, n/32+1, n+7
				codes := make([]byte, rows*cstride)
				for i := range codes {
					codes[i] = byte(r.Uint32())
				}
				scales, zeros := make([]uint16, rows*sstride), make([]uint16, rows*zstride)
				for i := range scales {
					scales[i] = tensor.Float32ToF16(float32(r.NormFloat64() / 64))
				}
				for i := range zeros {
					zeros[i] = tensor.Float32ToF16(float32(r.NormFloat64() * 30))
				}
				scales[0], scales[1], zeros[zstride] = 0x0001, 0x7c00, 0xfc00
				want := make([]float32, rows*dstride)
				keyRows8Go(want, dstride, codes, cstride, scales, sstride, zeros, zstride, rows, n, dt)
				got, whole := guarded(rows * dstride)
				copy(got, want)
				for x := range rows {
					for t := range n {
						got[x*dstride+t] = float32(math.NaN())
					}
				}
				if !DecodeKeyRows8(got, dstride, codes, cstride, scales, sstride, zeros, zstride, rows, n, dt) {
					t.Fatal("declined")
				}
				checkGuards(t, whole, "dst")
				expectSame(t, got, want, "rows")
			})
		}
	}
	if DecodeKeyRows8(make([]float32, 32), 32, make([]byte, 32), 32, make([]uint16, 1), 1, make([]uint16, 1), 1, 1, 32, tensor.F16) {
		t.Error("float16: accepted, want declined")
	}
}
