package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// Dequantize expands len(dst) elements of type t from data into dst with
// llama.cpp's dequantize_row_* formulas (F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0 and the K-quants Q2_K ... Q6_K). Every float32 product and difference is
// rounded on its own, as the reference C does without contraction; Go
// could fuse a*b-c into one FMA, so each product is converted to float32
// explicitly, which the Go spec says prevents fusion.
func Dequantize(t Type, data []byte, dst []float32) error {
	n := len(dst)
	bs, bb := t.BlockSize(), t.BlockBytes()
	if bs == 0 {
		return fmt.Errorf("unknown type %s", t)
	}
	if n%bs != 0 {
		return fmt.Errorf("%d elements are not a multiple of %s's block size %d", n, t, bs)
	}
	if need := n / bs * bb; len(data) < need {
		return fmt.Errorf("%d elements of %s need %d bytes, got %d", n, t, need, len(data))
	}
	le := binary.LittleEndian
	h := func(b []byte) float32 { return tensor.F16ToFloat32(le.Uint16(b)) }
	for i := range n / bs {
		x := data[i*bb : (i+1)*bb]
		y := dst[i*bs : (i+1)*bs]
		switch t {
		case F32:
			y[0] = math.Float32frombits(le.Uint32(x))
		case F16:
			y[0] = h(x)
		case BF16:
			y[0] = tensor.BF16ToFloat32(le.Uint16(x))
		case Q4_0:
			d := h(x)
			for j := range 16 {
				y[j] = float32(int(x[2+j]&0xF)-8) * d
				y[j+16] = float32(int(x[2+j]>>4)-8) * d
			}
		case Q4_1:
			d, m := h(x), h(x[2:])
			for j := range 16 {
				y[j] = float32(float32(x[4+j]&0xF)*d) + m
				y[j+16] = float32(float32(x[4+j]>>4)*d) + m
			}
		case Q5_0, Q5_1:
			// d (and Q5_1's m), then qh (bit j: element j's fifth bit),
			// then qs as Q4's: x = d·(q-16), or d·q + m.
			d, m, off := h(x), float32(0), 2
			if t == Q5_1 {
				m, off = h(x[2:]), 4
			}
			qh := le.Uint32(x[off:])
			qs := x[off+4:]
			for j := range 16 {
				q0 := int(qs[j]&0xF) | int(qh>>j&1)<<4
				q1 := int(qs[j]>>4) | int(qh>>(j+16)&1)<<4
				if t == Q5_0 {
					y[j], y[j+16] = float32(q0-16)*d, float32(q1-16)*d
				} else {
					y[j], y[j+16] = float32(float32(q0)*d)+m, float32(float32(q1)*d)+m
				}
			}
		case Q8_0:
			d := h(x)
			for j := range 32 {
				y[j] = float32(int8(x[2+j])) * d
			}
		case Q2_K:
			q2K(x, y)
		case Q3_K:
			q3K(x, y)
		case Q4_K:
			q45K(x, y, false)
		case Q5_K:
			q45K(x, y, true)
		case Q6_K:
			q6K(x, y)
		default:
			return fmt.Errorf("type %s is not supported (supported: %v)", t, Supported)
		}
	}
	return nil
}

// q2K is dequantize_row_q2_K for one block: scales[16] (low nibble: scale,
// high nibble: min), qs[64] (2-bit codes), d and dmin (F16).
func q2K(x []byte, y []float32) {
	scales, qs := x[0:16], x[16:80]
	d, min := f16(x[80:]), f16(x[82:])
	is, k := 0, 0
	for n := 0; n < 256; n += 128 {
		q := qs[n/4 : n/4+32]
		for shift := 0; shift < 8; shift += 2 {
			for half := 0; half < 2; half++ {
				sc := scales[is]
				is++
				dl := d * float32(sc&0xF)
				ml := min * float32(sc>>4)
				for l := range 16 {
					y[k] = float32(dl*float32((q[l+16*half]>>shift)&3)) - ml
					k++
				}
			}
		}
	}
}

