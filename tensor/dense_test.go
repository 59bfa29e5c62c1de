package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestDType(t *testing.T) {
	cases := []struct {
		d     DType
		name  string
		mlx   string
		size  int
		float bool
	}{
		{Bool, "BOOL", "bool", 1, false},
		{U8, "U8", "uint8", 1, false},
		{I8, "I8", "int8", 1, false},
		{U16, "U16", "uint16", 2, false},
		{I16, "I16", "int16", 2, false},
		{U32, "U32", "uint32", 4, false},
		{I32, "I32", "int32", 4, false},
		{U64, "U64", "uint64", 8, false},
		{I64, "I64", "int64", 8, false},
		{F16, "F16", "float16", 2, true},
		{BF16, "BF16", "bfloat16", 2, true},
		{F32, "F32", "float32", 4, true},
		{F64, "F64", "float64", 8, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.d.String() != c.name || c.d.Size() != c.size || c.d.IsFloat() != c.float || c.d.MLXName() != c.mlx {
				t.Errorf("got %s/%d/%v/%s, want %s/%d/%v/%s", c.d, c.d.Size(), c.d.IsFloat(), c.d.MLXName(), c.name, c.size, c.float, c.mlx)
			}
			for _, s := range []string{c.name, c.mlx} {
				if got, err := ParseDType(s); err != nil || got != c.d {
					t.Errorf("ParseDType(%q): got %v, %v, want %v", s, got, err, c.d)
				}
			}
		})
	}
	if Invalid.Size() != 0 || Invalid.String() != "INVALID" || DType(200).String() != "DType(200)" {
		t.Errorf("invalid dtypes: got %d %q %q", Invalid.Size(), Invalid.String(), DType(200).String())
	}
	for _, s := range []string{"", "f32", "FLOAT32", "F8_E4M3", "complex64", "INVALID"} {
		if _, err := ParseDType(s); err == nil || !strings.Contains(err.Error(), `"`+s+`"`) {
			t.Errorf("ParseDType(%q): got error %v, want one naming the string", s, err)
		}
	}
}

func TestShape(t *testing.T) {
	s := Shape{2, 3, 4}
	if s.Size() != 24 || (Shape{}).Size() != 1 || Shape(nil).Size() != 1 || (Shape{3, 0}).Size() != 0 {
		t.Errorf("Size: got %d %d %d %d, want 24 1 1 0", s.Size(), Shape{}.Size(), Shape(nil).Size(), Shape{3, 0}.Size())
	}
	if s.String() != "[2 3 4]" || (Shape{}).String() != "[]" {
		t.Errorf("String: got %q %q", s.String(), Shape{}.String())
	}
	c := s.Clone()
	c[0] = 9
	if s[0] != 2 || !s.Equal(Shape{2, 3, 4}) || s.Equal(c) || s.Equal(Shape{2, 3}) || !Shape(nil).Equal(Shape{}) {
		t.Errorf("Clone/Equal misbehave: s=%v c=%v", s, c)
	}
}

func TestViewsAndFrom(t *testing.T) {
	f := FromFloat32(Shape{2}, []float32{1.5, -2})
	if v := f.Float32s(); len(v) != 2 || v[0] != 1.5 || v[1] != -2 {
		t.Errorf("Float32s: got %v", v)
	}
	// 1.5 = 0x3FC00000 little-endian.
	if b := f.Bytes()[:4]; b[0] != 0 || b[1] != 0 || b[2] != 0xC0 || b[3] != 0x3F {
		t.Errorf("Bytes: got % x, want 00 00 c0 3f", b)
	}
	f.Float32s()[1] = 7 // views alias Data
	if got := math.Float32frombits(binary.LittleEndian.Uint32(f.Data[4:])); got != 7 {
		t.Errorf("view write: got %g, want 7", got)
	}
	if v := FromFloat64(Shape{1}, []float64{0.1}).Float64s(); v[0] != 0.1 {
		t.Errorf("Float64s: got %v", v)
	}
	if v := FromInt32(Shape{1}, []int32{-5}).Int32s(); v[0] != -5 {
		t.Errorf("Int32s: got %v", v)
	}
	if v := FromUint32(Shape{}, []uint32{1 << 31}).Uint32s(); v[0] != 1<<31 {
		t.Errorf("Uint32s: got %v", v)
	}
	h := New(BF16, Shape{2})
	h.Uint16s()[1] = 0x3F80
	if h.ToFloat32()[1] != 1 {
		t.Errorf("Uint16s: got %v", h.ToFloat32())
	}
	if n := len(New(F32, Shape{0, 3}).Float32s()); n != 0 {
		t.Errorf("empty view: got len %d", n)
	}

	c := f.Clone()
	c.Float32s()[0] = 99
	if f.Float32s()[0] != 1.5 {
		t.Errorf("Clone shares data")
	}
}

