//go:build mlx && !mlxc_system

// mlxgo's implementation of the mlx-c functions declared in
// mlxc/include/mlx/c/mlx.h, over MLX's C++ API (the pinned mlx-cpu wheel's
// headers and libmlx). Each function has mlx-c's name, signature and
// conventions: handles hold a heap-allocated C++ object (NULL = empty), ops
// write into *res, and every C++ exception (std::exception or anything else)
// becomes a call of the error handler and a return value of 1 (or an empty
// handle / NULL for functions that return one).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "mlx/array.h"
#include "mlx/compile.h"
#include "mlx/device.h"
#include "mlx/fast.h"
#include "mlx/memory.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "mlx/stream.h"
#include "mlx/transforms.h"
#include "mlx/version.h"

#include "mlx/c/mlx.h"

namespace mx = mlx::core;

namespace {

using Fn = std::function<std::vector<mx::array>(const std::vector<mx::array>&)>;

// ---- errors -----------------------------------------------------------------

void default_handler(const char* msg, void*) {
  std::fprintf(stderr, "MLX error: %s\n", msg);
  std::exit(-1);
}

struct Handler {
  mlx_error_handler_func fn = default_handler;
  std::shared_ptr<void> data;  // released with the user's dtor
};

std::mutex handler_mu;
Handler handler;

void report(const char* msg) {
  Handler h;
  {
    std::lock_guard<std::mutex> lock(handler_mu);
    h = handler;
  }
  h.fn(msg, h.data.get());
}

// guard runs f, turning any exception into a report and a return of 1.
template <class F>
int guard(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    report(e.what());
  } catch (...) {
    report("unknown C++ exception in MLX");
  }
  return 1;
}

// ---- handle access ----------------------------------------------------------

mx::array& arr(const mlx_array a) {
  if (a.ctx == nullptr) {
    throw std::invalid_argument("expected a non-empty mlx_array");
  }
  return *static_cast<mx::array*>(a.ctx);
}

std::optional<mx::array> opt(const mlx_array a) {
  if (a.ctx == nullptr) {
    return std::nullopt;
  }
  return *static_cast<mx::array*>(a.ctx);
}

mx::Stream& str(const mlx_stream s) {
  if (s.ctx == nullptr) {
    throw std::invalid_argument("expected a non-empty mlx_stream");
  }
  return *static_cast<mx::Stream*>(s.ctx);
}

mx::Device& dev(const mlx_device d) {
  if (d.ctx == nullptr) {
    throw std::invalid_argument("expected a non-empty mlx_device");
  }
  return *static_cast<mx::Device*>(d.ctx);
}

std::vector<mx::array>& vec(const mlx_vector_array v) {
  if (v.ctx == nullptr) {
    throw std::invalid_argument("expected a non-empty mlx_vector_array");
  }
  return *static_cast<std::vector<mx::array>*>(v.ctx);
}

Fn& fn(const mlx_closure c) {
  if (c.ctx == nullptr) {
    throw std::invalid_argument("expected a non-empty mlx_closure");
  }
  return *static_cast<Fn*>(c.ctx);
}

// Array handles. Every op result lives in its own heap mx::array (mlx-c's
// convention), made and freed once per op; the blocks are recycled through a
// per-thread free list instead of going back to malloc each time.
class HandleBlocks {
 public:
  HandleBlocks() { free_.reserve(kKeep); }
  ~HandleBlocks() {
    for (void* p : free_) {
      ::operator delete(p);
    }
  }
  void* get() {
    if (free_.empty()) {
      return ::operator new(sizeof(mx::array));
    }
    void* p = free_.back();
    free_.pop_back();
    return p;
  }
  void put(void* p) {
    if (free_.size() < kKeep) {
      free_.push_back(p);  // cannot throw below kKeep: reserved
    } else {
      ::operator delete(p);
    }
  }

 private:
  static constexpr size_t kKeep = 4096;
  std::vector<void*> free_;
};

