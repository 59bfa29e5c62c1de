package nn

import "github.com/mlxgo/mlxgo/backend"

// KVCache is the contract between an attention layer and the keys and values
// it has seen: mlx_lm's cache objects (offset, update_and_fetch, make_mask,
// state, trim), one per layer, owned by the caller and never by the model.
//
// Keys and values are [B, Hk, L, D] in the activation dtype. A cache is not
// safe for concurrent use. A forward pass that fails part way leaves its
// caches invalid: Release them and start again.
//
// Memory: the arrays a cache holds are made by Update, inside whatever
// backend scope is open at the time. The caller must keep State() out of
// that scope before closing it (models/minicpm5's Forward does), and Update
// itself releases the buffers it replaces, so a cache holds exactly State().
type KVCache interface {
	// Offset is the number of tokens stored: the position of the next token.
	Offset() int
	// Update appends k and v ([B, Hk, L, D]) at Offset and returns every
	// stored key and value, [B, Hk, Offset, D] (Offset after the append),
	// as new arrays that belong to the caller (its scope frees them).
	Update(k, v backend.Array) (keys, values backend.Array)
	// Mask is the mask for L new queries against this cache, what mlx_lm's
	// make_mask gives: NoMask for L == 1, otherwise CausalMask.
	Mask(L int) backend.Mask
	// State returns every array the cache holds (nil when empty): what
	// mlx_lm evaluates after a prefill chunk, and what a scope must keep.
	State() []backend.Array
	// Trim forgets the last n tokens (fewer if fewer are stored) and returns
	// how many it forgot. Stored data is not cleared, only the offset moves.
	Trim(n int) int
	// Release frees the cache's buffers and empties it.
	Release()
}
