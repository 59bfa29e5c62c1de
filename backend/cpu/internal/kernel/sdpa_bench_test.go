package kernel

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSDPAShapes runs real attention shapes, reading K and V in place
// from a cache of the model's dtype, causal, on each SDPA path (avx512,
// avx2, portable; a path the CPU lacks is skipped):
//
//   - MiniCPM5-1B (16 query heads, 2 KV heads of 128, bf16): prefill of 512
//     and 2048 tokens (where chunks of keys are merged), decode against 1k
//     and 8k cached positions;
//   - SmolLM2-135M (9 query heads, 3 KV heads of 64, f16): decode against
//     128, 512 and 2048 cached positions, prefill of 512 tokens.
//
// cpu-ns/op is the CPU time of all threads per op (steadier than wall time
// on a shared machine; with more than one thread it includes the workers'
// spinning between ops).
func BenchmarkSDPAShapes(b *testing.B) {
	type model struct {
		name      string
		h, hk, d  int
		dt        string
		round     Rounder
		prefill   []int
		decodeCtx []int
	}
	models := []model{
		{"minicpm5", 16, 2, 128, "bf16", tensor.RoundBF16, []int{512, 2048}, []int{1024, 8192}},
		{"smollm2", 9, 3, 64, "f16", tensor.RoundF16, []int{512}, []int{128, 512, 2048}},
	}
	for _, md := range models {
		type shape struct {
			name string
			l, s int
		}
		var shapes []shape
		for _, n := range md.prefill {
			shapes = append(shapes, shape{"prefill", n, n})
		}
		for _, n := range md.decodeCtx {
			shapes = append(shapes, shape{"decode", 1, n})
		}
		for _, sh := range shapes {
			h, hk, d := md.h, md.hk, md.d
			r := newRand(uint64(sh.s))
			q := randVec(r, h*sh.l*d, 1, md.round)
			k := randVec(r, hk*sh.s*d, 1, md.round)
			v := randVec(r, hk*sh.s*d, 1, md.round)
			kk := toStorage(k, md.dt, 1, hk, sh.s, d, sh.s+256, d)
			vv := toStorage(v, md.dt, 1, hk, sh.s, d, sh.s+256, d)
			dst := make([]float32, h*sh.l*d)
			for _, path := range sdpaPaths() {
				b.Run(fmt.Sprintf("%s/%s/%s/%s", md.name, sh.name, dims(sh.l, sh.s), path.name), func(b *testing.B) {
					restore, ok := path.set()
					if !ok {
						b.Skipf("SKIPPED: this CPU lacks the instructions of the %s SDPA kernels", path.name)
					}
					defer restore()
					t0 := cpuTime()
					for b.Loop() {
						SDPAKV(dst, q, kk, vv, 1, h, hk, sh.l, sh.s, d, d, 0.088, Mask{Kind: MaskCausal}, md.round, AccF32)
					}
					reportCPU(b, t0)
				})
			}
		}
	}
}
