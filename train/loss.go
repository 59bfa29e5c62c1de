package train

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// Loss is mlx_lm's default_loss on a batch: the model over
// tokens[:, :-1], the next-token cross-entropy against tokens[:, 1:]
// (logsumexp of the logits less the target's logit, both after the
// row's maximum is subtracted as a constant), summed in float32 over
// the positions s = 1..L-1 with offset ≤ s ≤ length, divided by their
// count. It returns the loss and the count (a scalar each); b must
// implement backend.Differentiator. Call it inside a
// Differentiator.ValueAndGrad function to train.
func Loss(b backend.Backend, m *minicpm5.Model, batch Batch) (loss, ntoks backend.Array, err error) {
	return lossWith(b, m, batch, minicpm5.ForwardOptions{})
}

// lossWith is Loss with the model's forward options (a checkpointing
// Block hook).
func lossWith(b backend.Backend, m *minicpm5.Model, batch Batch, fo minicpm5.ForwardOptions) (loss, ntoks backend.Array, err error) {
	d, ok := b.(backend.Differentiator)
	if !ok {
		return nil, nil, fmt.Errorf("train: backend %s has no gradients", b.Name())
	}
	ld, err := newLossData(m, batch)
	if err != nil {
		return nil, nil, err
	}
	ids, maskA := ld.arrays(b)
	return lossOn(b, d, m, ids, ld.targets(b, m.VocabSize()), maskA, fo)
}

// lossOn is lossWith on a batch's arrays: the input ids and the loss
// mask (lossData.arrays) and the targets as cePicked takes them
// (lossData.targets). It reads nothing else of the batch, so a compiled
// step may trace it with these as inputs.
func lossOn(b backend.Backend, d backend.Differentiator, m *minicpm5.Model, ids, pick, mask backend.Array, fo minicpm5.ForwardOptions) (loss, ntoks backend.Array, err error) {
	o, err := m.Forward(ids, nil, fo)
	if err != nil {
		return nil, nil, err
	}
	if sh := o.Logits.Shape(); sh[len(sh)-1] != m.VocabSize() {
		return nil, nil, fmt.Errorf("train: logits of %v for a vocabulary of %d", sh, m.VocabSize())
	}
	ce := cePicked(b, d, o.Logits, pick, mask)
	return meanCE(b, b.Reshape(ce, -1), mask)
}

// lossData is a batch as default_loss reads it, on the host: the
// inputs tokens[:, :-1] and targets tokens[:, 1:] ([B, T] row-major) and
// the mask of the positions counted.
type lossData struct {
	B, T   int
	in, tg []int32
	mask   []byte
}

func newLossData(m *minicpm5.Model, batch Batch) (lossData, error) {
	B, T := batch.B, batch.L-1
	if T < 1 || len(batch.Tokens) != B*batch.L || len(batch.Lengths) != B {
		return lossData{}, fmt.Errorf("train: batch of %d tokens, %d rows of %d and %d lengths: want rows of at least 2 tokens", len(batch.Tokens), B, batch.L, len(batch.Lengths))
	}
	for i, v := range batch.Tokens {
		if v < 0 || int(v) >= m.VocabSize() {
			return lossData{}, fmt.Errorf("train: batch row %d holds token %d, outside the model's vocabulary of %d", i/batch.L, v, m.VocabSize())
		}
	}
	ld := lossData{B: B, T: T, in: make([]int32, 0, B*T), tg: make([]int32, 0, B*T), mask: make([]byte, 0, B*T)}
	for r := 0; r < B; r++ {
		row := batch.Tokens[r*batch.L : (r+1)*batch.L]
		ld.in = append(ld.in, row[:T]...)
		ld.tg = append(ld.tg, row[1:]...)
		for s := int32(1); s <= int32(T); s++ {
			var v byte
			if s >= batch.Lengths[r][0] && s <= batch.Lengths[r][1] {
				v = 1
			}
			ld.mask = append(ld.mask, v)
		}
	}
	return ld, nil
}

