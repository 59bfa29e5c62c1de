package kernel

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/internal/mmap"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestPackedSameBits holds matmuls on packed weights
// (QuantizedMatmulTPacked: the call that packs them into the slot and the
// next that reads them) to the same matmuls without, bit for bit: in the
// one-row order (4-bit groups of 32, with words past the last chunk of
// 16) to the unpacked matmul at every number of rows (the one-row kernels
// up to four); in the GEMM's own order (every other shape) to the portable
// GEMM q8GemmGo at every number of rows, and past four rows to the
// unpacked GEMM too. Partial panels (n not a multiple of 16), one, two and
// four rows and one to three tiles of rows, scales and biases in
// float32, bfloat16, float16 or two dtypes, each output dtype, and
// symmetric weights (every bias -2^(bits-1) times its scale, one group's
// scale and bias zero), which pack without their biases; the output's
// guards stay untouched.
func TestPackedSameBits(t *testing.T) {
	if !packs(512, 64, 8) {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; pack returns nil and the packed path is the unpacked one")
	}
	cases := []struct{ bits, gs, n, k int }{
		{4, 32, 37, 576}, // one-row order, a tail of 8 words
		{4, 32, 16, 512},
		{4, 64, 70, 512},
		{4, 128, 33, 384},
		{8, 32, 37, 576},
		{8, 64, 19, 512},
		{8, 128, 48, 384},
	}
	for _, c := range cases {
		for _, m := range []int{1, 2, 4, 5, 8, 9, 17} {
			for _, dt := range testDTypes {
				for _, vec := range []string{"f32", "bf16", "f16", "bf16 scales, f32 biases", "symmetric f32", "symmetric bf16", "symmetric f16"} {
					name := fmt.Sprintf("b%dg%d/%s/%s/%s", c.bits, c.gs, dims(m, c.n, c.k), dt.name, vec)
					t.Run(name, func(t *testing.T) {
						x, wq, sc, bi := qmmTInputs(uint64(m*7+c.n+c.k+c.bits+c.gs), m, c.n, c.k, c.gs, c.bits)
						sym := strings.HasPrefix(vec, "symmetric ")
						scv, biv := packedTestVecs(vec, sc, bi, c.bits)
						want := make([]float32, m*c.n)
						QuantizedMatmulTVec(want, x, wq, scv, biv, m, c.n, c.k, c.gs, c.bits, dt.round, AccQ8)
						if !gemmDot(c.k, c.gs, c.bits) {
							if m > qmvBatchMax {
								gemm := make([]float32, m*c.n)
								q8GemmGo(gemm, x, wq, scv, biv, m, c.n, c.k, c.gs, c.bits, dt.round)
								expectSame(t, want, gemm, name+" unpacked GEMM against q8GemmGo")
							}
							q8GemmGo(want, x, wq, scv, biv, m, c.n, c.k, c.gs, c.bits, dt.round)
						}
						slot := NewPackSlot(nil, nil)
						for _, call := range []string{"packing", "packed"} {
							got, whole := guarded(m * c.n)
							withThreads(2, func() {
								QuantizedMatmulTPacked(got, x, wq, scv, biv, slot, m, c.n, c.k, c.gs, c.bits, dt.round, AccQ8)
							})
							if slot.Bytes() == 0 {
								t.Fatalf("%s call: the slot holds nothing", call)
							}
							if p := slot.packed(); p != nil && (p.symk != 0) != sym {
								t.Fatalf("%s call: packed symk %v, want symmetric: %v", call, p.symk, sym)
							}
							checkGuards(t, whole, name+" "+call)
							expectSame(t, got, want, name+" "+call)
						}
					})
				}
			}
		}
	}
}

