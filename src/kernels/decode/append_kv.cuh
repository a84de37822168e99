// The append step of decode: k_new/v_new written into the cache at cache_seqlens[b] + i before
// the split kernel reads the cache (stream order): copied bit for bit into a 16-bit cache, or
// quantised into an e4m3 cache by decode.h's rule. Included by launch.cu only: append_kernel is
// not a template, so it must be defined in one translation unit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common/convert.cuh"
#include "common/decode_problem.h"

namespace flashattn::decoding {

// Where 16-byte chunk i of k_new (i < per_tensor) or v_new (the rest) goes. ok is false for an
// out-of-range position or index (possible only with check_indices off): nothing is written
// outside the cache.
struct AppendSlot {
  bool ok = false, is_v = false;
  int b = 0, n = 0, h = 0, c = 0;
  int64_t cache_off = 0;  // elements, head included, chunk not
};

__device__ __forceinline__ AppendSlot append_slot(const DecodeProblem& p, int64_t i,
                                                  int64_t per_tensor, int chunks) {
  AppendSlot s;
  s.is_v = i >= per_tensor;
  int64_t x = s.is_v ? i - per_tensor : i;
  s.c = static_cast<int>(x % chunks);
  x /= chunks;
  s.h = static_cast<int>(x % p.heads_kv);
  x /= p.heads_kv;
  s.n = static_cast<int>(x % p.seqlen_new);
  s.b = static_cast<int>(x / p.seqlen_new);
  const int j = p.cache_seqlens[s.b] + s.n;
  if (j < 0 || j >= p.capacity) return s;
  const int64_t* cs = s.is_v ? p.v_stride : p.k_stride;
  if (p.paged) {
    const int pi = j / p.page_size;
    const int page = p.page_table[s.b * p.page_table_stride + pi];
    if (page < 0 || page >= p.num_pages) return s;
    s.cache_off = page * cs[0] + (j - pi * p.page_size) * cs[1];
  } else {
    const int row = p.cache_batch_idx != nullptr ? p.cache_batch_idx[s.b] : s.b;
    if (row < 0 || row >= p.cache_batch) return s;
    s.cache_off = row * cs[0] + int64_t(j) * cs[1];
  }
  s.cache_off += s.h * cs[2];
  s.ok = true;
  return s;
}

// f(s) for every in-range chunk slot of k_new and v_new, the threads of the grid striding over
// them: the loop both append kernels share.
template <class F>
__device__ __forceinline__ void for_each_append_slot(const DecodeProblem& p, F&& f) {
  const int chunks = p.head_dim / 8;
  const int64_t per_tensor = int64_t(p.batch) * p.seqlen_new * p.heads_kv * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < 2 * per_tensor;
       i += int64_t(gridDim.x) * blockDim.x) {
    const AppendSlot s = append_slot(p, i, per_tensor, chunks);
    if (s.ok) f(s);
  }
}

// The 8 source elements of chunk slot `s` of k_new or v_new.
__device__ __forceinline__ const void* append_source(const DecodeProblem& p, const AppendSlot& s) {
  const int64_t* ns = s.is_v ? p.v_new_stride : p.k_new_stride;
  return static_cast<const uint16_t*>(s.is_v ? p.v_new : p.k_new) + s.b * ns[0] + s.n * ns[1] +
         s.h * ns[2] + s.c * 8;
}

// 16-bit cache: one thread per 16-byte chunk of k_new and v_new, copied.
__global__ void append_kernel(const DecodeProblem p) {
  for_each_append_slot(p, [&](const AppendSlot& s) {
    auto* dst = static_cast<uint16_t*>(s.is_v ? p.v_cache : p.k_cache) + s.cache_off + s.c * 8;
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(append_source(p, s));
  });
}

// decode.h's quantisation of one appended value: one fp32 division rounded to nearest even (the
// intrinsic, so that no fast-math flag can turn it into an approximate reciprocal), then the
// saturating round to nearest even e4m3. common/host_dtype.h's quantize_e4m3 is the same on the
// host.
__device__ __forceinline__ uint8_t quantize_e4m3(float x, float scale) {
  return static_cast<uint8_t>(
      __nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3));
}

// e4m3 cache: one thread per 16-byte chunk of k_new and v_new (8 elements), quantised with the
// KV head's scale into 8 bytes of the cache.
template <typename Element>
__global__ void append_e4m3_kernel(const DecodeProblem p) {
  for_each_append_slot(p, [&](const AppendSlot& s) {
    const float scale = (s.is_v ? p.v_scale : p.k_scale)[p.kv_scale_per_head ? s.h : 0];
    const uint4 raw = *reinterpret_cast<const uint4*>(append_source(p, s));
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t out[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const auto bits = static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
      out[e / 4] |= uint32_t(quantize_e4m3(to_float<Element>(bits), scale)) << (8 * (e % 4));
    }
    auto* dst = static_cast<uint8_t*>(s.is_v ? p.v_cache : p.k_cache) + s.cache_off + s.c * 8;
    *reinterpret_cast<uint2*>(dst) = make_uint2(out[0], out[1]);
  });
}

}  // namespace flashattn::decoding
