package kernel

import (
	"runtime"
	"unsafe"
)

// The reference precision's dense matmul on packed weights. Its one-row
// kernel (denseRefZV1) reads sixteen weight rows at once, sixteen values of
// each a step, and transposes them in registers so that each lane adds its
// row's products in order: about a hundred shuffle-port instructions per
// 256 multiply-adds, 16-18 GB of float16 weights per CPU second on Zen 4
// (BenchmarkDenseStream .../ref, one thread) where the fast kernel reads
// 22. Packed, the same sixteen rows are stored column by column (value l
// of the sixteen rows side by side, 32 bytes), so a step is one load, one
// conversion, one multiply and one add per sixteen multiply-adds, in the
// same order (the same bits), and each worker reads its tiles as one
// sequential stream.

// densePacked is a matrix of n rows of k 16-bit values (float16 or
// bfloat16) in tiles of sixteen rows: tile t holds rows 16t..16t+15, value
// l of its rows at 16·(t·k + l) + r, rows past n zero.
type densePacked struct {
	v    Vec       // the tiles (float16 or bfloat16 bits, as the weights)
	mem  *freeOnce // frees v's memory (packArena)
	n, k int
}

// tiles is the number of sixteen-row tiles.
func (p *densePacked) tiles() int { return (p.n + 15) / 16 }

// bytes is the memory p holds.
func (p *densePacked) bytes() int64 { return 2 * int64(len(p.v.U16)) }

// packDense rearranges the n×k 16-bit weights w into densePacked's tiles,
// or returns nil where [densePackable] is false. done (or nil) is told of
// each range of weight rows [r0, r1) copied (from the workers, as pack's).
func packDense(w Vec, n, k int, done func(r0, r1 int)) *densePacked {
	if !densePackable(w) || n <= 0 || k <= 0 {
		return nil
	}
	need("packDense", "w", w.Len(), n*k)
	nt := (n + 15) / 16
	// Huge pages for the matrices under 2 MiB too (packArena): SmolLM2-360M's
	// attention projections, a quarter of its weights; its `reference`
	// decode (mlxgo generate, 128-token prompt, four alternating pairs on
	// Zen 4, 2026-12-05) 41.5-54.1 -> 42.4-57.2 tok/s, each pair faster.
	raw, free := packArena.Alloc(2 * nt * 16 * k)
	p := &densePacked{mem: &freeOnce{free: free}, n: n, k: k}
	p.v = Vec{U16: unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(raw))), nt*16*k), F16: w.F16}
	runtime.AddCleanup(p, (*freeOnce).do, p.mem)
	parallelFor(nt, 1, func(lo, hi int) {
		from := lo // the first tile not yet reported to done
		for t := lo; t < hi; t++ {
			if done != nil && t-from == packDoneEvery {
				done(16*from, 16*t)
				from = t
			}
			tile := p.v.U16[16*t*k : 16*(t+1)*k]
			l0 := 0 // values of every row already in the tile
			if 16*t+16 <= n {
				l0 = densePackTile(tile, w.U16[16*t*k:], k)
			}
			for r := range 16 {
				if j := 16*t + r; j < n {
					row := w.U16[j*k : (j+1)*k]
					for l := l0; l < k; l++ {
						tile[16*l+r] = row[l]
					}
				} else {
					for l := range k {
						tile[16*l+r] = 0
					}
				}
			}
		}
		if done != nil && from < hi {
			done(16*from, min(16*hi, n))
		}
	})
	return p
}

// dense returns the packed form of the n×k weights w, packing them on the
// first call (nil where packDense returns nil).
func (s *PackSlot) dense(w Vec, n, k int) *densePacked {
	s.packOnce(func() int64 {
		if s.d = packDense(w, n, k, s.rows); s.d != nil {
			return s.d.bytes()
		}
		return 0
	})
	return s.d
}

// denseAMX returns the AMX form of the n×k weights w, packing them on the
// first call (nil where packDenseAMX returns nil).
func (s *PackSlot) denseAMX(w Vec, n, k int) *denseAMX {
	s.packOnce(func() int64 {
		if s.da = packDenseAMX(w, n, k, s.rows); s.da != nil {
			return s.da.bytes()
		}
		return 0
	})
	return s.da
}

// DenseAMXReplaces reports whether DenseMatmulTPacked reads weights like w
// with k values a row from a packed copy alone in the fast precision (AMX:
// dense_amx.go), so that the original's memory may be given back once the
// copy is made.
func DenseAMXReplaces(w Vec, k int) bool { return denseAMXTakes(w, k) }

// DensePackReplaces reports whether DenseMatmulTPacked reads weights like
// w (float16 or bfloat16, on a CPU with the AVX-512 reference kernels)
// from a packed copy alone, in the reference precision, so that the
// original's memory may be given back once the copy is made.
func DensePackReplaces(w Vec) bool { return densePackable(w) }

// DenseMatmulTPacked is DenseMatmulT with a slot for the packed form of w
// (nil: none): in the reference precision, where DensePackReplaces(w), the
// first call packs w into the slot and every call reads the packed form
// alone, with the same bits; in the fast precision, where
// DenseAMXReplaces(w, k), likewise into AMX's layout, every call then on
// the AMX kernel (dense_amx.go: its own bits, within DenseFastBoundW, the
// same for every m). Otherwise it is DenseMatmulT.
func DenseMatmulTPacked(dst, x []float32, w Vec, slot *PackSlot, m, n, k int, fast bool) {
	need("DenseMatmulT", "dst", len(dst), m*n)
	need("DenseMatmulT", "x", len(x), m*k)
	need("DenseMatmulT", "w", w.Len(), n*k)
	if !fast && slot != nil && m > 0 && n > 0 && k > 0 {
		if p := slot.dense(w, n, k); p != nil {
			denseRefPacked(dst, x, p, m)
			return
		}
	}
	if fast && slot != nil && m > 0 && n > 0 && denseAMXTakes(w, k) {
		if p := slot.denseAMX(w, n, k); p != nil {
			denseAMXRun(dst, x, p, m)
			return
		}
	}
	DenseMatmulT(dst, x, w, m, n, k, fast)
}
