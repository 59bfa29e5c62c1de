package cpu

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/internal/mmap"
	"github.com/mlxgo/mlxgo/tensor"
)

// validQuant reports whether MLX's affine mode accepts groupSize and bits.
func validQuant(groupSize, bits int) error {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("bits %d not in {2, 3, 4, 5, 6, 8}", bits)
	}
	switch groupSize {
	case 32, 64, 128:
	default:
		return fmt.Errorf("group size %d not in {32, 64, 128}", groupSize)
	}
	return nil
}

// Quantize is mx.quantize (affine) of w [..., n] along its last axis: w
// needs at least 2 dimensions, a float dtype and n a multiple of groupSize.
// W is uint32 [..., n·bits/32]; Scales and Biases are [..., n/groupSize] in
// w's dtype.
func (b *Backend) Quantize(w backend.Array, groupSize, bits int) backend.QuantizedArray {
	a := b.use1("Quantize", w)
	args := []backend.Array{w}
	if b.tracked(w) {
		panic(backend.Errorf("Quantize", args, "has no gradient, and w is being differentiated"))
	}
	if err := validQuant(groupSize, bits); err != nil {
		panic(backend.Errorf("Quantize", args, "%v", err))
	}
	if len(a.shape) < 2 || !a.dtype.IsFloat() {
		panic(backend.Errorf("Quantize", args, "w must be a float array of at least 2 dimensions"))
	}
	cols := a.shape[len(a.shape)-1]
	if cols%groupSize != 0 {
		panic(backend.Errorf("Quantize", args, "last dimension %d is not a multiple of the group size %d", cols, groupSize))
	}
	rows := a.shape.Size() / max(cols, 1)
	lead := a.shape[:len(a.shape)-1]
	defer b.freeTmps()
	wq := tensor.New(tensor.U32, slices.Concat(lead, tensor.Shape{cols * bits / 32}))
	sb := slices.Concat(lead, tensor.Shape{cols / groupSize})
	scales := b.pool.getF32(sb.Size())
	biases := b.pool.getF32(sb.Size())
	kernel.Quantize(wq.Uint32s(), scales, biases, b.f32Of(a, a.dtype), rows, cols, groupSize, bits, rounder(a.dtype))
	return backend.QuantizedArray{
		W:         b.denseOut(wq),
		Scales:    b.floatOut(a.dtype, sb, scales),
		Biases:    b.floatOut(a.dtype, sb, biases),
		GroupSize: groupSize,
		Bits:      bits,
	}
}

// quantParts checks q as MLX's validate_quantized_input does and returns
// its arrays with the dtype of its scales and biases promoted together.
func (b *Backend) quantParts(op string, extra []backend.Array, q backend.QuantizedArray) (w, s, bi *Array, dt tensor.DType) {
	w, s, bi = b.use3(op, q.W, q.Scales, q.Biases)
	args := func() []backend.Array { return append(slices.Clone(extra), q.W, q.Scales, q.Biases) }
	if err := validQuant(q.GroupSize, q.Bits); err != nil {
		panic(backend.Errorf(op, args(), "%v", err))
	}
	switch {
	case w.dtype != tensor.U32:
		panic(backend.Errorf(op, args(), "W must be uint32"))
	case len(w.shape) < 2:
		panic(backend.Errorf(op, args(), "W needs at least 2 dimensions"))
	case !s.shape.Equal(bi.shape):
		panic(backend.Errorf(op, args(), "scales and biases shapes differ"))
	case len(s.shape) != len(w.shape) || !tensor.Shape(w.shape[:len(w.shape)-1]).Equal(s.shape[:len(s.shape)-1]):
		panic(backend.Errorf(op, args(), "W and scales leading dimensions differ"))
	case w.shape[len(w.shape)-1]*32/q.Bits != s.shape[len(s.shape)-1]*q.GroupSize || (w.shape[len(w.shape)-1]*32)%q.Bits != 0:
		panic(backend.Errorf(op, args(), "W and scales do not agree for group size %d and %d bits", q.GroupSize, q.Bits))
	}
	dt = backend.PromoteTypes(s.dtype, bi.dtype)
	if !dt.IsFloat() {
		panic(backend.Errorf(op, args(), "scales and biases need a float dtype"))
	}
	return w, s, bi, dt
}

