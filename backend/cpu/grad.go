package cpu

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// Reverse-mode differentiation (backend.Differentiator). While VJP or
// ValueAndGrad runs its function, b.tape records every op that reads a
// tracked array (a float input being differentiated, or the output of an
// op already recorded): the op, which values it read and made, and its
// vector-Jacobian product, a function of the output's cotangent written
// with the backend's own ops (vjp.go: the readable definition of each
// gradient). Ops that read only constants are not recorded. The tape holds
// its own views of the values a VJP reads (at the outermost level, so the
// function may release its intermediates or close its scopes), and
// releases them when the transform returns. The backward walks the tape
// in reverse, summing the cotangents of each value. It runs untraced:
// gradients of gradients are not computed (a VJP called inside a traced
// function gives results that the outer transform sees as constants).

var _ backend.Differentiator = (*Backend)(nil)

// tape is the record of one transform.
type tape struct {
	ids   map[*Array]int // the value id of each tracked array
	n     int            // value ids handed out
	nodes []node
	held  []*Array // the views the tape holds
}

// node is one recorded op (or checkpointed function): the value ids of its
// inputs (-1 for a constant) and outputs, their shapes and dtypes, and its
// VJP, which maps the outputs' cotangents (nil for an output that received
// none) to one cotangent per input (nil where the op has no gradient).
type node struct {
	op      string
	in, out []int
	inAt    []*Array // the inputs' held views, for shapes and dtypes
	outAt   []*Array
	vjp     func(gs []backend.Array) []backend.Array
}

// vjpFn is the VJP of a one-output op: x holds views of the op's array
// arguments (nil where an optional one is absent), y a view of its output,
// g the output's cotangent. It returns one cotangent per argument, nil
// where there is none. Each cotangent has its argument's shape (the VJP sums
// broadcast axes away itself); the tape converts it to the argument's dtype.
type vjpFn func(b *Backend, x []*Array, y *Array, g backend.Array) []backend.Array

func (t *tape) newID(a *Array) int {
	t.n++
	t.ids[a] = t.n
	return t.n
}

// hold makes a view of a that the tape owns, outside every scope.
func (b *Backend) hold(a *Array) *Array {
	h := b.makeArray(a.dtype, a.shape, a.buf, a.off, a.strides, true)
	b.tape.held = append(b.tape.held, h)
	return h
}

// view makes a new array (in the innermost scope) sharing a's storage.
func (b *Backend) view(a *Array) *Array {
	return b.newArray(a.dtype, a.shape, a.buf, a.off, a.strides)
}

// record adds op to the tape when one of its arguments is tracked and its
// output is a float array; ops call it (deferred) only while a tape is on.
// A nil out means the op panicked: nothing is recorded.
func (b *Backend) record(op string, out backend.Array, f vjpFn, args ...backend.Array) {
	t := b.tape
	o, _ := out.(*Array)
	if t == nil || o == nil || !o.dtype.IsFloat() {
		return
	}
	if _, ok := t.ids[o]; ok {
		return // the op gave back a tracked array itself: nothing to record
	}
	in := make([]int, len(args))
	tracked := false
	for i, x := range args {
		in[i] = -1
		if a, ok := x.(*Array); ok && a != nil {
			if id, ok := t.ids[a]; ok {
				in[i], tracked = id, true
			}
		}
	}
	if !tracked {
		return
	}
	xs := make([]*Array, len(args))
	for i, x := range args {
		if a, ok := x.(*Array); ok && a != nil {
			xs[i] = b.hold(a)
		}
	}
	y := b.hold(o)
	t.nodes = append(t.nodes, node{
		op: op, in: in, out: []int{t.newID(o)}, inAt: xs, outAt: []*Array{y},
		vjp: func(gs []backend.Array) []backend.Array { return f(b, xs, y, gs[0]) },
	})
}

// tracked reports whether x is tracked by the tape in progress.
func (b *Backend) tracked(x backend.Array) bool {
	a, ok := x.(*Array)
	if b.tape == nil || !ok || a == nil {
		return false
	}
	_, ok = b.tape.ids[a]
	return ok
}

// VJP implements backend.Differentiator.
func (b *Backend) VJP(fn backend.Func, primals, cotangents []backend.Array) (outputs, vjps []backend.Array, err error) {
	defer backend.Recover(&err)
	want := make([]bool, len(primals))
	for i := range want {
		want[i] = true
	}
	return b.vjp(fn, primals, cotangents, want)
}