thread_local HandleBlocks handle_blocks;

// new_handle constructs an mx::array from args in a recycled block.
template <class... Args>
mx::array* new_handle(Args&&... args) {
  void* p = handle_blocks.get();
  try {
    return new (p) mx::array(std::forward<Args>(args)...);
  } catch (...) {
    handle_blocks.put(p);
    throw;
  }
}

void free_handle(void* ctx) {
  if (ctx != nullptr) {
    static_cast<mx::array*>(ctx)->~array();
    handle_blocks.put(ctx);
  }
}

// put stores v in *res, reusing its object when it has one.
void put(mlx_array* res, mx::array v) {
  if (res->ctx != nullptr) {
    *static_cast<mx::array*>(res->ctx) = std::move(v);
  } else {
    res->ctx = new_handle(std::move(v));
  }
}

void put(mlx_vector_array* res, std::vector<mx::array> v) {
  if (res->ctx != nullptr) {
    *static_cast<std::vector<mx::array>*>(res->ctx) = std::move(v);
  } else {
    res->ctx = new std::vector<mx::array>(std::move(v));
  }
}

// op evaluates f (which builds an array) under guard and stores the result.
template <class F>
int op(mlx_array* res, F&& f) {
  return guard([&] { put(res, f()); });
}

mx::Dtype to_dtype(mlx_dtype t) {
  switch (t) {
    case MLX_BOOL: return mx::bool_;
    case MLX_UINT8: return mx::uint8;
    case MLX_UINT16: return mx::uint16;
    case MLX_UINT32: return mx::uint32;
    case MLX_UINT64: return mx::uint64;
    case MLX_INT8: return mx::int8;
    case MLX_INT16: return mx::int16;
    case MLX_INT32: return mx::int32;
    case MLX_INT64: return mx::int64;
    case MLX_FLOAT16: return mx::float16;
    case MLX_FLOAT32: return mx::float32;
    case MLX_FLOAT64: return mx::float64;
    case MLX_BFLOAT16: return mx::bfloat16;
    case MLX_COMPLEX64: return mx::complex64;
  }
  throw std::invalid_argument("unknown mlx_dtype " + std::to_string(int(t)));
}

mlx_dtype from_dtype(mx::Dtype t) {
  switch (t.val()) {
    case mx::Dtype::Val::bool_: return MLX_BOOL;
    case mx::Dtype::Val::uint8: return MLX_UINT8;
    case mx::Dtype::Val::uint16: return MLX_UINT16;
    case mx::Dtype::Val::uint32: return MLX_UINT32;
    case mx::Dtype::Val::uint64: return MLX_UINT64;
    case mx::Dtype::Val::int8: return MLX_INT8;
    case mx::Dtype::Val::int16: return MLX_INT16;
    case mx::Dtype::Val::int32: return MLX_INT32;
    case mx::Dtype::Val::int64: return MLX_INT64;
    case mx::Dtype::Val::float16: return MLX_FLOAT16;
    case mx::Dtype::Val::float32: return MLX_FLOAT32;
    case mx::Dtype::Val::float64: return MLX_FLOAT64;
    case mx::Dtype::Val::bfloat16: return MLX_BFLOAT16;
    case mx::Dtype::Val::complex64: return MLX_COMPLEX64;
  }
  throw std::invalid_argument("MLX dtype has no mlx_dtype");
}

mx::Shape shape_of(const int* p, size_t n) {
  return mx::Shape(p, p + n);
}

std::optional<int> opt_int(mlx_optional_int o) {
  return o.has_value ? std::optional<int>(o.value) : std::nullopt;
}

}  // namespace

