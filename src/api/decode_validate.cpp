// can_implement(DecodeParams): every rule a decode call must satisfy, each failure naming the
// argument and the rule. A refused call has launched nothing and written nothing.
#include "api/decode_validate.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "api/capabilities.h"
#include "api/tensor_check.h"
#include "common/cuda_check.h"
#include "common/decode_problem.h"
#include "common/head_dims.h"

namespace flashattn {
namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

bool is_paged(const DecodeParams& p) {
  return p.page_table != nullptr;
}
bool has_rotary(const DecodeParams& p) {
  return p.rotary_cos != nullptr;
}
int64_t capacity(const DecodeParams& p) {
  return is_paged(p) ? int64_t{p.max_pages} * p.page_size : p.cache_seqlen;
}
int cache_rows(const DecodeParams& p) {
  return p.cache_batch > 0 ? p.cache_batch : p.batch;
}

bool is_e4m3_cache(const DecodeParams& p) {
  return decode_cache_dtype(p) == DType::e4m3;
}
// Values k_scale and v_scale each hold.
int64_t scale_count(const DecodeParams& p) {
  return p.kv_scale_layout == KvScaleLayout::per_kv_head ? p.heads_kv : 1;
}
std::string scale_count_text(const DecodeParams& p) {
  return p.kv_scale_layout == KvScaleLayout::per_kv_head
             ? "heads_kv = " + str(p.heads_kv) + " values (per_kv_head)"
             : std::string("1 value (per_tensor)");
}
// A scale array as an input tensor: its bytes for the aliasing and placement checks.
TensorArg scale_arg(const char* name, const float* scale, int64_t n) {
  return {name, scale, {n, n, 1, 1}, {1, 1, n, 1}, 4};
}

// Copies `n` values from `src` (host or device memory) to the host, ordered on `stream`.
template <typename T>
Status to_host(const T* src, int64_t n, cudaStream_t stream, std::vector<T>& dst) {
  dst.resize(static_cast<size_t>(n));
  if (locate(src).host_ok) {
    std::copy(src, src + n, dst.begin());
    return Status::success();
  }
  FA_CUDA_TRY(cudaMemcpyAsync(dst.data(), src, static_cast<size_t>(n) * sizeof(T),
                              cudaMemcpyDeviceToHost, stream));
  FA_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::success();
}

Status check_memory(const DecodeParams& p) {
  const int64_t b = p.batch, sq = p.seqlen_q, hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim;
  const bool paged = is_paged(p);
  const int64_t cb = paged ? p.num_pages : cache_rows(p);
  const int64_t cs = paged ? p.page_size : p.cache_seqlen;
  const bool append = p.seqlen_new > 0;
  const DType cache_dtype = decode_cache_dtype(p);  // 16-byte vectors: 16 elements of e4m3
  std::vector<TensorArg> inputs = {tensor_arg("q", p.q, {b, sq, hq, d}, p.dtype),
                                   tensor_arg("k_cache", p.k_cache, {cb, cs, hkv, d}, cache_dtype),
                                   tensor_arg("v_cache", p.v_cache, {cb, cs, hkv, d}, cache_dtype)};
  if (append) {
    inputs.push_back(tensor_arg("k_new", p.k_new, {b, p.seqlen_new, hkv, d}, p.dtype));
    inputs.push_back(tensor_arg("v_new", p.v_new, {b, p.seqlen_new, hkv, d}, p.dtype));
  }
  const TensorArg o = tensor_arg("o", p.o, {b, sq, hq, d}, p.dtype);
  if (Status s = check_tensors(inputs); !s.ok()) return s;
  if (Status s = check_tensor(o); !s.ok()) return s;
  const NamedPointer ints[] = {{"cache_seqlens", p.cache_seqlens},
                               {"page_table", p.page_table},
                               {"cache_batch_idx", p.cache_batch_idx}};
  for (const auto& [name, ptr] : ints) {
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0)
      return invalid(name + ": must be a 4-byte aligned int32 array");
  }
  if (reinterpret_cast<uintptr_t>(p.lse) % 4 != 0) return invalid("lse: must be 4-byte aligned");
  if (Status s = check_sinks_pointer(p.sinks); !s.ok()) return s;
  inputs.push_back(sinks_arg(p.sinks, hq));
  if (is_e4m3_cache(p)) {  // read as fp32 scalars
    for (auto [name, ptr] : {std::pair{"k_scale", p.k_scale}, {"v_scale", p.v_scale}}) {
      if (reinterpret_cast<uintptr_t>(ptr) % alignof(float) != 0) {
        return invalid(std::string(name) + ": must be a 4-byte aligned fp32 array of " +
                       scale_count_text(p));
      }
    }
  }
  if (has_rotary(p)) {  // read element by element: only the element's alignment is needed
    const int64_t half = p.rotary_dim / 2;
    for (auto [name, ptr] : {std::pair{"rotary_cos", p.rotary_cos}, {"rotary_sin", p.rotary_sin}}) {
      if (reinterpret_cast<uintptr_t>(ptr) % 2 != 0)
        return invalid(std::string(name) + ": must be 2-byte aligned");
      inputs.push_back({name, ptr, {0, 0, half, 1}, {1, 1, p.seqlen_ro, half}, 2});
    }
  }