// TestPackedRejectsOtherShape: packed weights of another matrix are refused
// with the kernel's message, not read out of bounds.
func TestPackedRejectsOtherShape(t *testing.T) {
	if !packs(512, 64, 8) {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; pack returns nil")
	}
	x, wq, sc, bi := qmmTInputs(1, 8, 32, 512, 64, 8)
	slot := NewPackSlot(nil, nil)
	QuantizedMatmulTPacked(make([]float32, 8*32), x, wq, F32Vec(sc), F32Vec(bi), slot, 8, 32, 512, 64, 8, Identity, AccQ8)
	_, wq2, sc2, bi2 := qmmTInputs(2, 8, 16, 512, 64, 8)
	defer func() {
		if r := recover(); r == nil || fmt.Sprint(r) != "kernel.QuantizedMatmulT: packed weights of another shape" {
			t.Fatalf("got panic %v, want the shape message", r)
		}
	}()
	QuantizedMatmulTPacked(make([]float32, 8*16), x, wq2, F32Vec(sc2), F32Vec(bi2), slot, 8, 16, 512, 64, 8, Identity, AccQ8)
}

// TestPackSlotFree: a packed matrix of at least mmap.HugePage bytes sits
// in memory of its own (mmap.AllocHuge: it starts on a huge-page
// boundary); Free empties the slot, a second Free does nothing, and the
// garbage collector's cleanup afterwards frees nothing twice.
func TestPackSlotFree(t *testing.T) {
	if !packs(2048, 32, 4) {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; pack returns nil")
	}
	const n, k = 2048, 2048 // 2 MiB of 4-bit codes
	x, wq, sc, bi := qmmTInputs(5, 1, n, k, 32, 4)
	slot := NewPackSlot(nil, nil)
	dst := make([]float32, n)
	QuantizedMatmulTPacked(dst, x, wq, F32Vec(sc), F32Vec(bi), slot, 1, n, k, 32, 4, Identity, AccQ8)
	p := slot.packed()
	if p == nil {
		t.Fatal("nothing packed")
	}
	if runtime.GOOS == "linux" {
		if addr := uintptr(unsafe.Pointer(&p.codes[0])); addr%mmap.HugePage != 0 {
			t.Errorf("packed codes at %#x, want them on a %d-byte boundary (mmap.AllocHuge)", addr, mmap.HugePage)
		}
	}
	slot.Free()
	if slot.Bytes() != 0 || slot.packed() != nil {
		t.Fatalf("after Free the slot holds %d bytes", slot.Bytes())
	}
	slot.Free()
	p = nil
	runtime.GC()
	runtime.GC()
}

// TestPackSmallOnHugePages: the packed codes of matrices smaller than a
// huge page (a small model's) with their scales and biases, and packed
// dense tiles of that size, sit in memory advised for huge pages too
// (packArena's chunks), on 64-byte boundaries, each its own bytes.
func TestPackSmallOnHugePages(t *testing.T) {
	if !packs(576, 32, 4) {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; pack returns nil")
	}
	if runtime.GOOS != "linux" {
		t.Skip("SKIPPED: huge pages are advised on Linux only")
	}
	var slots []*PackSlot
	for i, n := range []int{192, 576, 1536} { // SmolLM2-135M's k/v, q/o and gate/up rows at width 576
		x, wq, sc, bi := qmmTInputs(uint64(20+i), 1, n, 576, 32, 4)
		slot := NewPackSlot(nil, nil)
		defer slot.Free()
		QuantizedMatmulTPacked(make([]float32, n), x, wq, F32Vec(sc), F32Vec(bi), slot, 1, n, 576, 32, 4, Identity, AccQ8)
		p := slot.packed()
		if p == nil {
			t.Fatalf("%dx576: nothing packed", n)
		}
		if len(p.codes) >= mmap.HugePage {
			t.Fatalf("%dx576: %d bytes of codes, want a matrix under a huge page", n, len(p.codes))
		}
		addr := uintptr(unsafe.Pointer(&p.codes[0]))
		if addr%64 != 0 {
			t.Errorf("%dx576: codes at %#x, not on a 64-byte boundary", n, addr)
		}
		if !mmap.HugeAdvised(addr) {
			t.Errorf("%dx576: codes at %#x are not in memory advised for huge pages", n, addr)
		}
		if len(p.sb32) == 0 || !mmap.HugeAdvised(uintptr(unsafe.Pointer(&p.sb32[0]))) {
			t.Errorf("%dx576: %d float32 scales and biases, want them beside the codes in memory advised for huge pages", n, len(p.sb32))
		}
		slots = append(slots, slot)
	}
	// A dense matrix's tiles (packDense) likewise: SmolLM2-360M's k and v.
	w := make([]uint16, 320*960)
	for i := range w {
		w[i] = uint16(0x3c00 + i%512) // float16 values from 1 up
	}
	d := packDense(F16Vec(w), 320, 960, nil)
	if d == nil {
		t.Fatal("packDense(320x960 float16): nothing packed")
	}
	defer d.mem.do()
	if addr := uintptr(unsafe.Pointer(&d.v.U16[0])); addr%64 != 0 || !mmap.HugeAdvised(addr) {
		t.Errorf("packDense(320x960): tiles at %#x, want a 64-byte boundary in memory advised for huge pages", addr)
	}
	for i := range slots { // distinct bytes: no piece overlaps another
		a := slots[i].packed().codes
		for _, other := range slots[i+1:] {
			b := other.packed().codes
			lo, hi := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
			if lo > hi {
				lo, hi = hi, lo
				a, b = b, a
			}
			if lo+uintptr(len(a)) > hi {
				t.Errorf("packed codes [%#x, +%d) and [%#x, +%d) overlap", lo, len(a), hi, len(b))
			}
		}
	}
}