extern "C" {

// ---- errors and strings -----------------------------------------------------

void mlx_set_error_handler(mlx_error_handler_func h, void* data, void (*dtor)(void*)) {
  std::lock_guard<std::mutex> lock(handler_mu);
  handler.fn = h != nullptr ? h : default_handler;
  // As mlx-c: the handler receives data only when a dtor comes with it
  // (mlx-c keeps it in a shared_ptr made only then), else NULL.
  if (dtor != nullptr) {
    handler.data = std::shared_ptr<void>(data, dtor);
  } else {
    handler.data = nullptr;
  }
}

mlx_string mlx_string_new(void) {
  return mlx_string{nullptr};
}

const char* mlx_string_data(mlx_string s) {
  if (s.ctx == nullptr) {
    report("expected a non-empty mlx_string");
    return nullptr;
  }
  return static_cast<std::string*>(s.ctx)->c_str();
}

int mlx_string_free(mlx_string s) {
  delete static_cast<std::string*>(s.ctx);
  return 0;
}

int mlx_version(mlx_string* res) {
  return guard([&] {
    if (res->ctx != nullptr) {
      *static_cast<std::string*>(res->ctx) = mx::version();
    } else {
      res->ctx = new std::string(mx::version());
    }
  });
}

// ---- devices and streams ----------------------------------------------------

mlx_device mlx_device_new_type(mlx_device_type type, int index) {
  mlx_device d{nullptr};
  guard([&] {
    auto t = type == MLX_GPU ? mx::Device::DeviceType::gpu : mx::Device::DeviceType::cpu;
    d.ctx = new mx::Device(t, index);
  });
  return d;
}

int mlx_device_free(mlx_device d) {
  delete static_cast<mx::Device*>(d.ctx);
  return 0;
}

int mlx_device_is_available(bool* avail, mlx_device d) {
  return guard([&] { *avail = mx::is_available(dev(d)); });
}

int mlx_device_get_type(mlx_device_type* type, mlx_device d) {
  return guard([&] {
    *type = dev(d).type == mx::Device::DeviceType::gpu ? MLX_GPU : MLX_CPU;
  });
}

int mlx_get_default_device(mlx_device* res) {
  return guard([&] {
    if (res->ctx != nullptr) {
      *static_cast<mx::Device*>(res->ctx) = mx::default_device();
    } else {
      res->ctx = new mx::Device(mx::default_device());
    }
  });
}

mlx_stream mlx_stream_new_device(mlx_device d) {
  mlx_stream s{nullptr};
  guard([&] { s.ctx = new mx::Stream(mx::new_stream(dev(d))); });
  return s;
}

int mlx_stream_free(mlx_stream s) {
  delete static_cast<mx::Stream*>(s.ctx);
  return 0;
}

int mlx_stream_get_device(mlx_device* res, mlx_stream s) {
  return guard([&] {
    mx::Device d = str(s).device;
    if (res->ctx != nullptr) {
      *static_cast<mx::Device*>(res->ctx) = d;
    } else {
      res->ctx = new mx::Device(d);
    }
  });
}

int mlx_get_default_stream(mlx_stream* res, mlx_device d) {
  return guard([&] {
    mx::Stream s = mx::default_stream(dev(d));
    if (res->ctx != nullptr) {
      *static_cast<mx::Stream*>(res->ctx) = s;
    } else {
      res->ctx = new mx::Stream(s);
    }
  });
}

mlx_stream mlx_default_cpu_stream_new(void) {
  mlx_stream s{nullptr};
  guard([&] { s.ctx = new mx::Stream(mx::default_stream(mx::Device::cpu)); });
  return s;
}

mlx_stream mlx_default_gpu_stream_new(void) {
  mlx_stream s{nullptr};
  guard([&] { s.ctx = new mx::Stream(mx::default_stream(mx::Device::gpu)); });
  return s;
}

int mlx_synchronize(mlx_stream s) {
  return guard([&] { mx::synchronize(str(s)); });
}

// ---- arrays -----------------------------------------------------------------

mlx_array mlx_array_new(void) {
  return mlx_array{nullptr};
}

int mlx_array_free(mlx_array a) {
  free_handle(a.ctx);
  return 0;
}

mlx_array mlx_array_new_data(const void* data, const int* shape, int dim, mlx_dtype dtype) {
  mlx_array res{nullptr};
  guard([&] {
    mx::Dtype t = to_dtype(dtype);
    mx::Shape sh = shape_of(shape, size_t(dim));
    size_t n = t.size();
    for (int d : sh) {
      n *= size_t(d);
    }
    auto buf = mx::allocator::malloc(n);
    if (n > 0) {
      std::memcpy(buf.buffer().raw_ptr(), data, n);
    }
    res.ctx = new_handle(std::move(buf), std::move(sh), t);
  });
  return res;
}

mlx_array mlx_array_new_data_managed_payload(
    void* data, const int* shape, int dim, mlx_dtype dtype, void* payload, void (*dtor)(void*)) {
  mlx_array res{nullptr};
  guard([&] {
    auto release = [payload, dtor](void*) {
      if (dtor != nullptr) {
        dtor(payload);
      }
    };
    res.ctx = new_handle(data, shape_of(shape, size_t(dim)), to_dtype(dtype), release);
  });
  return res;
}

size_t mlx_array_size(const mlx_array a) {
  size_t n = 0;
  guard([&] { n = arr(a).size(); });
  return n;
}

size_t mlx_array_nbytes(const mlx_array a) {
  size_t n = 0;
  guard([&] { n = arr(a).nbytes(); });
  return n;
}

size_t mlx_array_ndim(const mlx_array a) {
  size_t n = 0;
  guard([&] { n = arr(a).ndim(); });
  return n;
}

const int* mlx_array_shape(const mlx_array a) {
  const int* p = nullptr;
  guard([&] { p = arr(a).shape().data(); });
  return p;
}

mlx_dtype mlx_array_dtype(const mlx_array a) {
  mlx_dtype t = MLX_BOOL;
  guard([&] { t = from_dtype(arr(a).dtype()); });
  return t;
}

const uint8_t* mlx_array_data_uint8(const mlx_array a) {
  const uint8_t* p = nullptr;
  guard([&] { p = arr(a).data<uint8_t>(); });
  return p;
}

int mlx_array_eval(mlx_array a) {
  return guard([&] { arr(a).eval(); });
}

int _mlx_array_is_row_contiguous(bool* res, const mlx_array a) {
  return guard([&] { *res = arr(a).flags().row_contiguous; });
}

// ---- vectors ----------------------------------------------------------------

mlx_vector_array mlx_vector_array_new(void) {
  mlx_vector_array v{nullptr};
  guard([&] { v.ctx = new std::vector<mx::array>(); });
  return v;
}

int mlx_vector_array_free(mlx_vector_array v) {
  delete static_cast<std::vector<mx::array>*>(v.ctx);
  return 0;
}

mlx_vector_array mlx_vector_array_new_data(const mlx_array* data, size_t size) {
  mlx_vector_array v{nullptr};
  guard([&] {
    // As mlx-c: an empty handle when any element is empty (never a partial
    // vector).
    auto out = std::make_unique<std::vector<mx::array>>();
    out->reserve(size);
    for (size_t i = 0; i < size; i++) {
      out->push_back(arr(data[i]));
    }
    v.ctx = out.release();
  });
  return v;
}

int mlx_vector_array_set_data(mlx_vector_array* v, const mlx_array* data, size_t size) {
  return guard([&] {
    std::vector<mx::array> out;
    out.reserve(size);
    for (size_t i = 0; i < size; i++) {
      out.push_back(arr(data[i]));
    }
    put(v, std::move(out));
  });
}

int mlx_vector_array_append_value(mlx_vector_array v, const mlx_array val) {
  return guard([&] { vec(v).push_back(arr(val)); });
}

size_t mlx_vector_array_size(mlx_vector_array v) {
  size_t n = 0;
  guard([&] { n = vec(v).size(); });
  return n;
}

int mlx_vector_array_get(mlx_array* res, const mlx_vector_array v, size_t idx) {
  return guard([&] { put(res, vec(v).at(idx)); });
}

// ---- evaluation, closures, compile ------------------------------------------

int mlx_eval(const mlx_vector_array outputs) {
  return guard([&] { mx::eval(vec(outputs)); });
}

int mlx_async_eval(const mlx_vector_array outputs) {
  return guard([&] { mx::async_eval(vec(outputs)); });
}

int mlx_closure_free(mlx_closure c) {
  delete static_cast<Fn*>(c.ctx);
  return 0;
}

mlx_closure mlx_closure_new_func_payload(
    int (*fun)(mlx_vector_array*, const mlx_vector_array, void*), void* payload, void (*dtor)(void*)) {
  mlx_closure c{nullptr};
  guard([&] {
    // The payload lives as long as the last copy of the closure (compiled
    // copies included) and is then handed to dtor.
    std::shared_ptr<void> keep(payload, [dtor](void* p) {
      if (dtor != nullptr) {
        dtor(p);
      }
    });
    c.ctx = new Fn([fun, keep](const std::vector<mx::array>& args) {
      auto* in = new std::vector<mx::array>(args);
      mlx_vector_array input{in};
      mlx_vector_array out{nullptr};
      int rc = fun(&out, input, keep.get());
      delete in;
      std::unique_ptr<std::vector<mx::array>> result(static_cast<std::vector<mx::array>*>(out.ctx));
      if (rc != 0) {
        throw std::runtime_error("mlx_closure returned a non-zero value");
      }
      if (!result) {
        throw std::runtime_error("mlx_closure returned no result vector");
      }
      return *result;
    });
  });
  return c;
}

int mlx_closure_apply(mlx_vector_array* res, mlx_closure c, const mlx_vector_array input) {
  return guard([&] { put(res, fn(c)(vec(input))); });
}

int mlx_compile(mlx_closure* res, const mlx_closure f, bool shapeless) {
  return guard([&] {
    Fn compiled = mx::compile(fn(f), shapeless);
    if (res->ctx != nullptr) {
      *static_cast<Fn*>(res->ctx) = std::move(compiled);
    } else {
      res->ctx = new Fn(std::move(compiled));
    }
  });
}

// ---- gradients ----------------------------------------------------------------

namespace {
using VGFn = std::function<std::pair<std::vector<mx::array>, std::vector<mx::array>>(const std::vector<mx::array>&)>;
}  // namespace

mlx_closure_value_and_grad mlx_closure_value_and_grad_new(void) { return {nullptr}; }

int mlx_closure_value_and_grad_free(mlx_closure_value_and_grad c) {
  delete static_cast<VGFn*>(c.ctx);
  return 0;
}

int mlx_closure_value_and_grad_apply(
    mlx_vector_array* res_0, mlx_vector_array* res_1, mlx_closure_value_and_grad c, const mlx_vector_array input) {
  return guard([&] {
    if (c.ctx == nullptr) {
      throw std::invalid_argument("expected a non-empty mlx_closure_value_and_grad");
    }
    auto [values, grads] = (*static_cast<VGFn*>(c.ctx))(vec(input));
    put(res_0, std::move(values));
    put(res_1, std::move(grads));
  });
}

int mlx_value_and_grad(mlx_closure_value_and_grad* res, const mlx_closure f, const int* argnums, size_t argnums_num) {
  return guard([&] {
    VGFn vg = mx::value_and_grad(fn(f), std::vector<int>(argnums, argnums + argnums_num));
    if (res->ctx != nullptr) {
      *static_cast<VGFn*>(res->ctx) = std::move(vg);
    } else {
      res->ctx = new VGFn(std::move(vg));
    }
  });
}

int mlx_vjp(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_closure f, const mlx_vector_array primals,
            const mlx_vector_array cotangents) {
  return guard([&] {
    auto [outputs, vjps] = mx::vjp(fn(f), vec(primals), vec(cotangents));
    put(res_0, std::move(outputs));
    put(res_1, std::move(vjps));
  });
}

int mlx_checkpoint(mlx_closure* res, const mlx_closure f) {
  return guard([&] {
    Fn ck = mx::checkpoint(fn(f));
    if (res->ctx != nullptr) {
      *static_cast<Fn*>(res->ctx) = std::move(ck);
    } else {
      res->ctx = new Fn(std::move(ck));
    }
  });
}

int mlx_stop_gradient(mlx_array* res, const mlx_array a, const mlx_stream s) {
  return guard([&] { put(res, mx::stop_gradient(arr(a), str(s))); });
}

// ---- memory -----------------------------------------------------------------

int mlx_clear_cache(void) {
  return guard([&] { mx::clear_cache(); });
}

int mlx_get_active_memory(size_t* res) {
  return guard([&] { *res = mx::get_active_memory(); });
}

int mlx_get_cache_memory(size_t* res) {
  return guard([&] { *res = mx::get_cache_memory(); });
}

int mlx_get_peak_memory(size_t* res) {
  return guard([&] { *res = mx::get_peak_memory(); });
}

int mlx_reset_peak_memory(void) {
  return guard([&] { mx::reset_peak_memory(); });
}

// ---- constructors -----------------------------------------------------------

int mlx_zeros(mlx_array* res, const int* shape, size_t n, mlx_dtype dtype, const mlx_stream s) {
  return op(res, [&] { return mx::zeros(shape_of(shape, n), to_dtype(dtype), str(s)); });
}

int mlx_full(mlx_array* res, const int* shape, size_t n, const mlx_array vals, mlx_dtype dtype, const mlx_stream s) {
  return op(res, [&] { return mx::full(shape_of(shape, n), arr(vals), to_dtype(dtype), str(s)); });
}

// ---- elementwise ------------------------------------------------------------

#define MLXGO_BINARY(name)                                                                  \
  int mlx_##name(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s) { \
    return op(res, [&] { return mx::name(arr(a), arr(b), str(s)); });                       \
  }
