// can_implement(DecodeParams): every rule a decode call must satisfy, each failure naming the
// argument and the rule. A refused call has launched nothing and written nothing.
#include "api/decode_validate.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "common/decode_problem.h"
#include "common/cuda_check.h"

namespace flashattn {
namespace {

Status invalid(std::string msg) {
  return {StatusCode::invalid_argument, std::move(msg)};
}

std::string str(int64_t x) {
  return std::to_string(x);
}

bool is_paged(const DecodeParams& p) {
  return p.page_table != nullptr;
}
int64_t capacity(const DecodeParams& p) {
  return is_paged(p) ? int64_t{p.max_pages} * p.page_size : p.cache_seqlen;
}
int cache_rows(const DecodeParams& p) {
  return p.cache_batch > 0 ? p.cache_batch : p.batch;
}

// Where a pointer lives, as far as CUDA can tell (no driver: host memory).
struct Location {
  bool host_ok = true, device_ok = false;
  int device = -1;
};
Location locate(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  switch (attr.type) {
    case cudaMemoryTypeDevice: return {false, true, attr.device};
    case cudaMemoryTypeManaged: return {true, true, attr.device};
    case cudaMemoryTypeHost: return {true, attr.devicePointer != nullptr, attr.device};
    default: return {};
  }
}

struct Tensor {
  const char* name;
  const void* data;
  const int64_t (&stride)[4];
  std::array<int64_t, 4> size;
};

// [begin, end) bytes a strided tensor can touch.
std::array<uintptr_t, 2> extent(const Tensor& t) {
  int64_t last = 0;
  for (int i = 0; i < 4; ++i) {
    if (t.size[i] <= 0) return {0, 0};
    last += (t.size[i] - 1) * t.stride[i];
  }
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>((last + 1) * 2)};
}
bool overlaps(std::array<uintptr_t, 2> a, std::array<uintptr_t, 2> b) {
  return a[0] < a[1] && b[0] < b[1] && a[0] < b[1] && b[0] < a[1];
}

Status check_tensor(const Tensor& t) {
  const std::string n = t.name;
  if (t.data == nullptr) return invalid(n + ".data: must not be null");
  if (t.stride[3] != 1) {
    return invalid(n +
                   ".stride[3]: the last (head_dim) dimension must be contiguous (stride 1), got " +
                   str(t.stride[3]));
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0) {
    return invalid(n + ".data: must be 16-byte aligned (kernels load 16-byte vectors)");
  }
  for (int i = 0; i < 3; ++i) {
    if (t.stride[i] < 0)
      return invalid(n + ".stride[" + str(i) + "]: must be >= 0, got " + str(t.stride[i]));
    if (t.stride[i] % 8 != 0) {
      return invalid(n + ".stride[" + str(i) +
                     "]: must be a multiple of 8 elements (16 bytes), got " + str(t.stride[i]));
    }
  }
  return Status::success();
}

// Copies `n` int32 from `src` (host or device memory) to the host, ordered on `stream`.
Status to_host(const int32_t* src, int64_t n, cudaStream_t stream, std::vector<int32_t>& dst) {
  dst.resize(static_cast<size_t>(n));
  if (locate(src).host_ok) {
    std::copy(src, src + n, dst.begin());
    return Status::success();
  }
  FA_CUDA_TRY(
      cudaMemcpyAsync(dst.data(), src, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost, stream));
  FA_CUDA_TRY(cudaStreamSynchronize(stream));
  return Status::success();
}

Status check_memory(const DecodeParams& p) {
  const int64_t b = p.batch, sq = p.seqlen_q, hq = p.heads_q, hkv = p.heads_kv, d = p.head_dim;
  const bool paged = is_paged(p);
  const int64_t cb = paged ? p.num_pages : cache_rows(p);
  const int64_t cs = paged ? p.page_size : p.cache_seqlen;
  const bool append = p.seqlen_new > 0;
  std::vector<Tensor> inputs = {{"q", p.q.data, p.q.stride, {b, sq, hq, d}},
                                {"k_cache", p.k_cache.data, p.k_cache.stride, {cb, cs, hkv, d}},
                                {"v_cache", p.v_cache.data, p.v_cache.stride, {cb, cs, hkv, d}}};
  if (append) {
    inputs.push_back({"k_new", p.k_new.data, p.k_new.stride, {b, p.seqlen_new, hkv, d}});
    inputs.push_back({"v_new", p.v_new.data, p.v_new.stride, {b, p.seqlen_new, hkv, d}});
  }
  const Tensor o{"o", p.o.data, p.o.stride, {b, sq, hq, d}};
  for (const Tensor& t : inputs) {
    if (Status s = check_tensor(t); !s.ok()) return s;
  }
  if (Status s = check_tensor(o); !s.ok()) return s;
  const std::pair<const char*, const void*> ints[] = {{"cache_seqlens", p.cache_seqlens},
                                                      {"page_table", p.page_table},
                                                      {"cache_batch_idx", p.cache_batch_idx}};
  for (const auto& [name, ptr] : ints) {
    if (reinterpret_cast<uintptr_t>(ptr) % 4 != 0)
      return invalid(std::string(name) + ": must be a 4-byte aligned int32 array");
  }
  if (reinterpret_cast<uintptr_t>(p.lse) % 4 != 0) return invalid("lse: must be 4-byte aligned");

  // Outputs alias no input (the cache is written by the append and read afterwards); k_new/v_new
  // must not overlap the cache they are copied into.
  const int64_t lse_stride[4] = {hq * sq, sq, 1, 1};
  const Tensor lse{"lse", p.lse, lse_stride, {b, hq, sq, 1}};
  const auto lse_x =
      p.lse ? std::array<uintptr_t, 2>{extent(lse)[0],
                                       extent(lse)[0] + static_cast<uintptr_t>(b * hq * sq * 4)}
            : std::array<uintptr_t, 2>{0, 0};
  for (const Tensor& t : inputs) {
    if (overlaps(extent(o), extent(t)))
      return invalid(std::string("o: overlaps input ") + t.name +
                     "; the output must not alias an input");
    if (overlaps(lse_x, extent(t))) return invalid(std::string("lse: overlaps input ") + t.name);
  }
  if (overlaps(lse_x, extent(o))) return invalid("lse: overlaps the output o");
  if (append) {
    for (int i = 3; i < 5; ++i)
      for (int c = 1; c < 3; ++c)
        if (overlaps(extent(inputs[i]), extent(inputs[c])))
          return invalid(std::string(inputs[i].name) + ": overlaps " + inputs[c].name +
                         ", which it is appended to");
  }

  int count = 0, current = -1;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return {StatusCode::unsupported, "decode: needs a CUDA device and none is available"};
  }
  std::vector<std::pair<std::string, const void*>> ptrs;
  for (const Tensor& t : inputs) ptrs.emplace_back(std::string(t.name) + ".data", t.data);
  ptrs.emplace_back("o.data", p.o.data);
  ptrs.emplace_back("lse", p.lse);
  for (const auto& [name, ptr] : ints) ptrs.emplace_back(name, ptr);
  for (const auto& [name, ptr] : ptrs) {
    if (ptr == nullptr) continue;
    const Location loc = locate(ptr);
    if (!loc.device_ok) return invalid(name + ": decode needs device memory, got host memory");
    if (loc.device >= 0 && loc.device != current) {
      return invalid(name + ": lives on device " + str(loc.device) + " but the current device is " +
                     str(current));
    }
  }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current) != cudaSuccess) {
    (void)cudaGetLastError();
    return {StatusCode::cuda_error, "cudaDeviceGetAttribute failed for the current device"};
  }
  if (major < 8)
    return {StatusCode::unsupported,
            "decode: needs compute capability 8.0+, device is " + str(major) + ".x"};
  return Status::success();
}

}  // namespace

Status check_decode_shapes(const DecodeParams& p) {
  if (p.dtype != DType::bf16 && p.dtype != DType::fp16)
    return invalid("dtype: must be bf16 or fp16");
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
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) {
    return invalid("head_dim: decode supports 64, 128 or 256, got " + str(p.head_dim));
  }
  if (!std::isfinite(p.softmax_scale)) return invalid("softmax_scale: must be finite");
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
  return check_decode_indices(p, seqlens.data(), is_paged(p) ? table.data() : nullptr,
                              p.cache_batch_idx ? idx.data() : nullptr);
}

}  // namespace flashattn
