/*
 * mlxgo's declaration of the subset of the mlx-c API that backend/metal
 * calls. Names, types and prototypes are mlx-c's (the C API of MLX,
 * https://github.com/ml-explore/mlx-c, 0.6.0 and main at fba4470), so the Go code
 * compiles unchanged against the real headers (build tag mlxc_system).
 * The implementation is mlxgo's own, in backend/metal/mlxc.cpp, written over
 * MLX's C++ API from the pinned mlx-cpu wheel.
 *
 * Conventions (as in mlx-c): every object is a by-value struct holding one
 * pointer to a heap object owned by the caller, NULL meaning empty; each
 * handle obtained is released once with its _free. Ops write their result
 * into *res and return 0, or report the error to the error handler and
 * return 1. "may be null" arguments accept an empty handle for "absent".
 */
#ifndef MLXGO_MLXC_H
#define MLXGO_MLXC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Handles. */
typedef struct mlx_array_ { void* ctx; } mlx_array;
typedef struct mlx_stream_ { void* ctx; } mlx_stream;
typedef struct mlx_device_ { void* ctx; } mlx_device;
typedef struct mlx_string_ { void* ctx; } mlx_string;
typedef struct mlx_vector_array_ { void* ctx; } mlx_vector_array;
typedef struct mlx_closure_ { void* ctx; } mlx_closure;
typedef struct mlx_closure_value_and_grad_ { void* ctx; } mlx_closure_value_and_grad;

/* Element types, in MLX's Dtype::Val order. */
typedef enum mlx_dtype_ {
  MLX_BOOL,
  MLX_UINT8,
  MLX_UINT16,
  MLX_UINT32,
  MLX_UINT64,
  MLX_INT8,
  MLX_INT16,
  MLX_INT32,
  MLX_INT64,
  MLX_FLOAT16,
  MLX_FLOAT32,
  MLX_FLOAT64,
  MLX_BFLOAT16,
  MLX_COMPLEX64,
} mlx_dtype;

typedef enum mlx_device_type_ { MLX_CPU, MLX_GPU } mlx_device_type;

/* Optional scalars: has_value false means "use MLX's default". */
typedef struct mlx_optional_int_ { int value; bool has_value; } mlx_optional_int;
typedef struct mlx_optional_float_ { float value; bool has_value; } mlx_optional_float;
typedef struct mlx_optional_dtype_ { mlx_dtype value; bool has_value; } mlx_optional_dtype;

/* Errors: the handler receives every failure; the default prints and exits.
 * As in mlx-c, data reaches the handler only when dtor is not NULL (else the
 * handler gets NULL). mlx-c's messages end with " at <file>:<line>" of its
 * source; this subset's do not. */
typedef void (*mlx_error_handler_func)(const char* msg, void* data);
void mlx_set_error_handler(mlx_error_handler_func handler, void* data, void (*dtor)(void*));

/* Strings and version. */
mlx_string mlx_string_new(void);
const char* mlx_string_data(mlx_string str);
int mlx_string_free(mlx_string str);
int mlx_version(mlx_string* str_);

/* Devices and streams. */
mlx_device mlx_device_new_type(mlx_device_type type, int index);
int mlx_device_free(mlx_device dev);
int mlx_device_is_available(bool* avail, mlx_device dev);
int mlx_device_get_type(mlx_device_type* type, mlx_device dev);
int mlx_get_default_device(mlx_device* dev);
mlx_stream mlx_stream_new_device(mlx_device dev);
int mlx_stream_free(mlx_stream stream);
int mlx_stream_get_device(mlx_device* dev, mlx_stream stream);
int mlx_get_default_stream(mlx_stream* stream, mlx_device dev);
mlx_stream mlx_default_cpu_stream_new(void);
mlx_stream mlx_default_gpu_stream_new(void);
int mlx_synchronize(mlx_stream stream);

/* Arrays. */
mlx_array mlx_array_new(void);
int mlx_array_free(mlx_array arr);
mlx_array mlx_array_new_data(const void* data, const int* shape, int dim, mlx_dtype dtype);
mlx_array mlx_array_new_data_managed_payload(void* data, const int* shape, int dim, mlx_dtype dtype, void* payload, void (*dtor)(void*));
size_t mlx_array_size(const mlx_array arr);
size_t mlx_array_nbytes(const mlx_array arr);
size_t mlx_array_ndim(const mlx_array arr);
const int* mlx_array_shape(const mlx_array arr);
mlx_dtype mlx_array_dtype(const mlx_array arr);
const uint8_t* mlx_array_data_uint8(const mlx_array arr);
int mlx_array_eval(mlx_array arr);
/* Layout of an evaluated array (mlx-c's internal helper; meaningful only
 * after evaluation). */
int _mlx_array_is_row_contiguous(bool* res, const mlx_array arr);

/* Vectors of arrays. */
mlx_vector_array mlx_vector_array_new(void);
int mlx_vector_array_free(mlx_vector_array vec);
mlx_vector_array mlx_vector_array_new_data(const mlx_array* data, size_t size);
int mlx_vector_array_set_data(mlx_vector_array* vec, const mlx_array* data, size_t size);
int mlx_vector_array_append_value(mlx_vector_array vec, const mlx_array val);
size_t mlx_vector_array_size(mlx_vector_array vec);
int mlx_vector_array_get(mlx_array* res, const mlx_vector_array vec, size_t idx);

