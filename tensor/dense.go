package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// Dense is a row-major, little-endian host tensor. Data holds exactly
// Shape.Size()*DType.Size() bytes. Data may alias a read-only memory-mapped
// file (see SafetensorsFile.Tensor): writing through such a view faults, and it
// becomes invalid when the file is closed.
type Dense struct {
	DType DType
	Shape Shape
	Data  []byte
}

var littleEndianHost = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// alignedBytes allocates n zeroed bytes whose first byte is 8-byte aligned, so
// that every typed view of them is aligned.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// New returns a zeroed tensor. It panics if dt is not a valid DType or a
// dimension is negative (programmer errors).
func New(dt DType, shape Shape) *Dense {
	if !dt.valid() {
		panic(fmt.Sprintf("tensor.New: invalid dtype %v", dt))
	}
	for i, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor.New: negative dimension %d at axis %d of shape %v", d, i, shape))
		}
	}
	return &Dense{DType: dt, Shape: shape.Clone(), Data: alignedBytes(shape.Size() * dt.Size())}
}

func checkLen(fn string, shape Shape, n int) {
	if shape.Size() != n {
		panic(fmt.Sprintf("tensor.%s: %d values for shape %v (want %d)", fn, n, shape, shape.Size()))
	}
}

// FromFloat32 returns an F32 tensor holding a copy of v. It panics if len(v)
// does not match the shape.
func FromFloat32(shape Shape, v []float32) *Dense {
	checkLen("FromFloat32", shape, len(v))
	t := New(F32, shape)
	copy(t.Float32s(), v)
	return t
}

// FromFloat64 returns an F64 tensor holding a copy of v. It panics if len(v)
// does not match the shape.
func FromFloat64(shape Shape, v []float64) *Dense {
	checkLen("FromFloat64", shape, len(v))
	t := New(F64, shape)
	copy(t.Float64s(), v)
	return t
}

// FromInt32 returns an I32 tensor holding a copy of v. It panics if len(v)
// does not match the shape.
func FromInt32(shape Shape, v []int32) *Dense {
	checkLen("FromInt32", shape, len(v))
	t := New(I32, shape)
	copy(t.Int32s(), v)
	return t
}

// FromUint32 returns a U32 tensor holding a copy of v. It panics if len(v)
// does not match the shape.
func FromUint32(shape Shape, v []uint32) *Dense {
	checkLen("FromUint32", shape, len(v))
	t := New(U32, shape)
	copy(t.Uint32s(), v)
	return t
}

// view reinterprets t.Data as a []E after checking the dtype, length, host
// byte order and alignment; any failure is a programmer error and panics.
func view[E any](t *Dense, fn string, ok func(DType) bool) []E {
	var zero E
	size := int(unsafe.Sizeof(zero))
	if !ok(t.DType) {
		panic(fmt.Sprintf("tensor.%s: tensor has dtype %v", fn, t.DType))
	}
	if len(t.Data)%size != 0 {
		panic(fmt.Sprintf("tensor.%s: %d data bytes is not a multiple of %d", fn, len(t.Data), size))
	}
	if len(t.Data) == 0 {
		return []E{}
	}
	if !littleEndianHost {
		panic(fmt.Sprintf("tensor.%s: typed views need a little-endian host", fn))
	}
	if uintptr(unsafe.Pointer(&t.Data[0]))%uintptr(size) != 0 {
		panic(fmt.Sprintf("tensor.%s: data is not %d-byte aligned (copy it with Clone first)", fn, size))
	}
	return unsafe.Slice((*E)(unsafe.Pointer(&t.Data[0])), len(t.Data)/size)
}

func is(want ...DType) func(DType) bool {
	return func(d DType) bool {
		for _, w := range want {
			if d == w {
				return true
			}
		}
		return false
	}
}

// Float32s returns a zero-copy []float32 view of Data. It panics unless DType
// is F32 and Data is 4-byte aligned.
func (t *Dense) Float32s() []float32 { return view[float32](t, "Float32s", is(F32)) }

// Float64s returns a zero-copy []float64 view of Data. It panics unless DType
// is F64 and Data is 8-byte aligned.
func (t *Dense) Float64s() []float64 { return view[float64](t, "Float64s", is(F64)) }