#define MLXGO_UNARY(name)                                                 \
  int mlx_##name(mlx_array* res, const mlx_array a, const mlx_stream s) { \
    return op(res, [&] { return mx::name(arr(a), str(s)); });             \
  }

MLXGO_BINARY(add)
MLXGO_BINARY(subtract)
MLXGO_BINARY(multiply)
MLXGO_BINARY(divide)
MLXGO_BINARY(maximum)
MLXGO_BINARY(minimum)
MLXGO_BINARY(equal)
MLXGO_BINARY(less)
MLXGO_BINARY(greater)
MLXGO_BINARY(matmul)
MLXGO_UNARY(exp)
MLXGO_UNARY(log)
MLXGO_UNARY(negative)
MLXGO_UNARY(abs)
MLXGO_UNARY(sqrt)
MLXGO_UNARY(rsqrt)
MLXGO_UNARY(square)
MLXGO_UNARY(sigmoid)
MLXGO_UNARY(tanh)
MLXGO_UNARY(sin)
MLXGO_UNARY(cos)

#undef MLXGO_BINARY
#undef MLXGO_UNARY

int mlx_astype(mlx_array* res, const mlx_array a, mlx_dtype dtype, const mlx_stream s) {
  return op(res, [&] { return mx::astype(arr(a), to_dtype(dtype), str(s)); });
}

