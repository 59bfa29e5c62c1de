package kernel

import "unsafe"

// The float32 (AccF32) quantized matmul for tiles of 8 rows of x, with the
// assembly kernels f32gemmB4 and f32gemmB8 (qmm_gemmf32_amd64.s). Each
// output gets the bits of the one-row kernels (qdotF32B4/B8, the lane
// operations of the vector path in the same order): the kernel unpacks a
// weight block once for 8 rows of x instead of up to four, and walks the
// blocks in chunks so that the chunk of x (8 rows, f32ChunkBytes) stays in
// L1 while the weight rows of a tile pass over it; the accumulators wait
// in memory between chunks. x is rearranged for it per tile of 8 rows:
// block b of row i of tile T (the permF32 layout of the block) at
// ((T·nblk + b)·8 + i)·B floats, B = 16·32/bits.

// f32gArgs are the arguments of f32gemmB4/B8 (field offsets fixed in
// qmm_gemmf32_amd64.s): nrow weight rows from w (row stride wstr bytes),
// their scale lookups from s (block b's lanes 0-7 at s + b·sstep, lanes
// 8-15 hoff bytes further; row stride sstr) and biases from b (same row
// stride, gpad floats); x the tile of x at the chunk's first block; acc
// the accumulators (512 bytes per weight row); nblk blocks in the chunk;
// first starts the accumulators at zero, last adds the bias terms with the
// group sums xs of the 8 rows (row stride xsstr), sums the lanes and stores
// the outputs at out (row stride ostr), rounded to bfloat16 when bf16 is 1.
type f32gArgs struct {
	w           unsafe.Pointer // 0
	wstr        uintptr        // 8
	s           unsafe.Pointer // 16
	sstr        uintptr        // 24
	x           unsafe.Pointer // 32
	acc         unsafe.Pointer // 40
	nrow, nblk  int            // 48, 56
	first, last int            // 64, 72
	hoff, sstep uintptr        // 80, 88
	b, xs       unsafe.Pointer // 96, 104
	xsstr       uintptr        // 112
	gpad        int            // 120
	out         unsafe.Pointer // 128
	ostr        uintptr        // 136
	bf16        int            // 144
}

// f32ChunkBytes is the size of the chunk of x (8 rows) the float32 GEMM
// keeps in L1 (measured on a 32 KiB L1: 16-32 KiB within a few percent of
// each other, 48 KiB a third slower).
var f32ChunkBytes = 24 << 10

// permF32Tile writes row x (k values) as row i of a tile of 8 in the
// layout above, dst the tile's start.
func permF32Tile(dst, x []float32, i, k, bits int) {
	cpl := 32 / bits
	B := 16 * cpl
	if asmF32 && k >= B {
		nb := k / B
		check(len(dst) >= ((nb-1)*8+i+1)*B && len(x) >= nb*B, "QuantizedMatmulT", "permF32Tile: slices too short")
		permF32Asm(&dst[i*B], &x[0], nb, uintptr(8*B*4), bits)
		return
	}
	for b := range k / B {
		src, out := x[b*B:(b+1)*B], dst[(b*8+i)*B:(b*8+i+1)*B]
		for l := range 16 {
			for p := range cpl {
				out[p*16+l] = src[cpl*l+p]
			}
		}
	}
}
