// Package backend defines the contract every compute backend of mlxgo meets,
// and a registry of the backends compiled into the program.
//
// # Arrays
//
// An [Array] is an opaque handle owned by the backend that made it. It knows
// its dtype and shape (cached Go values, so asking never crosses into C);
// its storage is reached only through explicit host transfer: [Backend.FromHost]
// copies a host tensor in, [Backend.Borrow] wraps host memory that outlives the
// array (memory-mapped weights), and [Backend.ToHost] evaluates and copies out.
// Passing an Array to a backend other than the one that made it is a
// programmer error and panics with an [*OpError].
//
// # Semantics
//
// Ops follow MLX: its names (QuantizedMatmul, RMSNorm, RoPE,
// ScaledDotProductAttention, Take), numpy-style broadcasting, and MLX's type
// promotion ([PromoteTypes]): bf16 with bf16 gives bf16, f16 with bf16 gives
// f32, an integer with a float gives that float. Every op returns its result
// in MLX's output dtype; backends accumulate in float32 (or better) inside an
// op and round once to the output dtype, as MLX's kernels do. Axes may be
// negative (counted from the end).
//
// The quantized format is MLX's "affine" mode: a weight W [out, in] is stored
// as packed uint32 codes [out, in*bits/32] (element i of a row at bit offset
// i*bits of the row's little-endian byte string, least significant bit first),
// and per-group scales and biases [out, in/groupSize] in the activation dtype.
// Element i dequantizes to scales[g]*q[i] + biases[g] with g = i/groupSize.
// Bits are 2, 3, 4, 5, 6 or 8; group sizes 32, 64 or 128.
//
// # Lazy and eager
//
// Both kinds of backend return a handle from every op at once. An eager
// backend (cpu) computes during the call; a lazy one (mlx) records a graph
// and computes at [Backend.Eval]. Model code calls Eval where mlx_lm calls
// mx.eval (after each prefill chunk, once per generated token), so one code
// path serves both. ToHost always evaluates first.
//
// # Memory
//
// Release is deterministic. Arrays made while a [Scope] is open belong to it;
// [Scope.Close] releases every one not passed to [Scope.Keep], and kept arrays
// move to the enclosing scope. Arrays made with no scope open, and kept arrays
// that reach the outermost level, live until [Backend.Release]. A finalizer-like
// cleanup exists only as a safety net and is counted in [Stats].LeakedByGC, which
// tests expect to be zero; with MLXGO_TRACE_LEAKS=1 in the environment each
// array it frees is reported on standard error with the stack that made it.
// [Backend.Stats] reports live arrays and bytes so tests can show that a long
// generation does not grow them.
//
// # Errors
//
// Shapes, dtypes and parameters that a caller can get wrong are checked by the
// caller before any op runs (the loader validates checkpoints). An op called
// with arguments that violate its contract is a bug: it panics with an
// [*OpError] naming the op, the shapes and the dtypes. Public entry points
// (model forward passes, generation, conformance checks) recover *OpError with
// [Recover] and return it as an error; any other panic propagates. Failures a
// backend discovers while computing (an MLX error at Eval) are returned by
// Eval and ToHost as errors.
//
// # Threads
//
// A Backend is not safe for concurrent use. [Backend.Do] runs a function on the
// backend's own thread (MLX streams and its compile cache belong to one OS
// thread); the cpu backend runs it inline. Callers wrap a whole step (a forward
// pass and its Eval) in Do, not each op.
package backend
