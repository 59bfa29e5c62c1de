//go:build mlx

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "mlxgo.h"
#include "_cgo_export.h"

uint64_t mlxgo_self(void) { return (uint64_t)(uintptr_t)pthread_self(); }

static __thread char err_msg[4096];
static __thread int err_set;

static void on_error(const char* msg, void* data) {
  (void)data;
  if (err_set) {
    return;  // keep the first (root) cause
  }
  snprintf(err_msg, sizeof err_msg, "%s", msg != NULL ? msg : "(no message)");
  err_set = 1;
}

void mlxgo_install_error_handler(void) { mlx_set_error_handler(on_error, NULL, NULL); }

const char* mlxgo_error(void) { return err_set ? err_msg : ""; }

void mlxgo_clear_error(void) {
  err_set = 0;
  err_msg[0] = 0;
}

int mlxgo_meta(mlx_array a, int* ndim, int* shape, int* dtype) {
  size_t n = mlx_array_ndim(a);
  if (n > MLXGO_MAX_DIMS) {
    return 1;
  }
  const int* s = mlx_array_shape(a);
  if (n > 0 && s == NULL) {
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    shape[i] = s[i];
  }
  *ndim = (int)n;
  *dtype = (int)mlx_array_dtype(a);
  return 0;
}

int mlxgo_eval(const mlx_array* arrs, size_t n, bool async) {
  mlx_vector_array v = mlx_vector_array_new_data(arrs, n);
  if (v.ctx == NULL) {
    return 1;
  }
  int rc = async ? mlx_async_eval(v) : mlx_eval(v);
  mlx_vector_array_free(v);
  return rc;
}

int mlxgo_to_host(mlx_array a, mlx_stream s, void* dst, size_t n) {
  // Evaluate first: only then does the layout flag describe the buffer. A
  // row-contiguous result (the usual case) is read in place, with no copy
  // op recorded and run on the device.
  bool dense = false;
  int rc = mlx_array_eval(a);
  if (rc == 0) {
    rc = _mlx_array_is_row_contiguous(&dense, a);
  }
  if (rc != 0) {
    return rc;
  }
  mlx_array c = mlx_array_new();
  mlx_array src = a;
  if (!dense) {
    rc = mlx_contiguous(&c, a, false, s);
    if (rc == 0) {
      rc = mlx_array_eval(c);
    }
    src = c;
  }
  if (rc == 0 && mlx_array_nbytes(src) != n) {
    mlx_array_free(c);
    return 2;
  }
  if (rc == 0 && n > 0) {
    const uint8_t* p = mlx_array_data_uint8(src);
    if (p == NULL) {
      rc = 1;
    } else {
      memcpy(dst, p, n);
    }
  }
  mlx_array_free(c);
  return rc;
}

// silu(x) = x * sigmoid(x), as mlx.nn.silu.
static int silu(mlx_array* out, mlx_array x, mlx_stream s) {
  mlx_array sig = mlx_array_new();
  int rc = mlx_sigmoid(&sig, x, s) || mlx_multiply(out, x, sig, s);
  mlx_array_free(sig);
  return rc;
}

// builtin is the traced body of the builtin functions; payload holds which
// function and the stream.
struct builtin_payload {
  int which;
  mlx_stream s;
};

static int builtin(mlx_vector_array* res, const mlx_vector_array in, void* payload) {
  struct builtin_payload* p = payload;
  size_t want = p->which == MLXGO_FN_SILU ? 1 : 2;
  if (mlx_vector_array_size(in) != want) {
    return 1;
  }
  mlx_array a = mlx_array_new(), b = mlx_array_new(), t = mlx_array_new(), y = mlx_array_new();
  int rc = mlx_vector_array_get(&a, in, 0);
  if (rc == 0 && p->which == MLXGO_FN_SILU) {
    rc = silu(&y, a, p->s);
  } else if (rc == 0) {
    // swiglu(gate, x) = silu(gate) * x, as mlx_lm.models.activations.swiglu.
    rc = mlx_vector_array_get(&b, in, 1) || silu(&t, a, p->s) || mlx_multiply(&y, t, b, p->s);
  }
  if (rc == 0) {
    rc = mlx_vector_array_set_data(res, &y, 1);
  }
  mlx_array_free(a);
  mlx_array_free(b);
  mlx_array_free(t);
  mlx_array_free(y);
  return rc;
}

int mlxgo_compile_builtin(mlx_closure* res, int which, mlx_stream s) {
  struct builtin_payload* p = malloc(sizeof *p);
  if (p == NULL) {
    return 1;
  }
  p->which = which;
  p->s = s;
  mlx_closure raw = mlx_closure_new_func_payload(builtin, p, free);
  if (raw.ctx == NULL) {
    free(p);
    return 1;
  }
  int rc = mlx_compile(res, raw, true);
  mlx_closure_free(raw);
  return rc;
}

