//go:build amd64

package kernel

import (
	"fmt"
	"testing"
)

// BenchmarkDenseStream runs the matvecs of decode steps over unquantized
// weights in graph order, on 1 and 2 threads, and reports the weight bytes
// read per second (per CPU second with one thread): twenty-four of
// SmolLM2-360M's layers (q, k, v, o, gate, up, down at width 960, 472 MB in
// float16, fifteen times a 32 MB last-level cache and more than a 2026
// Xeon's 300 MiB), per weight dtype, read in place and ("/packed") from
// the packed copy the backend makes (the reference precision's tiles, or
// the fast one's AMX layout where the CPU has AMX-BF16). With a
// working set near the cache's size a cyclic stream partly hits it: four
// layers (79 MB) read 38 GB/s on two Zen 4 threads where sixteen read 27.
// The "/ref" runs take the reference precision's kernels (the in-order
// sums of DenseMatmulTRef).
func BenchmarkDenseStream(b *testing.B) {
	shapes := [][2]int{{960, 960}, {320, 960}, {320, 960}, {960, 960}, {2560, 960}, {2560, 960}, {960, 2560}}
	const layers = 24
	for _, dt := range []string{"f16", "bf16"} {
		r := newRand(1)
		var mats []Vec
		var dims [][2]int
		var bytes int64
		for range layers {
			for _, sh := range shapes {
				u := make([]uint16, sh[0]*sh[1])
				v := randVec(r, len(u), 0.5, Identity)
				w := F16Vec(u)
				if dt == "bf16" {
					Float32sToBF16(u, v)
					w = BF16Vec(u)
				} else {
					Float32sToF16(u, v)
				}
				mats, dims = append(mats, w), append(dims, sh)
				bytes += int64(2 * len(u))
			}
		}
		x := randVec(r, 2560, 1, Identity)
		dst := make([]float32, 2560)
		for _, th := range []int{1, 2} {
			for _, fast := range []bool{true, false} {
				for _, packed := range []bool{false, true} {
					name := fmt.Sprintf("smollm2-360m/%s/threads%d", dt, th)
					if !fast {
						name += "/ref"
					}
					if packed {
						name += "/packed"
					}
					slots := make([]*PackSlot, len(mats))
					if packed {
						for i, w := range mats {
							slots[i] = NewPackSlot(nil, nil)
							n, k := dims[i][0], dims[i][1]
							DenseMatmulTPacked(dst, x[:k], w, slots[i], 1, n, k, fast)
						}
					}
					b.Run(name, func(b *testing.B) {
						runThreads(b, th, bytes, func() {
							for i, w := range mats {
								n, k := dims[i][0], dims[i][1]
								DenseMatmulTPacked(dst, x[:k], w, slots[i], 1, n, k, fast)
							}
						})
					})
					for _, sl := range slots {
						sl.Free()
					}
				}
			}
		}
	}
}
