// Package minicpm5 is the MiniCPM5 model graph: a plain Llama (mlx_lm's
// models/llama.py) over the [backend.Backend] interface, loaded from an MLX
// checkpoint with mixed 4/8-bit affine quantization.
//
// The graph does what mlx_lm does, op for op and dtype for dtype:
// embed_tokens (a quantized embedding dequantizes only the looked-up rows),
// for each layer h = x + attn(input_layernorm(x)), out = h +
// mlp(post_attention_layernorm(h)), then the final norm and lm_head (or the
// embedding as a linear layer when tie_word_embeddings). The mask is built
// once per forward from the first cache (mlx_lm's create_attention_mask).
//
// Phases: [Model.Forward] is the one forward pass (any batch, any number of
// new tokens, the head over chosen rows only, optional hidden states);
// [Model.Prefill] runs a prompt in chunks and returns every position's
// logits; [Model.PrefillLast] runs it as mlx_lm's generate_step does and
// returns the last position's. Caches come from [Model.NewCache] and belong
// to the caller.
//
// Weights are borrowed from the memory-mapped checkpoint, stay quantized, and
// are never dequantized whole. Each forward runs in a backend scope (and each
// block in a nested one) and keeps only its outputs and the caches' arrays.
// Call the entry points inside Backend.Do on a backend that has a thread of
// its own (MLX), and with no scope of yours open.
package minicpm5
