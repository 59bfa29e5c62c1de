package nn

import "github.com/mlxgo/mlxgo/backend"

// Embedder maps token ids to vectors and, for tied output heads, vectors back
// to one score per token.
type Embedder interface {
	// Forward returns the rows of the table at ids (any shape): [..., dim].
	Forward(ids backend.Array) backend.Array
	// AsLinear returns x @ tableᵀ: [..., vocab].
	AsLinear(x backend.Array) backend.Array
}

// Embedding is an unquantized table, mlx.nn.Embedding.
type Embedding struct {
	B      backend.Backend
	Weight backend.Array // [vocab, dim]
}

// Forward returns Weight[ids].
func (e *Embedding) Forward(ids backend.Array) backend.Array {
	return e.B.Take(e.Weight, ids, 0)
}

// AsLinear returns x @ Weightᵀ.
func (e *Embedding) AsLinear(x backend.Array) backend.Array {
	return e.B.Matmul(x, e.B.Transpose(e.Weight, 1, 0))
}

// QuantizedEmbedding is an affine-quantized table, mlx.nn.QuantizedEmbedding:
// a lookup gathers the packed rows, their scales and their biases, and
// dequantizes only those rows.
type QuantizedEmbedding struct {
	B      backend.Backend
	Weight backend.QuantizedArray // [vocab, dim] quantized along dim
}

// Forward returns dequantize(W[ids], scales[ids], biases[ids]).
func (e *QuantizedEmbedding) Forward(ids backend.Array) backend.Array {
	q := backend.QuantizedArray{
		W:         e.B.Take(e.Weight.W, ids, 0),
		Scales:    e.B.Take(e.Weight.Scales, ids, 0),
		Biases:    e.B.Take(e.Weight.Biases, ids, 0),
		GroupSize: e.Weight.GroupSize,
		Bits:      e.Weight.Bits,
	}
	return e.B.Dequantize(q)
}

// AsLinear returns quantized_matmul(x, W, transpose=True).
func (e *QuantizedEmbedding) AsLinear(x backend.Array) backend.Array {
	return e.B.QuantizedMatmul(x, e.Weight, true)
}