// Int32s returns a zero-copy []int32 view of Data. It panics unless DType is
// I32 and Data is 4-byte aligned.
func (t *Dense) Int32s() []int32 { return view[int32](t, "Int32s", is(I32)) }

// Uint32s returns a zero-copy []uint32 view of Data. It panics unless DType is
// U32 and Data is 4-byte aligned.
func (t *Dense) Uint32s() []uint32 { return view[uint32](t, "Uint32s", is(U32)) }

// Uint16s returns a zero-copy view of the raw 16-bit elements of an F16, BF16,
// U16 or I16 tensor. It panics for other dtypes or if Data is not 2-byte aligned.
func (t *Dense) Uint16s() []uint16 { return view[uint16](t, "Uint16s", is(F16, BF16, U16, I16)) }

// Bytes returns Data (no copy).
func (t *Dense) Bytes() []byte { return t.Data }

// Len returns the number of elements, Shape.Size().
func (t *Dense) Len() int { return t.Shape.Size() }

// Clone returns a deep copy whose Data is freshly allocated and 8-byte aligned.
func (t *Dense) Clone() *Dense {
	c := &Dense{DType: t.DType, Shape: t.Shape.Clone(), Data: alignedBytes(len(t.Data))}
	copy(c.Data, t.Data)
	return c
}

// elem is one decoded element: floats and Bool/ints decode into f (exact
// except for 64-bit integers beyond 2^53), integers also into i or u exactly.
type elem struct {
	f     float64
	i     int64
	u     uint64
	isInt bool
	isU   bool
}

// at decodes element k from t.Data (any alignment).
func (t *Dense) at(k int) elem {
	d := t.Data
	switch t.DType {
	case Bool:
		v := int64(0)
		if d[k] != 0 {
			v = 1
		}
		return elem{f: float64(v), i: v, u: uint64(v), isInt: true}
	case U8:
		return uelem(uint64(d[k]))
	case I8:
		return ielem(int64(int8(d[k])))
	case U16:
		return uelem(uint64(binary.LittleEndian.Uint16(d[2*k:])))
	case I16:
		return ielem(int64(int16(binary.LittleEndian.Uint16(d[2*k:]))))
	case U32:
		return uelem(uint64(binary.LittleEndian.Uint32(d[4*k:])))
	case I32:
		return ielem(int64(int32(binary.LittleEndian.Uint32(d[4*k:]))))
	case U64:
		return uelem(binary.LittleEndian.Uint64(d[8*k:]))
	case I64:
		return ielem(int64(binary.LittleEndian.Uint64(d[8*k:])))
	case F16:
		return elem{f: float64(F16ToFloat32(binary.LittleEndian.Uint16(d[2*k:])))}
	case BF16:
		return elem{f: float64(BF16ToFloat32(binary.LittleEndian.Uint16(d[2*k:])))}
	case F32:
		return elem{f: float64(math.Float32frombits(binary.LittleEndian.Uint32(d[4*k:])))}
	case F64:
		return elem{f: math.Float64frombits(binary.LittleEndian.Uint64(d[8*k:]))}
	}
	panic(fmt.Sprintf("tensor: cannot decode dtype %v", t.DType))
}

func uelem(u uint64) elem { return elem{f: float64(u), i: int64(u), u: u, isInt: true, isU: true} }
func ielem(i int64) elem  { return elem{f: float64(i), i: i, u: uint64(i), isInt: true} }

// f32 converts e to float32 with a single rounding (MLX casts integers and
// doubles to float first when producing f16/bf16, so this is also the first
// step of those conversions).
func (e elem) f32() float32 {
	switch {
	case e.isU:
		return float32(e.u)
	case e.isInt:
		return float32(e.i)
	}
	return float32(e.f)
}

// ToFloat32 returns a new []float32 holding every element converted to
// float32: exact for F16, BF16, F32, Bool and integers below 2^24 in
// magnitude; round to nearest even otherwise (F64, large integers).
func (t *Dense) ToFloat32() []float32 {
	out := make([]float32, t.Shape.Size())
	t.Float32sAt(out, 0)
	return out
}

