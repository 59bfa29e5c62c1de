package train

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/tensor"
)

// The compiled training step. mlx_lm compiles its step (mx.compile over
// the model's and the optimizer's state, tuner/trainer.py), so on MLX its
// value-and-grad and optimizer update replay one traced graph per batch
// shape, with the elementwise ops fused. The trainer does the same
// through backend.Compiler: one compiled function per kind of step
// (stepKind), a function of the adapters' parameters, the optimizer's
// state and the step's scalars, the accumulated gradients and the batch's
// arrays, returning the loss, its token count and the new parameters and
// state (or the new accumulation). Everything that changes between
// steps is an input: a compiled function replays its trace's constants.
// The batches' shapes repeat (iterate_batches pads rows to one plus a
// multiple of 32, at most max_seq_length), so a run traces a few shapes.
//
// LoRA dropout's masks are drawn on the host from mx.random's sequence
// (mlx_lm passes mx.random.state in instead), so they are inputs too: the
// first step of each batch shape runs op by op and records the shapes of
// the masks it draws; later steps of that shape draw masks of those
// shapes from the same sequence, in the same order, before the call, and
// the trace's dropout takes them from its inputs (dropoutKeys.mask).
//
// What a compiled step cannot take: the segmented backward and the
// chunked loss (which read or cut the batch on the host), and ORPO. Those
// steps run op by op, as does every step with NoCompile.

// stepKind is what a compiled step's graph depends on beyond its inputs'
// shapes (mlx_lm's step retraces on its Python arguments the same way).
type stepKind struct {
	accum      bool // gradients accumulated from earlier steps come in
	update     bool // the step updates the parameters
	accumSteps int  // the divisor of an update's gradients
}

// compiler returns the backend's Compiler when the run's steps may be
// compiled, else nil.
func (t *Trainer) compiler() backend.Compiler {
	c, ok := t.B.(backend.Compiler)
	if !ok || t.NoCompile || (t.Dropout != nil && (t.keys == nil || !t.keys.viaMask)) || t.SegmentLayers > 0 || t.LossChunk > 0 {
		return nil
	}
	return c
}

// releaseCompiled frees the run's compiled steps.
func (t *Trainer) releaseCompiled() {
	for k, c := range t.compiled {
		c.release()
		delete(t.compiled, k)
	}
}

// compiledFn is a compiled step and its release.
type compiledFn struct {
	fn      backend.Func
	release func()
}

// compiledStep is step through a compiled function.
func (t *Trainer) compiledStep(batch Batch, accum *[]backend.Array, update bool, accumSteps int) ([]float64, error) {
	b := t.B
	drops, known := t.dropShapes[[2]int{batch.B, batch.L}]
	if t.Dropout != nil && !known {
		// The batch shape's first step: op by op, recording the masks'
		// shapes.
		var rec []tensor.Shape
		t.keys.shapes = &rec
		vals, err := t.plainStep(batch, accum, update, accumSteps)
		t.keys.shapes = nil
		if err == nil {
			if t.dropShapes == nil {
				t.dropShapes = map[[2]int][]tensor.Shape{}
			}
			t.dropShapes[[2]int{batch.B, batch.L}] = rec
		}
		return vals, err
	}
	ld, err := newLossData(t.Model, batch)
	if err != nil {
		return nil, err
	}
	slots := t.params()
	params := slotValues(slots)
	s := b.Scope()
	defer s.Close()
	in := append([]backend.Array(nil), params...)
	var nsc int
	if update {
		sc, err := t.Opt.begin(params, len(params))
		if err != nil {
			return nil, err
		}
		for _, st := range t.Opt.state {
			in = append(in, st...)
		}
		in = append(in, sc...)
		nsc = len(sc)
	}
	in = append(in, *accum...)
	ids, mask := ld.arrays(b)
	in = append(in, ids, ld.targets(b, t.Model.VocabSize()), mask)
	if t.Dropout != nil {
		for _, sh := range drops {
			in = append(in, lora.KeepMask(b, t.keys.p, t.keys.next(), sh))
		}
	}
	kind := stepKind{accum: *accum != nil, update: update, accumSteps: accumSteps}
	c, ok := t.compiled[kind]
	if !ok {
		fn, release := t.compiler().Compile(t.stepFunc(kind, len(slots), t.stateShape(), nsc))
		c = compiledFn{fn, release}
		if t.compiled == nil {
			t.compiled = map[stepKind]compiledFn{}
		}
		t.compiled[kind] = c
	}
	out, err := c.fn(in)
	if err != nil {
		return nil, err
	}
	outs, rest := out[:2], out[2:]
	var next, acc []backend.Array
	var state [][]backend.Array
	if update {
		next, state = rest[:len(slots)], unflatten(rest[len(slots):], t.stateShape())
	} else {
		acc = rest
	}
	return t.finish(s, slots, params, outs, next, state, acc, accum, update)
}

