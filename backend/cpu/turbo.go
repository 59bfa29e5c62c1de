package cpu

import (
	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// TurboScaledDotProductAttention is ScaledDotProductAttention over a
// TurboQuant KV cache's window read in place (backend.TurboAttention): the
// fused attention's blocked online softmax asks for a block of 32 key or
// value rows at a time, which turboRows decodes from their packed codes
// and float16 scales (package turboquant's arithmetic) into the kernel's
// scratch, rounded to kv.DType as the cache's decoded window is; values
// stay rotated when kv.Rotated. No window is decoded whole and no [L, S]
// score matrix is made, so the result is ScaledDotProductAttention's on
// the decoded window, bit for bit.
func (b *Backend) TurboScaledDotProductAttention(q backend.Array, kv backend.TurboKV, scale float32, mask backend.Mask) backend.Array {
	const op = "TurboScaledDotProductAttention"
	xs := []backend.Array{q, kv.Parts[0], kv.Parts[1], kv.Parts[2], kv.Parts[3], kv.Parts[4]}
	as := b.use(op, xs...)
	args := func() []backend.Array { return xs }
	qa := as[0]
	sc := turboquant.Scheme{KBits: kv.KBits, VBits: kv.VBits}
	if err := sc.CheckBits(); err != nil {
		panic(backend.Errorf(op, args(), "%v", err))
	}
	for _, a := range as {
		if len(a.shape) != 4 {
			panic(backend.Errorf(op, args(), "q and the five parts must be 4-D"))
		}
	}
	B, H, L, D := qa.shape[0], qa.shape[1], qa.shape[2], qa.shape[3]
	if err := turboquant.CheckHeadDim(D); err != nil {
		panic(backend.Errorf(op, args(), "%v", err))
	}
	Hk, S := as[1].shape[1], as[1].shape[2]
	g := D / turboquant.GroupSize
	kdt := tensor.U8
	if kv.KBits == 8 {
		kdt = tensor.I8
	}
	want := [5]struct {
		dt tensor.DType
		w  int
	}{{kdt, sc.KeyBytes(D)}, {tensor.F16, g}, {tensor.F16, g}, {tensor.U8, sc.ValueBytes(D)}, {tensor.F16, g}}
	for i, p := range as[1:] {
		s := p.shape
		if s[0] != B || s[1] != Hk || s[2] != S || s[3] != want[i].w || p.dtype != want[i].dt {
			panic(backend.Errorf(op, args(), "part %d is %v %v, want %v [%d %d %d %d] (%s, head_dim %d)", i, p.dtype, s, want[i].dt, B, Hk, S, want[i].w, sc, D))
		}
	}
	switch {
	case Hk == 0 || H%Hk != 0:
		panic(backend.Errorf(op, args(), "%d query heads is not a multiple of %d KV heads", H, Hk))
	case S == 0:
		panic(backend.Errorf(op, args(), "empty keys"))
	case !kv.DType.IsFloat():
		panic(backend.Errorf(op, args(), "decoded dtype %v is not a float dtype", kv.DType))
	}
	dt := backend.PromoteTypes(qa.dtype, kv.DType)
	if !dt.IsFloat() {
		panic(backend.Errorf(op, args(), "needs float dtypes"))
	}
	km := b.sdpaMask(op, args, mask, B, H, L, S, dt)
	defer b.freeTmps()
	var keys kernel.RowSource = &turboRows{codes: b.bytesKV(as[1]), scales: b.kvOf(as[2], tensor.F16), zeros: b.kvOf(as[3], tensor.F16), bits: kv.KBits, dt: kv.DType, key: true}
	if kv.KBits == 8 && b.fast {
		keys = turboQ8Keys{keys.(*turboRows)}
	}
	values := &turboRows{codes: b.bytesKV(as[4]), scales: b.kvOf(as[5], tensor.F16), bits: kv.VBits, dt: kv.DType, unrotate: !kv.Rotated}
	dst := b.pool.getF32(B * H * L * D)
	kernel.SDPAKV(dst, b.f32Of(qa, dt), kernel.KV{Rows: keys}, kernel.KV{Rows: values}, B, H, Hk, L, S, D, D, scale, km, rounder(dt), b.acc())
	return b.floatOut(dt, tensor.Shape{B, H, L, D}, dst)
}

// byteRows is a [B, Hk, S, w] array of one-byte elements read in place:
// row (bi, h, j) starts at bi·bst + h·hst + j·rst of raw.
type byteRows struct {
	raw           []byte
	bst, hst, rst int
}

// bytesKV describes a (a uint8 or int8 [B, Hk, S, w] array): in place when
// its rows are contiguous (a slice of a cache buffer), else copied.
func (b *Backend) bytesKV(a *Array) byteRows {
	Hk, S, w := a.shape[1], a.shape[2], a.shape[3]
	st := stridesOf(a)
	if st[3] != 1 && w > 1 {
		return byteRows{raw: b.hostCopy(a).Data, bst: Hk * S * w, hst: S * w, rst: w}
	}
	return byteRows{raw: a.buf.raw[a.off:], bst: st[0], hst: st[1], rst: st[2]}
}

// turboRows is a kernel.RowSource over a TurboQuant cache's keys (key set:
// affine codes, scales and zero points) or values (Lloyd-Max codes and RMS
// scales, un-rotated per row when unrotate is set), each decoded row
// rounded to dt.
type turboRows struct {
	codes         byteRows
	scales, zeros kernel.KV
	bits          int
	dt            tensor.DType
	key, unrotate bool
}

// DecodeRows implements kernel.RowSource with package turboquant's
// per-group decoders (the arithmetic of its DecodeKeys, DecodeValues and
// DecodeValuesRotated).
func (t *turboRows) DecodeRows(dst []float32, dstride, bi, h, j0, rows, n int) {
	if t.decodeAsm(dst, dstride, bi, h, j0, rows, n) {
		return
	}
	var codes [512]byte // a row (n is one of turboquant.HeadDims)
	cs := codes[:n]
	w := n * t.bits / 8
	gs := turboquant.GroupSize
	for r := range rows {
		j := j0 + r
		co := bi*t.codes.bst + h*t.codes.hst + j*t.codes.rst
		cs := cs
		if t.bits == 8 {
			cs = t.codes.raw[co : co+w] // one code a byte: read in place
		} else {
			turboquant.Unpack(t.codes.raw[co:co+w], t.bits, cs)
		}
		so := bi*t.scales.BStride + h*t.scales.HStride + j*t.scales.RowStride
		out := dst[r*dstride : r*dstride+n]
		if t.key {
			zo := bi*t.zeros.BStride + h*t.zeros.HStride + j*t.zeros.RowStride
			for g := range n / gs {
				turboquant.DecodeKeyGroup(cs[g*gs:(g+1)*gs], t.bits, t.scales.Vec.At(so+g), t.zeros.Vec.At(zo+g), out[g*gs:(g+1)*gs])
			}
		} else {
			for g := range n / gs {
				turboquant.DecodeValueGroupRotated(cs[g*gs:(g+1)*gs], t.bits, t.scales.Vec.At(so+g), out[g*gs:(g+1)*gs])
			}
			if t.unrotate {
				turboquant.Unrotate(out)
			}
		}
		roundTo(t.dt, out)
	}
}

// turboQ8Keys is the 8-bit keys of a TurboQuant cache offered to the fast
// precision's integer key kernel (kernel.Q8KeySource): the int8 codes read
// in place with their float16 scales and zero points. The kernel scores
// them against the int8-quantized query without decoding (and so without
// rounding the keys to kv.DType), within the bound of its fast precision.
type turboQ8Keys struct{ *turboRows }

// Q8Keys implements kernel.Q8KeySource.
func (t turboQ8Keys) Q8Keys() (codes []byte, bst, hst, rst int, scales, zeros kernel.KV, groupSize int) {
	c := t.codes
	return c.raw, c.bst, c.hst, c.rst, t.scales, t.zeros, turboquant.GroupSize
}

// turboCentroids are the Lloyd-Max centroids of the value widths that
// kernel.DecodeLloydRows takes (2, 3 and 4 bits).
var turboCentroids = func() (c [5][]float32) {
	for bits := 2; bits <= 4; bits++ {
		c[bits], _ = turboquant.Codebook(bits)
	}
	return c
}()

// decodeAsm decodes 8-bit key rows with kernel.DecodeKeyRows8 and 2- to
// 4-bit value rows with kernel.DecodeLloydRows (AVX-512: the bits of
// DecodeKeyGroup, DecodeValueGroupRotated and roundTo), un-rotating each
// value row before its rounding when t.unrotate; false when the kernels
// decline (the Go loops of DecodeRows then run).
func (t *turboRows) decodeAsm(dst []float32, dstride, bi, h, j0, rows, n int) bool {
	if !t.scales.Vec.F16 || t.scales.Vec.U16 == nil {
		return false
	}
	if t.key {
		if t.bits != 8 || !t.zeros.Vec.F16 || t.zeros.Vec.U16 == nil {
			return false
		}
		co := bi*t.codes.bst + h*t.codes.hst + j0*t.codes.rst
		so := bi*t.scales.BStride + h*t.scales.HStride + j0*t.scales.RowStride
		zo := bi*t.zeros.BStride + h*t.zeros.HStride + j0*t.zeros.RowStride
		return kernel.DecodeKeyRows8(dst, dstride, t.codes.raw[co:], t.codes.rst, t.scales.Vec.U16[so:], t.scales.RowStride, t.zeros.Vec.U16[zo:], t.zeros.RowStride, rows, n, t.dt)
	}
	if t.bits < 2 || t.bits > 4 {
		return false
	}
	dt := t.dt
	if t.unrotate {
		dt = tensor.F32
	}
	co := bi*t.codes.bst + h*t.codes.hst + j0*t.codes.rst
	so := bi*t.scales.BStride + h*t.scales.HStride + j0*t.scales.RowStride
	if !kernel.DecodeLloydRows(dst, dstride, t.codes.raw[co:], t.codes.rst, t.scales.Vec.U16[so:], t.scales.RowStride, rows, n, t.bits, turboCentroids[t.bits], dt) {
		return false
	}
	if t.unrotate {
		for r := range rows {
			out := dst[r*dstride : r*dstride+n]
			turboquant.Unrotate(out)
			roundTo(t.dt, out)
		}
	}
	return true
}
