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
  mlx_array c = mlx_array_new();
  int rc = mlx_contiguous(&c, a, false, s);
  if (rc == 0) {
    rc = mlxgo_eval(&c, 1, false);
  }
  if (rc == 0 && mlx_array_nbytes(c) != n) {
    mlx_array_free(c);
    return 2;
  }
  if (rc == 0 && n > 0) {
    const uint8_t* p = mlx_array_data_uint8(c);
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
