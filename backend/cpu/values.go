package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// This file moves values between an array's storage and the float32,
// float64 or integer slices the ops compute on, and back.

// wide reports whether an op producing dt computes in float64: always in
// high precision, and for F64 arrays in any precision (as MLX does).
func (b *Backend) wide(dt tensor.DType) bool { return b.high || dt == tensor.F64 }

// atLeastFloat is MLX's at_least_float: dt if it is a float type, else F32.
func atLeastFloat(dt tensor.DType) tensor.DType {
	if dt.IsFloat() {
		return dt
	}
	return tensor.F32
}

func isSigned(dt tensor.DType) bool {
	switch dt {
	case tensor.I8, tensor.I16, tensor.I32, tensor.I64:
		return true
	}
	return false
}

// isF32Family reports whether dt's values are held as float32 values
// (F32, BF16, F16).
func isF32Family(dt tensor.DType) bool {
	return dt == tensor.F32 || dt == tensor.BF16 || dt == tensor.F16
}

// exactIn reports whether every value of dtype from is a value of dtype to
// (the conversion does not round): the same dtype, or a half type to F32.
func exactIn(from, to tensor.DType) bool {
	return from == to || (to == tensor.F32 && (from == tensor.BF16 || from == tensor.F16))
}

// rounder is the kernel Rounder of a float dtype (identity for F32 and F64).
func rounder(dt tensor.DType) kernel.Rounder {
	switch dt {
	case tensor.BF16:
		return tensor.RoundBF16
	case tensor.F16:
		return tensor.RoundF16
	}
	return kernel.Identity
}

// roundTo rounds every value of v to dt in place (F32: nothing to do).
func roundTo(dt tensor.DType, v []float32) {
	switch dt {
	case tensor.BF16:
		kernel.RoundBF16s(v)
	case tensor.F16:
		kernel.RoundF16s(v)
	}
}

// roundF32 rounds one float32 to dt (F32, BF16 or F16).
func roundF32(dt tensor.DType, f float32) float32 {
	switch dt {
	case tensor.BF16:
		return tensor.RoundBF16(f)
	case tensor.F16:
		return tensor.RoundF16(f)
	}
	return f
}

// scratchF32 returns n float32s of pooled scratch that go back to the pool
// at the end of the op (freeTmps). Contents are undefined.
func (b *Backend) scratchF32(n int) []float32 {
	v := b.pool.getF32(n)
	b.tmps = append(b.tmps, v)
	return v
}

// freeTmps returns the op's scratch to the pool. Every op that reads its
// inputs through f32In ends with it (deferred).
func (b *Backend) freeTmps() {
	for i, v := range b.tmps {
		b.pool.putF32(v)
		b.tmps[i] = nil
	}
	b.tmps = b.tmps[:0]
}

// stridesOf returns a's element strides (row-major when it has none).
func stridesOf(a *Array) []int {
	if a.strides != nil {
		return a.strides
	}
	return strides(a.shape)
}

// normStrides returns st, or nil when an array of shape with strides st is
// row-major contiguous (axes of size 1 may have any stride).
func normStrides(shape tensor.Shape, st []int) []int {
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] != 1 && st[i] != acc {
			return st
		}
		acc *= shape[i]
	}
	return nil
}

// runs visits the elements of an array of shape, with element strides st
// (nil for row-major) and its first element at storage index off, in
// row-major order, in runs contiguous in the storage: fn(d, s, n) for the
// row-major index d of the run, its storage index s and its length n.
func runs(shape tensor.Shape, st []int, off int, fn func(d, s, n int)) {
	total := shape.Size()
	if total == 0 {
		return
	}
	if st == nil {
		fn(0, off, total)
		return
	}
	t, block := len(shape), 1
	for t > 0 && (shape[t-1] == 1 || st[t-1] == block) {
		t--
		block *= shape[t]
	}
	if t == 0 {
		fn(0, off, total)
		return
	}
	var idxBuf [8]int
	idx := idxBuf[:0]
	if t > len(idxBuf) {
		idx = make([]int, t)
	} else {
		idx = idxBuf[:t]
	}
	s := off
	for d := 0; d < total; d += block {
		fn(d, s, block)
		for ax := t - 1; ax >= 0; ax-- {
			idx[ax]++
			s += st[ax]
			if idx[ax] < shape[ax] {
				break
			}
			s -= st[ax] * shape[ax]
			idx[ax] = 0
		}
	}
}

// u16View and f32View reinterpret aligned raw bytes.
func u16View(raw []byte) []uint16 {
	if len(raw) == 0 {
		return []uint16{}
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2)
}

func f32View(raw []byte) []float32 {
	if len(raw) == 0 {
		return []float32{}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), len(raw)/4)
}

func f64View(raw []byte) []float64 {
	if len(raw) == 0 {
		return []float64{}
	}
	return unsafe.Slice((*float64)(unsafe.Pointer(&raw[0])), len(raw)/8)
}

