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
// the group sums Σx of the bias term stay exact; and the dense matmul with
// transposed weights (unquantized linear layers, a tied dense head) fuses
// and reorders its float32 sums (FMA, eight partial sums along k: within
// kernel.DenseFastBound, about (k/8)·2^-24 of Σ|x·w|), and on CPUs with
// AVX512_BF16 multiplies bfloat16 and float16 weights with x in bfloat16
// (VDPBF16PS, twice the FMA's multiply-adds: within
// kernel.DenseFastBoundW, about 2^-7 of Σ|x·w|); and the attention
// over an 8-bit quantized KV cache (QuantizedScaledDotProductAttention, on
// CPUs with AVX512-VNNI) quantizes each scaled query row to int8 per group
// of the keys' group size and scores it against the 8-bit key codes in
// integer arithmetic (VPDPBUSD), within the bound of kernel's sdpa_q8.go
// (TestSDPAQ8Bound). Results differ from
// "reference" by the activation rounding (relative error of order 2^-8 per
// element); it is judged by greedy-token agreement and a KL bound against
// the oracle (conformance TestFastPrecision), never by exact values. On
// CPUs with AVX-512 VNNI the "fast" backend keeps the quantized weights
// read from a file that its int8 kernels take (4- and 8-bit, groups of
// whole blocks of 32) in their panel layout, built by their first matmul,
// and gives the file's pages they held back to the operating system
// (Options.NoPackWeights turns it off). 4-bit group-32 results keep their
// bits; rows of the other shapes take the int8 GEMM's order at every batch
// size, where unpacked ones take the one-row order up to four rows.
//
// # Arrays and memory
//
// An [Array] is a view of a buffer: a shape, the storage index of its
// first element and element strides (row-major unless it says otherwise).
// A buffer holds either
//
//   - float32 values ("values storage"): every F32 array, and the result of
//     an op in BF16 or F16 of at most 2^20 elements. The values are exactly
//     those of the dtype (the kernels' Rounder already rounded them), so the
//     next op reads them in place, with no conversion, and writes its own
//     result straight into a new float32 buffer; or
//   - the dtype's own little-endian bytes ("raw storage"): arrays made by
//     FromHost, Borrow, Zeros and Full (other than F32), integer and Bool
//     arrays, F64 arrays, larger BF16/F16 op results (a long prompt's
//     activations stay half-size; they are encoded once, exactly, and read
//     back with vectorized conversions), and whatever Concatenate, Where,
//     SliceUpdate and Take build from raw inputs: a bf16 KV cache stays
//     bf16. Weights stay memory-mapped and quantized.
//
// Both kinds hold the same values, and nothing observable but Stats depends
// on which one an array uses: ToHost encodes values storage to the dtype's
// bytes exactly as a raw array holds them. Ops read
// their inputs through f32In (a view of values storage, or a conversion
// into pooled scratch) or, where a kernel accepts it, as a kernel.Vec in
// place (the scales and biases of the quantized matmul, the keys and values
// of ScaledDotProductAttention).
//
// Reshape of a contiguous array, Transpose, Slice and AsType to the same
// values return views that share the buffer; ops that need contiguous data
// gather a view into scratch, except ScaledDotProductAttention, which reads
// keys and values through their strides (kernel.SDPAKV), so a slice of a KV
// cache costs nothing per token; QuantizedScaledDotProductAttention reads
// a quantized cache's codes, scales and biases the same way, expanding a
// block of 32 positions at a time (kernel.QuantKV; 8-bit values and, in
// "fast", 8-bit keys are read as codes without the expansion). [Backend.SliceUpdate] writes in place into
// its dst's buffer when no other live array views it (the buffer's count of
// live views is 1, it is not borrowed and src is not dst): the result takes
// the buffer over and dst is released. Otherwise dst is copied first, so a
// live view never changes.
//
// Released buffers go to a pool of size classes and serve later ops, so a
// decode step that repeats the shapes of the last allocates no storage
// (the pool keeps at most 256 MiB; [Backend.ClearCache] empties it and
// returns the memory to the operating system, as mx.clear_cache does).
// [Backend.Borrow] aliases the caller's memory (memory-mapped weights stay
// mapped) when it is aligned for its dtype, and copies it otherwise.
//
// Scopes are a stack on the Backend (kept by backend/internal/lifetime,
// which the mlx backend shares): arrays made while a scope is open
// belong to the innermost one; Keep moves arrays to the enclosing scope;
// Close releases the rest. [Backend.Stats] counts live arrays (views
// included) and the bytes of the buffers they view, each buffer once (4
// bytes per element for values storage; borrowed memory is not counted),
// as they are made and released. As a safety net, an array at the
// outermost level (the only ones that can become unreachable without being
// released: a scope holds its arrays) has a runtime.AddCleanup cleanup: if
// the garbage collector finds it unreleased, the backend removes it from
// the counts at its next op and adds one to Stats.LeakedByGC; its buffer
// is the garbage collector's once no other array views it. A nonzero
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
// persistent worker pool. On amd64 the hot loops (quantized matmuls, SDPA,
// SwiGLU, RMSNorm's last step, bf16 conversions) run in assembly chosen at
// start-up from CPUID in every build; GOEXPERIMENT=simd is not needed. It
// adds archsimd kernels for AVX-512 CPUs without VNNI (see internal/kernel).
// A vector path sums in its own order where its doc says so (the float32
// quantized matmul, SDPA); elsewhere it is bit-identical to the portable
// loops, which run on every other CPU and platform.
package cpu
