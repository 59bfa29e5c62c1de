//go:build mlx && !mlxc_system

package metal

import (
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestFusedCrossEntropy: mx.fast.cross_entropy (which MLX's CPU computes
// op by op) gives logsumexp(x) − x[target] of each row in float32, and its
// gradient is softmax(x) − onehot(target), against float64 sums on the
// host, for float32 and float16 logits; FusesCrossEntropy is false on the
// CPU, as mlx.nn.losses.cross_entropy takes the unfused path there.
func TestFusedCrossEntropy(t *testing.T) {
	b := open(t)
	if b.Device() == "cpu" && b.FusesCrossEntropy() {
		t.Error("FusesCrossEntropy on the CPU: want false (mlx.nn.losses.cross_entropy fuses on the GPU only)")
	}
	const rows, V = 6, 37
	x := make([]float32, rows*V)
	tg := make([]int32, rows)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*1.7)*4 + float64(i%5))
	}
	for r := range tg {
		tg[r] = int32((r * 11) % V)
	}
	for _, tc := range []struct {
		dt       tensor.DType
		tol, gtl float64 // loss and gradient tolerances (float16 logits round to 2^-11)
	}{{tensor.F32, 1e-5, 1e-6}, {tensor.F16, 2e-2, 1e-2}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			err := b.Do(func() (err error) {
				defer backend.Recover(&err)
				s := b.Scope()
				defer s.Close()
				logits := b.AsType(b.FromHost(tensor.FromFloat32(tensor.Shape{2, 3, V}, x)), tc.dt)
				// The logits as the kernel reads them (rounded to dt).
				xh, err := b.ToHost(b.AsType(logits, tensor.F32))
				if err != nil {
					return err
				}
				xs := xh.ToFloat64()
				targets := b.FromHost(tensor.FromInt32(tensor.Shape{2, 3}, tg))
				outs, grads, err := b.ValueAndGrad(func(in []backend.Array) ([]backend.Array, error) {
					ce := b.FusedCrossEntropy(in[0], targets)
					return []backend.Array{b.Sum(b.Reshape(ce, -1), 0, false), ce}, nil
				}, []backend.Array{logits}, []int{0})
				if err != nil {
					return err
				}
				if got := outs[1].DType(); got != tensor.F32 {
					t.Errorf("loss dtype %v, want float32", got)
				}
				ce, err := b.ToHost(outs[1])
				if err != nil {
					return err
				}
				g, err := b.ToHost(b.AsType(grads[0], tensor.F32))
				if err != nil {
					return err
				}
				cs, gs := ce.ToFloat64(), g.ToFloat64()
				for r := range rows {
					row := xs[r*V : (r+1)*V]
					m := math.Inf(-1)
					for _, v := range row {
						m = math.Max(m, v)
					}
					sum := 0.0
					for _, v := range row {
						sum += math.Exp(v - m)
					}
					lse := m + math.Log(sum)
					if d := math.Abs(cs[r] - (lse - row[tg[r]])); d > tc.tol {
						t.Errorf("row %d: loss %v, want %v (off by %g)", r, cs[r], lse-row[tg[r]], d)
					}
					for j, v := range row {
						want := math.Exp(v - lse)
						if int32(j) == tg[r] {
							want--
						}
						if d := math.Abs(gs[r*V+j] - want); d > tc.gtl {
							t.Errorf("row %d, logit %d: gradient %v, want %v", r, j, gs[r*V+j], want)
						}
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
