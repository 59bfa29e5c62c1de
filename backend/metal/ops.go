//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// op runs one MLX op on the MLX thread: call gets the argument handles and
// writes the result; op names the failure. MLX checks shapes and dtypes as
// the op is recorded, so a bad call panics here with MLX's message.
func (b *Backend) op(op string, call func(res *C.mlx_array, h []C.mlx_array) C.int, args ...backend.Array) *Array {
	var out *Array
	b.do(op, func() {
		as := b.use(op, args...)
		hs := make([]C.mlx_array, len(as))
		for i, a := range as {
			hs[i] = a.h
		}
		var res C.mlx_array
		rc := call(&res, hs)
		out = b.wrap(op, rc, res, args...)
	})
	return out
}

// Binary applies op to a and b after broadcasting them together, with MLX's
// type promotion (comparisons give Bool).
func (b *Backend) Binary(op backend.BinaryOp, x, y backend.Array) backend.Array {
	var f func(*C.mlx_array, C.mlx_array, C.mlx_array, C.mlx_stream) C.int
	switch op {
	case backend.Add:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_add(r, a, c, s) }
	case backend.Subtract:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_subtract(r, a, c, s) }
	case backend.Multiply:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_multiply(r, a, c, s) }
	case backend.Divide:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_divide(r, a, c, s) }
	case backend.Maximum:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_maximum(r, a, c, s) }
	case backend.Minimum:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_minimum(r, a, c, s) }
	case backend.Equal:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_equal(r, a, c, s) }
	case backend.Less:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_less(r, a, c, s) }
	case backend.Greater:
		f = func(r *C.mlx_array, a, c C.mlx_array, s C.mlx_stream) C.int { return C.mlx_greater(r, a, c, s) }
	default:
		panic(backend.Errorf(op.String(), []backend.Array{x, y}, "unknown binary op %d", int(op)))
	}
	return b.op(op.String(), func(res *C.mlx_array, h []C.mlx_array) C.int { return f(res, h[0], h[1], b.s) }, x, y)
}

// Unary applies op elementwise with MLX's kernels (integer inputs of the
// transcendental ops give F32). SiLU is mlx.nn.silu, compiled shapeless as
// mlx does: x * sigmoid(x).
func (b *Backend) Unary(op backend.UnaryOp, x backend.Array) backend.Array {
	if op == backend.SiLU {
		return b.builtin(op.String(), C.MLXGO_FN_SILU, x)
	}
	var f func(*C.mlx_array, C.mlx_array, C.mlx_stream) C.int
	switch op {
	case backend.Exp:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_exp(r, a, s) }
	case backend.Log:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_log(r, a, s) }
	case backend.Negative:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_negative(r, a, s) }
	case backend.Abs:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_abs(r, a, s) }
	case backend.Sqrt:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_sqrt(r, a, s) }
	case backend.Rsqrt:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_rsqrt(r, a, s) }
	case backend.Square:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_square(r, a, s) }
	case backend.Sigmoid:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_sigmoid(r, a, s) }
	case backend.Tanh:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_tanh(r, a, s) }
	case backend.Sin:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_sin(r, a, s) }
	case backend.Cos:
		f = func(r *C.mlx_array, a C.mlx_array, s C.mlx_stream) C.int { return C.mlx_cos(r, a, s) }
	default:
		panic(backend.Errorf(op.String(), []backend.Array{x}, "unknown unary op %d", int(op)))
	}
	return b.op(op.String(), func(res *C.mlx_array, h []C.mlx_array) C.int { return f(res, h[0], b.s) }, x)
}

// AsType converts x to dt (mx.astype).
func (b *Backend) AsType(x backend.Array, dt tensor.DType) backend.Array {
	d := mlxDType("AsType", dt)
	return b.op("AsType", func(res *C.mlx_array, h []C.mlx_array) C.int { return C.mlx_astype(res, h[0], d, b.s) }, x)
}

// Where picks a where cond is true and b elsewhere (mx.where).
func (b *Backend) Where(cond, x, y backend.Array) backend.Array {
	return b.op("Where", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_where(res, h[0], h[1], h[2], b.s)
	}, cond, x, y)
}

// Reshape gives x a new shape of the same size; one dimension may be -1.
func (b *Backend) Reshape(x backend.Array, shape ...int) backend.Array {
	s := cints(shape)
	return b.op("Reshape", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_reshape(res, h[0], ptr(s), C.size_t(len(s)), b.s)
	}, x)
}

// Transpose permutes the axes of x; no axes reverses them (mx.transpose).
func (b *Backend) Transpose(x backend.Array, axes ...int) backend.Array {
	if len(axes) == 0 && x != nil {
		n := len(x.Shape())
		for i := range n {
			axes = append(axes, n-1-i)
		}
	}
	s := cints(axes)
	return b.op("Transpose", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_transpose_axes(res, h[0], ptr(s), C.size_t(len(s)), b.s)
	}, x)
}

