// C helpers of package metal, over the mlx-c API (ours or the system's).
// Each batches the mlx-c calls of one Go-side step into one cgo call.
#ifndef MLXGO_H
#define MLXGO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "mlx/c/mlx.h"

enum { MLXGO_MAX_DIMS = 32 };

// Builtin functions compiled with mlx_compile(shapeless=true).
enum { MLXGO_FN_SILU = 0, MLXGO_FN_SWIGLU = 1 };

// Ops recorded by mlxgo_op, one code per MLX function it calls.
enum {
  MLXGO_OP_ADD, MLXGO_OP_SUBTRACT, MLXGO_OP_MULTIPLY, MLXGO_OP_DIVIDE, MLXGO_OP_MAXIMUM, MLXGO_OP_MINIMUM,
  MLXGO_OP_EQUAL, MLXGO_OP_LESS, MLXGO_OP_GREATER, MLXGO_OP_MATMUL,
  MLXGO_OP_EXP, MLXGO_OP_LOG, MLXGO_OP_NEGATIVE, MLXGO_OP_ABS, MLXGO_OP_SQRT, MLXGO_OP_RSQRT, MLXGO_OP_SQUARE,
  MLXGO_OP_SIGMOID, MLXGO_OP_TANH, MLXGO_OP_SIN, MLXGO_OP_COS,
  MLXGO_OP_ASTYPE, MLXGO_OP_WHERE, MLXGO_OP_RESHAPE, MLXGO_OP_TRANSPOSE, MLXGO_OP_SLICE, MLXGO_OP_SLICE_UPDATE,
  MLXGO_OP_CONCATENATE, MLXGO_OP_TAKE, MLXGO_OP_SUM, MLXGO_OP_MAX, MLXGO_OP_ARGMAX, MLXGO_OP_LOGSUMEXP,
  MLXGO_OP_SOFTMAX, MLXGO_OP_APPLY, MLXGO_OP_RMS_NORM, MLXGO_OP_ROPE, MLXGO_OP_ROPE_DYNAMIC, MLXGO_OP_SDPA,
  MLXGO_OP_DEQUANTIZE, MLXGO_OP_QUANTIZED_MATMUL, MLXGO_OP_ZEROS,
};

// mlxgo_call describes one op for mlxgo_op and receives its result. The Go
// side keeps one per backend in C memory, fills the fields the op reads
// (see mlxgo_op) and reads res, ndim, shape and dtype back, so recording an
// op is a single cgo call.
typedef struct mlxgo_call {
  int op;
  mlx_stream s;
  mlx_array* args;  // nargs input handles (C memory of the Go side)
  size_t nargs;
  size_t n;  // entries used in v0, v1, v2
  int v0[MLXGO_MAX_DIMS], v1[MLXGO_MAX_DIMS], v2[MLXGO_MAX_DIMS];
  int i0, i1;
  bool b0, b1;
  float f0, f1;
  const char* str;
  mlx_closure fn;
  // Outputs.
  mlx_array res;
  int ndim, dtype;
  int shape[MLXGO_MAX_DIMS];
} mlxgo_call;

// mlxgo_op records op c->op and writes its result handle (owned by the
// caller), rank, dimensions and dtype into c. On failure it returns non-zero,
// leaves c->res empty and the message with the error handler. c comes as an
// integer: it is C memory, and cgo would otherwise check it for Go pointers
// on every call.
int mlxgo_op(uintptr_t c);
// mlxgo_free_arrays frees n handles.
void mlxgo_free_arrays(const mlx_array* a, size_t n);

// mlxgo_self identifies the calling OS thread.
uint64_t mlxgo_self(void);

// Errors: the handler keeps the first message reported on each thread since
// the last mlxgo_clear_error.
void mlxgo_install_error_handler(void);
const char* mlxgo_error(void);
void mlxgo_clear_error(void);

// mlxgo_meta writes a's rank, dimensions (at most MLXGO_MAX_DIMS) and dtype.
int mlxgo_meta(mlx_array a, int* ndim, int* shape, int* dtype);
// mlxgo_to_host evaluates a and copies its n bytes to dst, in row-major order
// (through a contiguous copy only when a is not laid out that way).
int mlxgo_to_host(mlx_array a, mlx_stream s, void* dst, size_t n);
// mlxgo_eval evaluates (or, with async, starts evaluating) n arrays.
int mlxgo_eval(const mlx_array* arrs, size_t n, bool async);
// mlxgo_compile_builtin compiles builtin function which on stream s.
int mlxgo_compile_builtin(mlx_closure* res, int which, mlx_stream s);
// mlxgo_apply calls f on n inputs and writes its single output.
int mlxgo_apply(mlx_closure f, const mlx_array* in, size_t n, mlx_array* out);
// mlxgo_sdpa is mlx_fast_scaled_dot_product_attention with force_fused=false,
// for mlx-c with or without that argument (0.7 / 0.6).
int mlxgo_sdpa(mlx_array* res, mlx_array q, mlx_array k, mlx_array v, float scale, const char* mode,
               mlx_array mask, mlx_stream s);
// mlxgo_quantize writes mlx_quantize's three affine outputs.
int mlxgo_quantize(mlx_array* wq, mlx_array* scales, mlx_array* biases, mlx_array w, int group_size, int bits,
                   mlx_stream s);
// mlxgo_borrow wraps data without a copy where MLX can; when MLX no longer
// needs it, the Go side is told through handle (mlxgoBorrowDone).
mlx_array mlxgo_borrow(void* data, const int* shape, int ndim, mlx_dtype dtype, uintptr_t handle);
// mlxgo_memory reads MLX's active, peak and cache bytes.
int mlxgo_memory(size_t* active, size_t* peak, size_t* cache);

#endif
