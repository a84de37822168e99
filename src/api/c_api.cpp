// The C ABI (include/flashattn/c_api.h) over the C++ API: copies the caller's struct into
// ForwardParams (DecodeParams), calls can_implement() and forward() (decode()), and turns the
// Status into a code and a message.
// Nothing thrown inside the library may unwind into a C caller (ctypes would abort the process),
// so every entry point catches everything.
#include "flashattn/c_api.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

// The C constants are the C++ enum values; a renumbering on either side must fail to compile.
static_assert(FLASHATTN_C_OK == static_cast<int>(StatusCode::ok));
static_assert(FLASHATTN_C_INVALID_ARGUMENT == static_cast<int>(StatusCode::invalid_argument));
static_assert(FLASHATTN_C_UNSUPPORTED == static_cast<int>(StatusCode::unsupported));
static_assert(FLASHATTN_C_CUDA_ERROR == static_cast<int>(StatusCode::cuda_error));
static_assert(FLASHATTN_C_BF16 == static_cast<int>(DType::bf16));
static_assert(FLASHATTN_C_FP16 == static_cast<int>(DType::fp16));
static_assert(FLASHATTN_C_KERNEL_AUTO == static_cast<int>(Kernel::automatic));
static_assert(FLASHATTN_C_KERNEL_CPU == static_cast<int>(Kernel::cpu));
static_assert(FLASHATTN_C_KERNEL_K2 == static_cast<int>(Kernel::k2));
static_assert(FLASHATTN_C_KERNEL_FA2 == static_cast<int>(Kernel::fa2));
static_assert(FLASHATTN_C_KERNEL_K6 == static_cast<int>(Kernel::k6));
static_assert(FLASHATTN_C_KERNEL_K8 == static_cast<int>(Kernel::k8));
static_assert(std::size(kAllKernels) == FLASHATTN_C_KERNEL_K8 + 1);

// Version 1 of the struct; the Python mirror (python/flashattn/_lib.py) checks the same numbers.
static_assert(sizeof(flashattn_c_fwd_params) == 256);
static_assert(offsetof(flashattn_c_fwd_params, q) == 64);
static_assert(offsetof(flashattn_c_fwd_params, q_stride) == 128);
constexpr size_t kV1Size = sizeof(flashattn_c_fwd_params);

// Version 1 of the decode struct; python/flashattn/_lib.py checks the same numbers.
static_assert(sizeof(flashattn_c_decode_params) == 368);
static_assert(offsetof(flashattn_c_decode_params, q) == 80);
static_assert(offsetof(flashattn_c_decode_params, q_stride) == 176);
constexpr size_t kDecodeV1Size = sizeof(flashattn_c_decode_params);

struct Converted {
  Status status;
  ForwardParams params;
};

struct ConvertedDecode {
  Status status;
  DecodeParams params;
};

void write_message(const std::string& msg, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  const size_t n = std::min(msg.size(), err_len - 1);
  std::memcpy(err, msg.data(), n);
  err[n] = '\0';
}

Status invalid(std::string msg) {
  return {StatusCode::invalid_argument, std::move(msg)};
}

// The checks every versioned params struct of the ABI shares: non-null, at least version 1's
// size, reserved 0, a known dtype. Only the caller's prefix is read: a larger struct from a newer
// caller keeps its unknown tail to itself; every field of version 1 is required.
template <class CParams>
Status read_versioned(const CParams* in, size_t v1_size, const char* type, CParams& out) {
  if (in == nullptr) return invalid("params: must not be null");
  if (in->struct_size < v1_size) {
    return invalid("struct_size: must be at least " + std::to_string(v1_size) + " (sizeof " +
                   type + "), got " + std::to_string(in->struct_size));
  }
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof out));
  if (out.reserved != 0) return invalid("reserved: must be 0, got " + std::to_string(out.reserved));
  if (out.dtype != FLASHATTN_C_BF16 && out.dtype != FLASHATTN_C_FP16) {
    return invalid("dtype: must be FLASHATTN_C_BF16 (0) or FLASHATTN_C_FP16 (1), got " +
                   std::to_string(out.dtype));
  }
  return Status::success();
}

