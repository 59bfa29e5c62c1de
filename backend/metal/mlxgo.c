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

int mlxgo_apply(mlx_closure f, const mlx_array* in, size_t n, mlx_array* out) {
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

int mlxgo_sdpa(mlx_array* res, mlx_array q, mlx_array k, mlx_array v, float scale, const char* mode,
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

// record runs the MLX function of c->op into *r.
static int record(mlxgo_call* c, mlx_array* r) {
  const mlx_array* a = c->args;
  const size_t n = c->nargs;
  const mlx_stream s = c->s;
  const mlx_array none = mlx_array_new();
  switch (c->op) {
    case MLXGO_OP_ADD: return mlx_add(r, a[0], a[1], s);
    case MLXGO_OP_SUBTRACT: return mlx_subtract(r, a[0], a[1], s);
    case MLXGO_OP_MULTIPLY: return mlx_multiply(r, a[0], a[1], s);
    case MLXGO_OP_DIVIDE: return mlx_divide(r, a[0], a[1], s);
    case MLXGO_OP_MAXIMUM: return mlx_maximum(r, a[0], a[1], s);
    case MLXGO_OP_MINIMUM: return mlx_minimum(r, a[0], a[1], s);
    case MLXGO_OP_EQUAL: return mlx_equal(r, a[0], a[1], s);
    case MLXGO_OP_LESS: return mlx_less(r, a[0], a[1], s);
    case MLXGO_OP_GREATER: return mlx_greater(r, a[0], a[1], s);
    case MLXGO_OP_MATMUL: return mlx_matmul(r, a[0], a[1], s);
    case MLXGO_OP_EXP: return mlx_exp(r, a[0], s);
    case MLXGO_OP_LOG: return mlx_log(r, a[0], s);
    case MLXGO_OP_NEGATIVE: return mlx_negative(r, a[0], s);
    case MLXGO_OP_ABS: return mlx_abs(r, a[0], s);
    case MLXGO_OP_SQRT: return mlx_sqrt(r, a[0], s);
    case MLXGO_OP_RSQRT: return mlx_rsqrt(r, a[0], s);
    case MLXGO_OP_SQUARE: return mlx_square(r, a[0], s);
    case MLXGO_OP_SIGMOID: return mlx_sigmoid(r, a[0], s);
    case MLXGO_OP_TANH: return mlx_tanh(r, a[0], s);
    case MLXGO_OP_SIN: return mlx_sin(r, a[0], s);
    case MLXGO_OP_COS: return mlx_cos(r, a[0], s);
    case MLXGO_OP_ASTYPE: return mlx_astype(r, a[0], (mlx_dtype)c->i0, s);
    case MLXGO_OP_WHERE: return mlx_where(r, a[0], a[1], a[2], s);
    case MLXGO_OP_RESHAPE: return mlx_reshape(r, a[0], c->v0, c->n, s);
    case MLXGO_OP_TRANSPOSE: return mlx_transpose_axes(r, a[0], c->v0, c->n, s);
    case MLXGO_OP_SLICE: return mlx_slice(r, a[0], c->v0, c->n, c->v1, c->n, c->v2, c->n, s);
    case MLXGO_OP_SLICE_UPDATE:
      return mlx_slice_update(r, a[0], a[1], c->v0, c->n, c->v1, c->n, c->v2, c->n, s);
    case MLXGO_OP_CONCATENATE: {
      mlx_vector_array v = mlx_vector_array_new_data(a, n);
      if (v.ctx == NULL) {
        return 1;
      }
      int rc = mlx_concatenate_axis(r, v, c->i0, s);
      mlx_vector_array_free(v);
      return rc;
    }
    case MLXGO_OP_TAKE: return mlx_take_axis(r, a[0], a[1], c->i0, s);
    case MLXGO_OP_SUM: return mlx_sum_axis(r, a[0], c->i0, c->b0, s);
    case MLXGO_OP_MAX: return mlx_max_axis(r, a[0], c->i0, c->b0, s);
    case MLXGO_OP_ARGMAX: return mlx_argmax_axis(r, a[0], c->i0, c->b0, s);
    case MLXGO_OP_LOGSUMEXP: return mlx_logsumexp_axis(r, a[0], c->i0, c->b0, s);
    case MLXGO_OP_SOFTMAX: return mlx_softmax_axis(r, a[0], c->i0, c->b0, s);
    case MLXGO_OP_APPLY: return mlxgo_apply(c->fn, a, n, r);
    case MLXGO_OP_RMS_NORM: return mlx_fast_rms_norm(r, a[0], n > 1 ? a[1] : none, c->f0, s);
    case MLXGO_OP_ROPE: {
      // i0 dims, b0 traditional, f1 base (b1: has one), f0 scale, i1 offset; a[1] freqs.
      mlx_optional_float base = {c->f1, c->b1};
      return mlx_fast_rope(r, a[0], c->i0, c->b0, base, c->f0, c->i1, n > 1 ? a[1] : none, s);
    }
    case MLXGO_OP_ROPE_DYNAMIC: {
      // As MLXGO_OP_ROPE with a[1] the offsets and a[2] freqs.
      mlx_optional_float base = {c->f1, c->b1};
      return mlx_fast_rope_dynamic(r, a[0], c->i0, c->b0, base, c->f0, a[1], n > 2 ? a[2] : none, s);
    }
    case MLXGO_OP_SDPA: return mlxgo_sdpa(r, a[0], a[1], a[2], c->f0, c->str, n > 3 ? a[3] : none, s);
    case MLXGO_OP_DEQUANTIZE: {
      mlx_optional_int g = {c->i0, true}, b = {c->i1, true};
      mlx_optional_dtype dt = {MLX_FLOAT32, false};
      return mlx_dequantize(r, a[0], a[1], a[2], g, b, c->str, none, dt, s);
    }
    case MLXGO_OP_QUANTIZED_MATMUL: {
      mlx_optional_int g = {c->i0, true}, b = {c->i1, true};
      return mlx_quantized_matmul(r, a[0], a[1], a[2], a[3], c->b0, g, b, c->str, s);
    }
    case MLXGO_OP_ZEROS: return mlx_zeros(r, c->v0, c->n, (mlx_dtype)c->i0, s);
  }
  char msg[64];
  snprintf(msg, sizeof msg, "mlxgo_op: unknown op code %d", c->op);
  on_error(msg, NULL);
  return 1;
}

int mlxgo_op(uintptr_t call) {
  mlxgo_call* c = (mlxgo_call*)call;
  mlx_array r = mlx_array_new();
  c->res = mlx_array_new();
  int rc = record(c, &r);
  if (rc == 0 && r.ctx == NULL) {
    on_error("the op returned an empty array", NULL);
    rc = 1;
  }
  if (rc != 0) {
    mlx_array_free(r);
    return rc;
  }
  size_t nd = mlx_array_ndim(r);
  const int* sh = mlx_array_shape(r);
  if (nd > MLXGO_MAX_DIMS || (nd > 0 && sh == NULL)) {
    char msg[64];
    snprintf(msg, sizeof msg, "the result has %zu dimensions, at most %d", nd, (int)MLXGO_MAX_DIMS);
    on_error(msg, NULL);
    mlx_array_free(r);
    return 1;
  }
  for (size_t i = 0; i < nd; i++) {
    c->shape[i] = sh[i];
  }
  c->ndim = (int)nd;
  c->dtype = (int)mlx_array_dtype(r);
  c->res = r;
  return 0;
}
