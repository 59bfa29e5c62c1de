package cpu

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// This file moves values between an array's storage dtype and the float32,
// float64 or integer slices the ops compute on.

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

// converted returns a's storage converted to dt (MLX's astype), or the
// storage itself when a already has dt.
func converted(a *Array, dt tensor.DType) *tensor.Dense {
	if a.dtype == dt {
		return a.data
	}
	return a.data.Convert(dt)
}

// f32As returns a's elements converted to dt, as float32. For an F32 array
// read as F32 it is a view of the storage: callers must not write it.
func f32As(a *Array, dt tensor.DType) []float32 {
	d := converted(a, dt)
	if d.DType == tensor.F32 {
		return d.Float32s()
	}
	return d.ToFloat32()
}

// vecAs returns a's elements converted to dt as a kernel.Vec: a view of the
// storage when a already has dt (F32, BF16 or F16), a float32 copy otherwise.
func vecAs(a *Array, dt tensor.DType) kernel.Vec {
	if a.dtype == dt {
		switch dt {
		case tensor.F32:
			return kernel.F32Vec(a.data.Float32s())
		case tensor.BF16:
			return kernel.BF16Vec(a.data.Uint16s())
		case tensor.F16:
			return kernel.F16Vec(a.data.Uint16s())
		}
	}
	return kernel.F32Vec(f32As(a, dt))
}

// f32Scratch recycles the float32 results of ops whose output dtype is not
// F32 (they are packed into the dtype and the float32 slice is done with).
var f32Scratch = sync.Pool{New: func() any { return new([]float32) }}

// scratchF32 returns n float32s for an op's result in dtype dt: pooled
// scratch unless dt is F32 (then the slice becomes the array's storage).
func scratchF32(dt tensor.DType, n int) []float32 {
	if dt == tensor.F32 {
		return make([]float32, n)
	}
	p := f32Scratch.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	v := (*p)[:n]
	*p = nil
	f32Scratch.Put(p)
	return v
}

// packScratch is packF32 for a slice from scratchF32: it packs v and
// returns v to the pool unless the tensor adopted it (F32).
func packScratch(dt tensor.DType, shape tensor.Shape, v []float32) *tensor.Dense {
	d := packF32(dt, shape, v)
	if dt != tensor.F32 {
		p := f32Scratch.Get().(*[]float32)
		if cap(v) > cap(*p) {
			*p = v[:0]
		}
		f32Scratch.Put(p)
	}
	return d
}

// f64As returns a's elements converted to dt, as float64 (exact for every
// float dtype). For an F64 array read as F64 it is a view of the storage.
func f64As(a *Array, dt tensor.DType) []float64 {
	d := converted(a, dt)
	switch d.DType {
	case tensor.F64:
		return d.Float64s()
	case tensor.F32, tensor.BF16, tensor.F16:
		f := d.ToFloat32() // the fast decoders; widening is exact
		out := make([]float64, len(f))
		for i, x := range f {
			out[i] = float64(x)
		}
		return out
	}
	return d.ToFloat64()
}

// packF32 stores v as a dt tensor, rounding to nearest even for F16 and BF16
// (a value already rounded by rounder(dt) is stored exactly). For F32 the
// tensor adopts v without copying.
func packF32(dt tensor.DType, shape tensor.Shape, v []float32) *tensor.Dense {
	switch dt {
	case tensor.F32:
		return &tensor.Dense{DType: dt, Shape: shape.Clone(), Data: f32Bytes(v)}
	case tensor.F64:
		out := tensor.New(dt, shape)
		o := out.Float64s()
		for i, x := range v {
			o[i] = float64(x)
		}
		return out
	case tensor.BF16, tensor.F16:
		out := tensor.New(dt, shape)
		o := out.Uint16s()
		to := tensor.Float32ToBF16
		if dt == tensor.F16 {
			to = tensor.Float32ToF16
		}
		for i, x := range v {
			o[i] = to(x)
		}
		return out
	}
	return tensor.FromFloat32(shape, v).Convert(dt)
}

// packF64 stores v as a dt tensor with one rounding per element: F32
// rounds to nearest even; F16 and BF16 round through a round-to-odd float32,
// which is the correctly rounded result (no double rounding). Integer dtypes
// truncate as astype does. For F64 the tensor adopts v without copying.
func packF64(dt tensor.DType, shape tensor.Shape, v []float64) *tensor.Dense {
	switch dt {
	case tensor.F64:
		var data []byte
		if len(v) > 0 {
			data = unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 8*len(v))
		}
		return &tensor.Dense{DType: dt, Shape: shape.Clone(), Data: data}
	case tensor.F32:
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return packF32(dt, shape, f)
	case tensor.BF16, tensor.F16:
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = toOdd32(x)
		}
		return packF32(dt, shape, f)
	}
	return tensor.FromFloat64(shape, v).Convert(dt)
}

// round64 rounds x to dt once and returns it as float64 (dt a float type).
func round64(dt tensor.DType, x float64) float64 {
	switch dt {
	case tensor.F32:
		return float64(float32(x))
	case tensor.BF16:
		return float64(tensor.RoundBF16(toOdd32(x)))
	case tensor.F16:
		return float64(tensor.RoundF16(toOdd32(x)))
	}
	return x
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

func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// intsAs returns a's elements converted to dt (an integer or Bool dtype) as
// 64-bit two's-complement values, sign-extended for signed dtypes.
func intsAs(a *Array, dt tensor.DType) []uint64 {
	d := converted(a, dt)
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

// packInts stores 64-bit values as dt, keeping the low bits (two's-complement
// wrap); Bool stores 1 for any nonzero value.
func packInts(dt tensor.DType, shape tensor.Shape, v []uint64) *tensor.Dense {
	out := tensor.New(dt, shape)
	o := out.Data
	for i, u := range v {
		switch {
		case dt == tensor.Bool:
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
	return out
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