int mlx_where(mlx_array* res, const mlx_array c, const mlx_array x, const mlx_array y, const mlx_stream s) {
  return op(res, [&] { return mx::where(arr(c), arr(x), arr(y), str(s)); });
}

// ---- shaping and indexing ---------------------------------------------------

int mlx_reshape(mlx_array* res, const mlx_array a, const int* shape, size_t n, const mlx_stream s) {
  return op(res, [&] { return mx::reshape(arr(a), shape_of(shape, n), str(s)); });
}

int mlx_transpose_axes(mlx_array* res, const mlx_array a, const int* axes, size_t n, const mlx_stream s) {
  return op(res, [&] { return mx::transpose(arr(a), std::vector<int>(axes, axes + n), str(s)); });
}

int mlx_broadcast_to(mlx_array* res, const mlx_array a, const int* shape, size_t n, const mlx_stream s) {
  return op(res, [&] { return mx::broadcast_to(arr(a), shape_of(shape, n), str(s)); });
}

int mlx_contiguous(mlx_array* res, const mlx_array a, bool allow_col_major, const mlx_stream s) {
  return op(res, [&] { return mx::contiguous(arr(a), allow_col_major, str(s)); });
}

int mlx_slice(mlx_array* res, const mlx_array a, const int* start, size_t start_n, const int* stop, size_t stop_n,
              const int* strides, size_t strides_n, const mlx_stream s) {
  return op(res, [&] {
    return mx::slice(arr(a), shape_of(start, start_n), shape_of(stop, stop_n), shape_of(strides, strides_n), str(s));
  });
}