// The SDPA prototype with force_fused (mlx-c 0.7, MLX >= 0.32.2) and without
// (mlx-c 0.6). _Generic picks the caller that matches the prototype the
// included header declares; each caller receives the function as a generic
// pointer, so the other one compiles too and is never used.
typedef void (*any_fn)(void);
typedef int (*sdpa_fused_fn)(mlx_array*, mlx_array, mlx_array, mlx_array, float, const char*, mlx_array, mlx_array,
                             bool, mlx_stream);
typedef int (*sdpa_plain_fn)(mlx_array*, mlx_array, mlx_array, mlx_array, float, const char*, mlx_array, mlx_array,
                             mlx_stream);

static int sdpa_fused(any_fn f, mlx_array* res, mlx_array q, mlx_array k, mlx_array v, float scale,
                      const char* mode, mlx_array mask, mlx_array sinks, mlx_stream s) {
  return ((sdpa_fused_fn)f)(res, q, k, v, scale, mode, mask, sinks, false, s);
}

static int sdpa_plain(any_fn f, mlx_array* res, mlx_array q, mlx_array k, mlx_array v, float scale,
                      const char* mode, mlx_array mask, mlx_array sinks, mlx_stream s) {
  return ((sdpa_plain_fn)f)(res, q, k, v, scale, mode, mask, sinks, s);
}

static int sdpa(mlx_array* res, mlx_array q, mlx_array k, mlx_array v, float scale, const char* mode,
                mlx_array mask, mlx_stream s) {
  return _Generic(&mlx_fast_scaled_dot_product_attention, sdpa_fused_fn: sdpa_fused, default: sdpa_plain)(
      (any_fn)&mlx_fast_scaled_dot_product_attention, res, q, k, v, scale, mode, mask, mlx_array_new(), s);
}

int mlxgo_quantize(mlx_array* wq, mlx_array* scales, mlx_array* biases, mlx_array w, int group_size, int bits,
                   mlx_stream s) {
  mlx_vector_array out = mlx_vector_array_new();
  mlx_optional_int g = {group_size, true}, b = {bits, true};
  int rc = mlx_quantize(&out, w, g, b, "affine", mlx_array_new(), s);
  if (rc == 0 && mlx_vector_array_size(out) != 3) {
    rc = 2;
  }
  if (rc == 0) {
    rc = mlx_vector_array_get(wq, out, 0) || mlx_vector_array_get(scales, out, 1) ||
         mlx_vector_array_get(biases, out, 2);
  }
  mlx_vector_array_free(out);
  return rc;
}

static int closure_call(mlx_vector_array* res, const mlx_vector_array in, void* p) {
  return mlxgoClosureCall(*(uintptr_t*)p, res, in);
}

static void closure_done(void* p) {
  mlxgoClosureDone(*(uintptr_t*)p);
  free(p);
}

mlx_closure mlxgo_closure(uintptr_t handle) {
  uintptr_t* p = malloc(sizeof *p);
  if (p == NULL) {
    mlxgoClosureDone(handle);
    return (mlx_closure){NULL};
  }
  *p = handle;
  // On failure mlx-c has already handed the payload to closure_done.
  return mlx_closure_new_func_payload(closure_call, p, closure_done);
}

static void borrow_done(void* p) {
  mlxgoBorrowDone(*(uintptr_t*)p);
  free(p);
}

mlx_array mlxgo_borrow(void* data, const int* shape, int ndim, mlx_dtype dtype, uintptr_t handle) {
  uintptr_t* p = malloc(sizeof *p);
  if (p == NULL) {
    return mlx_array_new();
  }
  *p = handle;
  return mlx_array_new_data_managed_payload(data, shape, ndim, dtype, p, borrow_done);
}

int mlxgo_memory(size_t* active, size_t* peak, size_t* cache) {
  return mlx_get_active_memory(active) || mlx_get_peak_memory(peak) || mlx_get_cache_memory(cache);
}

void mlxgo_free_arrays(const mlx_array* a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    mlx_array_free(a[i]);
  }
}

// arr and fn turn handles passed as integers back into mlx-c's types.
static inline mlx_array arr(mlxgo_arr h) {
  mlx_array a = {(void*)h};
  return a;
}

static inline mlx_closure fn(mlxgo_fn h) {
  mlx_closure f = {(void*)h};
  return f;
}

