// The C ABI (include/flashattn/c_api.h) over the C++ API: copies the caller's struct into
// ForwardParams (DecodeParams, BackwardParams, QuantizeFp8Params) field by field from one list
// per struct, calls can_implement() and forward() (decode(), backward(), quantize_fp8()), and
// turns the Status into a code and a message.
// Nothing thrown inside the library may unwind into a C caller (ctypes would abort the process),
// so every entry point catches everything.
#include "flashattn/c_api.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
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
static_assert(FLASHATTN_C_E4M3 == static_cast<int>(DType::e4m3));
static_assert(FLASHATTN_C_E5M2 == static_cast<int>(DType::e5m2));
static_assert(FLASHATTN_C_KERNEL_AUTO == static_cast<int>(Kernel::automatic));
static_assert(FLASHATTN_C_KERNEL_CPU == static_cast<int>(Kernel::cpu));
static_assert(FLASHATTN_C_KERNEL_K2 == static_cast<int>(Kernel::k2));
static_assert(FLASHATTN_C_KERNEL_FA2 == static_cast<int>(Kernel::fa2));
static_assert(FLASHATTN_C_KERNEL_K6 == static_cast<int>(Kernel::k6));
static_assert(FLASHATTN_C_KERNEL_K8 == static_cast<int>(Kernel::k8));
static_assert(std::size(kAllKernels) == FLASHATTN_C_KERNEL_K8 + 1);
static_assert(FLASHATTN_C_ROTATION_NONE == static_cast<int>(Fp8Rotation::none));
static_assert(FLASHATTN_C_ROTATION_HADAMARD == static_cast<int>(Fp8Rotation::hadamard));

// The struct's layout; the Python mirror (python/flashattn/_lib.py) checks the same numbers.
// Version 1 ended at 256 bytes (before `sinks`), version 2 at 264 (before `softcap`), version 3
// at 272 (before `block_table`), version 4 at 304 (before `out_dtype`), version 5 at 336 (before
// `q_block_descale`): callers built against them still run, with no sinks, no softcap, no block
// table, FP8 inputs written as bf16 with no descales, and no block descales (read_versioned
// zero-fills the tail they do not know; 0 is FLASHATTN_C_BF16).
// `reserved2` pads version 3, `reserved3` version 4 and `reserved4` the int32 out_dtype of
// version 5 to a multiple of 8 bytes.
static_assert(offsetof(flashattn_c_fwd_params, q) == 64);
static_assert(offsetof(flashattn_c_fwd_params, q_stride) == 128);
constexpr size_t kV1Size = 256;
static_assert(offsetof(flashattn_c_fwd_params, sinks) == kV1Size);
static_assert(offsetof(flashattn_c_fwd_params, softcap) == 264);      // version 2's size
static_assert(offsetof(flashattn_c_fwd_params, block_table) == 272);  // version 3's size
static_assert(offsetof(flashattn_c_fwd_params, out_dtype) == 304);    // version 4's size
static_assert(offsetof(flashattn_c_fwd_params, q_block_descale) == 336);  // version 5's size
static_assert(sizeof(flashattn_c_fwd_params) == 360);

// The decode struct's layout; version 1 ended at 368 bytes (before `sinks`); `reserved3` pads
// version 4 (the rotary fields) to a multiple of 8 bytes.
static_assert(offsetof(flashattn_c_decode_params, q) == 80);
static_assert(offsetof(flashattn_c_decode_params, q_stride) == 176);
constexpr size_t kDecodeV1Size = 368;
static_assert(offsetof(flashattn_c_decode_params, sinks) == kDecodeV1Size);
static_assert(offsetof(flashattn_c_decode_params, softcap) == 376);     // version 2's size
static_assert(offsetof(flashattn_c_decode_params, rotary_cos) == 384);  // version 3's size
static_assert(offsetof(flashattn_c_decode_params, cache_dtype) == 416);  // version 4's size
static_assert(sizeof(flashattn_c_decode_params) == 440);

// The backward struct's layout (version 1: 432 bytes; its sixteenth 32-bit field is
// `deterministic`, so it has no `reserved`).
static_assert(offsetof(flashattn_c_bwd_params, q) == 64);
static_assert(offsetof(flashattn_c_bwd_params, q_stride) == 176);
constexpr size_t kBwdV1Size = 432;
static_assert(offsetof(flashattn_c_bwd_params, softcap) == kBwdV1Size);
static_assert(sizeof(flashattn_c_bwd_params) == 440);