int mlx_slice_update(mlx_array* res, const mlx_array src, const mlx_array update, const int* start, size_t start_n,
                     const int* stop, size_t stop_n, const int* strides, size_t strides_n, const mlx_stream s) {
  return op(res, [&] {
    return mx::slice_update(arr(src), arr(update), shape_of(start, start_n), shape_of(stop, stop_n),
                            shape_of(strides, strides_n), str(s));
  });
}

int mlx_concatenate_axis(mlx_array* res, const mlx_vector_array arrays, int axis, const mlx_stream s) {
  return op(res, [&] { return mx::concatenate(vec(arrays), axis, str(s)); });
}

int mlx_take_axis(mlx_array* res, const mlx_array a, const mlx_array indices, int axis, const mlx_stream s) {
  return op(res, [&] { return mx::take(arr(a), arr(indices), axis, str(s)); });
}

// ---- reductions -------------------------------------------------------------

int mlx_sum_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s) {
  return op(res, [&] { return mx::sum(arr(a), axis, keepdims, str(s)); });
}

int mlx_max_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s) {
  return op(res, [&] { return mx::max(arr(a), axis, keepdims, str(s)); });
}

int mlx_argmax_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s) {
  return op(res, [&] { return mx::argmax(arr(a), axis, keepdims, str(s)); });
}

