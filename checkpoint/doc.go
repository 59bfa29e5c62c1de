// Package checkpoint reads an MLX-format llama checkpoint directory the way
// mlx_lm 0.32.2 (the pinned oracle) loads it: config.json (with
// generation_config.json's eos_token_id override) parsed into Config with
// mlx_lm's llama ModelArgs defaults, the quantization block resolved per
// layer, and every model*.safetensors tensor checked against the config.
//
// What mlx_lm does, and so what this package does:
//
//   - model_type "llama", or "mistral", "iquestcoder", "xverse" (remapped to
//     llama). "minicpm" is MiniCPM's muP variant, different math, and an error.
//   - Defaults: head_dim = hidden_size // num_attention_heads,
//     num_key_value_heads = num_attention_heads, rope_theta = 10000,
//     rope_traditional, attention_bias and mlp_bias false, and
//     tie_word_embeddings TRUE when absent (Hugging Face's default is false).
//     A transformers-v5 rope_parameters block is ignored, with a warning.
//   - Quantization: the "quantization" block gives global group_size, bits and
//     mode; any other key is a module path whose value is a dict of params
//     (mode defaults to affine), true (the global params) or false
//     (unquantized). A layer not listed is quantized iff "<path>.scales"
//     exists, with group_size and bits inferred from the stored shapes
//     (mlx_lm's infer_quant_config). Without that block, a truthy
//     quantization_config (or text_config.quantization_config) is read by
//     quant_method; the methods mlx_lm converts (awq, gptq, mxfp4, ...) are
//     unsupported here. Only mode "affine" is supported.
//   - Weights: sanitize drops self_attn.rotary_emb.inv_freq and, when tied,
//     lm_head.weight; then the load is strict: a missing tensor, an extra
//     tensor, or a wrong shape is an error naming the tensor.
//
// Errors name the file or tensor, the field, what was expected and what was
// found. Tensors are zero-copy views of memory-mapped files, valid until
// Checkpoint.Close.
//
// Dtypes: Checkpoint.DType, the activation dtype, is the dtype of the
// embedding's scales (or of its weight when unquantized). Float tensors of
// another float dtype are accepted with a warning, because MLX promotes mixed
// operands and mlx_lm runs such a model; a layer's scales and biases of
// different dtypes, or a non-float where a float is expected, are errors.
package checkpoint
