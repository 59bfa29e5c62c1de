// Package turboquant is the TurboQuant KV codec of the graph we port (the
// seed's kernels/turboquant, after vllm-metal's turboquant.py): keys
// quantized affinely per group of 32 along head_dim, values rotated by a
// signed Walsh-Hadamard transform and Lloyd-Max quantized per group of 32
// with an RMS scale, codes bit-packed little-endian. It works on host
// slices of one token-head row (head_dim elements) at a time; nn's
// TurboKVCache stores the codes in backend arrays.
//
// The arithmetic is float32 throughout, in the order written in each
// function's doc (conformance/oracle/turboquant.py implements the same
// specification independently, and the fixtures hold the two to the same
// bits). Rounding is to nearest even; half-precision values (scales,
// zero points) are IEEE float16, overflowing to ±Inf.
package turboquant

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// GroupSize is the number of head_dim elements sharing a scale (and, for
// keys, a zero point).
const GroupSize = 32

// Epsilon is added to every scale before dividing by it.
const Epsilon float32 = 1e-8

// HeadDims are the head dimensions the codec supports (those with a sign
// vector).
var HeadDims = []int{64, 128, 256, 512}

// KeyBits are the key bit widths offered: 8 (signed, the default) and the
// unsigned 2, 4 and 5.
var KeyBits = []int{2, 4, 5, 8}

// ValueBits are the value bit widths offered (those with a codebook).
var ValueBits = []int{2, 3, 4, 5, 8}

// Scheme is a TurboQuant configuration: key and value bit widths.
type Scheme struct{ KBits, VBits int }

// Default is the seed's default scheme, k8v3.
var Default = Scheme{KBits: 8, VBits: 3}

// ParseScheme reads "turbo" (the default, k8v3) or "turbo:k<K>v<V>".
func ParseScheme(s string) (Scheme, error) {
	if s == "turbo" {
		return Default, nil
	}
	rest, ok := strings.CutPrefix(s, "turbo:k")
	k, v, ok2 := strings.Cut(rest, "v")
	if !ok || !ok2 {
		return Scheme{}, fmt.Errorf("turboquant scheme %q: want turbo or turbo:k<K>v<V> (such as turbo:k8v3)", s)
	}
	kb, err1 := strconv.Atoi(k)
	vb, err2 := strconv.Atoi(v)
	if err1 != nil || err2 != nil {
		return Scheme{}, fmt.Errorf("turboquant scheme %q: want turbo or turbo:k<K>v<V> (such as turbo:k8v3)", s)
	}
	sc := Scheme{KBits: kb, VBits: vb}
	return sc, sc.CheckBits()
}

// String is the scheme's name, "turbo:k8v3".
func (s Scheme) String() string { return fmt.Sprintf("turbo:k%dv%d", s.KBits, s.VBits) }

// CheckBits returns an error naming a bit width that is not offered.
func (s Scheme) CheckBits() error {
	if !slices.Contains(KeyBits, s.KBits) {
		return fmt.Errorf("turboquant key bits %d: want one of %v", s.KBits, KeyBits)
	}
	if !slices.Contains(ValueBits, s.VBits) {
		return fmt.Errorf("turboquant value bits %d: want one of %v", s.VBits, ValueBits)
	}
	return nil
}

// Check returns an error naming what does not fit: a bit width not
// offered, or a head_dim without a sign vector.
func (s Scheme) Check(headDim int) error {
	if err := s.CheckBits(); err != nil {
		return err
	}
	return CheckHeadDim(headDim)
}

// CheckHeadDim returns an error unless d is one of HeadDims.
func CheckHeadDim(d int) error {
	if !slices.Contains(HeadDims, d) {
		return fmt.Errorf("turboquant: head_dim %d is not supported (want one of %v: the dimensions with a sign vector)", d, HeadDims)
	}
	return nil
}

// KeyBytes is the packed size of one token-head's key codes.
func (s Scheme) KeyBytes(d int) int { return d * s.KBits / 8 }

// ValueBytes is the packed size of one token-head's value codes.
func (s Scheme) ValueBytes(d int) int { return d * s.VBits / 8 }

// BytesPerTokenHead is what one token-head costs in the cache: packed key
// codes, float16 key scales and zero points, packed value codes and
// float16 value scales (200 bytes for k8v3 at head_dim 128, against 512 for
// bfloat16 keys and values).
func (s Scheme) BytesPerTokenHead(d int) int {
	g := d / GroupSize
	return s.KeyBytes(d) + 4*g + s.ValueBytes(d) + 2*g
}

//go:embed tables.json
var tablesJSON []byte

type codebook struct{ centroids, boundaries []float32 }

