package kernel

import (
	"fmt"
	"testing"
	"time"

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
//     128, 512 and 2048 cached positions, prefill of 512 tokens; and decode
//     on a bf16 cache (the synth preset's dtype) against 128 and 512.
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
		{"smollm2-bf16", 9, 3, 64, "bf16", tensor.RoundBF16, nil, []int{128, 512}},
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

// BenchmarkSDPALongContext is MiniCPM5-1B's attention of one layer (16
// query heads on 2 KV heads of 128, bf16) at long context, on the bf16
// cache and on 8- and 4-bit quantized caches (group 64, bf16 scales) read
// in place: decode (one query) against 1k to 32k cached positions, and a
// prefill chunk of 512 queries at the end of 4k and 16k; the 8-bit cache
// also in the fast precision (AccQ8: the integer key kernel). MB/s is the
// bytes of K and V read per second.
func BenchmarkSDPALongContext(b *testing.B) {
	const h, hk, d = 16, 2, 128
	for _, kind := range []string{"bf16", "q8", "q4"} {
		for _, sh := range []struct{ l, s int }{{1, 1024}, {1, 4096}, {1, 16384}, {1, 32768}, {512, 4096}, {512, 16384}} {
			r := newRand(uint64(sh.s))
			q := randVec(r, h*sh.l*d, 1, tensor.RoundBF16)
			var kk, vv KV
			var bytes int
			switch kind {
			case "bf16":
				kk = toStorage(randVec(r, hk*sh.s*d, 1, tensor.RoundBF16), "bf16", 1, hk, sh.s, d, sh.s, d)
				vv = toStorage(randVec(r, hk*sh.s*d, 1, tensor.RoundBF16), "bf16", 1, hk, sh.s, d, sh.s, d)
				bytes = 2 * hk * sh.s * d * 2
			default:
				bits := 8
				if kind == "q4" {
					bits = 4
				}
				kk = newQuantStoreN(r, hk, sh.s, d, 64, bits)
				vv = newQuantStoreN(r, hk, sh.s, d, 64, bits)
				bytes = 2 * hk * sh.s * (d*bits/8 + 2*2*d/64)
			}
			dst := make([]float32, h*sh.l*d)
			name := "decode"
			if sh.l > 1 {
				name = "prefill"
			}
			for _, path := range sdpaPaths() {
				for _, acc := range []Acc{AccF32, AccQ8} {
					if acc == AccQ8 && kind != "q8" {
						continue // the 8-bit key kernel only
					}
					accName := map[Acc]string{AccF32: "f32", AccQ8: "q8"}[acc]
					b.Run(fmt.Sprintf("%s/%s/%s/%s/acc=%s", kind, name, dims(sh.l, sh.s), path.name, accName), func(b *testing.B) {
						restore, ok := path.set()
						if !ok {
							b.Skipf("SKIPPED: this CPU lacks the instructions of the %s SDPA kernels", path.name)
						}
						defer restore()
						t0 := cpuTime()
						for b.Loop() {
							SDPAKV(dst, q, kk, vv, 1, h, hk, sh.l, sh.s, d, d, 0.088, Mask{Kind: MaskCausal}, tensor.RoundBF16, acc)
						}
						reportCPU(b, t0)
						b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
					})
				}
			}
		}
	}
}

// newQuantStoreN is a quantized cache of [1, hk, s, n] random codes with
// bf16 scales and biases, contiguous (no padding; benchmarks).
func newQuantStoreN(r interface{ Uint32() uint32 }, hk, s, n, gs, bits int) KV {
	wpr, gpr := WordsPerRow(n, bits), n/gs
	q := &QuantKV{W: make([]uint32, hk*s*wpr), HStride: s * wpr, RowStride: wpr, GroupSize: gs, Bits: bits}
	for i := range q.W {
		q.W[i] = r.Uint32()
	}
	sc, bi := make([]uint16, hk*s*gpr), make([]uint16, hk*s*gpr)
	for i := range sc {
		sc[i], bi[i] = 0x3c00, 0xbf00 // bf16 2^-7 and -0.5
	}
	q.Scales = KV{Vec: BF16Vec(sc), HStride: s * gpr, RowStride: gpr}
	q.Biases = KV{Vec: BF16Vec(bi), HStride: s * gpr, RowStride: gpr}
	return KV{Q: q}
}

// BenchmarkSDPAPrefix is one SmolLM2-135M layer's training attention (9
// query heads, 3 KV heads of 64, float32 storage) over a prefix-shared
// ORPO sequence, a prompt of 1024 tokens and two responses of 256 (1536
// positions), on the default kernel path: under the prefix mask (blocks
// of keys it hides skipped), under its explicit Bool mask (every key
// read, as before the prefix mask), and the two separate causal forwards
// of 1280 positions it replaces (two calls per op).
func BenchmarkSDPAPrefix(b *testing.B) {
	const h, hk, d, P, R = 9, 3, 64, 1024, 256
	m := Mask{Kind: MaskPrefix, Prefix: P, Ends: []int{P + R, P + 2*R}}
	r := newRand(1)
	for _, c := range []struct {
		name  string
		l     int
		mask  Mask
		calls int
	}{
		{"prefix", P + 2*R, m, 1},
		{"bool", P + 2*R, prefixBool(m, P+2*R), 1},
		{"two-causal", P + R, Mask{Kind: MaskCausal}, 2},
	} {
		q := randVec(r, h*c.l*d, 1, Identity)
		k := randVec(r, hk*c.l*d, 1, Identity)
		v := randVec(r, hk*c.l*d, 1, Identity)
		dst := make([]float32, h*c.l*d)
		b.Run(c.name, func(b *testing.B) {
			t0 := cpuTime()
			for b.Loop() {
				for range c.calls {
					SDPA(dst, q, k, v, 1, h, hk, c.l, c.l, d, d, 0.125, c.mask, Identity, AccF32)
				}
			}
			reportCPU(b, t0)
		})
	}
}

// BenchmarkSDPARowsCold is the attention of a server's decode step at eight
// rows on SmolLM2-135M's shape (9 query heads on 3 KV heads of 64, bf16,
// f16, or f32 as the real checkpoint's: its GGUF's float32 norms make it
// compute in float32; each row a cache of its own of capacity 256 as nn's
// per-row caches keep them) over 30 layers, each layer's caches in memory
// of their own, with a 96 MB sweep before each step (not timed) standing
// in for the weights a decode step streams: the caches come from memory,
// as they do in BenchmarkBatchDecode. ns/layer is the wall time of one layer's
// SDPAKVRows; MB/s the bytes of K and V read per second; f32 is the
// reference precision's path (AccF32), fast the fast precision's (AccQ8:
// bfloat16 scores where the CPU has AVX512_BF16, float32 and float16 keys
// untransposed).
func BenchmarkSDPARowsCold(b *testing.B) {
	const h, hk, d, rows, layers, capS = 9, 3, 64, 8, 30, 256
	for _, c := range []struct {
		ctx   int
		name  string
		acc   Acc
		dtype string
	}{
		{96, "f32", AccF32, "bf16"}, {96, "fast", AccQ8, "bf16"}, {192, "f32", AccF32, "bf16"}, {192, "fast", AccQ8, "bf16"},
		{96, "fast", AccQ8, "f16"}, {192, "fast", AccQ8, "f16"}, {96, "fast", AccQ8, "f32"}, {192, "fast", AccQ8, "f32"},
	} {
		ctx := c.ctx
		b.Run(fmt.Sprintf("ctx%d/%s/%s", ctx, c.dtype, c.name), func(b *testing.B) {
			r := newRand(uint64(ctx))
			ks, vs := make([][]KV, layers), make([][]KV, layers)
			var round Rounder = tensor.RoundBF16
			es := 2 // bytes per element
			switch c.dtype {
			case "f16":
				round = tensor.RoundF16
			case "f32":
				round, es = Identity, 4
			}
			lens := make([]int, rows)
			for i := range lens {
				lens[i] = ctx - 4 + i // rows a few tokens apart, as a server's are
			}
			for l := range layers {
				ks[l], vs[l] = make([]KV, rows), make([]KV, rows)
				for i := range rows {
					ks[l][i] = toStorage(randVec(r, hk*lens[i]*d, 1, round), c.dtype, 1, hk, lens[i], d, capS, d)
					vs[l][i] = toStorage(randVec(r, hk*lens[i]*d, 1, round), c.dtype, 1, hk, lens[i], d, capS, d)
				}
			}
			q := randVec(r, rows*h*d, 1, round)
			dst := make([]float32, rows*h*d)
			sweep := make([]byte, 96<<20)
			for i := range sweep {
				sweep[i] = byte(i)
			}
			var sum byte
			bytes := 0
			for _, n := range lens {
				bytes += 2 * hk * n * d * es * layers
			}
			var spent time.Duration
			for b.Loop() {
				for i := 0; i < len(sweep); i += 64 {
					sum += sweep[i]
				}
				t0 := time.Now()
				for l := range layers {
					SDPAKVRows(dst, q, ks[l], vs[l], lens, h, hk, 1, d, d, 0.125, Mask{}, round, c.acc)
				}
				spent += time.Since(t0)
			}
			if sum == 1 {
				b.Log("") // keeps the sweep
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*layers), "ns/layer")
			b.ReportMetric(float64(bytes)*float64(b.N)/spent.Seconds()/1e6, "MB/s")
		})
	}
}
