package cpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestQuantizedMatmulsT holds QuantizedMatmulsT (backend.SharedMatmuler)
// to one QuantizedMatmul per matrix, byte for byte: both precisions,
// weights borrowed (packed by the fast backend) and copied, x of one row,
// of a batch and of [B, L, K], and matrices that cannot share a pass (a
// different group size), which go one call each.
func TestQuantizedMatmulsT(t *testing.T) {
	const k = 256
	for _, prec := range []string{"fast", "reference"} {
		for _, mixed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mixed-groups-%v", prec, mixed), func(t *testing.T) {
				b := openWith(t, backend.Options{Precision: prec})
				r := rand.New(rand.NewPCG(3, 9))
				var borrowed, copied []backend.QuantizedArray
				for i, n := range []int{96, 40, 24} {
					wv := make([]float64, n*k)
					for j := range wv {
						wv[j] = r.NormFloat64()
					}
					gs := 32
					if mixed && i == 2 {
						gs = 64
					}
					q := b.Quantize(arr(b, tensor.BF16, tensor.Shape{n, k}, wv...), gs, 4)
					wd, sd, bd := quantHost(t, b, q)
					borrowed = append(borrowed, backend.QuantizedArray{W: b.Borrow(wd), Scales: b.Borrow(sd), Biases: b.Borrow(bd), GroupSize: gs, Bits: 4})
					copied = append(copied, q)
				}
				for _, xs := range []tensor.Shape{{1, k}, {8, k}, {2, 3, k}} {
					xv := make([]float64, xs.Size())
					for j := range xv {
						xv[j] = r.NormFloat64()
					}
					x := arr(b, tensor.BF16, xs, xv...)
					for _, ws := range [][]backend.QuantizedArray{borrowed, copied} {
						for call := range 2 { // the first call packs borrowed weights, the second reads the copies
							got := b.QuantizedMatmulsT(x, ws)
							for i, w := range ws {
								want, err := b.ToHost(b.QuantizedMatmul(x, w, true))
								if err != nil {
									t.Fatal(err)
								}
								g, err := b.ToHost(got[i])
								if err != nil {
									t.Fatal(err)
								}
								if !g.Shape.Equal(want.Shape) || g.DType != want.DType || !bytes.Equal(g.Data, want.Data) {
									t.Fatalf("x %v, call %d, matrix %d: %v %v differs from QuantizedMatmul's %v %v", xs, call, i, g.DType, g.Shape, want.DType, want.Shape)
								}
							}
						}
					}
				}
			})
		}
	}
}