  if (is_e4m3_cache(p)) {  // after the rotary tables: the indices below count on their order
    inputs.push_back(scale_arg("k_scale", p.k_scale, scale_count(p)));
    inputs.push_back(scale_arg("v_scale", p.v_scale, scale_count(p)));
  }

  // Outputs alias no input (the cache is written by the append and read afterwards); k_new/v_new
  // must not overlap the cache they are copied into.
  const TensorArg outputs[] = {o, lse_arg(p.lse, b, hq, sq)};
  if (Status s = check_no_aliasing(outputs, inputs); !s.ok()) return s;
  if (append) {  // inputs: q, k_cache, v_cache, k_new, v_new, sinks, rotary tables
    for (int i = 3; i < 5; ++i)
      for (int c = 1; c < 3; ++c)
        if (byte_range(inputs[i]).overlaps(byte_range(inputs[c])))
          return invalid(std::string(inputs[i].name) + ": overlaps " + inputs[c].name +
                         ", which it is appended to");
    // The append writes the caches that the scales must outlive unchanged.
    const size_t scales = is_e4m3_cache(p) ? 2 : 0;  // the last two inputs
    for (size_t i = inputs.size() - scales; i < inputs.size(); ++i)
      for (int c = 1; c < 3; ++c)
        if (byte_range(inputs[i]).overlaps(byte_range(inputs[c])))
          return invalid(std::string(inputs[i].name) + ": overlaps " + inputs[c].name +
                         ", which the append writes");
  }

  std::vector<NamedPointer> pointers;
  for (const TensorArg& t : inputs) pointers.push_back(data_pointer(t));
  pointers.push_back(data_pointer(o));
  pointers.push_back({"lse", p.lse});
  pointers.insert(pointers.end(), std::begin(ints), std::end(ints));
  return check_placement({.who = "decode", .min_cc = 80}, pointers);
}

Status check_rotary_shapes(const DecodeParams& p) {
  if ((p.rotary_cos != nullptr) != (p.rotary_sin != nullptr))
    return invalid("rotary_cos/rotary_sin: give both or neither");
  if (!has_rotary(p)) {
    if (p.rotary_dim != 0)
      return invalid("rotary_dim: must be 0 without rotary_cos/rotary_sin, got " +
                     str(p.rotary_dim));
    if (p.seqlen_ro != 0)
      return invalid("seqlen_ro: must be 0 without rotary_cos/rotary_sin, got " + str(p.seqlen_ro));
    return Status::success();
  }
  if (p.rotary_dim <= 0 || p.rotary_dim > p.head_dim || p.rotary_dim % 2 != 0) {
    return invalid("rotary_dim: must be even and in [2, head_dim = " + str(p.head_dim) +
                   "] with rotary_cos/rotary_sin, got " + str(p.rotary_dim));
  }
  if (p.seqlen_ro < 1)
    return invalid("seqlen_ro: must be >= 1 with rotary_cos/rotary_sin, got " + str(p.seqlen_ro));
  return Status::success();
}

// Positions [0, n) the rotary tables must cover for batch entry b: keys of k_new at
// cache_seqlens[b] + i, query tokens at cache_seqlens[b] + i when causal or local, else all at
// cache_seqlens[b].
int64_t rotary_positions(const DecodeParams& p, int64_t cache_seqlen) {
  const bool per_token = p.causal || p.window_left >= 0 || p.window_right >= 0;
  return cache_seqlen + std::max<int64_t>(p.seqlen_new, per_token ? p.seqlen_q : 1);
}