// TestPackRowsReported: while it packs, a slot tells its rows function of
// every weight row once, in ranges of at most packDoneEvery panels that
// tile [0, n) (from the workers, so a range may come in any order), and
// only once the rows' panels are written: the caller may give their pages
// back at once.
func TestPackRowsReported(t *testing.T) {
	if !packs(256, 32, 8) {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI; pack returns nil")
	}
	const n, k = 16*200 + 5, 256 // 201 panels, the last partial
	x, wq, sc, bi := qmmTInputs(9, 1, n, k, 32, 8)
	var mu sync.Mutex
	seen := make([]int, n)
	slot := NewPackSlot(nil, func(r0, r1 int) {
		mu.Lock()
		defer mu.Unlock()
		if r0 < 0 || r1 > n || r0 >= r1 || r1-r0 > packDoneEvery*q8C {
			t.Errorf("rows [%d, %d) reported (n %d, at most %d at a time)", r0, r1, n, packDoneEvery*q8C)
			return
		}
		for r := r0; r < r1; r++ {
			seen[r]++
		}
	})
	dst := make([]float32, n)
	withThreads(2, func() {
		QuantizedMatmulTPacked(dst, x, wq, F32Vec(sc), F32Vec(bi), slot, 1, n, k, 32, 8, Identity, AccQ8)
	})
	for r, c := range seen {
		if c != 1 {
			t.Fatalf("row %d reported %d times, want once", r, c)
		}
	}
}

// packedTestVecs returns sc and bi in the storage named by vec ("f32",
// "bf16", "f16", "bf16 scales, f32 biases", or one of the first three after
// "symmetric ", which first makes every bias -2^(bits-1) times its
// scale, the first scale zero).
func packedTestVecs(vec string, sc, bi []float32, bits int) (Vec, Vec) {
	if len(vec) > 10 && vec[:10] == "symmetric " {
		vec = vec[10:]
		sc[0] = 0
		for i := range sc {
			sc[i] = tensor.RoundBF16(sc[i])
			bi[i] = -float32(int(1)<<(bits-1)) * sc[i]
		}
	}
	sb, bb, sh, bh := make([]uint16, len(sc)), make([]uint16, len(bi)), make([]uint16, len(sc)), make([]uint16, len(bi))
	for i := range sc {
		sb[i], bb[i] = tensor.Float32ToBF16(sc[i]), tensor.Float32ToBF16(bi[i])
		sh[i], bh[i] = tensor.Float32ToF16(sc[i]), tensor.Float32ToF16(bi[i])
	}
	switch vec {
	case "bf16":
		return BF16Vec(sb), BF16Vec(bb)
	case "f16":
		return F16Vec(sh), F16Vec(bh)
	case "bf16 scales, f32 biases":
		return BF16Vec(sb), F32Vec(bi)
	}
	return F32Vec(sc), F32Vec(bi)
}