int mlx_logsumexp_axis(mlx_array* res, const mlx_array a, int axis, bool keepdims, const mlx_stream s) {
  return op(res, [&] { return mx::logsumexp(arr(a), axis, keepdims, str(s)); });
}

int mlx_softmax_axis(mlx_array* res, const mlx_array a, int axis, bool precise, const mlx_stream s) {
  return op(res, [&] { return mx::softmax(arr(a), std::vector<int>{axis}, precise, str(s)); });
}

// ---- quantization -----------------------------------------------------------

int mlx_quantize(mlx_vector_array* res, const mlx_array w, mlx_optional_int group_size, mlx_optional_int bits,
                 const char* mode, const mlx_array global_scale, const mlx_stream s) {
  return guard([&] {
    put(res, mx::quantize(arr(w), opt_int(group_size), opt_int(bits), mode, opt(global_scale), str(s)));
  });
}

int mlx_dequantize(mlx_array* res, const mlx_array w, const mlx_array scales, const mlx_array biases,
                   mlx_optional_int group_size, mlx_optional_int bits, const char* mode,
                   const mlx_array global_scale, mlx_optional_dtype dtype, const mlx_stream s) {
  return op(res, [&] {
    std::optional<mx::Dtype> t;
    if (dtype.has_value) {
      t = to_dtype(dtype.value);
    }
    return mx::dequantize(arr(w), arr(scales), opt(biases), opt_int(group_size), opt_int(bits), mode,
                          opt(global_scale), t, str(s));
  });
}