// done finishes an op call: o is what the mlx-c function (which returned rc)
// wrote. On success it moves o, with its rank, dimensions and dtype, into r.
static int done(mlxgo_result* r, int rc, mlx_array* o) {
  r->res = mlx_array_new();
  if (rc == 0 && o->ctx == NULL) {
    on_error("the op returned an empty array", NULL);
    rc = 1;
  }
  if (rc != 0) {
    mlx_array_free(*o);
    return rc;
  }
  size_t nd = mlx_array_ndim(*o);
  const int* sh = mlx_array_shape(*o);
  if (nd > MLXGO_MAX_DIMS || (nd > 0 && sh == NULL)) {
    char msg[64];
    snprintf(msg, sizeof msg, "the result has %zu dimensions, at most %d", nd, (int)MLXGO_MAX_DIMS);
    on_error(msg, NULL);
    mlx_array_free(*o);
    return 1;
  }
  for (size_t i = 0; i < nd; i++) {
    r->shape[i] = sh[i];
  }
  r->ndim = (int)nd;
  r->dtype = (int)mlx_array_dtype(*o);
  r->res = *o;
  return 0;
}

// RECORD(call) runs call, an mlx-c op writing into &o on the recorder's
// stream s, and finishes it into the recorder's result.
#define RECORD(call)                               \
  do {                                             \
    mlxgo_recorder* rec_ = (mlxgo_recorder*)rec;  \
    mlx_stream s = rec_->s;                        \
    mlx_array o = mlx_array_new();                 \
    return done(&rec_->r, (call), &o);            \
  } while (0)

int mlxgo_add(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_add(&o, arr(a), arr(b), s)); }
int mlxgo_subtract(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_subtract(&o, arr(a), arr(b), s)); }
int mlxgo_multiply(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_multiply(&o, arr(a), arr(b), s)); }
int mlxgo_divide(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_divide(&o, arr(a), arr(b), s)); }
int mlxgo_maximum(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_maximum(&o, arr(a), arr(b), s)); }
int mlxgo_minimum(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_minimum(&o, arr(a), arr(b), s)); }
int mlxgo_equal(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_equal(&o, arr(a), arr(b), s)); }
int mlxgo_less(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_less(&o, arr(a), arr(b), s)); }
int mlxgo_greater(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_greater(&o, arr(a), arr(b), s)); }
int mlxgo_matmul(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr b) { RECORD(mlx_matmul(&o, arr(a), arr(b), s)); }

int mlxgo_exp(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_exp(&o, arr(a), s)); }
int mlxgo_log(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_log(&o, arr(a), s)); }
int mlxgo_negative(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_negative(&o, arr(a), s)); }
int mlxgo_abs(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_abs(&o, arr(a), s)); }
int mlxgo_sqrt(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_sqrt(&o, arr(a), s)); }
int mlxgo_rsqrt(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_rsqrt(&o, arr(a), s)); }
int mlxgo_square(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_square(&o, arr(a), s)); }
int mlxgo_sigmoid(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_sigmoid(&o, arr(a), s)); }
int mlxgo_tanh(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_tanh(&o, arr(a), s)); }
int mlxgo_sin(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_sin(&o, arr(a), s)); }
int mlxgo_cos(mlxgo_rec rec, mlxgo_arr a) { RECORD(mlx_cos(&o, arr(a), s)); }

int mlxgo_sum(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims) {
  RECORD(mlx_sum_axis(&o, arr(a), axis, keepdims, s));
}

int mlxgo_max(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims) {
  RECORD(mlx_max_axis(&o, arr(a), axis, keepdims, s));
}

int mlxgo_argmax(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims) {
  RECORD(mlx_argmax_axis(&o, arr(a), axis, keepdims, s));
}

int mlxgo_logsumexp(mlxgo_rec rec, mlxgo_arr a, int axis, bool keepdims) {
  RECORD(mlx_logsumexp_axis(&o, arr(a), axis, keepdims, s));
}

int mlxgo_softmax(mlxgo_rec rec, mlxgo_arr a, int axis, bool precise) {
  RECORD(mlx_softmax_axis(&o, arr(a), axis, precise, s));
}

int mlxgo_astype(mlxgo_rec rec, mlxgo_arr a, mlx_dtype dtype) { RECORD(mlx_astype(&o, arr(a), dtype, s)); }

int mlxgo_where(mlxgo_rec rec, mlxgo_arr cond, mlxgo_arr x, mlxgo_arr y) {
  RECORD(mlx_where(&o, arr(cond), arr(x), arr(y), s));
}

// apply calls f on the inputs and writes its single output.
static int apply(mlx_array* out, mlx_closure f, const mlx_array* in, size_t n) {
  mlx_vector_array args = mlx_vector_array_new_data(in, n);
  if (args.ctx == NULL) {
    return 1;
  }
  mlx_vector_array res = mlx_vector_array_new();
  int rc = mlx_closure_apply(&res, f, args);
  if (rc == 0) {
    rc = mlx_vector_array_size(res) == 1 ? mlx_vector_array_get(out, res, 0) : 1;
  }
  mlx_vector_array_free(res);
  mlx_vector_array_free(args);
  return rc;
}

