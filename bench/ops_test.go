package bench

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// MiniCPM5-1B's shapes.
const (
	hidden, inter, vocab = 1536, 4608, 130560
	nHeads, nKV, headDim = 16, 2, 128
	groupSize            = 64
)

// goConfigs are the Go backend configurations compiled in (cpu-<precision>
// but high, mlx when built with -tags mlx).
func goConfigs() []string {
	var out []string
	for _, c := range DefaultConfigs() {
		if _, _, err := ParseConfig(c); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// forEachBackend runs fn as a sub-benchmark per Go configuration.
func forEachBackend(b *testing.B, fn func(b *testing.B, be backend.Backend)) {
	for _, c := range goConfigs() {
		b.Run(c, func(b *testing.B) {
			name, opts, _ := ParseConfig(c)
			be, err := backend.Open(name, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			fn(b, be)
		})
	}
}

// loop times op, evaluating its result and releasing every array it made.
func loop(b *testing.B, be backend.Backend, op func() backend.Array) {
	b.Helper()
	for b.Loop() {
		sc := be.Scope()
		if err := be.Eval(op()); err != nil {
			b.Fatal(err)
		}
		sc.Close()
	}
}

func randBF16(r *rand.Rand, shape tensor.Shape, scale float64) *tensor.Dense {
	v := make([]float32, shape.Size())
	for i := range v {
		v[i] = float32(scale * r.NormFloat64())
	}
	return tensor.FromFloat32(shape, v).Convert(tensor.BF16)
}

// randQuantized returns a random packed [n, k] weight: uniform codes, and
// scales and biases of a centred group range of about ±2.5/sqrt(k).
func randQuantized(be backend.Backend, r *rand.Rand, n, k, bits int) (backend.QuantizedArray, int64) {
	words := make([]uint32, n*k*bits/32)
	for i := range words {
		words[i] = r.Uint32()
	}
	g := n * k / groupSize
	sc, bi := make([]float32, g), make([]float32, g)
	levels := float32(int(1)<<bits - 1)
	for i := range sc {
		a := float32(2.5 / float64(k) * (1 + 0.2*r.NormFloat64()))
		sc[i], bi[i] = 2*a/levels, -a
	}
	gs := tensor.Shape{n, k / groupSize}
	q := backend.QuantizedArray{
		W:         be.FromHost(tensor.FromUint32(tensor.Shape{n, k * bits / 32}, words)),
		Scales:    be.FromHost(tensor.FromFloat32(gs, sc).Convert(tensor.BF16)),
		Biases:    be.FromHost(tensor.FromFloat32(gs, bi).Convert(tensor.BF16)),
		GroupSize: groupSize, Bits: bits,
	}
	return q, int64(len(words)*4 + 2*2*g)
}

// BenchmarkQuantizedMatmul: x [M, K] @ Wᵀ for the projections of one block,
// 4- and 8-bit, decode (M=1) and prefill (M=128, 512). Bytes: the packed
// weight with its scales and biases, read once per call.
func BenchmarkQuantizedMatmul(b *testing.B) {
	forEachBackend(b, func(b *testing.B, be backend.Backend) {
		for _, w := range []struct {
			name string
			n, k int
		}{{"q_proj", nHeads * headDim, hidden}, {"gate_up", inter, hidden}, {"down", hidden, inter}} {
			for _, bits := range []int{4, 8} {
				for _, m := range []int{1, 128, 512} {
					b.Run(fmt.Sprintf("%s/%dx%d/b%d/M%d", w.name, w.n, w.k, bits, m), func(b *testing.B) {
						r := rand.New(rand.NewPCG(1, 2))
						q, bytes := randQuantized(be, r, w.n, w.k, bits)
						x := be.FromHost(randBF16(r, tensor.Shape{1, m, w.k}, 1))
						defer be.Release(q.W, q.Scales, q.Biases, x)
						b.SetBytes(bytes)
						loop(b, be, func() backend.Array { return be.QuantizedMatmul(x, q, true) })
					})
				}
			}
		}
	})
}

// BenchmarkLMHead: the 8-bit output head, [1, 1536] @ [130560, 1536]ᵀ.
func BenchmarkLMHead(b *testing.B) {
	forEachBackend(b, func(b *testing.B, be backend.Backend) {
		r := rand.New(rand.NewPCG(3, 4))
		q, bytes := randQuantized(be, r, vocab, hidden, 8)
		x := be.FromHost(randBF16(r, tensor.Shape{1, 1, hidden}, 1))
		defer be.Release(q.W, q.Scales, q.Biases, x)
		b.SetBytes(bytes)
		loop(b, be, func() backend.Array { return be.QuantizedMatmul(x, q, true) })
	})
}

// BenchmarkSDPA: one query (16 heads) against a bf16 KV cache of 1k and 8k
// positions (2 KV heads of 128). Bytes: the keys and values read.
func BenchmarkSDPA(b *testing.B) {
	forEachBackend(b, func(b *testing.B, be backend.Backend) {
		for _, s := range []int{1024, 8192} {
			b.Run(fmt.Sprintf("S%d", s), func(b *testing.B) {
				r := rand.New(rand.NewPCG(5, uint64(s)))
				q := be.FromHost(randBF16(r, tensor.Shape{1, nHeads, 1, headDim}, 1))
				k := be.FromHost(randBF16(r, tensor.Shape{1, nKV, s, headDim}, 1))
				v := be.FromHost(randBF16(r, tensor.Shape{1, nKV, s, headDim}, 1))
				defer be.Release(q, k, v)
				b.SetBytes(int64(2 * nKV * s * headDim * 2))
				loop(b, be, func() backend.Array {
					return be.ScaledDotProductAttention(q, k, v, 0.088, backend.CausalMask{})
				})
			})
		}
	})
}

// BenchmarkElementwise: RMSNorm over hidden, RoPE over [16 heads, M, 128],
// SwiGLU over [M, 4608], for M = 1 and 512 (bf16). Bytes: the input read.
func BenchmarkElementwise(b *testing.B) {
	forEachBackend(b, func(b *testing.B, be backend.Backend) {
		for _, m := range []int{1, 512} {
			r := rand.New(rand.NewPCG(7, uint64(m)))
			b.Run(fmt.Sprintf("RMSNorm/M%d", m), func(b *testing.B) {
				x := be.FromHost(randBF16(r, tensor.Shape{1, m, hidden}, 1))
				w := be.FromHost(randBF16(r, tensor.Shape{hidden}, 0.05))
				defer be.Release(x, w)
				b.SetBytes(int64(m * hidden * 2))
				loop(b, be, func() backend.Array { return be.RMSNorm(x, w, 1e-5) })
			})
			b.Run(fmt.Sprintf("RoPE/M%d", m), func(b *testing.B) {
				x := be.FromHost(randBF16(r, tensor.Shape{1, nHeads, m, headDim}, 1))
				defer be.Release(x)
				b.SetBytes(int64(nHeads * m * headDim * 2))
				p := backend.RoPE{Dims: headDim, Base: 10000, Scale: 1}
				loop(b, be, func() backend.Array { return be.RoPE(x, p, backend.Offset{Scalar: 100}) })
			})
			b.Run(fmt.Sprintf("SwiGLU/M%d", m), func(b *testing.B) {
				g := be.FromHost(randBF16(r, tensor.Shape{1, m, inter}, 1))
				u := be.FromHost(randBF16(r, tensor.Shape{1, m, inter}, 1))
				defer be.Release(g, u)
				b.SetBytes(int64(2 * m * inter * 2))
				loop(b, be, func() backend.Array { return be.SwiGLU(g, u) })
			})
		}
	})
}

// The benchmarks' configurations are the harness's Go configurations.
func TestGoConfigs(t *testing.T) {
	cs := goConfigs()
	if len(cs) == 0 || cs[0] != "cpu-reference" {
		t.Fatalf("got %v, want cpu-reference first", cs)
	}
	for _, c := range cs {
		if strings.HasSuffix(c, "-high") {
			t.Errorf("got %s among the benchmarked configurations; high is float64 debugging", c)
		}
	}
}