func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// f32In returns a's elements, row-major, converted to dt (F32, BF16 or
// F16; MLX's astype) as float32 values. It is a view of a's storage when a
// holds values exact in dt contiguously, and the op's scratch otherwise:
// callers never write it.
func (b *Backend) f32In(a *Array, dt tensor.DType) []float32 {
	n := a.size()
	if a.buf.values && a.strides == nil && exactIn(a.dtype, dt) {
		return a.buf.f32[a.off : a.off+n]
	}
	v := b.scratchF32(n)
	b.fillF32(v, a, dt)
	return v
}

// fillF32 writes a's elements, row-major, converted to dt (F32, BF16 or
// F16) to dst.
func (b *Backend) fillF32(dst []float32, a *Array, dt tensor.DType) {
	switch {
	case a.buf.values:
		src := a.buf.f32
		runs(a.shape, a.strides, a.off, func(d, s, n int) { copy(dst[d:d+n], src[s:s+n]) })
	case a.dtype == tensor.BF16:
		src := u16View(a.buf.raw)
		runs(a.shape, a.strides, a.off, func(d, s, n int) { kernel.BF16ToFloat32s(dst[d:d+n], src[s:s+n]) })
	case a.dtype == tensor.F16:
		src := u16View(a.buf.raw)
		runs(a.shape, a.strides, a.off, func(d, s, n int) { kernel.F16ToFloat32s(dst[d:d+n], src[s:s+n]) })
	default: // integers, Bool, F64: MLX's astype through the host tensor
		c := b.hostDense(a).Convert(dt)
		switch dt {
		case tensor.F32:
			copy(dst, c.Float32s())
		case tensor.BF16:
			kernel.BF16ToFloat32s(dst, c.Uint16s())
		default:
			kernel.F16ToFloat32s(dst, c.Uint16s())
		}
		return
	}
	if !exactIn(a.dtype, dt) {
		roundTo(dt, dst)
	}
}

// vecIn returns a's elements converted to dt as a kernel.Vec: a view of
// the storage (float32 values, or bf16/f16 bits) when a is contiguous and
// its values are exact in dt, float32 scratch otherwise.
func (b *Backend) vecIn(a *Array, dt tensor.DType) kernel.Vec {
	if a.strides == nil && exactIn(a.dtype, dt) && !a.buf.values {
		n := a.size()
		switch a.dtype {
		case tensor.BF16:
			return kernel.BF16Vec(u16View(a.buf.raw)[a.off : a.off+n])
		case tensor.F16:
			return kernel.F16Vec(u16View(a.buf.raw)[a.off : a.off+n])
		}
	}
	return kernel.F32Vec(b.f32In(a, dt))
}

// f64In returns a's elements converted to dt as float64 (exact for every
// float dtype); for a contiguous F64 array it is a view of the storage.
func (b *Backend) f64In(a *Array, dt tensor.DType) []float64 {
	if dt == tensor.F64 {
		if a.dtype == tensor.F64 && a.strides == nil {
			return f64View(a.buf.raw)[a.off : a.off+a.size()]
		}
		if !a.buf.values {
			return b.hostDense(a).Convert(tensor.F64).Float64s()
		}
		dt = a.dtype // float32 values widen exactly
	}
	f := b.f32In(a, dt)
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out
}

// hostDense returns a's elements, row-major, as a host tensor of a's dtype:
// a view of the storage when a is raw and contiguous (callers must not
// write or keep it), a new tensor otherwise.
func (b *Backend) hostDense(a *Array) *tensor.Dense {
	if !a.buf.values && a.strides == nil {
		es := a.dtype.Size()
		return &tensor.Dense{DType: a.dtype, Shape: a.shape, Data: a.buf.raw[a.off*es : (a.off+a.size())*es]}
	}
	return b.hostCopy(a)
}

// hostCopy returns a new host tensor holding a's elements in a's dtype.
func (b *Backend) hostCopy(a *Array) *tensor.Dense {
	out := tensor.New(a.dtype, a.shape)
	writeBytes(out.Data, a)
	return out
}

// writeBytes writes a's elements, row-major, to dst in a's dtype bytes.
// Values storage is encoded (exactly: its values are in the dtype).
func writeBytes(dst []byte, a *Array) {
	if !a.buf.values {
		es := a.dtype.Size()
		src := a.buf.raw
		runs(a.shape, a.strides, a.off, func(d, s, n int) { copy(dst[d*es:(d+n)*es], src[s*es:(s+n)*es]) })
		return
	}
	src := a.buf.f32
	switch a.dtype {
	case tensor.F32:
		o := f32View(dst)
		runs(a.shape, a.strides, a.off, func(d, s, n int) { copy(o[d:d+n], src[s:s+n]) })
	case tensor.BF16:
		o := u16View(dst)
		runs(a.shape, a.strides, a.off, func(d, s, n int) { kernel.Float32sToBF16(o[d:d+n], src[s:s+n]) })
	default:
		o := u16View(dst)
		runs(a.shape, a.strides, a.off, func(d, s, n int) { kernel.Float32sToF16(o[d:d+n], src[s:s+n]) })
	}
}

