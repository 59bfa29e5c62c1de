package backendtest

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// The suite's reference arithmetic: plain float64 loops over row-major
// values, written out here so that no backend (and no kernel they share)
// takes part in computing an expected value.

// roundTo rounds x to dt with one round to nearest even: F32 by Go's
// conversion, F16 and BF16 by the definition of their formats (11 and 8
// significant bits, minimum normal exponent -14 and -126, overflow to
// infinity); integer and Bool values are returned unchanged (callers give
// them exact values). F64 is x itself.
func roundTo(x float64, dt tensor.DType) float64 {
	switch dt {
	case tensor.F32:
		return float64(float32(x))
	case tensor.F16:
		return roundBits(x, 11, -14, 15)
	case tensor.BF16:
		return roundBits(x, 8, -126, 127)
	}
	return x
}

// roundBits rounds x to a binary format of p significant bits and exponent
// range [emin, emax], subnormals included, to nearest even.
func roundBits(x float64, p, emin, emax int) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	e := math.Ilogb(x)
	if e < emin {
		e = emin
	}
	q := math.Ldexp(1, e-p+1) // the spacing of the format at x
	r := math.RoundToEven(x/q) * q
	if max := math.Ldexp(2-math.Ldexp(1, 1-p), emax); math.Abs(r) > max {
		return math.Copysign(math.Inf(1), x)
	}
	return r
}

func roundAll(v []float64, dt tensor.DType) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = roundTo(x, dt)
	}
	return out
}

// strides returns the row-major strides of shape.
func strides(shape tensor.Shape) []int {
	s := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = n
		n *= shape[i]
	}
	return s
}

// unravel writes the multi-index of flat index k in shape into idx.
func unravel(k int, shape tensor.Shape, idx []int) {
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] > 0 {
			idx[i] = k % shape[i]
			k /= shape[i]
		}
	}
}

// transposeND returns x with its axes permuted: out axis i is x's axis perm[i].
func transposeND(x nd, perm []int) nd {
	shape := make(tensor.Shape, len(perm))
	for i, p := range perm {
		shape[i] = x.shape[p]
	}
	xs := strides(x.shape)
	out := nd{shape, make([]float64, shape.Size())}
	idx := make([]int, len(shape))
	for k := range out.v {
		unravel(k, shape, idx)
		o := 0
		for i, p := range perm {
			o += idx[i] * xs[p]
		}
		out.v[k] = x.v[o]
	}
	return out
}

// sliceND returns x[start:stop] on every axis.
func sliceND(x nd, start, stop []int) nd {
	shape := make(tensor.Shape, len(start))
	for i := range shape {
		shape[i] = stop[i] - start[i]
	}
	xs := strides(x.shape)
	out := nd{shape, make([]float64, shape.Size())}
	idx := make([]int, len(shape))
	for k := range out.v {
		unravel(k, shape, idx)
		o := 0
		for i := range idx {
			o += (idx[i] + start[i]) * xs[i]
		}
		out.v[k] = x.v[o]
	}
	return out
}

// setSlice writes src into dst at start (in place).
func setSlice(dst nd, start []int, src nd) {
	ds := strides(dst.shape)
	idx := make([]int, len(src.shape))
	for k, v := range src.v {
		unravel(k, src.shape, idx)
		o := 0
		for i := range idx {
			o += (idx[i] + start[i]) * ds[i]
		}
		dst.v[o] = v
	}
}

// broadcastShape returns the numpy broadcast of the shapes, or false.
func broadcastShape(shapes ...tensor.Shape) (tensor.Shape, bool) {
	n := 0
	for _, s := range shapes {
		n = max(n, len(s))
	}
	out := make(tensor.Shape, n)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		for i, d := range s {
			j := n - len(s) + i
			switch {
			case d == out[j] || d == 1:
			case out[j] == 1:
				out[j] = d
			default:
				return nil, false
			}
		}
	}
	return out, true
}

// at returns x's element at the index idx of the broadcast shape (idx has
// that shape's rank; x's axes align to the right, size-1 axes repeat).
func (x nd) at(idx []int) float64 {
	off := len(idx) - len(x.shape)
	o, st := 0, 1
	for i := len(x.shape) - 1; i >= 0; i-- {
		if x.shape[i] != 1 {
			o += idx[off+i] * st
		}
		st *= x.shape[i]
	}
	return x.v[o]
}

// mapN evaluates f over the broadcast of xs.
func mapN(f func(v []float64) float64, xs ...nd) nd {
	shapes := make([]tensor.Shape, len(xs))
	for i, x := range xs {
		shapes[i] = x.shape
	}
	shape, _ := broadcastShape(shapes...)
	out := nd{shape, make([]float64, shape.Size())}
	idx := make([]int, len(shape))
	args := make([]float64, len(xs))
	for k := range out.v {
		unravel(k, shape, idx)
		for i, x := range xs {
			args[i] = x.at(idx)
		}
		out.v[k] = f(args)
	}
	return out
}

// lanes calls f for every lane of x along axis with the lane's values, and
// returns the shape of the result without the axis (keepDims false).
func lanes(x nd, axis int, f func(lane []float64)) tensor.Shape {
	outer, inner := 1, 1
	for i := 0; i < axis; i++ {
		outer *= x.shape[i]
	}
	for i := axis + 1; i < len(x.shape); i++ {
		inner *= x.shape[i]
	}
	n := x.shape[axis]
	lane := make([]float64, n)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			for j := 0; j < n; j++ {
				lane[j] = x.v[(o*n+j)*inner+in]
			}
			f(lane)
		}
	}
	shape := append(tensor.Shape{}, x.shape[:axis]...)
	return append(shape, x.shape[axis+1:]...)
}
