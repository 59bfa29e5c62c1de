package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestSDPAVJPTiles: the attention VJP under a causal mask or a PrefixMask,
// which goes in tiles of query positions over the keys up to each tile's
// last visible one, against the VJP under the equivalent Bool ArrayMask
// (the dense computation): bit for bit in one tile (the same ops), and in
// tiles of 5 and 16 positions (dK and dV summed tile by tile) within 1e-5
// of each tensor's largest element in float32 (measured ≤ 4e-7) and 2⁻⁷
// in bfloat16 (the float32 gradients rounded to bfloat16: one unit of its
// 8-bit significand at most). The forward is the same either way (the
// fused kernel, equal to the ArrayMask's bit for bit).
func TestSDPAVJPTiles(t *testing.T) {
	type mcase struct {
		name string
		L, S int
		mask backend.Mask
	}
	pm := backend.PrefixMask{Prefix: 13, Blocks: []int{9, 17, 4}}
	cases := []mcase{
		{"prefix", pm.Len(), pm.Len(), pm},
		{"prefix-only", 20, 20, backend.PrefixMask{Prefix: 20}},
		{"causal", 37, 37, backend.CausalMask{}},
		{"causal-offset", 23, 30, backend.CausalMask{}},
	}
	old := sdpaVJPTile
	defer func() { sdpaVJPTile = old }()
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, c := range cases {
			for _, tile := range []int{1000, 16, 5} {
				t.Run(fmt.Sprintf("%v/%s/tile%d", dt, c.name, tile), func(t *testing.T) {
					b := open(t)
					B, H, Hk, D, Dv := 2, 6, 2, 8, 16
					r := rand.New(rand.NewPCG(uint64(c.L), uint64(tile)))
					rnd := func(s tensor.Shape) backend.Array {
						v := make([]float64, s.Size())
						for i := range v {
							v[i] = r.NormFloat64()
						}
						return arr(b, dt, s, v...)
					}
					q, k, v := rnd(tensor.Shape{B, H, c.L, D}), rnd(tensor.Shape{B, Hk, c.S, D}), rnd(tensor.Shape{B, Hk, c.S, Dv})
					cot := rnd(tensor.Shape{B, H, c.L, Dv})
					dense := make([]byte, c.L*c.S)
					for i := range c.L {
						for j := range c.S {
							ok := j <= i+c.S-c.L
							if pm, isP := c.mask.(backend.PrefixMask); isP {
								ok = pm.Visible(i, j)
							}
							if ok {
								dense[i*c.S+j] = 1
							}
						}
					}
					am := backend.ArrayMask{A: b.FromHost(&tensor.Dense{DType: tensor.Bool, Shape: tensor.Shape{c.L, c.S}, Data: dense})}
					grads := func(m backend.Mask) (out []backend.Array, g []backend.Array) {
						out, g, err := b.VJP(func(x []backend.Array) ([]backend.Array, error) {
							return one(b.ScaledDotProductAttention(x[0], x[1], x[2], 0.3, m)), nil
						}, []backend.Array{q, k, v}, []backend.Array{cot})
						if err != nil {
							t.Fatal(err)
						}
						return out, g
					}
					sdpaVJPTile = 1 << 20
					wantOut, want := grads(am)
					sdpaVJPTile = tile
					gotOut, got := grads(c.mask)
					if d := maxRel(vals(t, b, gotOut[0]), vals(t, b, wantOut[0])); d != 0 {
						t.Errorf("forward differs from the ArrayMask's by %.3g", d)
					}
					bound := 1e-5
					if dt == tensor.BF16 {
						bound = 1.0 / 128
					}
					if tile >= c.L {
						bound = 0
					}
					for i, name := range []string{"dq", "dk", "dv"} {
						d := maxRel(vals(t, b, got[i]), vals(t, b, want[i]))
						if d > bound {
							t.Errorf("%s differs from the ArrayMask's by %.3g of its largest element (bound %g)", name, d, bound)
						}
						t.Logf("%s: %.3g", name, d)
					}
				})
			}
		}
	}
}

// maxRel is the largest |got − want| over the largest |want|.
func maxRel(got, want []float64) float64 {
	top, worst := 0.0, 0.0
	for i := range want {
		top = math.Max(top, math.Abs(want[i]))
		worst = math.Max(worst, math.Abs(got[i]-want[i]))
	}
	if worst == 0 {
		return 0
	}
	return worst / top
}