// stateShape is the number of state arrays of each parameter (nil
// before the optimizer's first update).
func (t *Trainer) stateShape() []int {
	var n []int
	for _, st := range t.Opt.state {
		n = append(n, len(st))
	}
	return n
}

// unflatten cuts xs into consecutive lists of shape[i] arrays.
func unflatten(xs []backend.Array, shape []int) [][]backend.Array {
	out := make([][]backend.Array, len(shape))
	for i, n := range shape {
		out[i], xs = xs[:n], xs[n:]
	}
	return out
}

// stepFunc is the function a compiled step of kind traces: of the n
// parameters, (with an update) the optimizer's state, nsc step scalars,
// (with accumulation) n accumulated gradients, and the input ids, target
// indices and loss mask; returning the loss, the token count and either
// the new parameters and state or the new accumulation. It is the
// uncompiled step's arithmetic: gradOf over lossOn, then descend.
func (t *Trainer) stepFunc(kind stepKind, n int, stateShape []int, nsc int) backend.Func {
	return func(in []backend.Array) ([]backend.Array, error) {
		b := t.B
		params, rest := in[:n], in[n:]
		var state [][]backend.Array
		var sc, accum []backend.Array
		if kind.update {
			ns := 0
			for _, k := range stateShape {
				ns += k
			}
			state, sc, rest = unflatten(rest[:ns], stateShape), rest[ns:ns+nsc], rest[ns+nsc:]
		}
		if kind.accum {
			accum, rest = rest[:n], rest[n:]
		}
		if len(rest) < 3 {
			return nil, fmt.Errorf("train: compiled step: %d batch inputs, want at least 3", len(rest))
		}
		ids, pick, mask := rest[0], rest[1], rest[2]
		if t.Dropout != nil {
			t.keys.masks, t.keys.drawn = append([]backend.Array{}, rest[3:]...), 0
			defer func() { t.keys.masks, t.keys.drawn = nil, 0 }()
		} else if len(rest) != 3 {
			return nil, fmt.Errorf("train: compiled step: %d dropout masks without dropout", len(rest)-3)
		}
		d := b.(backend.Differentiator)
		fo := t.forwardOptions()
		outs, grads, err := t.gradOf(t.params(), params, func() ([]backend.Array, error) {
			l, nt, err := lossOn(b, d, t.Model, ids, pick, mask, fo)
			return []backend.Array{l, nt}, err
		})
		if err != nil {
			return nil, err
		}
		if t.Dropout != nil && int(t.keys.drawn) != len(t.keys.masks) {
			return nil, fmt.Errorf("train: a compiled step drew %d dropout masks, its batch shape's first step %d", t.keys.drawn, len(t.keys.masks))
		}
		next, nextState, nextAccum := t.descend(params, grads, accum, state, sc, kind.update, kind.accumSteps)
		if !kind.update {
			return append(outs, nextAccum...), nil
		}
		outs = append(outs, next...)
		for _, st := range nextState {
			outs = append(outs, st...)
		}
		return outs, nil
	}
}