// The FP8 KV cache's rules (decode.h): cache_dtype, the scales and their layout.
Status check_cache_dtype(const DecodeParams& p) {
  const DType c = decode_cache_dtype(p);
  if (c != p.dtype && !dtype_is_fp8(c)) {
    return invalid(std::string("cache_dtype: must be unset, dtype (") + dtype_name(p.dtype) +
                   ") or e4m3, got " + dtype_name(c));
  }
  if (p.kv_scale_layout != KvScaleLayout::per_tensor &&
      p.kv_scale_layout != KvScaleLayout::per_kv_head) {
    return invalid("kv_scale_layout: must be per_tensor or per_kv_head, got " +
                   str(static_cast<int>(p.kv_scale_layout)));
  }
  for (auto [name, ptr] : {std::pair{"k_scale", p.k_scale}, {"v_scale", p.v_scale}}) {
    if (dtype_is_fp8(c) && ptr == nullptr) {
      return invalid(std::string(name) + ": required with cache_dtype " + dtype_name(c) +
                     " (fp32, " + scale_count_text(p) + ")");
    }
    if (!dtype_is_fp8(c) && ptr != nullptr) {
      return invalid(std::string(name) + ": only with cache_dtype e4m3 (the cache is " +
                     dtype_name(c) + ")");
    }
  }
  return Status::success();
}

}  // namespace

Status check_decode_shapes(const DecodeParams& p) {
  if (dtype_is_fp8(p.dtype)) {
    return invalid(std::string("dtype: must be bf16 or fp16 (q, o, k_new, v_new), got ") +
                   dtype_name(p.dtype) + "; an FP8 KV cache is cache_dtype = e4m3");
  }
  if (!dtype_is_16bit(p.dtype)) return invalid("dtype: must be bf16 or fp16");
  if (Status s = check_cache_dtype(p); !s.ok()) return s;
  const std::pair<const char*, int> positive[] = {{"batch", p.batch},
                                                  {"heads_q", p.heads_q},
                                                  {"heads_kv", p.heads_kv},
                                                  {"head_dim", p.head_dim}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) return invalid(std::string(name) + ": must be positive, got " + str(value));
  }
  // Grid limits: batch is gridDim.z and heads_kv gridDim.y.
  if (p.batch > 65535)
    return invalid("batch: must be <= 65535 (the launch grid's z limit), got " + str(p.batch));
  if (p.heads_kv > 65535) return invalid("heads_kv: must be <= 65535, got " + str(p.heads_kv));
  if (p.seqlen_q < 1 || p.seqlen_q > 16) {
    return invalid("seqlen_q: must be in [1, 16] for decode (use forward() for prefill), got " +
                   str(p.seqlen_q));
  }
  if (int64_t{p.batch} * p.seqlen_q * p.heads_q > INT_MAX) {  // rows of the combine grid
    return invalid("batch: batch * seqlen_q * heads_q must be < 2^31");
  }
  if (p.heads_q % p.heads_kv != 0) {
    return invalid("heads_q: must be a multiple of heads_kv (" + str(p.heads_q) +
                   " is not a multiple of " + str(p.heads_kv) + ")");
  }
  if (!head_dims_in<kDecodeHeadDims>(p.head_dim, p.head_dim)) {
    return invalid("head_dim: decode supports " + head_dims_text<kDecodeHeadDims>() + ", got " +
                   str(p.head_dim));
  }
  if (!std::isfinite(p.softmax_scale)) return invalid("softmax_scale: must be finite");
  if (!std::isfinite(p.softcap)) return invalid("softcap: must be finite (0: off)");
  if (p.softcap < 0.f)
    return invalid("softcap: must be >= 0 (0: off), got " + std::to_string(p.softcap));
  if (p.window_left < -1)
    return invalid("window_left: must be >= -1 (-1 is unbounded), got " + str(p.window_left));
  if (p.window_right < -1)
    return invalid("window_right: must be >= -1 (-1 is unbounded), got " + str(p.window_right));
  if (p.causal && p.window_right > 0) {
    return invalid(
        "window_right: must be -1 or 0 when causal (causal sees no key right of the diagonal), "
        "got " +
        str(p.window_right));
  }
  if (p.cache_seqlens == nullptr)
    return invalid("cache_seqlens: must not be null (one int32 per batch entry)");
  if (p.num_splits < 0 || p.num_splits > kDecodeMaxSplits) {
    return invalid("num_splits: must be in [0, " + str(kDecodeMaxSplits) + "] (0 chooses), got " +
                   str(p.num_splits));
  }
  if (is_paged(p)) {
    if (p.page_size < 1)
      return invalid("page_size: must be >= 1 with a page_table, got " + str(p.page_size));
    if (p.num_pages < 1)
      return invalid("num_pages: must be >= 1 with a page_table, got " + str(p.num_pages));
    if (p.max_pages < 1)
      return invalid("max_pages: must be >= 1 with a page_table, got " + str(p.max_pages));
    if (p.page_table_stride != 0 && p.page_table_stride < p.max_pages) {
      return invalid("page_table_stride: must be 0 or >= max_pages (" + str(p.max_pages) +
                     "), got " + str(p.page_table_stride));
    }
    if (capacity(p) > INT_MAX) return invalid("max_pages: max_pages * page_size must fit in int32");
    if (p.cache_batch_idx != nullptr)
      return invalid("cache_batch_idx: not supported with a page_table (index pages instead)");
  } else {
    if (p.cache_seqlen < 1)
      return invalid("cache_seqlen: must be >= 1 for a contiguous cache, got " +
                     str(p.cache_seqlen));
    if (p.cache_batch < 0)
      return invalid("cache_batch: must be >= 0 (0: batch), got " + str(p.cache_batch));
    if (p.cache_batch_idx == nullptr && cache_rows(p) < p.batch) {
      return invalid("cache_batch: " + str(p.cache_batch) + " rows cannot serve batch " +
                     str(p.batch) + " without cache_batch_idx");
    }
  }
  if (p.seqlen_new < 0) return invalid("seqlen_new: must be >= 0, got " + str(p.seqlen_new));
  const bool k_new = p.k_new.data != nullptr, v_new = p.v_new.data != nullptr;
  if (k_new != v_new) return invalid("k_new/v_new: give both or neither");
  if (k_new && p.seqlen_new == 0)
    return invalid("seqlen_new: must be >= 1 when k_new/v_new are given");
  if (!k_new && p.seqlen_new > 0) return invalid("k_new/v_new: must be given when seqlen_new > 0");
  if (p.seqlen_new > capacity(p)) {
    return invalid("seqlen_new: " + str(p.seqlen_new) + " exceeds the cache capacity " +
                   str(capacity(p)));
  }
  if (Status s = check_rotary_shapes(p); !s.ok()) return s;
  // Valid input that no kernel runs: after every invalid_argument rule.
  if (decode_cache_dtype(p) == DType::e5m2) {
    return {StatusCode::unsupported,
            "cache_dtype: e5m2 has no decode kernel; an FP8 KV cache is e4m3 (with k_scale, "
            "v_scale)"};
  }
  return Status::success();
}

