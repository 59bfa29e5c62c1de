//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestRoPEVectorBitExact holds each vector rotation (AVX-512 and AVX2,
// where the CPU has them) to ropeRow's scalar loop bit for bit: every
// bfloat16 pattern as x (NaNs, infinities, subnormals, zeros) against
// cos/sin pairs of real angles and a few special ones, for half widths
// that leave a scalar tail and for dst apart from x and dst = x, with and
// without bfloat16 rounding.
func TestRoPEVectorBitExact(t *testing.T) {
	avx512, _ := x86Features()
	hooks := []struct {
		name string
		ok   bool
		fn   func(dst, x, cs, sn []float32, half int) int
		lane int
	}{{"avx512", avx512, ropeAsm, 16}, {"avx2", vaOK, vaRoPESlice, 8}}
	pats := sdpaExpInputs()[:1<<16]
	for _, h := range hooks {
		if !h.ok {
			t.Logf("SKIPPED: this CPU lacks %s; its RoPE kernel is not tested", h.name)
			continue
		}
		for _, half := range []int{8, 16, 24, 32, 40, 64} {
			for _, inPlace := range []bool{false, true} {
				for _, k := range []struct {
					round Rounder
					kind  byte
				}{{Identity, 'i'}, {tensor.RoundBF16, 'b'}} {
					t.Run(fmt.Sprintf("%s/half%d/inplace%v/%c", h.name, half, inPlace, k.kind), func(t *testing.T) {
						p := RoPEParams{Dims: 2 * half}
						cs, sn := make([]float32, half), make([]float32, half)
						for i := range half {
							cs[i], sn[i] = ropeAngle(1, 37+i, float32(i+1)/7)
						}
						cs[half-1], sn[half-1] = float32(math.Inf(1)), float32(math.Copysign(0, -1))
						d := 2*half + 8 // features past Dims pass through
						for r0 := 0; r0 < len(pats); r0 += d {
							x := make([]float32, d)
							for i := range x {
								x[i] = pats[(r0+i*131)%len(pats)]
							}
							want := make([]float32, d)
							simd := simdRoPE
							simdRoPE = nil
							ropeRow(want, x, d, p, cs, sn, k.round, k.kind)
							simdRoPE = simd
							got := make([]float32, d)
							src := x
							if inPlace {
								copy(got, x)
								src = got
							}
							if n := h.fn(got, src, cs, sn, half); n != half&^(h.lane-1) {
								t.Fatalf("rotated %d pairs, want %d", n, half&^(h.lane-1))
							}
							// The rest as ropeRow does it with the hook.
							saved := simdRoPE
							simdRoPE = h.fn
							if inPlace {
								copy(got, x)
							}
							ropeRow(got, src, d, p, cs, sn, k.round, k.kind)
							simdRoPE = saved
							for i := range want {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("row at %d, feature %d: got %#08x, want %#08x (x %#08x)", r0, i, math.Float32bits(got[i]), math.Float32bits(want[i]), math.Float32bits(x[i%half]))
								}
							}
						}
					})
				}
			}
		}
	}
}