// The pre-pass struct's layout (version 1: 320 bytes; ten 32-bit fields, so no `reserved`).
static_assert(offsetof(flashattn_c_quantize_fp8_params, seed) == 40);
static_assert(offsetof(flashattn_c_quantize_fp8_params, q) == 48);
static_assert(offsetof(flashattn_c_quantize_fp8_params, q_stride) == 128);
constexpr size_t kQuantV1Size = 320;
static_assert(sizeof(flashattn_c_quantize_fp8_params) == kQuantV1Size);

// ---- the field lists ---------------------------------------------------------------------------
// Every field of each C struct, in declaration order, as HEADER(c_name) (read by read_versioned,
// not copied) or FIELD(c_name, target): copied into the C++ params' `target` by copy_field()
// below (int32 flags checked to be 0 or 1 into bool, dtype into DType, stride arrays, the rest
// assigned). The same lists build the layout tables the library exports, and static_asserts
// below prove that each list names every byte of its struct in order: a field added to c_api.h
// and not here fails to compile.
// clang-format off
#define FLASHATTN_C_FWD_FIELDS(HEADER, FIELD)                                                   \
  HEADER(struct_size) FIELD(dtype, dtype) FIELD(batch, batch) FIELD(seqlen_q, seqlen_q)         \
  FIELD(seqlen_k, seqlen_k) FIELD(heads_q, heads_q) FIELD(heads_kv, heads_kv)                   \
  FIELD(head_dim, head_dim) FIELD(head_dim_v, head_dim_v) FIELD(softmax_scale, softmax_scale)   \
  FIELD(causal, causal) FIELD(window_left, window_left) FIELD(window_right, window_right)       \
  FIELD(total_q, total_q) FIELD(total_k, total_k) HEADER(reserved) FIELD(q, q.data)             \
  FIELD(k, k.data) FIELD(v, v.data) FIELD(o, o.data) FIELD(lse, lse)                            \
  FIELD(cu_seqlens_q, cu_seqlens_q) FIELD(cu_seqlens_k, cu_seqlens_k) FIELD(stream, stream)     \
  FIELD(q_stride, q.stride) FIELD(k_stride, k.stride) FIELD(v_stride, v.stride)                 \
  FIELD(o_stride, o.stride) FIELD(sinks, sinks) FIELD(softcap, softcap) HEADER(reserved2)       \
  FIELD(block_table, block_table) FIELD(block_table_stride, block_table_stride)                 \
  FIELD(max_blocks_per_seq, max_blocks_per_seq) FIELD(num_blocks, num_blocks)                   \
  FIELD(page_size, page_size) HEADER(reserved3) FIELD(out_dtype, out_dtype)                     \
  HEADER(reserved4) FIELD(q_descale, q_descale) FIELD(k_descale, k_descale)                     \
  FIELD(v_descale, v_descale) FIELD(q_block_descale, q_block_descale)                           \
  FIELD(k_block_descale, k_block_descale) FIELD(v_block_descale, v_block_descale)

#define FLASHATTN_C_DECODE_FIELDS(HEADER, FIELD)                                                \
  HEADER(struct_size) FIELD(dtype, dtype) FIELD(batch, batch) FIELD(seqlen_q, seqlen_q)         \
  FIELD(heads_q, heads_q) FIELD(heads_kv, heads_kv) FIELD(head_dim, head_dim)                   \
  FIELD(cache_batch, cache_batch) FIELD(cache_seqlen, cache_seqlen) FIELD(num_pages, num_pages) \
  FIELD(page_size, page_size) FIELD(max_pages, max_pages) FIELD(seqlen_new, seqlen_new)         \
  FIELD(softmax_scale, softmax_scale) FIELD(causal, causal) FIELD(window_left, window_left)     \
  FIELD(window_right, window_right) FIELD(num_splits, num_splits)                               \
  FIELD(check_indices, check_indices) HEADER(reserved) FIELD(q, q.data) FIELD(o, o.data)        \
  FIELD(lse, lse) FIELD(k_cache, k_cache.data) FIELD(v_cache, v_cache.data)                     \
  FIELD(cache_batch_idx, cache_batch_idx) FIELD(page_table, page_table)                         \
  FIELD(cache_seqlens, cache_seqlens) FIELD(k_new, k_new.data) FIELD(v_new, v_new.data)         \
  FIELD(stream, stream) FIELD(page_table_stride, page_table_stride) FIELD(q_stride, q.stride)   \
  FIELD(o_stride, o.stride) FIELD(k_cache_stride, k_cache.stride)                               \
  FIELD(v_cache_stride, v_cache.stride) FIELD(k_new_stride, k_new.stride)                       \
  FIELD(v_new_stride, v_new.stride) FIELD(sinks, sinks) FIELD(softcap, softcap)              \
  HEADER(reserved2) FIELD(rotary_cos, rotary_cos) FIELD(rotary_sin, rotary_sin)                 \
  FIELD(rotary_dim, rotary_dim) FIELD(seqlen_ro, seqlen_ro)                                     \
  FIELD(rotary_interleaved, rotary_interleaved) HEADER(reserved3)                               \
  FIELD(cache_dtype, cache_dtype) FIELD(kv_scale_layout, kv_scale_layout)                       \
  FIELD(k_scale, k_scale) FIELD(v_scale, v_scale)