Status check_decode_scales(const DecodeParams& p, const float* k_scale, const float* v_scale) {
  const int64_t n = scale_count(p);
  for (auto [name, values] : {std::pair{"k_scale", k_scale}, {"v_scale", v_scale}}) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(values[i]) || !(values[i] > 0.f)) {
        return invalid(std::string(name) + "[" + str(i) + "]: must be finite and > 0, got " +
                       std::to_string(values[i]));
      }
    }
  }
  return Status::success();
}

Status check_decode_indices(const DecodeParams& p, const int32_t* seqlens,
                            const int32_t* page_table, const int32_t* batch_idx) {
  const int64_t cap = capacity(p);
  for (int b = 0; b < p.batch; ++b) {
    const int64_t s = seqlens[b];
    const std::string at = "cache_seqlens[" + str(b) + "]: ";
    if (s < 0) return invalid(at + "must be >= 0, got " + str(s));
    if (s + p.seqlen_new > cap) {
      return invalid(at + str(s) + " + seqlen_new " + str(p.seqlen_new) +
                     " exceeds the cache capacity " + str(cap) +
                     (is_paged(p) ? " (max_pages * page_size)" : " (cache_seqlen)"));
    }
    if (has_rotary(p) && rotary_positions(p, s) > p.seqlen_ro) {
      return invalid(at + str(s) + " uses rotary positions up to " +
                     str(rotary_positions(p, s) - 1) + ", beyond the tables' seqlen_ro " +
                     str(p.seqlen_ro) + " rows");
    }
  }
  if (page_table != nullptr) {
    const int64_t stride = p.page_table_stride > 0 ? p.page_table_stride : p.max_pages;
    for (int b = 0; b < p.batch; ++b) {
      const int64_t pages = (int64_t{seqlens[b]} + p.seqlen_new + p.page_size - 1) / p.page_size;
      for (int64_t i = 0; i < pages; ++i) {
        const int32_t page = page_table[b * stride + i];
        if (page < 0 || page >= p.num_pages) {
          return invalid("page_table[" + str(b) + "][" + str(i) + "]: page " + str(page) +
                         " is outside [0, num_pages = " + str(p.num_pages) + ") and would be read");
        }
      }
    }
  }
  if (batch_idx != nullptr) {
    const int rows = cache_rows(p);
    std::vector<int> owner(static_cast<size_t>(rows), -1);
    for (int b = 0; b < p.batch; ++b) {
      const int32_t r = batch_idx[b];
      if (r < 0 || r >= rows) {
        return invalid("cache_batch_idx[" + str(b) + "]: " + str(r) +
                       " is outside [0, cache_batch = " + str(rows) + ")");
      }
      // Two batch entries appending into one cache row would race on the same positions.
      if (p.seqlen_new > 0 && owner[static_cast<size_t>(r)] >= 0) {
        return invalid("cache_batch_idx[" + str(b) + "]: cache row " + str(r) +
                       " is also used by entry " + str(owner[static_cast<size_t>(r)]) +
                       "; appending k_new would write it twice");
      }
      owner[static_cast<size_t>(r)] = b;
    }
  }
  return Status::success();
}