func mustPanic(t *testing.T, name, want string, fn func()) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(r.(string), want) {
				t.Errorf("got panic %v, want one containing %q", r, want)
			}
		}()
		fn()
	})
}

func TestViewPanics(t *testing.T) {
	mustPanic(t, "dtype", "dtype I32", func() { FromInt32(Shape{1}, []int32{1}).Float32s() })
	mustPanic(t, "uint16-of-f32", "dtype F32", func() { New(F32, Shape{1}).Uint16s() })
	mustPanic(t, "len", "2 values for shape [3]", func() { FromFloat32(Shape{3}, []float32{1, 2}) })
	mustPanic(t, "negative", "negative dimension", func() { New(F32, Shape{-1}) })
	mustPanic(t, "invalid", "invalid dtype", func() { New(Invalid, Shape{1}) })
	buf := alignedBytes(12)
	mustPanic(t, "unaligned", "not 4-byte aligned", func() {
		(&Dense{DType: F32, Shape: Shape{2}, Data: buf[1:9]}).Float32s()
	})
}

// encode builds Data from little-endian element bit patterns.
func encode(dt DType, bits ...uint64) *Dense {
	t := New(dt, Shape{len(bits)})
	for i, b := range bits {
		switch dt.Size() {
		case 1:
			t.Data[i] = byte(b)
		case 2:
			binary.LittleEndian.PutUint16(t.Data[2*i:], uint16(b))
		case 4:
			binary.LittleEndian.PutUint32(t.Data[4*i:], uint32(b))
		case 8:
			binary.LittleEndian.PutUint64(t.Data[8*i:], b)
		}
	}
	return t
}

func TestToFloat(t *testing.T) {
	cases := []struct {
		name string
		t    *Dense
		want []float64
	}{
		{"BOOL", encode(Bool, 0, 1, 7), []float64{0, 1, 1}},
		{"U8", encode(U8, 0, 255), []float64{0, 255}},
		{"I8", encode(I8, 0x80, 0x7F, 0xFF), []float64{-128, 127, -1}},
		{"U16", encode(U16, 0xFFFF), []float64{65535}},
		{"I16", encode(I16, 0x8000), []float64{-32768}},
		{"U32", encode(U32, 0xFFFFFFFF), []float64{4294967295}},
		{"I32", encode(I32, 0x80000000), []float64{-2147483648}},
		{"U64", encode(U64, 1<<63), []float64{9223372036854775808}},
		{"I64", encode(I64, 0xFFFFFFFFFFFFFFFE), []float64{-2}},
		// f16 0xC000 = -2; 0x3555 = 1.0101010101b*2^-2 = 0.333251953125.
		{"F16", encode(F16, 0xC000, 0x3555), []float64{-2, 0.333251953125}},
		// bf16 0x3EAB = 1.0101011b*2^-2 = 0.333984375.
		{"BF16", encode(BF16, 0x3EAB, 0xC040), []float64{0.333984375, -3}},
		{"F32", encode(F32, 0x3EAAAAAB), []float64{float64(float32(1.0 / 3))}},
		{"F64", encode(F64, math.Float64bits(0.1)), []float64{0.1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got64, got32 := c.t.ToFloat64(), c.t.ToFloat32()
			for i, w := range c.want {
				if got64[i] != w || got32[i] != float32(w) {
					t.Errorf("got %v / %v, want %v (index %d)", got64[i], got32[i], w, i)
				}
				one := []float32{-1}
				c.t.Float32sAt(one, i) // one element from index i
				if one[0] != float32(w) {
					t.Errorf("Float32sAt(_, %d) = %v, want %v", i, one[0], w)
				}
			}
		})
	}
}