#define FLASHATTN_C_BWD_FIELDS(HEADER, FIELD)                                                   \
  HEADER(struct_size) FIELD(dtype, dtype) FIELD(batch, batch) FIELD(seqlen_q, seqlen_q)         \
  FIELD(seqlen_k, seqlen_k) FIELD(heads_q, heads_q) FIELD(heads_kv, heads_kv)                   \
  FIELD(head_dim, head_dim) FIELD(head_dim_v, head_dim_v) FIELD(softmax_scale, softmax_scale)   \
  FIELD(causal, causal) FIELD(window_left, window_left) FIELD(window_right, window_right)       \
  FIELD(total_q, total_q) FIELD(total_k, total_k) FIELD(deterministic, deterministic)           \
  FIELD(q, q.data) FIELD(k, k.data) FIELD(v, v.data) FIELD(o, o.data) FIELD(dout, dout.data)    \
  FIELD(lse, lse) FIELD(dq, dq.data) FIELD(dk, dk.data) FIELD(dv, dv.data)                      \
  FIELD(cu_seqlens_q, cu_seqlens_q) FIELD(cu_seqlens_k, cu_seqlens_k) FIELD(sinks, sinks)       \
  FIELD(dsinks, dsinks) FIELD(stream, stream) FIELD(q_stride, q.stride)                         \
  FIELD(k_stride, k.stride) FIELD(v_stride, v.stride) FIELD(o_stride, o.stride)                 \
  FIELD(dout_stride, dout.stride) FIELD(dq_stride, dq.stride) FIELD(dk_stride, dk.stride)       \
  FIELD(dv_stride, dv.stride) FIELD(softcap, softcap) HEADER(reserved2)

#define FLASHATTN_C_QUANTIZE_FP8_FIELDS(HEADER, FIELD)                                          \
  HEADER(struct_size) FIELD(dtype, dtype) FIELD(batch, batch) FIELD(seqlen_q, seqlen_q)         \
  FIELD(seqlen_k, seqlen_k) FIELD(heads_q, heads_q) FIELD(heads_kv, heads_kv)                   \
  FIELD(head_dim, head_dim) FIELD(head_dim_v, head_dim_v) FIELD(rotation, rotation)             \
  FIELD(seed, seed) FIELD(q, q.data) FIELD(k, k.data) FIELD(v, v.data) FIELD(q_out, q_out.data) \
  FIELD(k_out, k_out.data) FIELD(v_out, v_out.data) FIELD(q_block_descale, q_block_descale)     \
  FIELD(k_block_descale, k_block_descale) FIELD(v_block_descale, v_block_descale)               \
  FIELD(stream, stream) FIELD(q_stride, q.stride) FIELD(k_stride, k.stride)                     \
  FIELD(v_stride, v.stride) FIELD(q_out_stride, q_out.stride) FIELD(k_out_stride, k_out.stride) \
  FIELD(v_out_stride, v_out.stride)
// clang-format on

// The C type of a field, as flashattn_c_field names it.
template <class T>
constexpr const char* c_type_name() {
  if constexpr (std::is_same_v<T, uint32_t>)
    return "uint32";
  else if constexpr (std::is_same_v<T, int32_t>)
    return "int32";
  else if constexpr (std::is_same_v<T, float>)
    return "float";
  else if constexpr (std::is_same_v<T, int64_t>)
    return "int64";
  else if constexpr (std::is_same_v<T, uint64_t>)
    return "uint64";
  else if constexpr (std::is_pointer_v<T>)
    return "pointer";
  else if constexpr (std::is_same_v<T, int64_t[4]>)
    return "int64[4]";
  else
    static_assert(sizeof(T) == 0, "a field type flashattn_c_field has no name for");
}