// ValueAndGrad implements backend.Differentiator.
func (b *Backend) ValueAndGrad(fn backend.Func, inputs []backend.Array, argnums []int) (outputs, grads []backend.Array, err error) {
	defer backend.Recover(&err)
	want := make([]bool, len(inputs))
	for _, n := range argnums {
		if n < 0 || n >= len(inputs) {
			return nil, nil, fmt.Errorf("ValueAndGrad: argnum %d out of range for %d inputs", n, len(inputs))
		}
		want[n] = true
	}
	var seeded []backend.Array
	outputs, vjps, err := b.run(fn, inputs, want, func(outs []backend.Array) ([]backend.Array, error) {
		if len(outs) == 0 || outs[0] == nil || len(outs[0].Shape()) != 0 || !outs[0].DType().IsFloat() {
			return nil, fmt.Errorf("ValueAndGrad: the function's first output must be a float scalar, got %v", describe(outs))
		}
		seeded = []backend.Array{b.Full(tensor.Shape{}, 1, outs[0].DType())}
		return seeded, nil
	})
	b.Release(seeded...)
	if err != nil {
		return outputs, nil, err
	}
	for _, n := range argnums {
		grads = append(grads, b.view(vjps[n].(*Array)))
	}
	for _, v := range vjps {
		if v != nil {
			b.Release(v)
		}
	}
	return outputs, grads, nil
}

func describe(xs []backend.Array) string {
	s := "["
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		if x == nil {
			s += "nil"
		} else {
			s += fmt.Sprintf("%v %v", x.DType(), x.Shape())
		}
	}
	return s + "]"
}

// vjp is VJP computing the cotangents of the primals where want is set
// (nil elsewhere).
func (b *Backend) vjp(fn backend.Func, primals, cotangents []backend.Array, want []bool) (outputs, vjps []backend.Array, err error) {
	return b.run(fn, primals, want, func(outs []backend.Array) ([]backend.Array, error) {
		if len(cotangents) != len(outs) {
			return nil, fmt.Errorf("VJP: %d cotangents for %d outputs", len(cotangents), len(outs))
		}
		for i, c := range cotangents {
			if c == nil {
				continue
			}
			b.use1("VJP", c)
			if outs[i] == nil || !c.Shape().Equal(outs[i].Shape()) {
				return nil, fmt.Errorf("VJP: cotangent %d has shape %v, output %d has %v", i, c.Shape(), i, describe(outs[i:i+1]))
			}
		}
		return cotangents, nil
	})
}

// run traces fn on fresh views of primals (tracking the float ones where
// want is set), asks seed for the outputs' cotangents, and propagates them
// back: vjps[i] is primal i's cotangent (zeros when nothing reached it),
// nil where want is not set.
func (b *Backend) run(fn backend.Func, primals []backend.Array, want []bool, seed func(outs []backend.Array) ([]backend.Array, error)) (outs, vjps []backend.Array, err error) {
	ps := b.use("VJP", primals...)
	t := &tape{ids: map[*Array]int{}}
	saved := b.tape
	b.tape = t
	defer func() {
		b.tape = saved
		for _, h := range t.held {
			b.life.ReleaseOne(h)
		}
	}()
	inputs := make([]backend.Array, len(ps))
	leaf := make([]int, len(ps))
	for i, p := range ps {
		v := b.view(p)
		inputs[i], leaf[i] = v, -1
		if want[i] && p.dtype.IsFloat() {
			leaf[i] = t.newID(v)
		}
	}
	outs, err = fn(inputs)
	b.tape = nil
	for _, x := range inputs {
		if !containsArray(outs, x) {
			b.Release(x)
		}
	}
	if err != nil {
		return outs, nil, err
	}
	for i, o := range outs {
		if o != nil {
			b.use("VJP", outs[i])
		}
	}
	cots, err := seed(outs)
	if err != nil {
		return outs, nil, err
	}
	sc := b.Scope()
	defer sc.Close()
	grads := map[int]*Array{}
	for i, c := range cots {
		if c == nil {
			continue
		}
		if id, ok := t.ids[outs[i].(*Array)]; ok {
			b.accumulate(grads, id, b.fit(c, outs[i].(*Array), "VJP", i))
		}
	}
	for k := len(t.nodes) - 1; k >= 0; k-- {
		b.backward(&t.nodes[k], grads)
	}
	vjps = make([]backend.Array, len(ps))
	for i, p := range ps {
		switch {
		case !want[i]:
		case grads[leaf[i]] != nil:
			vjps[i] = grads[leaf[i]]
			delete(grads, leaf[i])
		default:
			vjps[i] = b.Zeros(p.shape, p.dtype)
		}
	}
	for _, v := range vjps {
		if v != nil {
			sc.Keep(v)
		}
	}
	return outs, vjps, nil
}

