// Package generate is mlxgo's token generation: the loop of mlx_lm's
// generate_step and stream_generate, its samplers (sample_utils.make_sampler),
// its logits processors (make_logits_processors) and MLX's threefry random
// numbers, written so that a seeded run reproduces mlx_lm's tokens.
//
// # The loop
//
// [Generate] takes a [Model], a prompt and [Options]:
//
//  1. Prefill: while more than one prompt token remains, the next
//     min(PrefillStepSize, remaining−1) tokens go through Model.Append and
//     the caches' State is evaluated (generate_step's chunking; the default
//     step is 2048). Exactly one prompt token is left.
//  2. Each step: logits of the last position (Model.LastLogits) → the logits
//     processors, if any → logprobs = logits − logsumexp(logits), both in the
//     model's dtype on the backend (LogSumExp, Binary Subtract) → sampler →
//     token.
//  3. Stop at an EOS id (FinishStop; the EOS is counted in
//     Stats.GenerationTokens but not returned in Result.Tokens nor passed to
//     the callback), after MaxTokens tokens (FinishLength), or when the
//     callback returns false (FinishCallback).
//
// Pipelining follows generate_step where the sampler allows it. Greedy
// decoding without processors samples on the backend (Argmax, smallest index
// on ties): step n+1 is built on the lazy token n and started (AsyncEval when
// the backend implements [backend.AsyncEvaler]) before token n is read back
// and handed to the callback. Every other configuration samples on the host,
// so token n must be known before step n+1 is built; step n+1 is then started
// before the callback sees token n. Unlike generate_step, Generate never
// computes the step after the last token it returns, which changes no token.
//
// The loop runs on the backend's thread, in one Backend.Do (the callback
// with it), so a backend with a thread of its own is not handed work from
// another thread at every step. mx.clear_cache's counterpart
// ([backend.CacheClearer]) is called where generate_step calls it: after
// each prefill chunk and after the generated tokens 0, 256, 512, ...
//
// # Sessions
//
// A [Session] is one sequence held by the caller across generations: its
// caches and the tokens they hold. Session.Generate continues it (only the
// new tokens are prefilled), Append adds known tokens without sampling,
// Trim and Reuse (longest common prefix with a new prompt, at least one
// token left to run) cut it back, Fork copies it (copy on write for
// nn.FullKVCache) and Release frees it. [Generate] is a fresh session
// released on return. Chunked prefill is one function, [Prefill], used by
// both and by models/minicpm5's PrefillLast.
//
// # Speculative decoding
//
// Session.GenerateSpeculative follows mlx_lm's speculative_generate_step: a
// [Drafter] proposes up to NumDraftTokens tokens, the model runs its
// pending token and the drafts in one forward ([WindowModel]), picks a token
// at each position and accepts drafts while they equal its picks; its own
// pick after them comes next, and the caches are trimmed back. The drafters
// are a second model ([DraftModel], with a session of its own) and prompt
// lookup ([PromptLookup], n-gram matches in the sequence, as llama.cpp's).
// Greedy decoding gives Generate's tokens; each token says whether it came
// from the draft (Token.FromDraft, mlx_lm's from_draft).
//
// # Processors' context
//
// The processors see a token history: the prompt, then every generated
// token. mlx_lm 0.32.2 (the pinned oracle) adds every prefill chunk to that
// history, as BatchGenerator does; this is [FullPrompt], the default. mlx_lm
// 0.32.0 and earlier (mlx_lm/generate.py, generate_step) left the prefill chunks out, so the
// history started with the last prompt token only and the repetition penalty
// ignored the rest of the prompt: [LastPromptToken] reproduces that.
//
// # Batches
//
// A [BatchGenerator] decodes many sequences at once with mlx_lm's
// BatchGenerator semantics: Insert queues prompts (each with its own max
// tokens, sampler, seed, logits processors and stop tokens), Next runs one
// step (a decode step of the generating rows, then prefill of queued
// prompts, right-padded in chunks, which join the generating rows while
// others decode), Remove drops sequences. The rows share an
// nn.BatchKVCache (left padding, one RoPE offset per row, an explicit
// mask). [BatchGenerate] is mlx_lm's batch_generate over it. On the MLX
// backend its tokens and logprobs are mlx_lm's bit for bit.
//
// # Sampling on the host
//
// The sampler runs on the host over one [V] row of logprobs (one ToHost of V
// values per token: 0.5 MB for a 130k vocabulary). This costs one transfer
// per token but is identical on every backend and lets the filters emulate
// MLX's dtype arithmetic exactly: the logprobs keep their dtype's values, a
// Python scalar meeting an array is rounded to float32 and then to the
// array's dtype (1/temp, ln(min_p), the penalties), and every op result is
// rounded to the dtype. top_p works as the pinned sample_utils does (exp in
// float32, a sequential float32 "mass above" sum), min_p's threshold is
// computed in the dtype, top_k keeps the k largest. Where MLX leaves ties to
// argpartition (top_k, min_p's min_tokens_to_keep) ties go to the smaller
// index. XTC is not implemented (NewSampler fails if it is requested).
//
// Categorical sampling is MLX's single-row inverse-CDF method (mlx ≥ 0.32.1):
// weights exp(x − max) in float32 with MLX's CPU exp (a Cephes polynomial
// with fused multiply-adds, reproduced bit for bit), an exclusive cumulative
// sum and total summed sequentially in float32 (MLX's CPU reductions on
// x86; Metal's reduction order may differ in the last bit, which matters
// only for a draw within an ulp of a boundary), one uniform draw scaled by
// the total, and the largest index whose cumulative weight is ≤ it. Random
// numbers are threefry2x32 exactly as mlx/random.cpp and
// backend/cpu/threefry.cpp: [Key], [Split], [Bits], [Uniform], and [RNG], the
// mx.random.seed state; every draw splits the state first, and sampling
// consumes one key per token (none when greedy).
//
// # Memory
//
// Each step runs inside a backend scope: the step's intermediates are
// released when it closes, the caches' State is kept out of it (the cache
// releases the buffers it replaces, per nn.KVCache), and the step's output is
// released once its token is read. A long generation therefore holds a
// constant number of live arrays. Generate releases its caches before it
// returns; a Session's caches live until Session.Release.
package generate