#define FLASHATTN_C_LAYOUT_HEADER(c) \
  flashattn_c_field{#c, c_type_name<decltype(S::c)>(), offsetof(S, c), sizeof(S::c)},
#define FLASHATTN_C_LAYOUT_FIELD(c, target) FLASHATTN_C_LAYOUT_HEADER(c)

constexpr auto kFwdFields = [] {
  using S = flashattn_c_fwd_params;
  return std::array{FLASHATTN_C_FWD_FIELDS(FLASHATTN_C_LAYOUT_HEADER, FLASHATTN_C_LAYOUT_FIELD)};
}();
constexpr auto kDecodeFields = [] {
  using S = flashattn_c_decode_params;
  return std::array{FLASHATTN_C_DECODE_FIELDS(FLASHATTN_C_LAYOUT_HEADER, FLASHATTN_C_LAYOUT_FIELD)};
}();
constexpr auto kBwdFields = [] {
  using S = flashattn_c_bwd_params;
  return std::array{FLASHATTN_C_BWD_FIELDS(FLASHATTN_C_LAYOUT_HEADER, FLASHATTN_C_LAYOUT_FIELD)};
}();
constexpr auto kQuantFields = [] {
  using S = flashattn_c_quantize_fp8_params;
  return std::array{
      FLASHATTN_C_QUANTIZE_FP8_FIELDS(FLASHATTN_C_LAYOUT_HEADER, FLASHATTN_C_LAYOUT_FIELD)};
}();

// The fields follow each other with no gap and end at sizeof(S): the list misses no field, and
// (the structs having no implicit padding) names them in declaration order.
template <class S, size_t N>
constexpr bool covers_every_byte(const std::array<flashattn_c_field, N>& fields) {
  size_t at = 0;
  for (const flashattn_c_field& f : fields) {
    if (f.offset != at) return false;
    at += f.size;
  }
  return at == sizeof(S);
}
static_assert(covers_every_byte<flashattn_c_fwd_params>(kFwdFields));
static_assert(covers_every_byte<flashattn_c_decode_params>(kDecodeFields));
static_assert(covers_every_byte<flashattn_c_bwd_params>(kBwdFields));
static_assert(covers_every_byte<flashattn_c_quantize_fp8_params>(kQuantFields));

struct Converted {
  Status status;
  ForwardParams params;
};

struct ConvertedDecode {
  Status status;
  DecodeParams params;
};

struct ConvertedBwd {
  Status status;
  BackwardParams params;
};

struct ConvertedQuant {
  Status status;
  QuantizeFp8Params params;
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

// A FLASHATTN_C_* element type code in field `name`.
Status check_dtype_code(const char* name, int32_t code) {
  if (code >= FLASHATTN_C_BF16 && code <= FLASHATTN_C_E5M2) return Status::success();
  return invalid(std::string(name) +
                 ": must be FLASHATTN_C_BF16 (0), FLASHATTN_C_FP16 (1), FLASHATTN_C_E4M3 (2) or "
                 "FLASHATTN_C_E5M2 (3), got " +
                 std::to_string(code));
}

// The checks every versioned params struct of the ABI shares: non-null, at least version 1's
// size, the reserved fields 0 (those the struct has), a known dtype. Only the caller's prefix is
// read: a larger struct from a newer caller keeps its unknown tail to itself; every field of
// version 1 is required.
template <class CParams>
Status read_versioned(const CParams* in, size_t v1_size, const char* type, CParams& out) {
  if (in == nullptr) return invalid("params: must not be null");
  if (in->struct_size < v1_size) {
    return invalid("struct_size: must be at least " + std::to_string(v1_size) + " (sizeof " + type +
                   "), got " + std::to_string(in->struct_size));
  }
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof out));
  if constexpr (requires { out.reserved; }) {
    if (out.reserved != 0)
      return invalid("reserved: must be 0, got " + std::to_string(out.reserved));
  }
  if constexpr (requires { out.reserved2; }) {  // zero when the caller's struct ends before it
    if (out.reserved2 != 0)
      return invalid("reserved2: must be 0, got " + std::to_string(out.reserved2));
  }
  if constexpr (requires { out.reserved3; }) {
    if (out.reserved3 != 0)
      return invalid("reserved3: must be 0, got " + std::to_string(out.reserved3));
  }
  if constexpr (requires { out.reserved4; }) {
    if (out.reserved4 != 0)
      return invalid("reserved4: must be 0, got " + std::to_string(out.reserved4));
  }
  return check_dtype_code("dtype", out.dtype);
}

