//go:build mlx

package metal

// #include "mlxgo.h"
import "C"

import (
	"errors"

	"github.com/mlxgo/mlxgo/backend"
)

var _ backend.Compiler = (*Backend)(nil)

var errReleased = errors.New("the compiled function was released")

// compiled is a function compiled with mlx_compile (shapeless false): MLX
// keeps its traces in its compile cache, one per list of input shapes and
// dtypes, until the closure is freed. The cache belongs to the MLX thread
// (MLX's is thread-local), where every call runs.
type compiled struct {
	g  *gradFn
	cl C.mlx_closure
}

// Compile implements backend.Compiler with mlx_compile. A trace calls fn
// back through the same mlx_closure as the gradients do (grad.go), so fn
// may differentiate and checkpoint; its failure is the call's error.
// Functions still compiled when the backend closes are freed with it.
func (b *Backend) Compile(fn backend.Func) (backend.Func, func()) {
	c := &compiled{g: &gradFn{b: b, fn: fn}}
	b.do("Compile", func() {
		cl := b.closure(c.g)
		defer C.mlx_closure_free(cl)
		if C.mlx_compile(&c.cl, cl, false) != 0 {
			panic(b.opError("Compile", nil))
		}
		if b.compiled == nil {
			b.compiled = map[*compiled]struct{}{}
		}
		b.compiled[c] = struct{}{}
	})
	call := func(inputs []backend.Array) (outputs []backend.Array, err error) {
		b.do("Compile", func() { outputs, err = b.applyCompiled(c, inputs) })
		return outputs, err
	}
	release := func() {
		if b.closed {
			return
		}
		b.run(func() { b.freeCompiled(c) })
	}
	return call, release
}

func (b *Backend) applyCompiled(c *compiled, inputs []backend.Array) (outputs []backend.Array, err error) {
	defer backend.Recover(&err)
	if c.cl.ctx == nil {
		return nil, &backend.OpError{Op: "Compile", Err: errReleased}
	}
	c.g.err = nil
	iv := b.vector("Compile", inputs)
	defer C.mlx_vector_array_free(iv)
	var r C.mlx_vector_array
	defer func() { C.mlx_vector_array_free(r) }()
	if C.mlx_closure_apply(&r, c.cl, iv) != 0 {
		return nil, c.g.failure("Compile")
	}
	return b.arrays("Compile", r), nil
}

// freeCompiled frees c's closure (and with it MLX's traces of it); on the
// MLX thread.
func (b *Backend) freeCompiled(c *compiled) {
	if c.cl.ctx != nil {
		C.mlx_closure_free(c.cl)
		c.cl.ctx = nil
	}
	delete(b.compiled, c)
}