var signs, codebooks = func() (map[int][]float32, map[int]codebook) {
	var t struct {
		Signs     map[string][]float64 `json:"signs"`
		Codebooks map[string]struct {
			Centroids  []float64 `json:"centroids"`
			Boundaries []float64 `json:"boundaries"`
		} `json:"codebooks"`
	}
	if err := json.Unmarshal(tablesJSON, &t); err != nil {
		panic("turboquant: tables.json: " + err.Error())
	}
	f32 := func(v []float64) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = float32(x)
		}
		return out
	}
	s := map[int][]float32{}
	for _, d := range HeadDims {
		v := t.Signs[strconv.Itoa(d)]
		if len(v) != d {
			panic(fmt.Sprintf("turboquant: tables.json: %d signs for head_dim %d", len(v), d))
		}
		s[d] = f32(v)
	}
	c := map[int]codebook{}
	for _, b := range ValueBits {
		cb := t.Codebooks[strconv.Itoa(b)]
		if len(cb.Centroids) != 1<<b || len(cb.Boundaries) != 1<<b-1 {
			panic(fmt.Sprintf("turboquant: tables.json: codebook %d has %d centroids, %d boundaries", b, len(cb.Centroids), len(cb.Boundaries)))
		}
		c[b] = codebook{f32(cb.Centroids), f32(cb.Boundaries)}
	}
	return s, c
}()

// Signs returns the ±1 sign vector of head_dim d (a copy), or nil for a d
// not in HeadDims.
func Signs(d int) []float32 { return slices.Clone(signs[d]) }

// Codebook returns the Lloyd-Max centroids (2^bits) and boundaries (2^bits
// - 1) of a value bit width (copies), or nils for bits not offered.
func Codebook(bits int) (centroids, boundaries []float32) {
	c := codebooks[bits]
	return slices.Clone(c.centroids), slices.Clone(c.boundaries)
}

func f16(x float32) uint16     { return tensor.Float32ToF16(x) }
func fromF16(h uint16) float32 { return tensor.F16ToFloat32(h) }
func roundEven(x float32) float32 {
	return float32(math.RoundToEven(float64(x)))
}

// EncodeKeys quantizes one key row x (head_dim elements) into codes (one
// per element: int8 two's complement for 8 bits, else 0..2^bits-1) and a
// float16 scale and zero point per group of 32. Per group, with m and M its
// minimum and maximum (float32):
//
//	8 bits: s = (M-m)/254, z = round((M+m) / (2·(s+ε))), q = clip(round(x/(s+ε) - z), -127, 127)
//	b bits: s = (M-m)/(2^b-1), z = round(m/(s+ε)),      q = clip(round(x/(s+ε) - z), 0, 2^b-1)
//
// each operation rounded to float32, ε = 1e-8; then s and z are rounded to
// float16. A constant group gives s = 0 and z ≈ m·1e8, which overflows
// float16 to ±Inf once |m| > ~6.6e-4, so it decodes to NaN: the seed's
// behaviour, kept (TestConstantGroup).
func EncodeKeys(x []float32, bits int, codes []byte, scales, zeros []uint16) {
	for g := range len(x) / GroupSize {
		xs := x[g*GroupSize : (g+1)*GroupSize]
		lo, hi := xs[0], xs[0]
		for _, v := range xs[1:] {
			lo, hi = min(lo, v), max(hi, v)
		}
		var s, z, qlo, qhi float32
		if bits == 8 {
			s = (hi - lo) / 254
			z = roundEven((hi + lo) / (2 * (s + Epsilon)))
			qlo, qhi = -127, 127
		} else {
			qhi = float32(int(1)<<bits - 1)
			s = (hi - lo) / qhi
			z = roundEven(lo / (s + Epsilon))
		}
		for i, v := range xs {
			q := roundEven(float32(v/(s+Epsilon)) - z)
			q = min(max(q, qlo), qhi)
			if bits == 8 {
				codes[g*GroupSize+i] = byte(int8(q)) // the int8's bits
			} else {
				codes[g*GroupSize+i] = byte(q)
			}
		}
		scales[g], zeros[g] = f16(s), f16(z)
	}
}

// DecodeKeys is (q + z)·s per element in float32 (q the code, int8 for 8
// bits; z and s the group's float16 values), written to out.
func DecodeKeys(codes []byte, bits int, scales, zeros []uint16, out []float32) {
	for g := range len(out) / GroupSize {
		o, c := out[g*GroupSize:(g+1)*GroupSize], codes[g*GroupSize:(g+1)*GroupSize]
		DecodeKeyGroup(c, bits, fromF16(scales[g]), fromF16(zeros[g]), o)
	}
}

// DecodeKeyGroup is DecodeKeys of one group (len(out) codes) whose scale s
// and zero point z are already widened from float16 to float32.
func DecodeKeyGroup(codes []byte, bits int, s, z float32, out []float32) {
	for i := range out {
		q := float32(codes[i])
		if bits == 8 {
			q = float32(int8(codes[i]))
		}
		out[i] = float32(q+z) * s
	}
}