// One field from the C struct into the C++ params (`name` is the C field's, for messages).
template <class T>
Status copy_field(const char*, const T& from, T& to) {
  to = from;
  return Status::success();
}
Status copy_field(const char* name, int32_t from, bool& to) {
  if (from != 0 && from != 1) {
    return invalid(std::string(name) + ": must be 0 or 1, got " + std::to_string(from));
  }
  to = from != 0;
  return Status::success();
}
// dtype (already checked by read_versioned) and out_dtype: any element type code; which ones a
// call may use are validation's rules (out_dtype bf16 or fp16 with FP8 inputs, else ignored).
Status copy_field(const char* name, int32_t from, DType& to) {
  if (Status s = check_dtype_code(name, from); !s.ok()) return s;
  to = static_cast<DType>(from);
  return Status::success();
}
// 0 (a zero-filled older struct too): the caches are `dtype`; else a dtype code (the rules of
// which are decode validation's).
Status copy_field(const char* name, int32_t from, std::optional<DType>& to) {
  if (from < FLASHATTN_C_BF16 || from > FLASHATTN_C_E5M2) {
    return invalid(std::string(name) + ": must be 0 (dtype) or a FLASHATTN_C_* dtype, got " +
                   std::to_string(from));
  }
  to = from == 0 ? std::nullopt : std::optional<DType>(static_cast<DType>(from));
  return Status::success();
}
Status copy_field(const char*, int32_t from, KvScaleLayout& to) {  // range checked by validation
  to = static_cast<KvScaleLayout>(from);
  return Status::success();
}
Status copy_field(const char*, int32_t from, Fp8Rotation& to) {  // range checked by validation
  to = static_cast<Fp8Rotation>(from);
  return Status::success();
}
Status copy_field(const char*, const int64_t (&from)[4], int64_t (&to)[4]) {
  std::copy(std::begin(from), std::end(from), std::begin(to));
  return Status::success();
}

