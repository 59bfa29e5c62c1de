package generate

import (
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSample measures one temperature sample (mlx_lm's defaults for a
// chat request: temperature 0.7, top-p 0.9) over a vocabulary of MiniCPM5's
// size, the per-row host work of a sampled decode step, on bfloat16 and
// float16 logits.
//
//	go test ./generate/ -run '^$' -bench Sample
func BenchmarkSample(b *testing.B) {
	const vocab = 130560
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F16} {
		round := rounder(dt)
		r := rand.New(rand.NewPCG(1, 2))
		lp := make([]float32, vocab)
		for i := range lp {
			lp[i] = round(float32(r.NormFloat64()*3 - 12))
		}
		for _, c := range []struct {
			name string
			opts SamplerOptions
		}{
			{"temp", SamplerOptions{Temp: 0.7}},
			{"temp-top-p", SamplerOptions{Temp: 0.7, TopP: 0.9}},
		} {
			b.Run(c.name+"/"+dt.String(), func(b *testing.B) {
				s, err := NewSampler(c.opts)
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, err := s.Sample(lp, dt); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