void copy_strides(int64_t (&dst)[4], const int64_t (&src)[4]) {
  std::copy(std::begin(src), std::end(src), std::begin(dst));
}

Converted convert(const flashattn_c_fwd_params* in) {
  Converted c;
  flashattn_c_fwd_params p{};
  c.status = read_versioned(in, kV1Size, "flashattn_c_fwd_params", p);
  if (!c.status.ok()) return c;
  if (p.causal != 0 && p.causal != 1) {
    c.status = invalid("causal: must be 0 or 1, got " + std::to_string(p.causal));
    return c;
  }
  ForwardParams& f = c.params;
  f.dtype = static_cast<DType>(p.dtype);
  f.batch = p.batch;
  f.seqlen_q = p.seqlen_q;
  f.seqlen_k = p.seqlen_k;
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.head_dim_v = p.head_dim_v;
  f.q.data = p.q;
  f.k.data = p.k;
  f.v.data = p.v;
  f.o.data = p.o;
  copy_strides(f.q.stride, p.q_stride);
  copy_strides(f.k.stride, p.k_stride);
  copy_strides(f.v.stride, p.v_stride);
  copy_strides(f.o.stride, p.o_stride);
  f.lse = p.lse;
  f.softmax_scale = p.softmax_scale;
  f.causal = p.causal != 0;
  f.window_left = p.window_left;
  f.window_right = p.window_right;
  f.cu_seqlens_q = p.cu_seqlens_q;
  f.cu_seqlens_k = p.cu_seqlens_k;
  f.total_q = p.total_q;
  f.total_k = p.total_k;
  f.stream = p.stream;
  return c;
}

ConvertedDecode convert_decode(const flashattn_c_decode_params* in) {
  ConvertedDecode c;
  flashattn_c_decode_params p{};
  c.status = read_versioned(in, kDecodeV1Size, "flashattn_c_decode_params", p);
  if (!c.status.ok()) return c;
  for (auto [name, flag] : {std::pair{"causal", p.causal}, {"check_indices", p.check_indices}}) {
    if (flag != 0 && flag != 1) {
      c.status = invalid(std::string(name) + ": must be 0 or 1, got " + std::to_string(flag));
      return c;
    }
  }
  DecodeParams& d = c.params;
  d.dtype = static_cast<DType>(p.dtype);
  d.batch = p.batch;
  d.seqlen_q = p.seqlen_q;
  d.heads_q = p.heads_q;
  d.heads_kv = p.heads_kv;
  d.head_dim = p.head_dim;
  d.q.data = p.q;
  d.o.data = p.o;
  d.lse = p.lse;
  d.k_cache.data = p.k_cache;
  d.v_cache.data = p.v_cache;
  d.cache_batch = p.cache_batch;
  d.cache_seqlen = p.cache_seqlen;
  d.cache_batch_idx = p.cache_batch_idx;
  d.page_table = p.page_table;
  d.num_pages = p.num_pages;
  d.page_size = p.page_size;
  d.max_pages = p.max_pages;
  d.page_table_stride = p.page_table_stride;
  d.cache_seqlens = p.cache_seqlens;
  d.k_new.data = p.k_new;
  d.v_new.data = p.v_new;
  d.seqlen_new = p.seqlen_new;
  copy_strides(d.q.stride, p.q_stride);
  copy_strides(d.o.stride, p.o_stride);
  copy_strides(d.k_cache.stride, p.k_cache_stride);
  copy_strides(d.v_cache.stride, p.v_cache_stride);
  copy_strides(d.k_new.stride, p.k_new_stride);
  copy_strides(d.v_new.stride, p.v_new_stride);
  d.softmax_scale = p.softmax_scale;
  d.causal = p.causal != 0;
  d.window_left = p.window_left;
  d.window_right = p.window_right;
  d.num_splits = p.num_splits;
  d.check_indices = p.check_indices != 0;
  d.stream = p.stream;
  return c;
}

bool valid_kernel_id(int kernel) {
  return kernel >= 0 && kernel < static_cast<int>(std::size(kAllKernels));
}

