package kernel

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkSDPAShapes runs MiniCPM5-1B's attention (16 query heads, 2 KV
// heads of 128, causal, bf16 values as the model keeps them): prefill of
// 512 tokens and decode against 1k and 8k cached positions, reading K and V
// in place from a bf16 cache, on the assembly and the portable path (and a
// prefill of 2048 tokens, where chunks of keys are merged).
// cpu-ns/op is the CPU time of all threads per op (steadier than wall time
// on a shared machine).
func BenchmarkSDPAShapes(b *testing.B) {
	const h, hk, d = 16, 2, 128
	shapes := []struct {
		name string
		l, s int
	}{{"prefill", 512, 512}, {"prefill", 2048, 2048}, {"decode", 1, 1024}, {"decode", 1, 8192}}
	for _, sh := range shapes {
		r := newRand(uint64(sh.s))
		q := randVec(r, h*sh.l*d, 1, tensor.RoundBF16)
		k := randVec(r, hk*sh.s*d, 1, tensor.RoundBF16)
		v := randVec(r, hk*sh.s*d, 1, tensor.RoundBF16)
		kk := toStorage(k, "bf16", 1, hk, sh.s, d, sh.s+256, d)
		vv := toStorage(v, "bf16", 1, hk, sh.s, d, sh.s+256, d)
		dst := make([]float32, h*sh.l*d)
		for _, path := range sdpaPaths() {
			b.Run(fmt.Sprintf("%s/%s/%s", sh.name, dims(sh.l, sh.s), path.name), func(b *testing.B) {
				restore, ok := path.set()
				if !ok {
					b.Skipf("SKIPPED: this CPU lacks the instructions of the %s SDPA kernels", path.name)
				}
				defer restore()
				t0 := cpuTime()
				for b.Loop() {
					SDPAKV(dst, q, kk, vv, 1, h, hk, sh.l, sh.s, d, d, 0.088, Mask{Kind: MaskCausal}, tensor.RoundBF16, AccF32)
				}
				reportCPU(b, t0)
			})
		}
	}
}