// sliceBounds resolves start and stop (negative values count from the end)
// and checks 0 <= start <= stop <= dim on every axis: MLX would clamp, the
// contract does not.
func sliceBounds(shape tensor.Shape, start, stop []int) (lo, hi []int, err error) {
	if len(start) != len(shape) || len(stop) != len(shape) {
		return nil, nil, fmt.Errorf("start %v and stop %v need one entry per axis (%d)", start, stop, len(shape))
	}
	lo, hi = make([]int, len(shape)), make([]int, len(shape))
	for i, d := range shape {
		lo[i], hi[i] = start[i], stop[i]
		if lo[i] < 0 {
			lo[i] += d
		}
		if hi[i] < 0 {
			hi[i] += d
		}
		if lo[i] < 0 || lo[i] > hi[i] || hi[i] > d {
			return nil, nil, fmt.Errorf("axis %d: range [%d:%d] outside [0:%d]", i, start[i], stop[i], d)
		}
	}
	return lo, hi, nil
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// Slice takes x[start[i]:stop[i]] on every axis (step 1). Negative bounds
// count from the end; out-of-range bounds panic.
func (b *Backend) Slice(x backend.Array, start, stop []int) backend.Array {
	if x == nil {
		panic(backend.Errorf("Slice", []backend.Array{x}, "argument 0 is nil"))
	}
	lo, hi, err := sliceBounds(x.Shape(), start, stop)
	if err != nil {
		panic(backend.Errorf("Slice", []backend.Array{x}, "%v", err))
	}
	l, u, st := cints(lo), cints(hi), cints(ones(len(lo)))
	return b.op("Slice", func(res *C.mlx_array, h []C.mlx_array) C.int {
		n := C.size_t(len(l))
		return C.mlx_slice(res, h[0], ptr(l), n, ptr(u), n, ptr(st), n, b.s)
	}, x)
}

// SliceUpdate returns dst with src written at start (mx slice_update: src is
// converted to dst's dtype and broadcast, its shape padded with leading 1s).
// Negative starts count from the end; a region outside dst panics. MLX
// reuses dst's buffer when nothing else holds it; dst stays valid either way.
func (b *Backend) SliceUpdate(dst, src backend.Array, start []int) backend.Array {
	args := []backend.Array{dst, src}
	if dst == nil || src == nil {
		panic(backend.Errorf("SliceUpdate", args, "nil argument"))
	}
	ds, ss := dst.Shape(), src.Shape()
	if len(ss) > len(ds) {
		panic(backend.Errorf("SliceUpdate", args, "src has more dimensions than dst"))
	}
	region := ones(len(ds))
	copy(region[len(ds)-len(ss):], ss)
	stop := make([]int, len(region))
	for i := range stop {
		if i < len(start) {
			stop[i] = start[i] + region[i]
			if start[i] < 0 {
				stop[i] += ds[i]
			}
		}
	}
	lo, hi, err := sliceBounds(ds, start, stop)
	if err != nil {
		panic(backend.Errorf("SliceUpdate", args, "%v", err))
	}
	l, u, st := cints(lo), cints(hi), cints(ones(len(lo)))
	return b.op("SliceUpdate", func(res *C.mlx_array, h []C.mlx_array) C.int {
		n := C.size_t(len(l))
		return C.mlx_slice_update(res, h[0], h[1], ptr(l), n, ptr(u), n, ptr(st), n, b.s)
	}, dst, src)
}

// Concatenate joins arrays along axis (mx.concatenate).
func (b *Backend) Concatenate(axis int, xs ...backend.Array) backend.Array {
	if len(xs) == 0 {
		panic(&backend.OpError{Op: "Concatenate", Err: fmt.Errorf("no arrays")})
	}
	return b.op("Concatenate", func(res *C.mlx_array, h []C.mlx_array) C.int {
		v := C.mlx_vector_array_new_data(&h[0], C.size_t(len(h)))
		if v.ctx == nil {
			return 1
		}
		defer C.mlx_vector_array_free(v)
		return C.mlx_concatenate_axis(res, v, C.int(axis), b.s)
	}, xs...)
}

// Take gathers whole slices of x along axis at integer indices (mx.take).
// Indices are not range-checked (they are data, and MLX is lazy).
func (b *Backend) Take(x, indices backend.Array, axis int) backend.Array {
	if indices != nil && (indices.DType().IsFloat() || indices.DType() == tensor.Bool) {
		panic(backend.Errorf("Take", []backend.Array{x, indices}, "indices must have an integer dtype"))
	}
	return b.op("Take", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_take_axis(res, h[0], h[1], C.int(axis), b.s)
	}, x, indices)
}

// Sum reduces along axis (mx.sum).
func (b *Backend) Sum(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.op("Sum", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_sum_axis(res, h[0], C.int(axis), C.bool(keepDims), b.s)
	}, x)
}

// Max reduces along axis (mx.max).
func (b *Backend) Max(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.op("Max", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_max_axis(res, h[0], C.int(axis), C.bool(keepDims), b.s)
	}, x)
}

// Argmax returns the uint32 index of the largest element along axis (mx.argmax).
func (b *Backend) Argmax(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.op("Argmax", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_argmax_axis(res, h[0], C.int(axis), C.bool(keepDims), b.s)
	}, x)
}

// LogSumExp reduces along axis (mx.logsumexp).
func (b *Backend) LogSumExp(x backend.Array, axis int, keepDims bool) backend.Array {
	return b.op("LogSumExp", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_logsumexp_axis(res, h[0], C.int(axis), C.bool(keepDims), b.s)
	}, x)
}

// Softmax along axis (mx.softmax).
func (b *Backend) Softmax(x backend.Array, axis int, precise bool) backend.Array {
	return b.op("Softmax", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_softmax_axis(res, h[0], C.int(axis), C.bool(precise), b.s)
	}, x)
}

// Matmul is mx.matmul.
func (b *Backend) Matmul(x, y backend.Array) backend.Array {
	return b.op("Matmul", func(res *C.mlx_array, h []C.mlx_array) C.int {
		return C.mlx_matmul(res, h[0], h[1], b.s)
	}, x, y)
}
