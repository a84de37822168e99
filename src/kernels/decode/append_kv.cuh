// The append step of decode: k_new/v_new copied into the cache at cache_seqlens[b] + i, bit for
// bit, before the split kernel reads the cache (stream order). Included by launch.cu only: the
// kernel is not a template, so it must be defined in one translation unit.
#pragma once

#include <cstdint>

#include "common/decode_problem.h"

namespace flashattn::decoding {

// One thread per 16-byte chunk of k_new and v_new. Out-of-range positions or indices (possible
// only with check_indices off) are skipped: nothing is written outside the cache.
__global__ void append_kernel(const DecodeProblem p) {
  const int chunks = p.head_dim / 8;
  const int64_t per_tensor = int64_t(p.batch) * p.seqlen_new * p.heads_kv * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < 2 * per_tensor;
       i += int64_t(gridDim.x) * blockDim.x) {
    const bool is_v = i >= per_tensor;
    int64_t x = is_v ? i - per_tensor : i;
    const int c = static_cast<int>(x % chunks);
    x /= chunks;
    const int h = static_cast<int>(x % p.heads_kv);
    x /= p.heads_kv;
    const int n = static_cast<int>(x % p.seqlen_new);
    const int b = static_cast<int>(x / p.seqlen_new);
    const int j = p.cache_seqlens[b] + n;
    if (j < 0 || j >= p.capacity) continue;
    const int64_t* cs = is_v ? p.v_stride : p.k_stride;
    int64_t off = 0;
    if (p.paged) {
      const int pi = j / p.page_size;
      const int page = p.page_table[b * p.page_table_stride + pi];
      if (page < 0 || page >= p.num_pages) continue;
      off = page * cs[0] + (j - pi * p.page_size) * cs[1];
    } else {
      const int row = p.cache_batch_idx != nullptr ? p.cache_batch_idx[b] : b;
      if (row < 0 || row >= p.cache_batch) continue;
      off = row * cs[0] + int64_t(j) * cs[1];
    }
    const int64_t* ns = is_v ? p.v_new_stride : p.k_new_stride;
    const auto* src = static_cast<const uint16_t*>(is_v ? p.v_new : p.k_new) + b * ns[0] +
                      n * ns[1] + h * ns[2] + c * 8;
    auto* dst = static_cast<uint16_t*>(is_v ? p.v_cache : p.k_cache) + off + h * cs[2] + c * 8;
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  }
}

}  // namespace flashattn::decoding
