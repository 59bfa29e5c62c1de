// Package convert turns a GGUF file of the llama architecture into an MLX
// model directory that mlx_lm (and checkpoint.Open) loads: config.json,
// model.safetensors (sharded with an index when large), tokenizer.json and
// tokenizer_config.json with the chat template.
//
// Weights: each tensor is converted by gguf.File.Convert (Q4_0, Q4_1, Q8_0
// become MLX affine group 32, exactly; F32/F16/BF16 stay; K-quants are
// dequantized to F32 exactly, or, only with Options.Requantize, quantized
// again with MLX's affine algorithm, which loses precision) and renamed to
// Hugging Face's names:
//
//	token_embd             model.embed_tokens
//	blk.N.attn_norm        model.layers.N.input_layernorm
//	blk.N.attn_q/k/v       model.layers.N.self_attn.q_proj/k_proj/v_proj
//	blk.N.attn_output      model.layers.N.self_attn.o_proj
//	blk.N.ffn_norm         model.layers.N.post_attention_layernorm
//	blk.N.ffn_gate/up/down model.layers.N.mlp.gate_proj/up_proj/down_proj
//	output_norm            model.norm
//	output                 lm_head (absent: tie_word_embeddings true)
//
// RoPE layout: llama.cpp's converter permutes the rows of q_proj and k_proj
// within each head (convert_hf_to_gguf.py's permute, the same as mlx_lm's
// gguf.py permute_weights): Hugging Face row h·hd + j·hd/2 + i becomes GGUF
// row h·hd + 2i + j (i < hd/2, j ∈ {0, 1}), so that llama.cpp can rotate
// adjacent pairs. Convert undoes it (for k_proj with the KV head count), so
// the checkpoint runs with mlx_lm's default non-traditional RoPE
// (rope_traditional false), exactly as the original Hugging Face model.
// Rows are whole output features, so the permutation moves packed codes,
// scales and biases together and stays exact for quantized weights.
//
// Tokenizer: tokenizer.ggml.model "gpt2" (byte-level BPE) is supported:
// every token of tokenizer.ggml.tokens goes into the BPE vocabulary with
// its id, tokenizer.ggml.merges become the merges, tokens of type CONTROL
// (3) become special added tokens and USER_DEFINED (4) non-special added
// tokens; tokenizer.ggml.pre selects the pre-tokenizer llama.cpp uses for
// that name (see preTokenizers). Other tokenizer models are an error.
package convert