Status can_implement(const DecodeParams& p) {
  if (Status s = check_decode_shapes(p); !s.ok()) return s;
  if (Status s = check_memory(p); !s.ok()) return s;
  if (!p.check_indices) return Status::success();
  const auto stream = static_cast<cudaStream_t>(p.stream);
  std::vector<int32_t> seqlens, table, idx;
  if (Status s = to_host(p.cache_seqlens, p.batch, stream, seqlens); !s.ok()) return s;
  if (is_paged(p)) {
    const int64_t stride = p.page_table_stride > 0 ? p.page_table_stride : p.max_pages;
    if (Status s = to_host(p.page_table, (p.batch - 1) * stride + p.max_pages, stream, table);
        !s.ok())
      return s;
  }
  if (p.cache_batch_idx != nullptr) {
    if (Status s = to_host(p.cache_batch_idx, p.batch, stream, idx); !s.ok()) return s;
  }
  if (is_e4m3_cache(p)) {
    std::vector<float> ks, vs;
    if (Status s = to_host(p.k_scale, scale_count(p), stream, ks); !s.ok()) return s;
    if (Status s = to_host(p.v_scale, scale_count(p), stream, vs); !s.ok()) return s;
    if (Status s = check_decode_scales(p, ks.data(), vs.data()); !s.ok()) return s;
  }
  return check_decode_indices(p, seqlens.data(), is_paged(p) ? table.data() : nullptr,
                              p.cache_batch_idx ? idx.data() : nullptr);
}

Status decode_error_status(const DecodeErrorRecord& r) {
  const char* const names[kDecodeErrorKinds] = {"cache_seqlens", "cache_batch_idx", "page_table"};
  int first = -1;
  std::string others;
  for (int kind = 0; kind < kDecodeErrorKinds; ++kind) {
    if (r.by_kind[kind].seen == 0) continue;
    if (first < 0) {
      first = kind;
    } else {
      others += others.empty() ? names[kind] : std::string(", ") + names[kind];
    }
  }
  if (first < 0) return Status::success();
  const DecodeErrorEntry& e = r.by_kind[first];
  const std::string b = str(e.batch), v = str(e.value), limit = str(e.limit);
  std::string message;
  if (first == kDecodeErrorSeqlen) {
    message = e.value < 0 ? "cache_seqlens[" + b + "]: must be >= 0, got " + v
                          : "cache_seqlens[" + b + "]: " + v + " + seqlen_new " +
                                str(e.seqlen_new) + " exceeds the cache capacity " + limit;
  } else if (first == kDecodeErrorCacheRow) {
    message = "cache_batch_idx[" + b + "]: " + v + " is outside [0, cache_batch = " + limit + ")";
  } else {
    message = "page_table[" + b + "][" + str(e.index) + "]: page " + v +
              " is outside [0, num_pages = " + limit + ") and was read as zeros";
  }
  message += " (met by a decode kernel with check_indices off; that call's result is unspecified)";
  if (!others.empty()) message += "; also bad since the last check: " + others;
  return invalid(message);
}

}  // namespace flashattn
