package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// GroupSize is the affine group size of the converted Q4_0, Q4_1 and Q8_0
// tensors: their block size.
const GroupSize = 32

// Converted is one tensor in MLX form. A quantized tensor has packed U32
// codes in Weight ([..., cols·Bits/32], MLX's LSB-first packing), and
// Scales and Biases [..., cols/GroupSize]; an unquantized one has only a
// float Weight of the tensor's shape.
type Converted struct {
	Weight, Scales, Biases *tensor.Dense
	Bits, GroupSize        int // 0 when unquantized
	// Dequantized is true for K-quants, turned into F32 values.
	Dequantized bool
}

// Quantized reports whether the tensor is MLX-affine quantized.
func (c *Converted) Quantized() bool { return c.Bits != 0 }

// Supported lists the types Convert handles.
var Supported = []Type{F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}

func (f *File) tensorErr(t TensorInfo, format string, a ...any) error {
	return fmt.Errorf("gguf %s: tensor %s: "+format, append([]any{f.Path, t.Name}, a...)...)
}

// Convert returns the tensor in MLX form (see the package doc). Float
// tensors are copies; nothing aliases the mapped file.
func (f *File) Convert(t TensorInfo) (*Converted, error) {
	data := f.Data(t)
	switch t.Type {
	case F32, F16, BF16:
		dt := map[Type]tensor.DType{F32: tensor.F32, F16: tensor.F16, BF16: tensor.BF16}[t.Type]
		w := tensor.New(dt, tensor.Shape(t.Shape))
		copy(w.Data, data)
		return &Converted{Weight: w}, nil
	case Q4_0, Q4_1, Q8_0:
		return affine(t, data), nil
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K:
		w := tensor.New(tensor.F32, tensor.Shape(t.Shape))
		if err := Dequantize(t.Type, data, w.Float32s()); err != nil {
			return nil, f.tensorErr(t, "%v", err)
		}
		return &Converted{Weight: w, Dequantized: true}, nil
	}
	return nil, f.tensorErr(t, "type %s is not supported (supported: %v)", t.Type, Supported)
}

// affine converts Q4_0, Q4_1 or Q8_0 blocks to MLX affine codes, scales and
// biases (see the package doc for the exact mapping).
func affine(t TensorInfo, data []byte) *Converted {
	bits := 4
	if t.Type == Q8_0 {
		bits = 8
	}
	cols := t.Shape[len(t.Shape)-1]
	lead := t.Shape[:len(t.Shape)-1]
	nb := t.Elements() / GroupSize
	bs := t.Type.BlockBytes()
	w := tensor.New(tensor.U32, tensor.Shape(append(append([]int{}, lead...), cols*bits/32)))
	scales := make([]uint16, nb)
	biases := make([]float32, nb) // exact values, before choosing a dtype
	le := binary.LittleEndian
	wide := false
	for b := range nb {
		blk := data[b*bs : (b+1)*bs]
		d := le.Uint16(blk)
		scales[b] = d
		df := tensor.F16ToFloat32(d)
		var out []byte
		switch t.Type {
		case Q4_0, Q4_1:
			qs := blk[2:]
			if t.Type == Q4_0 {
				biases[b] = -8 * df
			} else {
				biases[b] = tensor.F16ToFloat32(le.Uint16(blk[2:]))
				qs = blk[4:]
			}
			// ggml: element j in the low nibble of qs[j], element j+16 in
			// the high one. MLX: element k in nibble k (LSB first).
			out = w.Data[b*16 : (b+1)*16]
			for k := range 16 {
				lo := qs[(2*k)%16] >> (4 * ((2 * k) / 16))
				hi := qs[(2*k+1)%16] >> (4 * ((2*k + 1) / 16))
				out[k] = lo&0xF | (hi&0xF)<<4
			}
		case Q8_0:
			biases[b] = -128 * df
			out = w.Data[b*32 : (b+1)*32]
			for k, q := range blk[2:34] {
				out[k] = q ^ 0x80 // int8 q → uint8 q+128
			}
		}
		if !wide && !fitsF16(biases[b]) {
			wide = true
		}
	}
	gShape := tensor.Shape(append(append([]int{}, lead...), cols/GroupSize))
	c := &Converted{Weight: w, Bits: bits, GroupSize: GroupSize}
	if wide {
		c.Scales, c.Biases = tensor.New(tensor.F32, gShape), tensor.New(tensor.F32, gShape)
		s, bi := c.Scales.Float32s(), c.Biases.Float32s()
		for i := range nb {
			s[i] = tensor.F16ToFloat32(scales[i])
			bi[i] = biases[i]
		}
		return c
	}
	c.Scales, c.Biases = tensor.New(tensor.F16, gShape), tensor.New(tensor.F16, gShape)
	copy(c.Scales.Uint16s(), scales)
	bi := c.Biases.Uint16s()
	for i, v := range biases {
		bi[i] = tensor.Float32ToF16(v)
	}
	if t.Type == Q4_1 { // m's own bits, NaN payloads included
		for b := range nb {
			bi[b] = le.Uint16(data[b*bs+2:])
		}
	}
	return c
}

// fitsF16 reports whether v (a multiple of an F16 value by a power of two)
// survives the round trip through F16. NaN counts as fitting.
func fitsF16(v float32) bool {
	if v != v {
		return true
	}
	return tensor.F16ToFloat32(tensor.Float32ToF16(v)) == v || math.IsInf(float64(v), 0)
}