int mlx_quantized_matmul(mlx_array* res, const mlx_array x, const mlx_array w, const mlx_array scales,
                         const mlx_array biases, bool transpose, mlx_optional_int group_size, mlx_optional_int bits,
                         const char* mode, const mlx_stream s) {
  return op(res, [&] {
    return mx::quantized_matmul(arr(x), arr(w), arr(scales), opt(biases), transpose, opt_int(group_size),
                                opt_int(bits), mode, str(s));
  });
}

// ---- mx.fast ----------------------------------------------------------------

int mlx_fast_rms_norm(mlx_array* res, const mlx_array x, const mlx_array weight, float eps, const mlx_stream s) {
  return op(res, [&] { return mx::fast::rms_norm(arr(x), opt(weight), eps, str(s)); });
}

int mlx_fast_rope(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base,
                  float scale, int offset, const mlx_array freqs, const mlx_stream s) {
  return op(res, [&] {
    std::optional<float> b = base.has_value ? std::optional<float>(base.value) : std::nullopt;
    return mx::fast::rope(arr(x), dims, traditional, b, scale, offset, opt(freqs), str(s));
  });
}

int mlx_fast_rope_dynamic(mlx_array* res, const mlx_array x, int dims, bool traditional, mlx_optional_float base,
                          float scale, const mlx_array offset, const mlx_array freqs, const mlx_stream s) {
  return op(res, [&] {
    std::optional<float> b = base.has_value ? std::optional<float>(base.value) : std::nullopt;
    return mx::fast::rope(arr(x), dims, traditional, b, scale, arr(offset), opt(freqs), str(s));
  });
}

int mlx_fast_scaled_dot_product_attention(mlx_array* res, const mlx_array q, const mlx_array k, const mlx_array v,
                                          float scale, const char* mask_mode, const mlx_array mask_arr,
                                          const mlx_array sinks, const mlx_stream s) {
  return op(res, [&] {
    return mx::fast::scaled_dot_product_attention(arr(q), arr(k), arr(v), scale, mask_mode, opt(mask_arr),
                                                  opt(sinks), /*force_fused=*/false, str(s));
  });
}

// ---- mlxgo extensions (not mlx-c) ---------------------------------------------

// mlxgo_fast_cross_entropy is mx.fast.cross_entropy (MLX 0.32; mlx-c 0.7
// has it as mlx_fast_cross_entropy, the older mlx-c the tag mlxc_system
// may find does not): logsumexp(logits) - logits[target] per row, in
// float32, fused on Metal and CUDA.
int mlxgo_fast_cross_entropy(mlx_array* res, const mlx_array logits, const mlx_array targets, const mlx_stream s) {
  return op(res, [&] { return mx::fast::cross_entropy(arr(logits), arr(targets), str(s)); });
}

// mlxgo_graph_ops walks the graph that computes outs[0..n) and returns, in a
// malloc'd string the caller frees, the name of the primitive of every node
// still to run (an array not yet evaluated, its siblings, the other outputs
// of the same call, counted with it), one per line. For diagnostics (op
// counts, as mx.export_to_dot draws them), not for the hot path.
char* mlxgo_graph_ops(const mlx_array* outs, size_t n) {
  char* out = nullptr;
  guard([&] {
    std::vector<mx::array> stack;
    for (size_t i = 0; i < n; i++) {
      stack.push_back(arr(outs[i]));
    }
    std::unordered_set<std::uintptr_t> seen;
    std::string names;
    while (!stack.empty()) {
      mx::array a = std::move(stack.back());
      stack.pop_back();
      if (!seen.insert(a.id()).second || !a.has_primitive()) {
        continue;
      }
      for (auto& s : a.siblings()) {
        seen.insert(s.id());
      }
      names += a.primitive().name();
      names += '\n';
      for (auto& in : a.inputs()) {
        stack.push_back(in);
      }
    }
    out = static_cast<char*>(std::malloc(names.size() + 1));
    if (out == nullptr) {
      throw std::bad_alloc();
    }
    std::memcpy(out, names.c_str(), names.size() + 1);
  });
  return out;
}

}  // extern "C"
