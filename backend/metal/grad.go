//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"fmt"
	"runtime/cgo"
	"slices"
	"sync/atomic"

	"github.com/mlxgo/mlxgo/backend"
)

// Gradients are MLX's own: the function to differentiate becomes an
// mlx_closure whose calls come back into Go (mlxgoClosureCall), and
// mlx_vjp, mlx_value_and_grad and mlx_checkpoint trace it, so the graph
// they differentiate is the one MLX would build from the same Python.
//
// A call of the closure runs on the MLX thread, inside the transform (or,
// for a checkpointed function, again inside the backward of the transform
// around it). It wraps the inputs MLX passes (tracers) as arrays of a scope
// of its own, runs the function, hands MLX the outputs' handles and closes
// the scope: MLX holds its own references to everything the graph needs,
// so the function's arrays are freed when it returns. They must not be kept
// beyond the call (as in MLX, where they are tracers of one trace). A Go
// panic cannot cross the C frames between: the call recovers it and
// returns non-zero, MLX throws, and the transform returns the function's
// own error rather than MLX's "mlx_closure returned a non-zero value".

var _ backend.Differentiator = (*Backend)(nil)

// gradFn is a Go function behind an mlx_closure.
type gradFn struct {
	b   *Backend
	fn  backend.Func
	err error // the first failure of a call, for the transform to return

	// check, when set, vets the function's outputs before MLX sees them.
	check func(outs []backend.Array) error
	// give, when set, says which outputs go to MLX (a VJP's outputs with a
	// cotangent); the others are moved to the caller's scope and kept in
	// kept.
	give []bool
	kept []backend.Array
}

//export mlxgoClosureCall
func mlxgoClosureCall(h C.uintptr_t, res *C.mlx_vector_array, in C.mlx_vector_array) C.int {
	return cgo.Handle(h).Value().(*gradFn).call(res, in)
}

//export mlxgoClosureDone
func mlxgoClosureDone(h C.uintptr_t) {
	cgo.Handle(h).Delete()
	closuresAlive.Add(-1)
}

// closuresAlive counts the Go functions behind mlx_closures that MLX has
// not dropped yet (across all backends), for the tests.
var closuresAlive atomic.Int64

func (g *gradFn) fail(err error) C.int {
	if g.err == nil {
		g.err = err
	}
	return 1
}

// call runs the function on the arrays of in and writes the handles of
// its outputs into *res.
func (g *gradFn) call(res *C.mlx_vector_array, in C.mlx_vector_array) (rc C.int) {
	b := g.b
	sc := b.life.Open()
	defer sc.Close()
	defer func() {
		if r := recover(); r != nil {
			if oe, ok := r.(*backend.OpError); ok {
				rc = g.fail(oe)
			} else {
				rc = g.fail(fmt.Errorf("panic in the function being differentiated: %v", r))
			}
		}
	}()
	n := int(C.mlx_vector_array_size(in))
	inputs := make([]backend.Array, n)
	for i := range n {
		var h C.mlx_array
		inputs[i] = b.wrap("closure", C.mlx_vector_array_get(&h, in, C.size_t(i)), h)
	}
	outs, err := g.fn(inputs)
	if err != nil {
		return g.fail(err)
	}
	if g.check != nil {
		if err := g.check(outs); err != nil {
			return g.fail(err)
		}
	}
	if g.give != nil && len(g.give) != len(outs) {
		return g.fail(fmt.Errorf("VJP: %d cotangents for %d outputs", len(g.give), len(outs)))
	}
	hs := make([]C.mlx_array, 0, len(outs))
	for i := range outs {
		a := b.arg("closure", outs, i)
		if g.give != nil && !g.give[i] {
			g.kept = append(g.kept, sc.Keep(a))
			continue
		}
		hs = append(hs, a.h)
	}
	var p *C.mlx_array
	if len(hs) > 0 {
		p = &hs[0]
	}
	if C.mlx_vector_array_set_data(res, p, C.size_t(len(hs))) != 0 {
		return g.fail(takeError())
	}
	return 0
}