// Dequantize is mx.dequantize (affine): scales·q + biases per group, in the
// promoted dtype of the scales and biases, each step rounded to it.
func (b *Backend) Dequantize(q backend.QuantizedArray) (traced backend.Array) {
	if b.tape != nil {
		defer func() { b.record("Dequantize", traced, noVJP, q.W, q.Scales, q.Biases) }()
	}
	w, s, bi, dt := b.quantParts("Dequantize", nil, q)
	cols := w.shape[len(w.shape)-1] * 32 / q.Bits
	rows := w.shape.Size() / w.shape[len(w.shape)-1]
	var shapeBuf [4]int
	shape := append(append(tensor.Shape(shapeBuf[:0]), w.shape[:len(w.shape)-1]...), cols)
	defer b.freeTmps()
	dst := b.pool.getF32(shape.Size())
	kernel.Dequantize(dst, b.codes(w), b.f32Of(s, dt), b.f32Of(bi, dt), rows, cols, q.GroupSize, q.Bits, rounder(dt))
	return b.floatOut(dt, shape, dst)
}

// QuantizedMatmulsT implements backend.SharedMatmuler: QuantizedMatmul(x,
// ws[i], true) for every i, the same bits. Where every W is 2-D with the
// same group size, bits and output dtype and x's last dimension is their
// K, x goes through kernel.QuantizedMatmulTPackedShared once (quantized
// once and every matrix's rows in one parallel pass, where they are
// packed); otherwise, and while gradients are recorded, one QuantizedMatmul
// each, which names what is wrong with any of them.
func (b *Backend) QuantizedMatmulsT(x backend.Array, ws []backend.QuantizedArray) []backend.Array {
	const op = "QuantizedMatmulsT"
	xa := b.use1(op, x)
	if b.tape != nil || len(ws) < 2 || len(xa.shape) == 0 {
		return backend.QuantizedMatmulsTComposed(b, x, ws)
	}
	K := xa.shape[len(xa.shape)-1]
	gs, bits := ws[0].GroupSize, ws[0].Bits
	parts := make([][3]*Array, len(ws))
	var dt tensor.DType
	for i, q := range ws {
		if q.GroupSize != gs || q.Bits != bits || q.W == nil || q.Scales == nil || q.Biases == nil {
			return backend.QuantizedMatmulsTComposed(b, x, ws)
		}
		w, s, bi, sdt := b.quantParts(op, []backend.Array{x}, q)
		d := backend.PromoteTypes(xa.dtype, sdt)
		if len(w.shape) != 2 || K == 0 || w.shape[1]*32/bits != K || !d.IsFloat() || i > 0 && d != dt {
			return backend.QuantizedMatmulsTComposed(b, x, ws)
		}
		dt, parts[i] = d, [3]*Array{w, s, bi}
	}
	defer b.freeTmps()
	M := xa.size() / K
	mats := make([]kernel.SharedMat, len(ws))
	for i, p := range parts {
		n := p[0].shape[0]
		mats[i] = kernel.SharedMat{Dst: b.pool.getF32(M * n), WQ: b.codes(p[0]), Scales: b.vecOf(p[1], dt), Biases: b.vecOf(p[2], dt), Slot: b.packSlot(p[0], p[1], p[2], ws[i], K), N: n}
	}
	kernel.QuantizedMatmulTPackedShared(b.f32Of(xa, dt), mats, M, K, gs, bits, rounder(dt), b.acc())
	out := make([]backend.Array, len(ws))
	for i, a := range mats {
		shape := append(xa.shape[:len(xa.shape)-1:len(xa.shape)-1], a.N)
		out[i] = b.floatOut(dt, shape, a.Dst)
	}
	return out
}

