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
	B, T := batch.B, batch.L-1
	if T < 1 || len(batch.Tokens) != B*batch.L || len(batch.Lengths) != B {
		return nil, nil, fmt.Errorf("train: batch of %d tokens, %d rows of %d and %d lengths: want rows of at least 2 tokens", len(batch.Tokens), B, batch.L, len(batch.Lengths))
	}
	for i, v := range batch.Tokens {
		if v < 0 || int(v) >= m.VocabSize() {
			return nil, nil, fmt.Errorf("train: batch row %d holds token %d, outside the model's vocabulary of %d", i/batch.L, v, m.VocabSize())
		}
	}
	in, tg, mask := make([]int32, 0, B*T), make([]int32, 0, B*T), make([]byte, 0, B*T)
	for r := 0; r < B; r++ {
		row := batch.Tokens[r*batch.L : (r+1)*batch.L]
		in = append(in, row[:T]...)
		tg = append(tg, row[1:]...)
		for s := int32(1); s <= int32(T); s++ {
			var v byte
			if s >= batch.Lengths[r][0] && s <= batch.Lengths[r][1] {
				v = 1
			}
			mask = append(mask, v)
		}
	}
	ids := b.FromHost(tensor.FromInt32(tensor.Shape{B, T}, in))
	maskA := b.FromHost(&tensor.Dense{DType: tensor.Bool, Shape: tensor.Shape{B, T}, Data: mask})
	o, err := m.Forward(ids, nil, fo)
	if err != nil {
		return nil, nil, err
	}
	logits := o.Logits
	V := logits.Shape()[2]
	flat := make([]int32, len(tg))
	for i, v := range tg {
		flat[i] = v + int32(i*V)
	}
	pick := b.FromHost(tensor.FromInt32(tensor.Shape{B, T}, flat))
	l := b.Binary(backend.Subtract, logits, d.StopGradient(b.Max(logits, -1, true)))
	score := b.Take(b.Reshape(l, -1), pick, 0)
	ce := b.Binary(backend.Multiply, b.Binary(backend.Subtract, b.LogSumExp(l, -1, false), score), maskA)
	sum := b.Sum(b.Reshape(b.AsType(ce, tensor.F32), -1), 0, false)
	ntoks = b.Sum(b.Reshape(maskA, -1), 0, false)
	return b.Binary(backend.Divide, sum, ntoks), ntoks, nil
}
