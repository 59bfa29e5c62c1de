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

// mlxgo_result receives the array an op records: its handle (owned by the
// caller), rank, dimensions and dtype. The Go side keeps one per backend in C
// memory and reads it back after each op call, so recording an op and
// learning its result's shape and dtype take one cgo call.
typedef struct mlxgo_result {
  mlx_array res;
  int ndim, dtype;
  int shape[MLXGO_MAX_DIMS];
} mlxgo_result;

// The ops: one function per op, each calling the mlx-c function of the same
// name (mlxgo_X calls mlx_X, mlx_X_axis or mlx_fast_X) on stream s and
// writing its result into *r. On failure one returns non-zero, leaves r->res
// empty and the message with the error handler.

// Elementwise, with MLX's broadcasting and type promotion.
int mlxgo_add(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_subtract(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_multiply(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_divide(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_maximum(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_minimum(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_equal(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_less(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_greater(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);
int mlxgo_exp(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_log(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_negative(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_abs(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_sqrt(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_rsqrt(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_square(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_sigmoid(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_tanh(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_sin(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_cos(mlxgo_result* r, mlx_array a, mlx_stream s);
int mlxgo_astype(mlxgo_result* r, mlx_array a, mlx_dtype dtype, mlx_stream s);
int mlxgo_where(mlxgo_result* r, mlx_array cond, mlx_array x, mlx_array y, mlx_stream s);
// mlxgo_apply applies f, a function of one array (y empty) or two.
int mlxgo_apply(mlxgo_result* r, mlx_closure f, mlx_array x, mlx_array y);

// Shapes and indexing. Lists of dimensions or axes have n entries.
int mlxgo_zeros(mlxgo_result* r, const int* shape, size_t n, mlx_dtype dtype, mlx_stream s);
int mlxgo_reshape(mlxgo_result* r, mlx_array a, const int* shape, size_t n, mlx_stream s);
int mlxgo_transpose(mlxgo_result* r, mlx_array a, const int* axes, size_t n, mlx_stream s);
// mlxgo_slice is a[start:stop] on each of the n axes, with step 1.
int mlxgo_slice(mlxgo_result* r, mlx_array a, const int* start, const int* stop, size_t n, mlx_stream s);
// mlxgo_slice_update writes update into dst[start:stop] (n axes, step 1).
int mlxgo_slice_update(mlxgo_result* r, mlx_array dst, mlx_array update, const int* start, const int* stop, size_t n,
                       mlx_stream s);
// mlxgo_concatenate joins the n arrays at arrays along axis.
int mlxgo_concatenate(mlxgo_result* r, const mlx_array* arrays, size_t n, int axis, mlx_stream s);
int mlxgo_take(mlxgo_result* r, mlx_array a, mlx_array indices, int axis, mlx_stream s);

// Reductions along one axis, and softmax.
int mlxgo_sum(mlxgo_result* r, mlx_array a, int axis, bool keepdims, mlx_stream s);
int mlxgo_max(mlxgo_result* r, mlx_array a, int axis, bool keepdims, mlx_stream s);
int mlxgo_argmax(mlxgo_result* r, mlx_array a, int axis, bool keepdims, mlx_stream s);
int mlxgo_logsumexp(mlxgo_result* r, mlx_array a, int axis, bool keepdims, mlx_stream s);
int mlxgo_softmax(mlxgo_result* r, mlx_array a, int axis, bool precise, mlx_stream s);
int mlxgo_matmul(mlxgo_result* r, mlx_array a, mlx_array b, mlx_stream s);

// The fast ops. An empty weight or freqs means none.
int mlxgo_rms_norm(mlxgo_result* r, mlx_array x, mlx_array weight, float eps, mlx_stream s);
int mlxgo_rope(mlxgo_result* r, mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale,
               int offset, mlx_array freqs, mlx_stream s);
// mlxgo_rope_dynamic is mlxgo_rope with an offset per batch row (offsets).
int mlxgo_rope_dynamic(mlxgo_result* r, mlx_array x, int dims, bool traditional, mlx_optional_float base,
                       float scale, mlx_array offsets, mlx_array freqs, mlx_stream s);
// mlxgo_sdpa is mlx_fast_scaled_dot_product_attention with no sinks and
// force_fused false, for mlx-c with or without that argument (0.7 / 0.6).
// mask is read for mask_mode "array" only.
int mlxgo_sdpa(mlxgo_result* r, mlx_array q, mlx_array k, mlx_array v, float scale, const char* mask_mode,
               mlx_array mask, mlx_stream s);
int mlxgo_dequantize(mlxgo_result* r, mlx_array w, mlx_array scales, mlx_array biases, int group_size, int bits,
                     const char* mode, mlx_stream s);
int mlxgo_quantized_matmul(mlxgo_result* r, mlx_array x, mlx_array w, mlx_array scales, mlx_array biases,
                           bool transpose, int group_size, int bits, const char* mode, mlx_stream s);

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
// mlxgo_quantize writes mlx_quantize's three affine outputs.
int mlxgo_quantize(mlx_array* wq, mlx_array* scales, mlx_array* biases, mlx_array w, int group_size, int bits,
                   mlx_stream s);
// mlxgo_borrow wraps data without a copy where MLX can; when MLX no longer
// needs it, the Go side is told through handle (mlxgoBorrowDone).
mlx_array mlxgo_borrow(void* data, const int* shape, int ndim, mlx_dtype dtype, uintptr_t handle);
// mlxgo_memory reads MLX's active, peak and cache bytes.
int mlxgo_memory(size_t* active, size_t* peak, size_t* cache);

#endif