// q3K is dequantize_row_q3_K for one block: hmask[32], qs[64], scales[12]
// (sixteen 6-bit signed scales, offset 32), d (F16).
func q3K(x []byte, y []float32) {
	hmask, qs, packed := x[0:32], x[32:96], x[96:108]
	dAll := f16(x[108:])
	var sc [16]int
	for j := range 16 {
		var low byte
		if j < 8 {
			low = packed[j] & 0xF
		} else {
			low = packed[j-8] >> 4
		}
		high := (packed[8+j%4] >> (2 * (j / 4))) & 3
		sc[j] = int(low|high<<4) - 32
	}
	is, k := 0, 0
	m := byte(1)
	for n := 0; n < 256; n += 128 {
		q := qs[n/4 : n/4+32]
		for shift := 0; shift < 8; shift += 2 {
			for half := 0; half < 2; half++ {
				dl := dAll * float32(sc[is])
				is++
				for l := range 16 {
					v := int((q[l+16*half] >> shift) & 3)
					if hmask[l+16*half]&m == 0 {
						v -= 4
					}
					y[k] = dl * float32(v)
					k++
				}
			}
			m <<= 1
		}
	}
}

// scaleMinK4 is get_scale_min_k4: the j-th 6-bit scale and min of the
// 12-byte scales field of Q4_K and Q5_K.
func scaleMinK4(j int, q []byte) (byte, byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xF | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// q45K is dequantize_row_q4_K (five false) or dequantize_row_q5_K (five
// true) for one block: d, dmin (F16), scales[12], then for Q5_K qh[32],
// then qs[128].
func q45K(x []byte, y []float32, five bool) {
	d, min := f16(x), f16(x[2:])
	scales := x[4:16]
	qh, ql := []byte(nil), x[16:144]
	if five {
		qh, ql = x[16:48], x[48:176]
	}
	is, k := 0, 0
	u1, u2 := byte(1), byte(2)
	for j := 0; j < 256; j += 64 {
		sc, m := scaleMinK4(is, scales)
		d1, m1 := d*float32(sc), min*float32(m)
		sc, m = scaleMinK4(is+1, scales)
		d2, m2 := d*float32(sc), min*float32(m)
		q := ql[j/2 : j/2+32]
		for l := range 32 {
			v := int(q[l] & 0xF)
			if five && qh[l]&u1 != 0 {
				v += 16
			}
			y[k] = float32(d1*float32(v)) - m1
			k++
		}
		for l := range 32 {
			v := int(q[l] >> 4)
			if five && qh[l]&u2 != 0 {
				v += 16
			}
			y[k] = float32(d2*float32(v)) - m2
			k++
		}
		is += 2
		u1 <<= 2
		u2 <<= 2
	}
}

// q6K is dequantize_row_q6_K for one block: ql[128], qh[64], scales[16]
// (int8), d (F16). y = (d·scale)·q, left to right.
func q6K(x []byte, y []float32) {
	d := f16(x[208:])
	for n := 0; n < 256; n += 128 {
		ql, qh, sc := x[n/2:n/2+64], x[128+n/4:128+n/4+32], x[192+n/16:192+n/16+8]
		for l := range 32 {
			is := l / 16
			q1 := int(ql[l]&0xF|((qh[l]>>0)&3)<<4) - 32
			q2 := int(ql[l+32]&0xF|((qh[l]>>2)&3)<<4) - 32
			q3 := int(ql[l]>>4|((qh[l]>>4)&3)<<4) - 32
			q4 := int(ql[l+32]>>4|((qh[l]>>6)&3)<<4) - 32
			y[n+l] = float32(d*float32(int8(sc[is]))) * float32(q1)
			y[n+l+32] = float32(d*float32(int8(sc[is+2]))) * float32(q2)
			y[n+l+64] = float32(d*float32(int8(sc[is+4]))) * float32(q3)
			y[n+l+96] = float32(d*float32(int8(sc[is+6]))) * float32(q4)
		}
	}
}

func f16(b []byte) float32 { return tensor.F16ToFloat32(binary.LittleEndian.Uint16(b)) }