// QuantizedMatmul is mx.quantized_matmul (affine). With transpose, W stores
// [..., N, K] quantized along K and the result is x @ Wᵀ; without, W stores
// [..., K, N] quantized along N and the result is x @ W. K is x's last
// dimension. The output dtype is the promotion of x's dtype with the
// scales' (x, scales and biases are converted to it). With a 2-D W, all of
// x's leading axes are rows; when both x and W have more than 2 dimensions
// their batch axes broadcast. The kernels read the packed codes directly.
func (b *Backend) QuantizedMatmul(x backend.Array, q backend.QuantizedArray, transpose bool) (traced backend.Array) {
	if b.tape != nil {
		defer func() {
			b.record("QuantizedMatmul", traced, quantizedMatmulVJP(q.GroupSize, q.Bits, transpose), x, q.W, q.Scales, q.Biases)
		}()
	}
	op := "QuantizedMatmul"
	xa := b.use1(op, x)
	w, s, bi, sdt := b.quantParts(op, []backend.Array{x}, q)
	args := func() []backend.Array { return []backend.Array{x, q.W, q.Scales, q.Biases} }
	dt := backend.PromoteTypes(xa.dtype, sdt)
	if !dt.IsFloat() || len(xa.shape) == 0 {
		panic(backend.Errorf(op, args(), "x must be a float array of at least 1 dimension"))
	}
	defer b.freeTmps()
	wr, wc := w.shape[len(w.shape)-2], w.shape[len(w.shape)-1]*32/q.Bits
	K, N := wc, wr
	if !transpose {
		K, N = wr, wc
	}
	if xa.shape[len(xa.shape)-1] != K {
		panic(backend.Errorf(op, args(), "x's last dimension is not %d (W is %d×%d, transpose %v)", K, wr, wc, transpose))
	}
	run := kernel.QuantizedMatmulT
	if !transpose {
		run = kernel.QuantizedMatmulN
	}
	wq := b.codes(w)
	round := rounder(dt)

	if len(w.shape) == 2 {
		M := xa.shape.Size() / max(K, 1)
		var shapeBuf [4]int
		shape := append(append(tensor.Shape(shapeBuf[:0]), xa.shape[:len(xa.shape)-1]...), N)
		if transpose {
			// The linear layers: scales and biases are read in their
			// storage dtype (no float32 copy of them per call).
			dst := b.pool.getF32(shape.Size())
			kernel.QuantizedMatmulTPacked(dst, b.f32Of(xa, dt), wq, b.vecOf(s, dt), b.vecOf(bi, dt), b.packSlot(w, s, bi, q, K), M, N, K, q.GroupSize, q.Bits, round, b.acc())
			return b.floatOut(dt, shape, dst)
		}
		dst := b.pool.getF32(shape.Size())
		run(dst, b.f32Of(xa, dt), wq, b.f32Of(s, dt), b.f32Of(bi, dt), M, N, K, q.GroupSize, q.Bits, round, b.acc())
		return b.floatOut(dt, shape, dst)
	}
	xs, ss, bs := b.f32Of(xa, dt), b.f32Of(s, dt), b.f32Of(bi, dt)
	if len(xa.shape) < 3 {
		panic(backend.Errorf(op, args(), "a batched W needs x with batch dimensions too"))
	}
	xb, wb := xa.shape[:len(xa.shape)-2], w.shape[:len(w.shape)-2]
	batch, ok := broadcastShapes(xb, wb)
	if !ok {
		panic(backend.Errorf(op, args(), "batch dimensions do not broadcast"))
	}
	M := xa.shape[len(xa.shape)-2]
	shape := slices.Concat(batch, tensor.Shape{M, N})
	dst := b.pool.getF32(shape.Size())
	xm, dm := M*K, M*N
	wm, sm := len(wq)/max(wb.Size(), 1), len(ss)/max(wb.Size(), 1)
	walk(batch, [][]int{bstrides(xb, batch), bstrides(wb, batch)}, func(i int, o []int) {
		run(dst[i*dm:(i+1)*dm], xs[o[0]*xm:(o[0]+1)*xm], wq[o[1]*wm:(o[1]+1)*wm],
			ss[o[1]*sm:(o[1]+1)*sm], bs[o[1]*sm:(o[1]+1)*sm], M, N, K, q.GroupSize, q.Bits, round, b.acc())
	})
	return b.floatOut(dt, shape, dst)
}

// codes returns the packed uint32 codes of W, row-major: a view of its
// storage, or a copy when W is not contiguous.
func (b *Backend) codes(w *Array) []uint32 {
	n := w.size()
	if n == 0 {
		return []uint32{}
	}
	var raw []byte
	if w.strides != nil {
		raw = b.hostCopy(w).Data
	} else {
		raw = w.buf.raw[4*w.off : 4*(w.off+n)]
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&raw[0])), n)
}

// packed is one quantized weight matrix of a buffer kept rearranged
// (Options.PackWeights): the matrix at element off of the buffer, with its
// scales and biases (identified by their first bytes, in borrowed memory
// too, which is never written), group size and bits.
type packed struct {
	off      int
	s, bi    unsafe.Pointer
	gs, bits int
	n, k     int // a dense matrix's shape (denseSlot; gs and bits 0, s and bi nil)
	slot     *kernel.PackSlot
}

