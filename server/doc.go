// Package server is mlxgo serve: OpenAI's chat and completions API over
// one model, with continuous batching, as mlx_lm.server and llama-server
// serve it. It is a thin HTTP layer over generate.BatchGenerator and owns
// no model state.
//
// # Engine
//
// One goroutine (the engine) owns the batch generator, and through it the
// model and its backend, which are not safe for concurrent use. Handlers
// parse and check a request, render its prompt (chat template, tokenizer)
// and hand the engine a job through a channel; between decode steps the
// engine inserts new jobs (they join the batch while others decode) and
// removes cancelled ones (their cache rows are freed at once), then runs one
// step and hands each token to its job's outbox, which never blocks the
// engine: a slow client delays only its own handler. The handler turns
// tokens into text (the streaming detokenizer), cuts it at stop strings
// (matched across token boundaries, never emitted: text that may start one
// is held back) and writes the answer, whole or as server-sent events.
//
// # Limits
//
// MaxConcurrency sequences decode at once, PrefillConcurrency prompts
// prefill at once, QueueSize more wait; a request beyond those is answered
// 429 with Retry-After at once. A request body is capped (MaxBodyBytes,
// 1 MiB by default, 413 beyond); headers must come within 10 s and the
// whole request within ReadTimeout; a client that reads nothing for
// WriteTimeout is dropped. A client that disconnects cancels its sequence.
// Every bad request gets OpenAI's error JSON with a 4xx status naming the
// field; a panic in a handler or the generator is answered 500 and the
// process goes on (the generator is then replaced and the sequences it
// held fail).
//
// # Prefix cache
//
// With PromptCacheBytes > 0, a finished sequence's KV cache (its prompt and
// every token generated) is copied into an LRU keyed by those tokens; a new
// request whose prompt shares a prefix with an entry starts from a copy of
// the longest such prefix (generate.SequenceOptions.Prefix) and prefills
// only the rest, which usage.prompt_tokens_details.cached_tokens reports.
// Sequences cancelled mid-way are not cached (nor in mlx_lm.server). With
// PromptCacheDir the entries outlive the server: saved as prompt cache
// files (mlx_lm's format, package promptcache) when evicted and at Close,
// loaded by New, which refuses a file made for another model
// (ErrOtherModel).
//
// # Prefill
//
// Prompts are prefilled in chunks between decode steps; while sequences
// decode, a step prefills at most PrefillBudget prompt tokens
// (generate.BatchOptions.PrefillBudget), so that a long prompt joining
// delays each decode step by one chunk instead of its whole prefill.
//
// # Sampling
//
// A request with a seed samples from a random state of its own seeded with
// it, so its tokens are those of generate.Generate (mlxgo generate --seed)
// with that seed, whatever else is in the batch; requests without one share
// the state seeded by Config.Seed, drawing in batch order as mlx_lm does.
package server