// fwht is the Sylvester-ordered Walsh-Hadamard transform of x in place,
// scaled by float32(1/√len(x)): butterflies (a+b, a-b) over pairs (j, j+h)
// for h = 1, 2, 4, ..., len/2, each sum rounded to float32, and the last
// stage's results multiplied by the scale (MLX's hadamard_transform order).
func fwht(x []float32) {
	n := len(x)
	scale := float32(1 / math.Sqrt(float64(n)))
	for h := 1; h < n; h *= 2 {
		for i := 0; i < n; i += 2 * h {
			for j := i; j < i+h; j++ {
				a, b := x[j], x[j+h]
				x[j], x[j+h] = a+b, a-b
			}
		}
	}
	for j := range x {
		x[j] *= scale
	}
}

// Rotate is the value rotation in place: x ⊙ σ, then the scaled
// Walsh-Hadamard transform (len(x) one of HeadDims).
func Rotate(x []float32) {
	s := signs[len(x)]
	for j := range x {
		x[j] *= s[j]
	}
	fwht(x)
}

// Unrotate inverts Rotate in place: the scaled transform, then ⊙ σ.
func Unrotate(x []float32) {
	fwht(x)
	s := signs[len(x)]
	for j := range x {
		x[j] *= s[j]
	}
}

// EncodeValues rotates one value row x (a copy; x is not changed) and
// quantizes it: per group of 32 the RMS scale ρ = sqrt(Σ y²/32) (the sum of
// float32 squares taken in order, j = 0..31), code = the number of
// boundaries strictly below y/(ρ+ε), and ρ stored as float16 (encoding
// divides by the float32 ρ, decoding multiplies by the float16 one).
func EncodeValues(x []float32, bits int, codes []byte, scales []uint16) {
	y := slices.Clone(x)
	Rotate(y)
	bounds := codebooks[bits].boundaries
	for g := range len(y) / GroupSize {
		ys := y[g*GroupSize : (g+1)*GroupSize]
		var sum float32
		for _, v := range ys {
			sum += float32(v * v)
		}
		rho := float32(math.Sqrt(float64(sum / GroupSize)))
		for i, v := range ys {
			u := v / (rho + Epsilon)
			idx := 0
			for idx < len(bounds) && u > bounds[idx] {
				idx++
			}
			codes[g*GroupSize+i] = byte(idx)
		}
		scales[g] = f16(rho)
	}
}

// DecodeValuesRotated is c[code]·ρ per element in float32: the values still
// in the rotated domain (the deferred read).
func DecodeValuesRotated(codes []byte, bits int, scales []uint16, out []float32) {
	for g := range len(out) / GroupSize {
		DecodeValueGroupRotated(codes[g*GroupSize:(g+1)*GroupSize], bits, fromF16(scales[g]), out[g*GroupSize:(g+1)*GroupSize])
	}
}

// DecodeValueGroupRotated is DecodeValuesRotated of one group (len(out)
// codes) whose RMS scale rho is already widened from float16 to float32.
func DecodeValueGroupRotated(codes []byte, bits int, rho float32, out []float32) {
	c := codebooks[bits].centroids
	for i := range out {
		out[i] = c[codes[i]] * rho
	}
}

// DecodeValues is DecodeValuesRotated followed by Unrotate: the values.
func DecodeValues(codes []byte, bits int, scales []uint16, out []float32) {
	DecodeValuesRotated(codes, bits, scales, out)
	Unrotate(out)
}

// Pack writes codes (one per byte, each < 2^bits) as a little-endian
// bitstream: element i occupies bits [i·bits, (i+1)·bits) of out, which
// holds len(codes)·bits/8 bytes. 8-bit codes are copied.
func Pack(codes []byte, bits int, out []byte) {
	if bits == 8 {
		copy(out, codes)
		return
	}
	clear(out[:len(codes)*bits/8])
	mask := byte(1)<<bits - 1
	for i, c := range codes {
		bit := i * bits
		v := uint16(c&mask) << (bit % 8)
		out[bit/8] |= byte(v)
		if hi := byte(v >> 8); hi != 0 {
			out[bit/8+1] |= hi
		}
	}
}

// Unpack is Pack's inverse: len(codes) codes from packed. Eight codes
// fill bits whole bytes, so they are read as one little-endian word of
// those bytes; a tail of fewer than eight codes is read code by code.
func Unpack(packed []byte, bits int, codes []byte) {
	if bits == 8 {
		copy(codes, packed)
		return
	}
	wmask := uint64(1)<<bits - 1
	i := 0
	for ; i+8 <= len(codes); i += 8 {
		off := i * bits / 8
		var w uint64
		if off+8 <= len(packed) {
			w = binary.LittleEndian.Uint64(packed[off:]) // the bytes past these codes' are shifted out
		} else {
			for k, c := range packed[off : off+bits] {
				w |= uint64(c) << (8 * k)
			}
		}
		out := codes[i : i+8]
		for k := range out {
			out[k] = byte(w >> (k * bits) & wmask)
		}
	}
	mask := uint16(1)<<bits - 1
	for ; i < len(codes); i++ {
		bit := i * bits
		v := uint16(packed[bit/8])
		if bit/8+1 < len(packed) {
			v |= uint16(packed[bit/8+1]) << 8
		}
		codes[i] = byte(v >> (bit % 8) & mask)
	}
}