// closure makes the mlx_closure of g (freed by the caller with
// mlx_closure_free; g lives until MLX drops the closure's last copy).
func (b *Backend) closure(g *gradFn) C.mlx_closure {
	closuresAlive.Add(1)
	c := C.mlxgo_closure(C.uintptr_t(cgo.NewHandle(g)))
	if c.ctx == nil {
		panic(b.opError("closure", nil))
	}
	return c
}

// failure is the error of a transform whose mlx-c call failed: the
// function's own when a call of it failed, else MLX's.
func (g *gradFn) failure(op string) error {
	msg := takeError()
	if g.err != nil {
		return g.err
	}
	return &backend.OpError{Op: op, Err: msg}
}

// vector makes an mlx_vector_array of the arrays' handles (freed by the
// caller).
func (b *Backend) vector(op string, xs []backend.Array) C.mlx_vector_array {
	hs := make([]C.mlx_array, len(xs))
	for i := range xs {
		hs[i] = b.arg(op, xs, i).h
	}
	var p *C.mlx_array
	if len(hs) > 0 {
		p = &hs[0]
	}
	return C.mlx_vector_array_new_data(p, C.size_t(len(hs)))
}

// arrays adopts the arrays of v (new handles) in the current scope.
func (b *Backend) arrays(op string, v C.mlx_vector_array) []backend.Array {
	n := int(C.mlx_vector_array_size(v))
	out := make([]backend.Array, n)
	for i := range n {
		var h C.mlx_array
		out[i] = b.wrap(op, C.mlx_vector_array_get(&h, v, C.size_t(i)), h)
	}
	return out
}

// VJP implements backend.Differentiator with mlx_vjp. Outputs without a
// cotangent are not handed to MLX (mx.vjp wants one per output); they come
// back as computed.
func (b *Backend) VJP(fn backend.Func, primals, cotangents []backend.Array) (outputs, vjps []backend.Array, err error) {
	b.do("VJP", func() { outputs, vjps, err = b.vjp(fn, primals, cotangents) })
	return outputs, vjps, err
}

func (b *Backend) vjp(fn backend.Func, primals, cotangents []backend.Array) (outputs, vjps []backend.Array, err error) {
	defer backend.Recover(&err)
	g := &gradFn{b: b, fn: fn, give: make([]bool, len(cotangents))}
	var cots []backend.Array
	for i, c := range cotangents {
		if c != nil {
			g.give[i] = true
			cots = append(cots, c)
		}
	}
	cl := b.closure(g)
	defer C.mlx_closure_free(cl)
	pv, cv := b.vector("VJP", primals), b.vector("VJP", cots)
	defer C.mlx_vector_array_free(pv)
	defer C.mlx_vector_array_free(cv)
	var r0, r1 C.mlx_vector_array
	defer func() { C.mlx_vector_array_free(r0) }()
	defer func() { C.mlx_vector_array_free(r1) }()
	if C.mlx_vjp(&r0, &r1, cl, pv, cv) != 0 {
		return nil, nil, g.failure("VJP")
	}
	given := b.arrays("VJP", r0)
	for _, give := range g.give {
		if give {
			outputs = append(outputs, given[0])
			given = given[1:]
		} else {
			outputs = append(outputs, g.kept[0])
			g.kept = g.kept[1:]
		}
	}
	return outputs, b.arrays("VJP", r1), nil
}

// ValueAndGrad implements backend.Differentiator with mlx_value_and_grad.
func (b *Backend) ValueAndGrad(fn backend.Func, inputs []backend.Array, argnums []int) (outputs, grads []backend.Array, err error) {
	b.do("ValueAndGrad", func() { outputs, grads, err = b.valueAndGrad(fn, inputs, argnums) })
	return outputs, grads, err
}

