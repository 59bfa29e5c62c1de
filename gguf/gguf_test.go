package gguf

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// f16 bits of small exact values used in hand-built blocks.
func h(v float32) []byte {
	return binary.LittleEndian.AppendUint16(nil, tensor.Float32ToF16(v))
}

// q4Block builds a Q4_0/Q4_1 block from 32 codes (0..15): element j in the
// low nibble of byte j, element j+16 in the high nibble.
func q4Bytes(codes [32]byte) []byte {
	out := make([]byte, 16)
	for j := range 16 {
		out[j] = codes[j] | codes[j+16]<<4
	}
	return out
}

func writeTemp(t *testing.T, kvs []KV, ts []WriteTensor) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "x.gguf")
	if err := WriteFile(p, kvs, ts); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMetadataRoundTrip(t *testing.T) {
	kvs := []KV{
		{"general.architecture", Str("llama")},
		{"u8", Value{Type: TypeUint8, V: uint8(7)}},
		{"i8", Value{Type: TypeInt8, V: int8(-7)}},
		{"u16", Value{Type: TypeUint16, V: uint16(65535)}},
		{"i16", Value{Type: TypeInt16, V: int16(-300)}},
		{"u32", U32(1 << 31)},
		{"i32", Value{Type: TypeInt32, V: int32(-5)}},
		{"f32", F32Value(1e-5)},
		{"bool", BoolValue(true)},
		{"u64", Value{Type: TypeUint64, V: uint64(1 << 40)}},
		{"i64", Value{Type: TypeInt64, V: int64(-1 << 40)}},
		{"f64", Value{Type: TypeFloat64, V: 0.1}},
		{"strs", Strs([]string{"a", "", "日本"})},
		{"i32s", I32s([]int32{1, -2, 3})},
		{"f32s", Value{Type: TypeArray, Elem: TypeFloat32, V: []float32{0.5, -1}}},
		{"bools", Value{Type: TypeArray, Elem: TypeBool, V: []bool{true, false}}},
		{"nested", Value{Type: TypeArray, Elem: TypeArray, V: []Value{I32s([]int32{4}), I32s(nil)}}},
		{"general.alignment", U32(64)},
	}
	f, err := Open(writeTemp(t, kvs, []WriteTensor{{Name: "a", Dims: []uint64{3}, Type: F32, Data: make([]byte, 12)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Alignment != 64 || f.DataOffset%64 != 0 || f.Version != 3 {
		t.Fatalf("alignment %d, data offset %d, version %d; want 64, a multiple of 64, 3", f.Alignment, f.DataOffset, f.Version)
	}
	for i, kv := range kvs {
		got := f.KVs[i]
		if got.Key != kv.Key || got.Value.Summary() != kv.Value.Summary() || got.Value.Type != kv.Value.Type {
			t.Errorf("got %s=%s (%s), want %s=%s (%s) (index %d)", got.Key, got.Value.Summary(), got.Value.Type, kv.Key, kv.Value.Summary(), kv.Value.Type, i)
		}
	}
	if v, _, err := f.Int("u64"); err != nil || v != 1<<40 {
		t.Errorf("Int(u64) = %d, %v; want %d", v, err, int64(1<<40))
	}
	if v, _, err := f.Float("f32"); err != nil || float32(v) != 1e-5 {
		t.Errorf("Float(f32) = %v, %v; want float32 1e-5", v, err)
	}
	if s, _, err := f.Strings("strs"); err != nil || strings.Join(s, "|") != "a||日本" {
		t.Errorf("Strings = %q, %v", s, err)
	}
	if v, _, err := f.Ints("i32s"); err != nil || len(v) != 3 || v[1] != -2 {
		t.Errorf("Ints = %v, %v", v, err)
	}
	if _, _, err := f.String("u8"); err == nil || !strings.Contains(err.Error(), "metadata u8") {
		t.Errorf("String(u8): got %v, want an error naming the key", err)
	}
}

// TestConvertAffine checks the exact mapping of Q4_0, Q4_1 and Q8_0 to MLX
// affine: for every element, scale·code + bias computed in float64 from the
// converted tensors equals llama.cpp's dequantized value (Dequantize), and
// equals the hand-written value of the block.
func TestConvertAffine(t *testing.T) {
	var c4 [32]byte
	var c8 [32]byte
	for i := range 32 {
		c4[i] = byte((i * 7) % 16)
		c8[i] = byte(int8(i*9 - 140)) // covers -128..127 region, wraps
	}
	// Hand values: Q4_0 d·(q−8); Q4_1 d·q + m; Q8_0 d·q.
	cases := []struct {
		name string
		typ  Type
		blk  []byte
		want func(i int) float64
	}{
		{"q4_0", Q4_0, append(h(0.5), q4Bytes(c4)...), func(i int) float64 { return 0.5 * float64(int(c4[i])-8) }},
		{"q4_1", Q4_1, append(append(h(0.25), h(-1.5)...), q4Bytes(c4)...), func(i int) float64 { return 0.25*float64(c4[i]) - 1.5 }},
		{"q8_0", Q8_0, append(h(0.125), c8[:]...), func(i int) float64 { return 0.125 * float64(int8(c8[i])) }},
		// d = 600: −128d = −76800 overflows F16, so scales and biases are F32.
		{"q8_0/wide", Q8_0, append(h(600), c8[:]...), func(i int) float64 { return 600 * float64(int8(c8[i])) }},
		// d = 9000: −8d = −72000 overflows F16.
		{"q4_0/wide", Q4_0, append(h(9000), q4Bytes(c4)...), func(i int) float64 { return 9000 * float64(int(c4[i])-8) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Two rows of one block each.
			data := append(append([]byte{}, tc.blk...), tc.blk...)
			f, err := Open(writeTemp(t, nil, []WriteTensor{{Name: "w", Dims: []uint64{32, 2}, Type: tc.typ, Data: data}}))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c, err := f.Convert(f.Tensors[0])
			if err != nil {
				t.Fatal(err)
			}
			wantScaleDType := tensor.F16
			if strings.HasSuffix(tc.name, "wide") {
				wantScaleDType = tensor.F32
			}
			if c.GroupSize != 32 || c.Scales.DType != wantScaleDType || c.Biases.DType != wantScaleDType {
				t.Fatalf("group %d, scales %s, biases %s; want 32, %s, %s", c.GroupSize, c.Scales.DType, c.Biases.DType, wantScaleDType, wantScaleDType)
			}
			if !c.Weight.Shape.Equal(tensor.Shape{2, 32 * c.Bits / 32}) || !c.Scales.Shape.Equal(tensor.Shape{2, 1}) {
				t.Fatalf("weight %v, scales %v", c.Weight.Shape, c.Scales.Shape)
			}
			ref := make([]float32, 64)
			if err := Dequantize(tc.typ, data, ref); err != nil {
				t.Fatal(err)
			}
			s, b := c.Scales.ToFloat64(), c.Biases.ToFloat64()
			words := c.Weight.Uint32s()
			per := 32 / c.Bits
			for i := range 64 {
				row, k := i/32, i%32
				w := words[row*(32/per)+k/per]
				q := (w >> (uint(k%per) * uint(c.Bits))) & (1<<c.Bits - 1)
				got := s[row]*float64(q) + b[row]
				if got != tc.want(k) || float64(ref[i]) != tc.want(k) {
					t.Fatalf("element %d: affine %v, llama.cpp %v, want %v", i, got, ref[i], tc.want(k))
				}
			}
		})
	}
}

// TestConvertFloat checks that F32, F16 and BF16 keep their bytes and get
// the row-major shape.
func TestConvertFloat(t *testing.T) {
	for _, tc := range []struct {
		typ Type
		dt  tensor.DType
	}{{F32, tensor.F32}, {F16, tensor.F16}, {BF16, tensor.BF16}} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			data := make([]byte, 6*tc.dt.Size())
			for i := range data {
				data[i] = byte(i*37 + 1)
			}
			f, err := Open(writeTemp(t, nil, []WriteTensor{{Name: "n", Dims: []uint64{3, 2}, Type: tc.typ, Data: data}}))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c, err := f.Convert(f.Tensors[0])
			if err != nil {
				t.Fatal(err)
			}
			if c.Quantized() || c.Weight.DType != tc.dt || !c.Weight.Shape.Equal(tensor.Shape{2, 3}) || string(c.Weight.Data) != string(data) {
				t.Fatalf("got %s %v quantized=%v, want %s [2 3] with the same bytes", c.Weight.DType, c.Weight.Shape, c.Quantized(), tc.dt)
			}
		})
	}
}

// kBlock builds one K-quant block whose values are hand-computable: every
// sub-block scale and min is 1 (or the type's neutral encoding), d = 0.5,
// dmin = 0.25, and code k%(2^bits) for element k.
func TestDequantizeKQuants(t *testing.T) {
	const d, dmin = 0.5, 0.25
	cases := []struct {
		typ  Type
		blk  func() []byte
		want func(k int) float64
	}{
		{Q2_K, func() []byte {
			// scales byte: scale 3 (low nibble), min 2 (high nibble).
			b := make([]byte, 84)
			for i := range 16 {
				b[i] = 3 | 2<<4
			}
			// qs: element k = 128·n + 32·(shift/2) + 16·half + l reads
			// bits shift of qs[32n + 16half + l]; set every 2-bit field to
			// (shift/2) so element k has code (k/32)%4.
			for i := range 64 {
				b[16+i] = 0 | 1<<2 | 2<<4 | 3<<6
			}
			copy(b[80:], h(d))
			copy(b[82:], h(dmin))
			return b
		}, func(k int) float64 { return d*3*float64((k/32)%4) - dmin*2 }},
		{Q3_K, func() []byte {
			// scales: every 6-bit scale 33 (33−32 = 1): low nibble 1, high bits 2.
			b := make([]byte, 110)
			for i := range 8 {
				b[96+i] = 1 | 1<<4
			}
			for i := range 4 {
				b[104+i] = 2 | 2<<2 | 2<<4 | 2<<6
			}
			// hmask all set: no −4; low 2 bits as in Q2_K: code (k/32)%4.
			for i := range 32 {
				b[i] = 0xFF
			}
			for i := range 64 {
				b[32+i] = 0 | 1<<2 | 2<<4 | 3<<6
			}
			copy(b[108:], h(d))
			return b
		}, func(k int) float64 { return d * 1 * float64((k/32)%4) }},
		{Q4_K, func() []byte {
			// scales j<4 bytes: scale 2, mins 3; j>=4 packed: low nibbles 2 and 3.
			b := make([]byte, 144)
			copy(b, h(d))
			copy(b[2:], h(dmin))
			for j := range 4 {
				b[4+j] = 2
				b[8+j] = 3
				b[12+j] = 2 | 3<<4
			}
			for l := range 128 {
				b[16+l] = byte(l%16) | byte(15-l%16)<<4
			}
			return b
		}, func(k int) float64 {
			l := k % 32
			q := l % 16
			if (k/32)%2 == 1 {
				q = 15 - l%16
			}
			return d*2*float64(q) - dmin*3
		}},
		{Q5_K, func() []byte {
			b := make([]byte, 176)
			copy(b, h(d))
			copy(b[2:], h(dmin))
			for j := range 4 {
				b[4+j] = 2
				b[8+j] = 3
				b[12+j] = 2 | 3<<4
			}
			for l := range 32 {
				b[16+l] = 0xAA // high bit set for odd sub-blocks (u2 = 2, 8, 32, 128)
			}
			for l := range 128 {
				b[48+l] = byte(l%16) | byte(15-l%16)<<4
			}
			return b
		}, func(k int) float64 {
			l := k % 32
			q := l % 16
			if (k/32)%2 == 1 {
				q = 15 - l%16 + 16
			}
			return d*2*float64(q) - dmin*3
		}},
		{Q6_K, func() []byte {
			b := make([]byte, 210)
			// ql: low nibble = l%16, high nibble = 0; qh: all 2-bit fields 2
			// (+32); so q = l%16 + 32 − 32 for the first/second quarter…
			for i := range 128 {
				b[i] = byte(i % 16)
			}
			for i := range 64 {
				b[128+i] = 2 | 2<<2 | 2<<4 | 2<<6
			}
			for i := range 16 {
				b[192+i] = byte(int8(i - 8)) // signed scales
			}
			copy(b[208:], h(d))
			return b
		}, func(k int) float64 {
			n, r := k/128, k%128
			quarter, l := r/32, r%32
			is := n*8 + l/16 + 2*quarter
			var low int
			if quarter < 2 { // low nibbles of ql[l] / ql[l+32]
				low = (l + 32*quarter) % 16
			}
			q := low | 2<<4
			return d * float64(is-8) * float64(q-32)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.typ.String(), func(t *testing.T) {
			blk := tc.blk()
			if len(blk) != tc.typ.BlockBytes() {
				t.Fatalf("block of %d bytes, want %d", len(blk), tc.typ.BlockBytes())
			}
			got := make([]float32, 256)
			if err := Dequantize(tc.typ, blk, got); err != nil {
				t.Fatal(err)
			}
			for k := range 256 {
				if float64(got[k]) != tc.want(k) {
					t.Fatalf("got %v, want %v (%s, index %d)", got[k], tc.want(k), tc.typ, k)
				}
			}
			// Convert keeps it as F32 with the row-major shape.
			f, err := Open(writeTemp(t, nil, []WriteTensor{{Name: "k", Dims: []uint64{256, 1}, Type: tc.typ, Data: blk}}))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c, err := f.Convert(f.Tensors[0])
			if err != nil {
				t.Fatal(err)
			}
			if !c.Dequantized || c.Weight.DType != tensor.F32 || !c.Weight.Shape.Equal(tensor.Shape{1, 256}) || c.Weight.Float32s()[255] != got[255] {
				t.Fatalf("Convert: %s %v dequantized=%v", c.Weight.DType, c.Weight.Shape, c.Dequantized)
			}
		})
	}
}

// TestErrors feeds broken files and checks each error names the problem,
// the file and, where there is one, the tensor.
func TestErrors(t *testing.T) {
	good := func() []byte {
		b, err := Encode([]KV{{"general.architecture", Str("llama")}},
			[]WriteTensor{{Name: "blk.0.w", Dims: []uint64{32, 2}, Type: Q8_0, Data: make([]byte, 68)}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Offsets into good(): magic 0, version 4, counts 8..24, then the KV.
	typeOffset := func(b []byte) int { return strings.Index(string(b), "blk.0.w") + len("blk.0.w") + 4 + 16 }
	cases := []struct {
		name   string
		mutate func([]byte) []byte
		want   []string
	}{
		{"bad-magic", func(b []byte) []byte { copy(b, "GGML"); return b }, []string{"bad magic", `"GGML"`}},
		{"empty", func(b []byte) []byte { return b[:0] }, []string{"too short"}},
		{"version1", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 1); return b }, []string{"version 1"}},
		{"version9", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 9); return b }, []string{"version 9"}},
		{"big-endian", func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 3); return b }, []string{"big-endian"}},
		{"truncated-header", func(b []byte) []byte { return b[:30] }, []string{"truncated"}},
		// The 68 data bytes end 28 bytes of padding before the end of the file.
		{"truncated-data", func(b []byte) []byte { return b[:len(b)-28-10] }, []string{"tensor blk.0.w", "out of range"}},
		{"huge-count", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<40); return b }, []string{"metadata pairs"}},
		{"huge-tensor-count", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[8:], 1<<40); return b }, []string{"claims 1099511627776 tensors"}},
		{"unknown-type", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[typeOffset(b):], 99); return b }, []string{"tensor blk.0.w", "unknown ggml type 99"}},
		{"offset-out-of-range", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[typeOffset(b)+4:], 1<<20); return b }, []string{"tensor blk.0.w", "out of range"}},
		{"misaligned", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[typeOffset(b)+4:], 4); return b }, []string{"tensor blk.0.w", "alignment"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), tc.name+".gguf")
			if err := os.WriteFile(p, tc.mutate(good()), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Fatalf("got no error, want one containing %q", tc.want)
			}
			for _, w := range append(tc.want, p) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestUnsupportedType: a type whose layout is known but which has no exact
