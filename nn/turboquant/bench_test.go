package turboquant

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkCodec measures one token-head row through the codec: encode and
// pack (what an append costs per row), unpack and decode (what each read
// costs per stored row; the deferred read skips the value un-rotation).
func BenchmarkCodec(b *testing.B) {
	for _, s := range []Scheme{{8, 3}, {4, 2}} {
		for _, d := range []int{64, 128} {
			r := rand.New(rand.NewPCG(1, 2))
			x := make([]float32, d)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			codes := make([]byte, d)
			g := d / GroupSize
			ks, kz, vs := make([]uint16, g), make([]uint16, g), make([]uint16, g)
			kp, vp := make([]byte, s.KeyBytes(d)), make([]byte, s.ValueBytes(d))
			out := make([]float32, d)
			b.Run(fmt.Sprintf("encode/%s/d%d", s, d), func(b *testing.B) {
				for b.Loop() {
					EncodeKeys(x, s.KBits, codes, ks, kz)
					Pack(codes, s.KBits, kp)
					EncodeValues(x, s.VBits, codes, vs)
					Pack(codes, s.VBits, vp)
				}
			})
			for _, deferred := range []bool{false, true} {
				b.Run(fmt.Sprintf("decode/%s/d%d/deferred=%v", s, d, deferred), func(b *testing.B) {
					for b.Loop() {
						Unpack(kp, s.KBits, codes)
						DecodeKeys(codes, s.KBits, ks, kz, out)
						Unpack(vp, s.VBits, codes)
						if deferred {
							DecodeValuesRotated(codes, s.VBits, vs, out)
						} else {
							DecodeValues(codes, s.VBits, vs, out)
						}
					}
				})
			}
		}
	}
}
