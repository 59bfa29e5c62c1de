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

// mlxgo_self identifies the calling OS thread.
uint64_t mlxgo_self(void);

// Errors: the handler keeps the first message reported on each thread since
// the last mlxgo_clear_error.
void mlxgo_install_error_handler(void);
const char* mlxgo_error(void);
void mlxgo_clear_error(void);

// mlxgo_meta writes a's rank, dimensions (at most MLXGO_MAX_DIMS) and dtype.
int mlxgo_meta(mlx_array a, int* ndim, int* shape, int* dtype);
// mlxgo_to_host evaluates a row-contiguous copy of a and copies its n bytes to dst.
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