// MLX mapping (Q5_0) opens, and Convert names the tensor and the type.
func TestUnsupportedType(t *testing.T) {
	f, err := Open(writeTemp(t, nil, []WriteTensor{{Name: "blk.3.ffn_up.weight", Dims: []uint64{32}, Type: Q5_0, Data: make([]byte, 22)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.Convert(f.Tensors[0])
	if err == nil || !strings.Contains(err.Error(), "blk.3.ffn_up.weight") || !strings.Contains(err.Error(), "Q5_0") {
		t.Fatalf("got %v, want an error naming blk.3.ffn_up.weight and Q5_0", err)
	}
}

// TestF16Exactness documents the claim that −8d and −128d are exact in F16
// below overflow: for every finite F16 d, the F16 rounding of −8d equals −8d
// unless |8d| > 65504 (resp. 128).
func TestF16Exactness(t *testing.T) {
	for bits := 0; bits < 1<<16; bits++ {
		d := tensor.F16ToFloat32(uint16(bits))
		if math.IsNaN(float64(d)) || math.IsInf(float64(d), 0) {
			continue
		}
		for _, k := range []float32{-8, -128} {
			v := k * d
			exact := tensor.F16ToFloat32(tensor.Float32ToF16(v)) == v
			if exact != (math.Abs(float64(v)) <= 65504) {
				t.Fatalf("d=%v: %v·d=%v exact in F16 %v, want %v", d, k, v, exact, !exact)
			}
		}
	}
}

// TestDequantizeQ5 checks Q5_0 (x = d·(q−16)) and Q5_1 (x = d·q + m) on a
// block whose 32 codes cover 0..31 in a scrambled order: the low four bits
// of element j in qs[j]'s low nibble and of element j+16 in its high
// nibble, the fifth bits in qh (bit j for element j, bit j+16 for j+16).
func TestDequantizeQ5(t *testing.T) {
	var c [32]byte
	for i := range 32 {
		c[i] = byte((i * 13) % 32)
	}
	var qh uint32
	for i := range 32 {
		qh |= uint32(c[i]>>4) << i
	}
	var low [32]byte
	for i := range 32 {
		low[i] = c[i] & 0xF
	}
	body := append(binary.LittleEndian.AppendUint32(nil, qh), q4Bytes(low)...)
	for _, tc := range []struct {
		typ  Type
		blk  []byte
		want func(q byte) float32
	}{
		{Q5_0, append(h(0.5), body...), func(q byte) float32 { return 0.5 * float32(int(q)-16) }},
		{Q5_1, append(append(h(0.25), h(-1.5)...), body...), func(q byte) float32 { return 0.25*float32(q) - 1.5 }},
	} {
		got := make([]float32, 32)
		if err := Dequantize(tc.typ, tc.blk, got); err != nil {
			t.Fatal(err)
		}
		for i := range 32 {
			if got[i] != tc.want(c[i]) {
				t.Fatalf("%s element %d (code %d): got %v, want %v", tc.typ, i, c[i], got[i], tc.want(c[i]))
			}
		}
	}
}