// Float32sAt converts the len(dst) elements from flat index start on to
// float32 into dst, as ToFloat32 does (callers convert parts of a large
// array in parallel). It panics when the range leaves the array.
func (t *Dense) Float32sAt(dst []float32, start int) {
	if n := t.Shape.Size(); start < 0 || start+len(dst) > n {
		panic(fmt.Sprintf("tensor: Float32sAt [%d, %d) of %d elements", start, start+len(dst), n))
	}
	switch t.DType {
	case F32:
		if littleEndianHost && len(dst) > 0 { // the bytes are the values: one copy
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*len(dst)), t.Data[4*start:])
			return
		}
		for k := range dst {
			dst[k] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*(start+k):]))
		}
	case BF16:
		for k := range dst {
			dst[k] = BF16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*(start+k):]))
		}
	case F16:
		for k := range dst {
			dst[k] = F16ToFloat32(binary.LittleEndian.Uint16(t.Data[2*(start+k):]))
		}
	default:
		for k := range dst {
			dst[k] = t.at(start + k).f32()
		}
	}
}

// ToFloat64 returns a new []float64 holding every element converted to
// float64 (exact except for 64-bit integers beyond 2^53, which round to
// nearest even).
func (t *Dense) ToFloat64() []float64 {
	out := make([]float64, t.Shape.Size())
	for k := range out {
		out[k] = t.at(k).f
	}
	return out
}

// Convert returns a new tensor of dtype dt with every element converted as
// MLX's astype does:
//
//   - to F32 and F64: one round to nearest even from the source value;
//   - to F16 and BF16: through float32 first (MLX's half types are built from
//     float), then Float32ToF16 / Float32ToBF16;
//   - to an integer type from an integer or Bool: two's-complement wrap (C
//     static_cast); from a float: truncation toward zero through float64, with
//     NaN giving 0 and out-of-range values saturating (where C is undefined);
//   - to Bool: 1 for any nonzero value, NaN included.
//
// It panics if dt is not a valid DType.
func (t *Dense) Convert(dt DType) *Dense {
	if dt == t.DType {
		return t.Clone()
	}
	out := New(dt, t.Shape)
	n := t.Shape.Size()
	o := out.Data
	for k := 0; k < n; k++ {
		e := t.at(k)
		switch dt {
		case F64:
			binary.LittleEndian.PutUint64(o[8*k:], math.Float64bits(e.f))
		case F32:
			binary.LittleEndian.PutUint32(o[4*k:], math.Float32bits(e.f32()))
		case BF16:
			binary.LittleEndian.PutUint16(o[2*k:], Float32ToBF16(e.f32()))
		case F16:
			binary.LittleEndian.PutUint16(o[2*k:], Float32ToF16(e.f32()))
		case Bool:
			if e.f != 0 || e.u != 0 {
				o[k] = 1
			}
		default:
			u := e.u
			if !e.isInt {
				u = floatToIntBits(e.f, dt)
			}
			switch dt.Size() {
			case 1:
				o[k] = byte(u)
			case 2:
				binary.LittleEndian.PutUint16(o[2*k:], uint16(u))
			case 4:
				binary.LittleEndian.PutUint32(o[4*k:], uint32(u))
			case 8:
				binary.LittleEndian.PutUint64(o[8*k:], u)
			}
		}
	}
	return out
}

// floatToIntBits truncates f toward zero and saturates it to dt's range,
// returning the two's-complement bits. NaN gives 0.
func floatToIntBits(f float64, dt DType) uint64 {
	if f != f {
		return 0
	}
	f = math.Trunc(f)
	bits := uint(8 * dt.Size())
	switch dt {
	case U8, U16, U32, U64:
		maxU := math.Ldexp(1, int(bits)) // 2^bits, exactly representable
		switch {
		case f <= 0:
			return 0
		case f >= maxU:
			return math.MaxUint64 >> (64 - bits)
		}
		return uint64(f)
	default:
		lim := math.Ldexp(1, int(bits)-1) // 2^(bits-1)
		switch {
		case f >= lim:
			return uint64(1)<<(bits-1) - 1
		case f < -lim:
			return uint64(-(int64(1) << (bits - 1)))
		}
		return uint64(int64(f))
	}
}