// TestFloat32sAtRange: a range that leaves the array panics with a message
// naming it, rather than reading past the data.
func TestFloat32sAtRange(t *testing.T) {
	d := FromFloat32(Shape{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	got := make([]float32, 3)
	d.Float32sAt(got, 3)
	if got[0] != 4 || got[2] != 6 {
		t.Fatalf("Float32sAt(_, 3) = %v, want [4 5 6]", got)
	}
	for _, c := range []struct{ n, start int }{{3, 4}, {1, -1}, {7, 0}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Float32sAt") {
					t.Errorf("Float32sAt of %d from %d: recovered %v, want a panic naming Float32sAt", c.n, c.start, r)
				}
			}()
			d.Float32sAt(make([]float32, c.n), c.start)
		}()
	}
}

func TestConvert(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name string
		in   *Dense
		to   DType
		want []uint64 // element bits
	}{
		// 1+2^-8 ties to 1.0 (0x3F80); 1+3*2^-8 ties up to 0x3F82; NaN -> 0x7FC0.
		{"F32>BF16", FromFloat32(Shape{3}, []float32{1 + 1.0/256, 1 + 3.0/256, float32(nan)}), BF16, []uint64{0x3F80, 0x3F82, 0x7FC0}},
		// F64 goes through float32 first, as MLX's half types are built from
		// float: 1+2^-8+2^-40 rounds to float32 1+2^-8, which then ties to 1.0
		// (a direct rounding would give 1+2^-7 = 0x3F81).
		{"F64>BF16-via-float32", FromFloat64(Shape{1}, []float64{1 + math.Ldexp(1, -8) + math.Ldexp(1, -40)}), BF16, []uint64{0x3F80}},
		{"F32>F16", FromFloat32(Shape{2}, []float32{65504, 65520}), F16, []uint64{0x7BFF, 0x7C00}},
		// 2^24+1 = 16777217 is a tie between 2^24 (even mantissa) and 2^24+2: rounds to 2^24 = 0x4B800000.
		{"I32>F32", FromInt32(Shape{1}, []int32{16777217}), F32, []uint64{0x4B800000}},
		{"BF16>F32", encode(BF16, 0x3F81), F32, []uint64{0x3F810000}},
		{"F16>F64", encode(F16, 0x3C01), F64, []uint64{math.Float64bits(1 + math.Ldexp(1, -10))}},
		// Truncation toward zero; NaN -> 0; saturation at the int32 range.
		{"F32>I32", FromFloat32(Shape{5}, []float32{2.9, -2.9, float32(nan), 3e9, -3e9}), I32,
			[]uint64{2, 0xFFFFFFFE, 0, 0x7FFFFFFF, 0x80000000}},
		{"F32>U8", FromFloat32(Shape{3}, []float32{-1, 300, 255.5}), U8, []uint64{0, 255, 255}},
		// Integer to integer wraps: 300 mod 256 = 44; -1 -> 0xFF.
		{"I32>U8", FromInt32(Shape{2}, []int32{300, -1}), U8, []uint64{44, 0xFF}},
		{"U32>I64", FromUint32(Shape{1}, []uint32{0xFFFFFFFF}), I64, []uint64{0xFFFFFFFF}},
		{"F32>Bool", FromFloat32(Shape{3}, []float32{0, -0.5, float32(nan)}), Bool, []uint64{0, 1, 1}},
		{"Bool>F32", encode(Bool, 0, 1), F32, []uint64{0, 0x3F800000}},
		{"F32>F32-clone", FromFloat32(Shape{1}, []float32{2}), F32, []uint64{0x40000000}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := c.in.Convert(c.to)
			if out.DType != c.to || !out.Shape.Equal(c.in.Shape) {
				t.Fatalf("got %v %v, want %v %v", out.DType, out.Shape, c.to, c.in.Shape)
			}
			want := encode(c.to, c.want...)
			for i := range c.want {
				w := want.Data[i*c.to.Size() : (i+1)*c.to.Size()]
				g := out.Data[i*c.to.Size() : (i+1)*c.to.Size()]
				if string(g) != string(w) {
					t.Errorf("got % x, want % x (index %d)", g, w, i)
				}
			}
		})
	}
}