// backward applies n's VJP to the cotangents of its outputs (taking them
// out of grads) and adds the results to the cotangents of its inputs.
func (b *Backend) backward(n *node, grads map[int]*Array) {
	gs := make([]backend.Array, len(n.out))
	var got []backend.Array
	for j, id := range n.out {
		if g := grads[id]; g != nil {
			gs[j] = g
			got = append(got, g)
			delete(grads, id)
		}
	}
	if len(got) == 0 {
		return
	}
	sc := b.Scope()
	res := n.vjp(gs)
	fitted := make([]*Array, len(n.in))
	for i, id := range n.in {
		if id < 0 {
			continue
		}
		if i >= len(res) || res[i] == nil {
			panic(backend.Errorf(n.op, []backend.Array{n.inAt[i]}, "no gradient with respect to argument %d (it is not differentiable)", i))
		}
		fitted[i] = b.fit(res[i], n.inAt[i], n.op, i)
		sc.Keep(fitted[i])
	}
	sc.Close()
	b.Release(got...)
	for i, id := range n.in {
		if fitted[i] != nil {
			b.accumulate(grads, id, fitted[i])
		}
	}
}

// fit returns g as a new array with like's dtype, checking its shape.
func (b *Backend) fit(g backend.Array, like *Array, op string, i int) *Array {
	ga := b.use1(op, g)
	if !ga.shape.Equal(like.shape) {
		panic(backend.Errorf(op, []backend.Array{g, like}, "internal: cotangent of argument %d has shape %v, want %v", i, ga.shape, like.shape))
	}
	if ga.dtype != like.dtype {
		return b.AsType(ga, like.dtype).(*Array)
	}
	return b.view(ga)
}

// accumulate adds g to the cotangent of value id (g is taken over).
func (b *Backend) accumulate(grads map[int]*Array, id int, g *Array) {
	if old := grads[id]; old != nil {
		sum := b.Binary(backend.Add, old, g).(*Array)
		b.Release(old, g)
		g = sum
	}
	grads[id] = g
}

func containsArray(xs []backend.Array, x backend.Array) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Checkpoint implements backend.Differentiator. Under a transform, the
// returned function runs fn untraced and records it as one node whose VJP
// runs fn again on the inputs (a transform of its own) and propagates the
// cotangents through that recomputation; only fn's inputs and outputs are
// held. Outside a transform it is fn.
func (b *Backend) Checkpoint(fn backend.Func) backend.Func {
	return func(inputs []backend.Array) ([]backend.Array, error) {
		t := b.tape
		want := make([]bool, len(inputs))
		anyTracked := false
		for i, x := range inputs {
			want[i] = b.tracked(x)
			anyTracked = anyTracked || want[i]
		}
		if !anyTracked {
			return fn(inputs)
		}
		b.tape = nil
		outs, err := fn(inputs)
		b.tape = t
		if err != nil {
			return outs, err
		}
		in := make([]int, len(inputs))
		xs := make([]*Array, len(inputs))
		for i, x := range inputs {
			in[i] = -1
			if want[i] {
				in[i] = t.ids[x.(*Array)]
			}
			xs[i] = b.hold(b.use1("Checkpoint", x))
		}
		var out []int
		var ys []*Array
		for _, o := range outs {
			oa := b.use1("Checkpoint", o)
			if !oa.dtype.IsFloat() {
				continue
			}
			out = append(out, t.newID(oa))
			ys = append(ys, b.hold(oa))
		}
		floats := func(gs []backend.Array) []backend.Array {
			full := make([]backend.Array, len(outs))
			j := 0
			for i, o := range outs {
				if o.DType().IsFloat() {
					full[i] = gs[j]
					j++
				}
			}
			return full
		}
		t.nodes = append(t.nodes, node{
			op: "Checkpoint", in: in, out: out, inAt: xs, outAt: ys,
			vjp: func(gs []backend.Array) []backend.Array {
				args := make([]backend.Array, len(xs))
				for i, x := range xs {
					args[i] = x
				}
				again, vjps, err := b.vjp(fn, args, floats(gs), want)
				if err != nil {
					panic(&backend.OpError{Op: "Checkpoint", Err: fmt.Errorf("recomputing the function: %w", err)})
				}
				b.Release(again...)
				return vjps
			},
		})
		return outs, nil
	}
}

// StopGradient implements backend.Differentiator: a view of x that no
// tape tracks.
func (b *Backend) StopGradient(x backend.Array) backend.Array {
	return b.view(b.use1("StopGradient", x))
}
