// The prologue of a decode step, one small kernel ahead of the split kernel when there is work
// for it: k_new/v_new copied into the cache at cache_seqlens[b] + i, bit for bit, and the split
// counters of the in-kernel combine (combine.cuh) zeroed. The split kernel is its programmatic
// dependent launch (sm_90): it is scheduled as soon as this kernel starts, streams Q (and, with
// nothing appended, K/V) at once, and waits in griddepcontrol.wait only before it reads what this
// kernel writes. Included by launch.cu only: the kernel is not a template, so it must be defined
// in one translation unit.
#pragma once

#include <cstdint>

#include "api/decode_problem.h"
#include "kernels/decode/ptx_sm80.cuh"

namespace flashattn::decoding {

// One thread per 16-byte chunk of k_new and v_new (grid-stride), and per split counter.
// Out-of-range positions or indices (possible only with check_indices off) are skipped: nothing
// is written outside the cache.
__global__ void prologue_kernel(const DecodeProblem p) {
  launch_dependents();
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (p.split_counters != nullptr) {
    const int64_t counters = int64_t(p.batch) * p.heads_kv * p.row_chunks;
    for (int64_t i = first; i < counters; i += step) p.split_counters[i] = 0;
  }
  const int chunks = p.head_dim / 8;
  const int64_t per_tensor = int64_t(p.batch) * p.seqlen_new * p.heads_kv * chunks;
  for (int64_t i = first; i < 2 * per_tensor; i += step) {
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