#define FLASHATTN_C_COPY_HEADER(c)
#define FLASHATTN_C_COPY_FIELD(c, target) \
  if (Status s = copy_field(#c, p.c, out.target); !s.ok()) return s;

Status copy_fields(const flashattn_c_fwd_params& p, ForwardParams& out) {
  FLASHATTN_C_FWD_FIELDS(FLASHATTN_C_COPY_HEADER, FLASHATTN_C_COPY_FIELD)
  return Status::success();
}

Status copy_fields(const flashattn_c_decode_params& p, DecodeParams& out) {
  FLASHATTN_C_DECODE_FIELDS(FLASHATTN_C_COPY_HEADER, FLASHATTN_C_COPY_FIELD)
  return Status::success();
}

Converted convert(const flashattn_c_fwd_params* in) {
  Converted c;
  flashattn_c_fwd_params p{};
  c.status = read_versioned(in, kV1Size, "flashattn_c_fwd_params", p);
  if (c.status.ok()) c.status = copy_fields(p, c.params);
  return c;
}

Status copy_fields(const flashattn_c_bwd_params& p, BackwardParams& out) {
  FLASHATTN_C_BWD_FIELDS(FLASHATTN_C_COPY_HEADER, FLASHATTN_C_COPY_FIELD)
  return Status::success();
}

ConvertedDecode convert_decode(const flashattn_c_decode_params* in) {
  ConvertedDecode c;
  flashattn_c_decode_params p{};
  c.status = read_versioned(in, kDecodeV1Size, "flashattn_c_decode_params", p);
  if (c.status.ok()) c.status = copy_fields(p, c.params);
  return c;
}

ConvertedBwd convert_bwd(const flashattn_c_bwd_params* in) {
  ConvertedBwd c;
  flashattn_c_bwd_params p{};
  c.status = read_versioned(in, kBwdV1Size, "flashattn_c_bwd_params", p);
  if (c.status.ok()) c.status = copy_fields(p, c.params);
  return c;
}

Status copy_fields(const flashattn_c_quantize_fp8_params& p, QuantizeFp8Params& out) {
  FLASHATTN_C_QUANTIZE_FP8_FIELDS(FLASHATTN_C_COPY_HEADER, FLASHATTN_C_COPY_FIELD)
  return Status::success();
}

ConvertedQuant convert_quant(const flashattn_c_quantize_fp8_params* in) {
  ConvertedQuant c;
  flashattn_c_quantize_fp8_params p{};
  c.status = read_versioned(in, kQuantV1Size, "flashattn_c_quantize_fp8_params", p);
  if (c.status.ok()) c.status = copy_fields(p, c.params);
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

// The same for the backward entry points.
template <class Fn>
int call_bwd(const flashattn_c_bwd_params* in, int kernel, char* err, size_t err_len,
             Fn fn) noexcept {
  return guarded(err, err_len, [&]() -> Status {
    ConvertedBwd c = convert_bwd(in);
    if (!c.status.ok()) return std::move(c.status);
    if (!valid_kernel_id(kernel))
      return invalid("kernel: unknown kernel id " + std::to_string(kernel));
    return fn(c.params, static_cast<Kernel>(kernel));
  });
}

// The same for the pre-pass entry points.
template <class Fn>
int call_quant(const flashattn_c_quantize_fp8_params* in, char* err, size_t err_len,
               Fn fn) noexcept {
  return guarded(err, err_len, [&]() -> Status {
    ConvertedQuant c = convert_quant(in);
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

int flashattn_c_decode_check_errors(void* stream, char* err, size_t err_len) {
  return fa::guarded(err, err_len, [&] { return fa::decode_check_errors(stream); });
}

int flashattn_c_backward(const flashattn_c_bwd_params* params, int kernel, char* err,
                         size_t err_len) {
  return fa::call_bwd(params, kernel, err, err_len,
                      [](const fa::BackwardParams& p, fa::Kernel k) { return fa::backward(p, k); });
}

int flashattn_c_backward_can_implement(const flashattn_c_bwd_params* params, int kernel, char* err,
                                       size_t err_len) {
  return fa::call_bwd(params, kernel, err, err_len, [](const fa::BackwardParams& p, fa::Kernel k) {
    return fa::can_implement(p, k);
  });
}

size_t flashattn_c_bwd_params_size(void) {
  return sizeof(flashattn_c_bwd_params);
}

size_t flashattn_c_fwd_params_size(void) {
  return sizeof(flashattn_c_fwd_params);
}

int flashattn_c_quantize_fp8(const flashattn_c_quantize_fp8_params* params, char* err,
                             size_t err_len) {
  return fa::call_quant(params, err, err_len,
                        [](const fa::QuantizeFp8Params& p) { return fa::quantize_fp8(p); });
}

int flashattn_c_can_quantize_fp8(const flashattn_c_quantize_fp8_params* params, char* err,
                                 size_t err_len) {
  return fa::call_quant(params, err, err_len,
                        [](const fa::QuantizeFp8Params& p) { return fa::can_quantize_fp8(p); });
}

size_t flashattn_c_quantize_fp8_params_size(void) {
  return sizeof(flashattn_c_quantize_fp8_params);
}

int flashattn_c_fp8_block_rows(int head_dim, int32_t* q_rows, int32_t* kv_rows) {
  const fa::Fp8BlockRows rows = fa::fp8_block_rows(head_dim);  // arithmetic: nothing thrown
  if (q_rows != nullptr) *q_rows = rows.q;
  if (kv_rows != nullptr) *kv_rows = rows.kv;
  return rows.q > 0 ? 1 : 0;
}

const flashattn_c_field* flashattn_c_fwd_params_fields(size_t* count) {
  if (count != nullptr) *count = fa::kFwdFields.size();
  return fa::kFwdFields.data();
}

const flashattn_c_field* flashattn_c_decode_params_fields(size_t* count) {
  if (count != nullptr) *count = fa::kDecodeFields.size();
  return fa::kDecodeFields.data();
}

const flashattn_c_field* flashattn_c_bwd_params_fields(size_t* count) {
  if (count != nullptr) *count = fa::kBwdFields.size();
  return fa::kBwdFields.data();
}

const flashattn_c_field* flashattn_c_quantize_fp8_params_fields(size_t* count) {
  if (count != nullptr) *count = fa::kQuantFields.size();
  return fa::kQuantFields.data();
}

const char* flashattn_c_version(void) {
  return FLASHATTN_C_VERSION;
}

}  // extern "C"