// arrays returns the input ids and the loss mask, [B, T] each.
func (ld lossData) arrays(b backend.Backend) (ids, mask backend.Array) {
	ids = b.FromHost(tensor.FromInt32(tensor.Shape{ld.B, ld.T}, ld.in))
	mask = b.FromHost(&tensor.Dense{DType: tensor.Bool, Shape: tensor.Shape{ld.B, ld.T}, Data: ld.mask})
	return ids, mask
}

// ceRows is default_loss's masked cross-entropy of each row of logits
// [..., V] against its target tg (one per row, row-major): logsumexp of
// the logits less the target's logit, both after the row's maximum is
// subtracted as a constant, times the mask (of the rows' shape), in
// float32, of the rows' shape.
func ceRows(b backend.Backend, d backend.Differentiator, logits backend.Array, tg []int32, mask backend.Array) backend.Array {
	sh := logits.Shape()
	if fusedCE(b) != nil {
		return cePicked(b, d, logits, b.FromHost(tensor.FromInt32(sh[:len(sh)-1], tg)), mask)
	}
	return cePicked(b, d, logits, b.FromHost(tensor.FromInt32(sh[:len(sh)-1], picks(tg, sh[len(sh)-1]))), mask)
}

// fusedCE returns b as a CrossEntropyFuser when its device has the fused
// cross-entropy, which mlx.nn.losses.cross_entropy takes there
// (mx.fast.cross_entropy on a GPU), else nil.
func fusedCE(b backend.Backend) backend.CrossEntropyFuser {
	if f, ok := b.(backend.CrossEntropyFuser); ok && f.FusesCrossEntropy() {
		return f
	}
	return nil
}

// picks returns the flat index of each target's logit among rows of V
// logits: tg[i] + i·V.
func picks(tg []int32, V int) []int32 {
	flat := make([]int32, len(tg))
	for i, v := range tg {
		flat[i] = v + int32(i*V)
	}
	return flat
}

// targets returns the targets as cePicked takes them on b, [B, T]: the
// targets themselves where b fuses the cross-entropy, else their flat
// indices in logits [B, T, V].
func (ld lossData) targets(b backend.Backend, V int) backend.Array {
	if fusedCE(b) != nil {
		return b.FromHost(tensor.FromInt32(tensor.Shape{ld.B, ld.T}, ld.tg))
	}
	return b.FromHost(tensor.FromInt32(tensor.Shape{ld.B, ld.T}, picks(ld.tg, V)))
}

// cePicked is ceRows with the targets as an array of the rows' shape:
// where b fuses the cross-entropy (fusedCE), the targets, and the
// cross-entropy is mx.fast.cross_entropy's cast to the logits' dtype
// (mlx.nn.losses.cross_entropy on a GPU); else the targets' flat indices
// in the logits, and the cross-entropy is computed op by op.
func cePicked(b backend.Backend, d backend.Differentiator, logits, pick, mask backend.Array) backend.Array {
	if f := fusedCE(b); f != nil {
		ce := b.AsType(f.FusedCrossEntropy(logits, pick), logits.DType())
		return b.AsType(b.Binary(backend.Multiply, ce, mask), tensor.F32)
	}
	l := b.Binary(backend.Subtract, logits, d.StopGradient(b.Max(logits, -1, true)))
	score := b.Take(b.Reshape(l, -1), pick, 0)
	ce := b.Binary(backend.Multiply, b.Binary(backend.Subtract, b.LogSumExp(l, -1, false), score), mask)
	return b.AsType(ce, tensor.F32)
}

// meanCE is default_loss's reduction of the rows' cross-entropies ce
// (float32, flat): their sum over the number of positions mask counts,
// and that number.
func meanCE(b backend.Backend, ce, mask backend.Array) (loss, ntoks backend.Array, err error) {
	sum := b.Sum(ce, 0, false)
	ntoks = b.Sum(b.Reshape(mask, -1), 0, false)
	return b.Binary(backend.Divide, sum, ntoks), ntoks, nil
}
