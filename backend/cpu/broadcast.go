package cpu

import "github.com/mlxgo/mlxgo/tensor"

// broadcastShapes returns the numpy broadcast of shapes: aligned at the
// right, each axis equal or 1. ok is false when they do not broadcast.
func broadcastShapes(shapes ...tensor.Shape) (out tensor.Shape, ok bool) {
	return broadcastInto(nil, shapes...)
}

// broadcastInto is broadcastShapes appending the result to dst[:0].
func broadcastInto(dst tensor.Shape, shapes ...tensor.Shape) (out tensor.Shape, ok bool) {
	n := 0
	for _, s := range shapes {
		n = max(n, len(s))
	}
	out = dst[:0]
	for range n {
		out = append(out, 1)
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

// strides returns the row-major element strides of shape.
func strides(shape tensor.Shape) []int {
	st := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

// bstrides returns the element strides of an array of shape in read as
// shape out (which in broadcasts to): 0 on broadcast axes.
func bstrides(in, out tensor.Shape) []int {
	st := make([]int, len(out))
	inSt := strides(in)
	for i := range in {
		j := len(out) - len(in) + i
		if in[i] != 1 || out[j] == 1 {
			st[j] = inSt[i]
		}
	}
	return st
}

// walk visits every element k of shape out in row-major order and calls
// fn(k, offs), where offs[i] is the flat index of the element of input i
// (strides st[i], from bstrides). offs must not be kept.
func walk(out tensor.Shape, st [][]int, fn func(k int, offs []int)) {
	n := out.Size()
	offs := make([]int, len(st))
	if n == 0 {
		return
	}
	if contiguous(out, st) {
		for k := range n {
			for i := range offs {
				offs[i] = k
			}
			fn(k, offs)
		}
		return
	}
	idx := make([]int, len(out))
	for k := range n {
		fn(k, offs)
		for ax := len(out) - 1; ax >= 0; ax-- {
			idx[ax]++
			for i := range offs {
				offs[i] += st[i][ax]
			}
			if idx[ax] < out[ax] {
				break
			}
			for i := range offs {
				offs[i] -= st[i][ax] * out[ax]
			}
			idx[ax] = 0
		}
	}
}

// contiguous reports whether every input is read in order (no broadcasting).
func contiguous(out tensor.Shape, st [][]int) bool {
	want := strides(out)
	for _, s := range st {
		for ax := range s {
			if out[ax] != 1 && s[ax] != want[ax] {
				return false
			}
		}
	}
	return true
}
