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
// caller), rank, dimensions and dtype. The Go side reads it back after each
// op call, so recording an op and learning its result's shape and dtype take
// one cgo call.
typedef struct mlxgo_result {
  mlx_array res;
  int ndim, dtype;
  int shape[MLXGO_MAX_DIMS];
} mlxgo_result;

// mlxgo_recorder is what every op call shares: the stream the ops run on and
// the result of the op last recorded. The Go side keeps one per backend in C
// memory and passes its address as an integer, mlxgo_rec.
typedef struct mlxgo_recorder {
  mlx_stream s;
  mlxgo_result r;
} mlxgo_recorder;

// The op functions take their arguments' handles as integers: cgo checks
// (runtime.cgoCheckPointer, once per argument and call) every argument whose
// C type may hold a pointer, and these only ever hold C pointers.
typedef uintptr_t mlxgo_rec;  // a mlxgo_recorder*
typedef uintptr_t mlxgo_arr;  // an mlx_array's ctx; 0 is the empty array
typedef uintptr_t mlxgo_fn;   // an mlx_closure's ctx

// The ops: one function per op, each calling the mlx-c function of the same
// name (mlxgo_X calls mlx_X, mlx_X_axis or mlx_fast_X) on the recorder's
// stream and writing its result into the recorder's result. On failure one
// returns non-zero, leaves the result empty and the message with the error
// handler.

// Elementwise, with MLX's broadcasting and type promotion.
int mlxgo_add(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_subtract(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_multiply(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_divide(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_maximum(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_minimum(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_equal(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_less(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_greater(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);
int mlxgo_exp(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_log(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_negative(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_abs(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_sqrt(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_rsqrt(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_square(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_sigmoid(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_tanh(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_sin(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_cos(mlxgo_rec rec, mlxgo_arr a);
int mlxgo_astype(mlxgo_rec rec, mlxgo_arr a, mlx_dtype dtype);
int mlxgo_where(mlxgo_rec rec, mlxgo_arr cond, mlxgo_arr x, mlxgo_arr y);
// mlxgo_apply applies f, a function of one array (y empty) or two.
int mlxgo_apply(mlxgo_rec rec, mlxgo_fn f, mlxgo_arr x, mlxgo_arr y);

// Shapes and indexing. Lists of dimensions or axes have n entries.
int mlxgo_zeros(mlxgo_rec rec, const int* shape, size_t n, mlx_dtype dtype);
int mlxgo_reshape(mlxgo_rec rec, mlxgo_arr a, const int* shape, size_t n);
int mlxgo_transpose(mlxgo_rec rec, mlxgo_arr a, const int* axes, size_t n);
// mlxgo_slice is a[start:stop] on each of the n axes, with step 1.
int mlxgo_slice(mlxgo_rec rec, mlxgo_arr a, const int* start, const int* stop, size_t n);
// mlxgo_slice_update writes update into dst[start:stop] (n axes, step 1).
int mlxgo_slice_update(mlxgo_rec rec, mlxgo_arr dst, mlxgo_arr update, const int* start, const int* stop, size_t n);
// mlxgo_concatenate joins the n arrays at arrays along axis.
int mlxgo_concatenate(mlxgo_rec rec, const mlx_array* arrays, size_t n, int axis);
int mlxgo_take(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr indices, int axis);

// Reductions along one axis, and softmax.
int mlxgo_sum(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims);
int mlxgo_max(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims);
int mlxgo_argmax(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims);
int mlxgo_logsumexp(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims);
int mlxgo_softmax(mlxgo_rec rec, mlxgo_arr a, int axis, bool precise);
int mlxgo_matmul(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b);

// The fast ops. An empty weight or freqs means none.
int mlxgo_rms_norm(mlxgo_rec rec, mlxgo_arr x, mlxgo_arr weight, float eps);
int mlxgo_rope(mlxgo_rec rec, mlxgo_arr x, int dims, bool traditional, mlx_optional_float base, float scale,
               int offset, mlxgo_arr freqs);
// mlxgo_rope_dynamic is mlxgo_rope with an offset per batch row (offsets).
int mlxgo_rope_dynamic(mlxgo_rec rec, mlxgo_arr x, int dims, bool traditional, mlx_optional_float base,
                       float scale, mlxgo_arr offsets, mlxgo_arr freqs);
// mlxgo_sdpa is mlx_fast_scaled_dot_product_attention with no sinks and
// force_fused false, for mlx-c with or without that argument (0.7 / 0.6).
// mask is read for mask_mode "array" only.
int mlxgo_sdpa(mlxgo_rec rec, mlxgo_arr q, mlxgo_arr k, mlxgo_arr v, float scale, const char* mask_mode,
               mlxgo_arr mask);
int mlxgo_dequantize(mlxgo_rec rec, mlxgo_arr w, mlxgo_arr scales, mlxgo_arr biases, int group_size, int bits,
                     const char* mode);
int mlxgo_quantized_matmul(mlxgo_rec rec, mlxgo_arr x, mlxgo_arr w, mlxgo_arr scales, mlxgo_arr biases,
                           bool transpose, int group_size, int bits, const char* mode);

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
// mlxgo_closure makes an mlx_closure whose calls run the Go function
// registered under handle (mlxgoClosureCall); when MLX drops the closure's
// last copy, the Go side is told through handle (mlxgoClosureDone).
mlx_closure mlxgo_closure(uintptr_t handle);
// mlxgo_memory reads MLX's active, peak and cache bytes.
int mlxgo_memory(size_t* active, size_t* peak, size_t* cache);

#endif
