// Package nn holds the layers of a Llama-architecture model, written over the
// [backend.Backend] interface only, each one doing exactly what its mlx or
// mlx_lm counterpart does (same ops, same order, same dtypes), so that the MLX
// backend reproduces mlx_lm bit for bit and the CPU backend stays within
// rounding noise of it:
//
//   - [Dense] and [QuantizedLinear] behind [Linear] (mlx.nn.Linear,
//     mlx.nn.QuantizedLinear);
//   - [Embedding] and [QuantizedEmbedding] behind [Embedder], with AsLinear
//     for tied output heads (mlx.nn.Embedding, mlx.nn.QuantizedEmbedding);
//   - [RMSNorm] (mlx.nn.RMSNorm);
//   - [RoPE] with every scaling of mlx_lm's initialize_rope ([NewRoPE]);
//   - [Attention] (grouped-query attention of mlx_lm's llama.py) and [MLP]
//     (its SwiGLU feed-forward);
//   - the [KVCache] contract and [FullKVCache] (mlx_lm's KVCache);
//   - [LoRALinear] and [DoRALinear] (mlx_lm's tuner.lora.LoRALinear and
//     tuner.dora.DoRALinear over a Dense or a QuantizedLinear base, with
//     Fuse).
//
// Layers own nothing but their parameters and leave every intermediate to
// the caller's backend scope: a model opens a scope around each block and
// keeps only its output (and the caches' State). Only a cache releases
// arrays itself, the buffers it replaces. Ops called against their contract
// panic with a *backend.OpError, which the model's entry points recover.
package nn
