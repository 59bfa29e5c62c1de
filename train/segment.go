package train

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

// The segmented backward (the seed's SegmentedTraining). The forward runs
// the layers in ranges of Trainer.SegmentLayers, untraced, and keeps only
// the residual stream at the ranges' boundaries; the head's VJP gives the
// loss's gradient with respect to the last stream; then each range, from
// the last, is run again under a VJP of its input stream and its
// adapters, whose cotangent is the gradient at its output, and gives the
// gradient at its input for the range before. Each range's results are
// evaluated before the next, so only one range's intermediates exist at
// a time (on MLX too, whose graph is otherwise evaluated as a whole).
// The gradients are the unsegmented backward's bit for bit: each range
// runs the same ops on the same values, and a stream's cotangent reaches
// its boundary as the sum the unsegmented backward makes there.
//
// Ranges start at the lowest adapted layer: the layers below it need no
// gradient (the unsegmented backward does not trace them either) and run
// once. Dropout is refused: a recomputed range would draw new masks.

// segmentedGrad is ValueAndGrad of the loss with respect to the arrays in
// slots (the adapters' parameters, in order), segmented: it returns the
// loss and its token count, and one gradient per slot.
func (t *Trainer) segmentedGrad(batch Batch, slots []*backend.Array) (outs, grads []backend.Array, err error) {
	defer backend.Recover(&err)
	b, m := t.B, t.Model
	d := b.(backend.Differentiator)
	if t.Dropout != nil {
		return nil, nil, fmt.Errorf("train: dropout with a segmented backward is not implemented (a recomputed segment would draw new dropout masks)")
	}
	if t.GradCheckpoint {
		return nil, nil, fmt.Errorf("train: --grad-checkpoint and a segmented backward exclude each other (segments already recompute their layers)")
	}
	layer, first, err := t.slotLayers(slots)
	if err != nil {
		return nil, nil, err
	}
	ld, err := newLossData(m, batch)
	if err != nil {
		return nil, nil, err
	}
	ids, mask := ld.arrays(b)
	emb := m.Embed(ids)
	h := m.RunLayers(emb, 0, first, nil)
	if h != emb {
		b.Release(emb)
	}
	bounds := []int{first}
	for lo := first; lo < len(m.Layers); lo += t.SegmentLayers {
		bounds = append(bounds, min(lo+t.SegmentLayers, len(m.Layers)))
	}
	hs := []backend.Array{h}
	if err := b.Eval(h); err != nil {
		return nil, nil, err
	}
	for k := 0; k+1 < len(bounds); k++ {
		next := m.RunLayers(hs[k], bounds[k], bounds[k+1], nil)
		if err := b.Eval(next); err != nil {
			return nil, nil, err
		}
		hs = append(hs, next)
	}
	loss, ntoks, dh, err := headGrad(b, d, m, hs[len(hs)-1], ld, mask, t.LossChunk)
	if err != nil {
		return nil, nil, err
	}
	if err := b.Eval(loss, ntoks, dh); err != nil {
		return nil, nil, err
	}
	grads = make([]backend.Array, len(slots))
	for k := len(bounds) - 2; k >= 0; k-- {
		lo, hi := bounds[k], bounds[k+1]
		var idx []int
		for i := range slots {
			if layer[i] >= lo && layer[i] < hi {
				idx = append(idx, i)
			}
		}
		// The first range's input needs no gradient: it is a constant of
		// the function rather than a primal.
		withH := k > 0
		var primals []backend.Array
		if withH {
			primals = append(primals, hs[k])
		}
		for _, i := range idx {
			primals = append(primals, *slots[i])
		}
		saved := make([]backend.Array, len(idx))
		for j, i := range idx {
			saved[j] = *slots[i]
		}
		x := hs[k]
		fn := func(in []backend.Array) ([]backend.Array, error) {
			ps := in
			if withH {
				x, ps = in[0], in[1:]
			}
			for j, i := range idx {
				*slots[i] = ps[j]
			}
			return []backend.Array{m.RunLayers(x, lo, hi, nil)}, nil
		}
		again, vjps, err := d.VJP(fn, primals, []backend.Array{dh})
		for j, i := range idx {
			*slots[i] = saved[j]
		}
		if err != nil {
			return nil, nil, fmt.Errorf("train: layers %d..%d: %w", lo, hi-1, err)
		}
		b.Release(again...)
		if err := b.Eval(vjps...); err != nil {
			return nil, nil, err
		}
		b.Release(dh, hs[k+1])
		if withH {
			dh, vjps = vjps[0], vjps[1:]
		} else {
			dh = nil
		}
		for j, i := range idx {
			grads[i] = vjps[j]
		}
	}
	b.Release(hs[0])
	return []backend.Array{loss, ntoks}, grads, nil
}

// slotLayers returns the layer of each slot's adapter (from its path,
// model.layers.{i}.…) and the lowest.
func (t *Trainer) slotLayers(slots []*backend.Array) (layer []int, first int, err error) {
	of := map[*backend.Array]int{}
	for _, a := range t.Adapters {
		rest, ok := strings.CutPrefix(a.Path, "model.layers.")
		n, _, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(n)
		if !ok || err != nil || i < 0 || i >= len(t.Model.Layers) {
			return nil, 0, fmt.Errorf("train: adapter %s is not in a layer of the model: a segmented backward adapts layers only", a.Path)
		}
		for _, p := range a.Params() {
			of[p.Array] = i
		}
	}
	if len(slots) == 0 {
		return nil, 0, fmt.Errorf("train: no adapters to train")
	}
	first = len(t.Model.Layers)
	layer = make([]int, len(slots))
	for k, s := range slots {
		i, ok := of[s]
		if !ok {
			return nil, 0, fmt.Errorf("train: internal: parameter %d belongs to no adapter", k)
		}
		layer[k], first = i, min(first, i)
	}
	return layer, first, nil
}

// chunkedLoss is Loss through the chunked head (headLoss), the layers run
// through block when it is not nil (a checkpointing hook).
func chunkedLoss(b backend.Backend, m *minicpm5.Model, batch Batch, block func(int, *minicpm5.Block, backend.Array, backend.Mask) backend.Array, chunk int) (loss, ntoks backend.Array, err error) {
	defer backend.Recover(&err)
	d, ok := b.(backend.Differentiator)
	if !ok {
		return nil, nil, fmt.Errorf("train: backend %s has no gradients", b.Name())
	}
	ld, err := newLossData(m, batch)
	if err != nil {
		return nil, nil, err
	}
	ids, mask := ld.arrays(b)
	emb := m.Embed(ids)
	h := m.RunLayers(emb, 0, len(m.Layers), block)
	if h != emb {
		b.Release(emb)
	}
	return headLoss(b, d, m, h, ld, mask, chunk)
}