int mlxgo_apply(mlxgo_rec rec, mlxgo_fn f, mlxgo_arr x, mlxgo_arr y) {
  const mlx_array in[2] = {arr(x), arr(y)};
  RECORD(apply(&o, fn(f), in, y == 0 ? 1 : 2));
}

int mlxgo_zeros(mlxgo_rec rec, const int* shape, size_t n, mlx_dtype dtype) {
  RECORD(mlx_zeros(&o, shape, n, dtype, s));
}

int mlxgo_reshape(mlxgo_rec rec, mlxgo_arr a, const int* shape, size_t n) {
  RECORD(mlx_reshape(&o, arr(a), shape, n, s));
}

int mlxgo_transpose(mlxgo_rec rec, mlxgo_arr a, const int* axes, size_t n) {
  RECORD(mlx_transpose_axes(&o, arr(a), axes, n, s));
}

static const int ones[MLXGO_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

// too_many reports (to the error handler) a list of more than MLXGO_MAX_DIMS
// axes, which ones cannot cover.
static bool too_many(size_t n) {
  if (n <= MLXGO_MAX_DIMS) {
    return false;
  }
  on_error("more axes than MLXGO_MAX_DIMS", NULL);
  return true;
}

int mlxgo_slice(mlxgo_rec rec, mlxgo_arr a, const int* start, const int* stop, size_t n) {
  RECORD(too_many(n) ? 1 : mlx_slice(&o, arr(a), start, n, stop, n, ones, n, s));
}

int mlxgo_slice_update(mlxgo_rec rec, mlxgo_arr dst, mlxgo_arr update, const int* start, const int* stop, size_t n) {
  RECORD(too_many(n) ? 1 : mlx_slice_update(&o, arr(dst), arr(update), start, n, stop, n, ones, n, s));
}

static int concatenate(mlx_array* out, const mlx_array* arrays, size_t n, int axis, mlx_stream s) {
  mlx_vector_array v = mlx_vector_array_new_data(arrays, n);
  if (v.ctx == NULL) {
    return 1;
  }
  int rc = mlx_concatenate_axis(out, v, axis, s);
  mlx_vector_array_free(v);
  return rc;
}

int mlxgo_concatenate(mlxgo_rec rec, const mlx_array* arrays, size_t n, int axis) {
  RECORD(concatenate(&o, arrays, n, axis, s));
}

int mlxgo_take(mlxgo_rec rec, mlxgo_arr a, mlxgo_arr indices, int axis) {
  RECORD(mlx_take_axis(&o, arr(a), arr(indices), axis, s));
}

int mlxgo_rms_norm(mlxgo_rec rec, mlxgo_arr x, mlxgo_arr weight, float eps) {
  RECORD(mlx_fast_rms_norm(&o, arr(x), arr(weight), eps, s));
}

int mlxgo_rope(mlxgo_rec rec, mlxgo_arr x, int dims, bool traditional, mlx_optional_float base, float scale,
               int offset, mlxgo_arr freqs) {
  RECORD(mlx_fast_rope(&o, arr(x), dims, traditional, base, scale, offset, arr(freqs), s));
}

int mlxgo_rope_dynamic(mlxgo_rec rec, mlxgo_arr x, int dims, bool traditional, mlx_optional_float base,
                       float scale, mlxgo_arr offsets, mlxgo_arr freqs) {
  RECORD(mlx_fast_rope_dynamic(&o, arr(x), dims, traditional, base, scale, arr(offsets), arr(freqs), s));
}

int mlxgo_sdpa(mlxgo_rec rec, mlxgo_arr q, mlxgo_arr k, mlxgo_arr v, float scale, const char* mask_mode,
               mlxgo_arr mask) {
  RECORD(sdpa(&o, arr(q), arr(k), arr(v), scale, mask_mode, arr(mask), s));
}

int mlxgo_dequantize(mlxgo_rec rec, mlxgo_arr w, mlxgo_arr scales, mlxgo_arr biases, int group_size, int bits,
                     const char* mode) {
  mlx_optional_int g = {group_size, true}, b = {bits, true};
  mlx_optional_dtype dt = {MLX_FLOAT32, false};
  RECORD(mlx_dequantize(&o, arr(w), arr(scales), arr(biases), g, b, mode, mlx_array_new(), dt, s));
}

int mlxgo_quantized_matmul(mlxgo_rec rec, mlxgo_arr x, mlxgo_arr w, mlxgo_arr scales, mlxgo_arr biases,
                           bool transpose, int group_size, int bits, const char* mode) {
  mlx_optional_int g = {group_size, true}, b = {bits, true};
  RECORD(mlx_quantized_matmul(&o, arr(x), arr(w), arr(scales), arr(biases), transpose, g, b, mode, s));
}