// contiguousBuf returns a new row-major buffer of a's storage kind holding
// a's elements.
func (b *Backend) contiguousBuf(a *Array) *buffer {
	n := a.size()
	if a.buf.values {
		v := b.pool.getF32(n)
		src := a.buf.f32
		runs(a.shape, a.strides, a.off, func(d, s, n int) { copy(v[d:d+n], src[s:s+n]) })
		return b.valuesBuf(v)
	}
	raw := b.pool.getRaw(n*a.dtype.Size(), false)
	writeBytes(raw, a)
	return b.rawBuf(raw, false)
}

// valuesF64 stores v, computed in float64, as a new array of dtype dt with
// one rounding per element: F32 rounds to nearest even; F16 and BF16 round
// through a round-to-odd float32, which is the correctly rounded result (no
// double rounding). Integer dtypes truncate as astype does. For F64 the
// array adopts v.
func (b *Backend) valuesF64(dt tensor.DType, shape tensor.Shape, v []float64) *Array {
	switch dt {
	case tensor.F64:
		var data []byte
		if len(v) > 0 {
			data = unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
		}
		return b.newArray(dt, shape, b.rawBuf(data, false), 0, nil)
	case tensor.F32, tensor.BF16, tensor.F16:
		f := b.pool.getF32(len(v))
		for i, x := range v {
			if dt == tensor.F32 {
				f[i] = float32(x)
			} else {
				f[i] = roundF32(dt, toOdd32(x))
			}
		}
		return b.valuesOut(dt, shape, f)
	}
	return b.denseOut(tensor.FromFloat64(shape.Clone(), v).Convert(dt))
}

// toOdd32 rounds x to float32 toward zero and sets the lowest mantissa bit
// when anything was discarded (round to odd). Rounding that again to a
// format with fewer mantissa bits (f16, bf16) gives the correctly rounded
// result of x.
func toOdd32(x float64) float32 {
	f := float32(x)
	if x != x || float64(f) == x || math.IsInf(x, 0) {
		return f
	}
	bits := math.Float32bits(f)
	if math.Abs(float64(f)) > math.Abs(x) {
		bits-- // step the magnitude toward zero (Inf becomes MaxFloat32)
	}
	return math.Float32frombits(bits | 1)
}

// intsIn returns a's elements converted to dt (an integer or Bool dtype) as
// 64-bit two's-complement values, sign-extended for signed dtypes.
func (b *Backend) intsIn(a *Array, dt tensor.DType) []uint64 {
	d := b.hostDense(a)
	if d.DType != dt {
		d = d.Convert(dt)
	}
	n := d.Shape.Size()
	out := make([]uint64, n)
	raw := d.Data
	signed := isSigned(dt)
	for i := range out {
		var u uint64
		switch dt.Size() {
		case 1:
			u = uint64(raw[i])
			if signed {
				u = uint64(int64(int8(raw[i])))
			}
		case 2:
			v := binary.LittleEndian.Uint16(raw[2*i:])
			u = uint64(v)
			if signed {
				u = uint64(int64(int16(v)))
			}
		case 4:
			v := binary.LittleEndian.Uint32(raw[4*i:])
			u = uint64(v)
			if signed {
				u = uint64(int64(int32(v)))
			}
		default:
			u = binary.LittleEndian.Uint64(raw[8*i:])
		}
		out[i] = u
	}
	return out
}

// intsOut stores 64-bit values as a new array of dt, keeping the low bits
// (two's-complement wrap); Bool stores 1 for any nonzero value.
func (b *Backend) intsOut(dt tensor.DType, shape tensor.Shape, v []uint64) *Array {
	o := b.pool.getRaw(len(v)*dt.Size(), false)
	for i, u := range v {
		switch {
		case dt == tensor.Bool:
			o[i] = 0
			if u != 0 {
				o[i] = 1
			}
		case dt.Size() == 1:
			o[i] = byte(u)
		case dt.Size() == 2:
			binary.LittleEndian.PutUint16(o[2*i:], uint16(u))
		case dt.Size() == 4:
			binary.LittleEndian.PutUint32(o[4*i:], uint32(u))
		default:
			binary.LittleEndian.PutUint64(o[8*i:], u)
		}
	}
	return b.newArray(dt, shape, b.rawBuf(o, false), 0, nil)
}

// wrap reduces u to dt's width and sign-extends it again, so comparisons of
// results of integer arithmetic see the stored value.
func wrap(dt tensor.DType, u uint64) uint64 {
	bits := 8 * dt.Size()
	if dt == tensor.Bool {
		if u != 0 {
			return 1
		}
		return 0
	}
	if bits == 64 {
		return u
	}
	u &= 1<<bits - 1
	if isSigned(dt) && u>>(bits-1) != 0 {
		u |= ^uint64(0) << bits
	}
	return u
}

// intLess compares two values of integer dtype dt.
func intLess(dt tensor.DType, x, y uint64) bool {
	if isSigned(dt) {
		return int64(x) < int64(y)
	}
	return x < y
}