// packSlot returns the slot of w's rearranged copy (built by the kernel the
// first time its matmul runs on w, k its columns), or nil: in the high
// precision or with NoPackWeights; where the kernel does not pack this
// shape for the backend's precision (kernel.PackReplaces in the fast one,
// kernel.RefPackReplaces in the reference one, which are also where the
// matmul then reads only the copy); or when w, its
// scales or its biases are not contiguous views of borrowed memory (a
// file's mapping: pooled buffers are reused, so only those stay the same
// matrix while they live). The pages of the mapping that hold nothing but
// w, its scales and its biases go back to the operating system as the
// copy is made (Stats.ReleasedBytes): the process then holds the weights
// once.
func (b *Backend) packSlot(w, s, bi *Array, q backend.QuantizedArray, k int) *kernel.PackSlot {
	replaces := b.pack && kernel.PackReplaces(k, q.GroupSize, q.Bits) || b.packRef && kernel.RefPackReplaces(k, q.GroupSize, q.Bits)
	if !replaces || w.buf == nil || !w.buf.borrowed || !s.buf.borrowed || !bi.buf.borrowed || w.strides != nil || s.strides != nil || bi.strides != nil || w.size() == 0 || s.size() == 0 {
		return nil
	}
	sp, bp := firstElem(s), firstElem(bi)
	for _, p := range w.buf.packs {
		if p.off == w.off && p.s == sp && p.bi == bp && p.gs == q.GroupSize && p.bits == q.Bits {
			return p.slot
		}
	}
	slot := b.newSlot(w.shape[0], rawBytes(w), rawBytes(s), rawBytes(bi))
	w.buf.packs = append(w.buf.packs, packed{off: w.off, s: sp, bi: bp, gs: q.GroupSize, bits: q.Bits, slot: slot})
	return slot
}

// denseSlot returns the slot of the packed copy of the dense weight matrix
// W [n, k] whose transpose y is (transposedRows' view: nn.Dense's
// Matmul(x, Transpose(W)), or a tied head), built by the first matmul on
// it, or nil: in the precision "high" or with NoPackWeights; where the
// kernel does not pack it (kernel.DensePackReplaces in the reference
// precision: 16-bit weights on a CPU with the AVX-512 kernels;
// kernel.DenseAMXReplaces in the fast one: 16-bit weights, k a multiple
// of 32, a CPU with AMX-BF16); or when W is not in borrowed memory (a
// file's mapping). The
// pages of the mapping that hold nothing but W go back to the operating
// system as the copy is made, as packSlot's do (an embedding lookup on a
// tied head then reads its rows from the file again).
func (b *Backend) denseSlot(y *Array, w kernel.Vec, n, k int) *kernel.PackSlot {
	packs := b.packRef && kernel.DensePackReplaces(w) || b.pack && kernel.DenseAMXReplaces(w, k)
	if !packs || y.buf == nil || !y.buf.borrowed || y.buf.values || n == 0 || k == 0 {
		return nil
	}
	for _, p := range y.buf.packs {
		if p.off == y.off && p.s == nil && p.gs == 0 && p.n == n && p.k == k {
			return p.slot
		}
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&y.buf.raw[y.off*2])), 2*n*k)
	slot := b.newSlot(n, raw)
	y.buf.packs = append(y.buf.packs, packed{off: y.off, n: n, k: k, slot: slot})
	return slot
}

// newSlot returns an empty slot for a matrix of n rows held in mapped (the
// file's bytes of its values, and of its scales and biases): each range of
// rows goes back to the operating system as soon as its copy is made (the
// whole pages inside it), so that the file's pages and the packed copy of
// a large matrix (a tied head) are not both resident; the count comes
// once the matrix is packed (Stats.PackedBytes, Stats.ReleasedBytes).
func (b *Backend) newSlot(n int, mapped ...[]byte) *kernel.PackSlot {
	rows := func(r0, r1 int) {
		for _, m := range mapped {
			per := len(m) / n
			mmap.Release(m[r0*per : r1*per])
		}
	}
	return kernel.NewPackSlot(func(n int64) {
		b.packed += n
		for _, m := range mapped {
			b.released += mmap.Release(m)
		}
	}, rows)
}

// rawBytes is the memory of a (contiguous, not empty), float32 values or
// raw bytes alike.
func rawBytes(a *Array) []byte {
	es := a.dtype.Size()
	if a.buf.values {
		es = 4
	}
	return unsafe.Slice((*byte)(firstElem(a)), a.size()*es)
}

// firstElem is the address of a's first element (a contiguous, not empty).
func firstElem(a *Array) unsafe.Pointer {
	if a.buf.values {
		return unsafe.Pointer(&a.buf.f32[a.off])
	}
	return unsafe.Pointer(&a.buf.raw[a.off*a.dtype.Size()])
}

// vecOf is vecIn for any float dt (F64 through float32 scratch).
func (b *Backend) vecOf(a *Array, dt tensor.DType) kernel.Vec {
	if isF32Family(dt) {
		return b.vecIn(a, dt)
	}
	return kernel.F32Vec(b.f32Of(a, dt))
}
