// The rotary step of decode: rotated copies of q and k_new written into the workspace
// (DecodeProblem::q_rotated, k_new_rotated), one launch for both, before the append. The caller's
// q and k_new are only read. Included by launch.cu only.
//
// Arithmetic (decode.h's header comment; reference::apply_rotary repeats it on the host): fp32,
// x0' = fma(x0, c, -(x1 * s)) and x1' = fma(x1, c, x0 * s) with the products and fmas written as
// __fmul_rn / __fmaf_rn so that the compiler cannot contract or reorder them, then one
// round-to-nearest-even to Element.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/decode_problem.h"

namespace flashattn::decoding {

template <typename Element>
__device__ __forceinline__ float to_float(Element x) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}
template <typename Element>
__device__ __forceinline__ Element from_float(float x) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return __float2half_rn(x);
}

// One thread per (row, pair): a row is one head of one token of q or of k_new, head_dim / 2
// pairs each. Pair p < rotary_dim / 2 is rotated (dims 2p, 2p + 1 interleaved; p, p + rd / 2
// not); the others copy dims 2p, 2p + 1 unchanged (the same dims in both layouts).
template <typename Element>
__global__ void rotary_kernel(const DecodeProblem p) {
  const int half = p.head_dim / 2, half_rd = p.rotary_dim / 2;
  const int64_t q_rows = int64_t(p.batch) * p.seqlen_q * p.heads_q;
  const int64_t k_rows = int64_t(p.batch) * p.seqlen_new * p.heads_kv;
  const int64_t items = (q_rows + k_rows) * half;
  const auto* cos_table = static_cast<const Element*>(p.rotary_cos);
  const auto* sin_table = static_cast<const Element*>(p.rotary_sin);
  for (int64_t it = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; it < items;
       it += int64_t(gridDim.x) * blockDim.x) {
    const int pair = static_cast<int>(it % half);
    int64_t row = it / half;
    const bool is_q = row < q_rows;
    if (!is_q) row -= q_rows;
    const int heads = is_q ? p.heads_q : p.heads_kv;
    const int tokens = is_q ? p.seqlen_q : p.seqlen_new;
    const int h = static_cast<int>(row % heads);
    const int i = static_cast<int>(row / heads % tokens);
    const int b = static_cast<int>(row / heads / tokens);
    const int64_t* st = is_q ? p.q_stride : p.k_new_stride;
    const auto* src =
        static_cast<const Element*>(is_q ? p.q : p.k_new) + b * st[0] + i * st[1] + h * st[2];
    auto* dst = static_cast<Element*>(is_q ? p.q_rotated : p.k_new_rotated) + row * p.head_dim;
    if (pair >= half_rd) {
      dst[2 * pair] = src[2 * pair];
      dst[2 * pair + 1] = src[2 * pair + 1];
      continue;
    }
    // Positions outside the table (possible only with check_indices off) read the nearest row.
    int64_t pos = int64_t(p.cache_seqlens[b]) + (is_q && !p.rotary_q_per_token ? 0 : i);
    pos = pos < 0 ? 0 : (pos >= p.seqlen_ro ? p.seqlen_ro - 1 : pos);
    const float c = to_float(cos_table[pos * half_rd + pair]);
    const float s = to_float(sin_table[pos * half_rd + pair]);
    const int d0 = p.rotary_interleaved ? 2 * pair : pair;
    const int d1 = p.rotary_interleaved ? 2 * pair + 1 : pair + half_rd;
    const float x0 = to_float(src[d0]), x1 = to_float(src[d1]);
    dst[d0] = from_float<Element>(__fmaf_rn(x0, c, -__fmul_rn(x1, s)));
    dst[d1] = from_float<Element>(__fmaf_rn(x1, c, __fmul_rn(x0, s)));
  }
}

}  // namespace flashattn::decoding