// Runs `fn()` -> Status and reports it: no exception leaves, the message goes to `err`.
template <class Fn>
int guarded(char* err, size_t err_len, Fn fn) noexcept {
  Status s;
  try {
    s = fn();
  } catch (const std::exception& e) {
    write_message(std::string("internal error: ") + e.what(), err, err_len);
    return FLASHATTN_C_INTERNAL_ERROR;
  } catch (...) {
    write_message("internal error: unknown exception", err, err_len);
    return FLASHATTN_C_INTERNAL_ERROR;
  }
  try {
    write_message(s.message, err, err_len);
  } catch (...) {  // nothing useful left to report; the code still says what happened
  }
  return static_cast<int>(s.code);
}

// Runs `fn(params, kernel)` -> Status behind the checks shared by forward and can_implement.
template <class Fn>
int call(const flashattn_c_fwd_params* in, int kernel, char* err, size_t err_len, Fn fn) noexcept {
  return guarded(err, err_len, [&]() -> Status {
    Converted c = convert(in);
    if (!c.status.ok()) return std::move(c.status);
    if (!valid_kernel_id(kernel))
      return invalid("kernel: unknown kernel id " + std::to_string(kernel));
    return fn(c.params, static_cast<Kernel>(kernel));
  });
}

// The same for the decode entry points.
template <class Fn>
int call_decode(const flashattn_c_decode_params* in, char* err, size_t err_len, Fn fn) noexcept {
  return guarded(err, err_len, [&]() -> Status {
    ConvertedDecode c = convert_decode(in);
    if (!c.status.ok()) return std::move(c.status);
    return fn(c.params);
  });
}

}  // namespace
}  // namespace flashattn

namespace fa = flashattn;

extern "C" {

int flashattn_c_forward(const flashattn_c_fwd_params* params, int kernel, char* err,
                        size_t err_len) {
  return fa::call(params, kernel, err, err_len,
                  [](const fa::ForwardParams& p, fa::Kernel k) { return fa::forward(p, k); });
}

int flashattn_c_can_implement(const flashattn_c_fwd_params* params, int kernel, char* err,
                              size_t err_len) {
  return fa::call(params, kernel, err, err_len,
                  [](const fa::ForwardParams& p, fa::Kernel k) { return fa::can_implement(p, k); });
}

int flashattn_c_select_kernel(const flashattn_c_fwd_params* params) {
  try {
    fa::Converted c = fa::convert(params);
    if (!c.status.ok()) return FLASHATTN_C_KERNEL_AUTO;
    return static_cast<int>(fa::select_kernel(c.params));
  } catch (...) {
    return FLASHATTN_C_KERNEL_AUTO;
  }
}

int flashattn_c_kernel_from_name(const char* name) {
  if (name == nullptr) return -1;
  const std::optional<fa::Kernel> k = fa::parse_kernel(name);
  return k ? static_cast<int>(*k) : -1;
}

const char* flashattn_c_kernel_name(int kernel) {
  return fa::valid_kernel_id(kernel) ? fa::kernel_name(static_cast<fa::Kernel>(kernel)) : nullptr;
}

int flashattn_c_kernel_is_built(int kernel) {
  return fa::valid_kernel_id(kernel) && fa::kernel_is_built(static_cast<fa::Kernel>(kernel));
}

int flashattn_c_kernel_runs_on_host(int kernel) {
  return fa::valid_kernel_id(kernel) && fa::kernel_runs_on_host(static_cast<fa::Kernel>(kernel));
}

int flashattn_c_decode(const flashattn_c_decode_params* params, char* err, size_t err_len) {
  return fa::call_decode(params, err, err_len,
                         [](const fa::DecodeParams& p) { return fa::decode(p); });
}

int flashattn_c_decode_can_implement(const flashattn_c_decode_params* params, char* err,
                                     size_t err_len) {
  return fa::call_decode(params, err, err_len,
                         [](const fa::DecodeParams& p) { return fa::can_implement(p); });
}

size_t flashattn_c_decode_params_size(void) {
  return sizeof(flashattn_c_decode_params);
}

size_t flashattn_c_fwd_params_size(void) {
  return sizeof(flashattn_c_fwd_params);
}

const char* flashattn_c_version(void) {
  return FLASHATTN_C_VERSION;
}

}  // extern "C"