/* Evaluation, closures and compilation. */
int mlx_eval(const mlx_vector_array outputs);
int mlx_async_eval(const mlx_vector_array outputs);
int mlx_closure_free(mlx_closure cls);
mlx_closure mlx_closure_new_func_payload(int (*fun)(mlx_vector_array*, const mlx_vector_array, void*), void* payload, void (*dtor)(void*));
int mlx_closure_apply(mlx_vector_array* res, mlx_closure cls, const mlx_vector_array input);
int mlx_compile(mlx_closure* res, const mlx_closure fun, bool shapeless);

/* Gradients (MLX's autodiff of a closure). */
mlx_closure_value_and_grad mlx_closure_value_and_grad_new(void);
int mlx_closure_value_and_grad_free(mlx_closure_value_and_grad cls);
int mlx_closure_value_and_grad_apply(mlx_vector_array* res_0, mlx_vector_array* res_1, mlx_closure_value_and_grad cls, const mlx_vector_array input);
int mlx_value_and_grad(mlx_closure_value_and_grad* res, const mlx_closure fun, const int* argnums, size_t argnums_num);
int mlx_vjp(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_closure fun, const mlx_vector_array primals, const mlx_vector_array cotangents);
int mlx_checkpoint(mlx_closure* res, const mlx_closure fun);
int mlx_stop_gradient(mlx_array* res, const mlx_array a, const mlx_stream s);

/* Memory. */
int mlx_clear_cache(void);
int mlx_get_active_memory(size_t* res);
int mlx_get_cache_memory(size_t* res);
int mlx_get_peak_memory(size_t* res);
int mlx_reset_peak_memory(void);

/* Constructors. */
int mlx_zeros(mlx_array* res, const int* shape, size_t shape_num, mlx_dtype dtype, const mlx_stream s);
int mlx_full(mlx_array* res, const int* shape, size_t shape_num, const mlx_array vals, mlx_dtype dtype, const mlx_stream s);

/* Elementwise. */
int mlx_add(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_subtract(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_multiply(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_divide(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_maximum(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_minimum(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_equal(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_less(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_greater(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_exp(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_log(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_negative(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_abs(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_sqrt(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_rsqrt(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_square(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_sigmoid(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_tanh(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_sin(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_cos(mlx_array* res, const mlx_array a, const mlx_stream s);
int mlx_astype(mlx_array* res, const mlx_array a, mlx_dtype dtype, const mlx_stream s);
int mlx_where(mlx_array* res, const mlx_array condition, const mlx_array x, const mlx_array y, const mlx_stream s);

/* Shaping and indexing. */
int mlx_reshape(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const mlx_stream s);
int mlx_transpose_axes(mlx_array* res, const mlx_array a, const int* axes, size_t axes_num, const mlx_stream s);
int mlx_broadcast_to(mlx_array* res, const mlx_array a, const int* shape, size_t shape_num, const mlx_stream s);
int mlx_contiguous(mlx_array* res, const mlx_array a, bool allow_col_major, const mlx_stream s);
int mlx_slice(mlx_array* res, const mlx_array a, const int* start, size_t start_num, const int* stop, size_t stop_num, const int* strides, size_t strides_num, const mlx_stream s);
int mlx_slice_update(mlx_array* res, const mlx_array src, const mlx_array update, const int* start, size_t start_num, const int* stop, size_t stop_num, const int* strides, size_t strides_num, const mlx_stream s);
int mlx_concatenate_axis(mlx_array* res, const mlx_vector_array arrays, int axis, const mlx_stream s);
int mlx_take_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s);

/* Reductions. */
int mlx_sum_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_max_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_argmax_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_logsumexp_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s);
int mlx_softmax_axis(mlx_array* res, const mlx_array a, int axis, bool precise, const mlx_stream s);

/* Linear algebra and quantization. */
int mlx_matmul(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s);
int mlx_quantize(mlx_vector_array* res, const mlx_array w, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_array global_scale /* may be null */, const mlx_stream s);
int mlx_dequantize(mlx_array* res, const mlx_array w, const mlx_array scales, const mlx_array biases /* may be null */, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_array global_scale /* may be null */, mlx_optional_dtype dtype, const mlx_stream s);
int mlx_quantized_matmul(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales, const mlx_array biases /* may be null */, bool transpose, mlx_optional_int group_size, mlx_optional_int bits, const char* mode, const mlx_stream s);

/* mx.fast. */
int mlx_fast_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight /* may be null */, float eps, const mlx_stream s);
int mlx_fast_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale, int offset, const mlx_array freqs /* may be null */, const mlx_stream s);
int mlx_fast_rope_dynamic(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base, float scale, const mlx_array offset, const mlx_array freqs /* may be null */, const mlx_stream s);
/* mlx-c's prototype (0.6.0 and its main branch, bindings of MLX 0.31.2): MLX
 * 0.32's force_fused argument is not in it, and is false here. */
int mlx_fast_scaled_dot_product_attention(mlx_array* res, const mlx_array queries, const mlx_array keys, const mlx_array values, float scale, const char* mask_mode, const mlx_array mask_arr /* may be null */, const mlx_array sinks /* may be null */, const mlx_stream s);

#ifdef __cplusplus
}
#endif

#endif
