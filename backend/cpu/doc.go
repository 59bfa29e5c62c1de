// Package cpu is the pure-Go backend of mlxgo: the readable definition of
// every op of the backend contract, checked against MLX's semantics. It
// registers itself as "cpu"; open it with backend.Open("cpu", opts) or [New].
//
// # Precision
//
// "reference" (the default, also ""): MLX's semantics. Inside an op, sums
// and products accumulate in float32, as MLX's kernels do for f32, f16 and
// bf16 arrays, and the op's output is rounded once to its dtype (round to
// nearest even), so a bf16 graph is rounded after every op exactly where MLX
// rounds it. Where MLX's own CPU kernel computes a step in the array dtype
// (the exp inside sigmoid, softmax without precise, the steps of the
// compiled swiglu) that step is rounded too, and exp is MLX's CPU exp
// polynomial, so single ops match MLX's CPU bit for bit where the
// summation order agrees. F64 arrays compute in float64.
//
// "high": float64 accumulation and float64 evaluation of every function,
// with each op's output still rounded to its dtype (once, correctly: f16
// and bf16 results round through a round-to-odd float32). It moves no op
// boundary, so the differences between the two modes measure the rounding
// inside ops only. The fused and quantized kernels (internal/kernel) accept
// the same switch where they accumulate; RoPE and SwiGLU have no
// accumulation and behave alike in both modes.
//
// "fast": approximate. As "reference", except that the quantized matmul
// with transposed weights (every linear layer) quantizes its activations to
// int8 per block of 32 with a float32 scale and multiplies them with the
// integer codes in integer arithmetic (after llama.cpp's Q8_0 activations);
// the group sums Σx of the bias term stay exact. Results differ from
// "reference" by the activation rounding (relative error of order 2^-8 per
// element); it is judged by greedy-token agreement and a KL bound against
// the oracle (models/minicpm5 TestFastPrecision), never by exact values.
//
// # Arrays and memory
//
// An [Array] holds a tensor.Dense in its own dtype. Ops compute during the
// call and always write fresh storage (no views); [Backend.Eval] has nothing
// left to do. [Backend.Borrow] aliases the caller's memory (memory-mapped
// weights stay mapped) when it is aligned for its dtype, and copies it
// otherwise. [Backend.SliceUpdate] takes over the storage of a dst it owns,
// which releases dst.
//
// Scopes are a stack on the Backend: arrays made while a scope is open
// belong to the innermost one; Keep moves arrays to the enclosing scope;
// Close releases the rest. [Backend.Stats] counts live arrays and the bytes
// they own (borrowed memory is not counted) as they are made and released.
// As a safety net, an array that becomes unreachable without being released
// (only possible outside every scope) is noticed by a runtime.AddCleanup
// cleanup, which removes it from the counts and adds one to
// Stats.LeakedByGC; the memory itself is the garbage collector's. A nonzero
// LeakedByGC is a bug in the caller.
//
// Using a released array, an array of another backend, or the backend after
// Close panics with a *backend.OpError, as does any op called against its
// contract (shapes, dtypes, axes, quantization parameters).
//
// # Threads
//
// A Backend is not safe for concurrent use; Do runs its function inline.
// Matmul and the kernels split their work across worker goroutines
// (backend.Options.Threads, default GOMAXPROCS); the kernels use a
// persistent worker pool. Build with GOEXPERIMENT=simd on amd64 for the
// AVX-512 kernels (see internal/kernel); results then differ from the
// portable build by float32 summation order only.
package cpu