func (b *Backend) valueAndGrad(fn backend.Func, inputs []backend.Array, argnums []int) (outputs, grads []backend.Array, err error) {
	defer backend.Recover(&err)
	for _, n := range argnums {
		if n < 0 || n >= len(inputs) {
			return nil, nil, fmt.Errorf("ValueAndGrad: argnum %d out of range for %d inputs", n, len(inputs))
		}
	}
	g := &gradFn{b: b, fn: fn, check: func(outs []backend.Array) error {
		if len(outs) == 0 || outs[0] == nil || len(outs[0].Shape()) != 0 || !outs[0].DType().IsFloat() {
			return fmt.Errorf("ValueAndGrad: the function's first output must be a float scalar, got %d outputs", len(outs))
		}
		return nil
	}}
	cl := b.closure(g)
	defer C.mlx_closure_free(cl)
	iv := b.vector("ValueAndGrad", inputs)
	defer C.mlx_vector_array_free(iv)
	if len(argnums) == 0 {
		var r C.mlx_vector_array
		defer func() { C.mlx_vector_array_free(r) }()
		if C.mlx_closure_apply(&r, cl, iv) != 0 {
			return nil, nil, g.failure("ValueAndGrad")
		}
		return b.arrays("ValueAndGrad", r), nil, nil
	}
	// MLX wants distinct argnums and returns their gradients in ascending
	// order; the contract's are in the caller's order, repeats allowed.
	uniq := slices.Clone(argnums)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	nums := cints(uniq)
	vg := C.mlx_closure_value_and_grad_new()
	defer func() { C.mlx_closure_value_and_grad_free(vg) }()
	if C.mlx_value_and_grad(&vg, cl, ptr(nums), C.size_t(len(nums))) != 0 {
		return nil, nil, g.failure("ValueAndGrad")
	}
	var r0, r1 C.mlx_vector_array
	defer func() { C.mlx_vector_array_free(r0) }()
	defer func() { C.mlx_vector_array_free(r1) }()
	if C.mlx_closure_value_and_grad_apply(&r0, &r1, vg, iv) != 0 {
		return nil, nil, g.failure("ValueAndGrad")
	}
	outputs = b.arrays("ValueAndGrad", r0)
	for _, n := range argnums {
		var h C.mlx_array
		at, _ := slices.BinarySearch(uniq, n)
		grads = append(grads, b.wrap("ValueAndGrad", C.mlx_vector_array_get(&h, r1, C.size_t(at)), h))
	}
	return outputs, grads, nil
}

// Checkpoint implements backend.Differentiator with mlx_checkpoint: the
// returned function applies fn's checkpointed closure, which MLX calls
// again in the backward.
func (b *Backend) Checkpoint(fn backend.Func) backend.Func {
	return func(inputs []backend.Array) (outputs []backend.Array, err error) {
		b.do("Checkpoint", func() { outputs, err = b.checkpoint(fn, inputs) })
		return outputs, err
	}
}

func (b *Backend) checkpoint(fn backend.Func, inputs []backend.Array) (outputs []backend.Array, err error) {
	defer backend.Recover(&err)
	g := &gradFn{b: b, fn: fn}
	cl := b.closure(g)
	defer C.mlx_closure_free(cl)
	var ck C.mlx_closure
	defer func() { C.mlx_closure_free(ck) }()
	if C.mlx_checkpoint(&ck, cl) != 0 {
		return nil, g.failure("Checkpoint")
	}
	iv := b.vector("Checkpoint", inputs)
	defer C.mlx_vector_array_free(iv)
	var r C.mlx_vector_array
	defer func() { C.mlx_vector_array_free(r) }()
	if C.mlx_closure_apply(&r, ck, iv) != 0 {
		return nil, g.failure("Checkpoint")
	}
	return b.arrays("Checkpoint", r), nil
}

// StopGradient implements backend.Differentiator with mlx_stop_gradient.
func (b *Backend) StopGradient(x backend.Array) backend.Array {
	var out backend.Array
	b.do("StopGradient", func() {
		a := b.use("StopGradient", x)[0]
		var h C.mlx_array
		out = b.wrap("StopGradient", C.mlx_stop_gradient(&h, a.h, b.s), h, x)
	})
	return out
}
