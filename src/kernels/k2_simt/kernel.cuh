// K2: fused attention forward on CUDA cores in FA2 loop order. One thread block owns one
// (query tile, head_q, batch): it loads its Q tile once, then walks the key blocks the mask allows,
// running for each the steps of compute.cuh (S = Q·Kᵀ, online softmax, rescale O, O += P·V) with
// S and P never leaving the SM. Loads go global -> registers -> fp32 shared memory (TileCopy): the
// next K/V block is prefetched into registers while the current one is computed, so global latency
// hides behind the math even at one block per SM.
#pragma once

#include <cstdint>

#include "common/problem.h"
#include "kernels/k2_simt/compute.cuh"

namespace flashattn::k2 {

// 1-D grid, query tile slowest and counted down from the last: under a causal mask the longest
// tiles start first and the short ones fill the tail. Min blocks 1 tells ptxas it may use up to
// 255 registers; without it, it capped head dim 96 at 128 and spilled.
template <class C>
__global__ void __launch_bounds__(kThreads, 1) fwd_kernel(const Problem p) {
  using Element = typename C::Element;
  extern __shared__ float4 smem_vec[];
  const SmemTiles<C> t(reinterpret_cast<float*>(smem_vec));

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int bh_count = p.batch * p.heads_q;
  const int q_tiles = (p.seqlen_q + C::kBlockQ - 1) / C::kBlockQ;
  const int q_tile = q_tiles - 1 - static_cast<int>(blockIdx.x / bh_count);
  const int bh = static_cast<int>(blockIdx.x % bh_count);
  const int b = bh / p.heads_q, h = bh % p.heads_q, h_kv = h / p.group;
  const int row0 = q_tile * C::kBlockQ;
  const int rows = min(C::kBlockQ, p.seqlen_q - row0);

  const Element* q = static_cast<const Element*>(p.q) + b * p.q_stride[0] + h * p.q_stride[2] +
                     row0 * p.q_stride[1];
  const Element* k = static_cast<const Element*>(p.k) + b * p.k_stride[0] + h_kv * p.k_stride[2];
  const Element* v = static_cast<const Element*>(p.v) + b * p.v_stride[0] + h_kv * p.v_stride[2];

  int key_lo = 0, key_hi = 0;
  p.mask.key_range(row0, row0 + rows, key_lo, key_hi);
  const int num_blocks = key_hi > key_lo ? (key_hi - key_lo + C::kBlockK - 1) / C::kBlockK : 0;

  {
    TileCopy<Element, C::kBlockQ, C::kHeadDim, true> q_copy;
    q_copy.load(q, p.q_stride[1], rows);
    q_copy.store(t.q, p.scale_log2);
  }
  TileCopy<Element, C::kBlockK, C::kHeadDim, true> k_copy;
  TileCopy<Element, C::kBlockK, C::kHeadDimV, false> v_copy;
  if (num_blocks > 0) {
    k_copy.load(k + key_lo * p.k_stride[1], p.k_stride[1], p.seqlen_k - key_lo);
    v_copy.load(v + key_lo * p.v_stride[1], p.v_stride[1], p.seqlen_k - key_lo);
  }

  float o[kRowsPerThread][C::kOCols] = {};
  float m[kRowsPerThread], l[kRowsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) m[i] = -INFINITY, l[i] = 0.f;
  for (int n = 0; n < num_blocks; ++n) {
    const int key0 = key_lo + n * C::kBlockK;
    __syncthreads();  // the previous block's readers of k_s, v_s and p_s are done
    k_copy.store(t.k, 1.f);
    v_copy.store(t.v, 1.f);
    __syncthreads();
    if (n + 1 < num_blocks) {  // prefetch: in flight during this block's math
      const int next = key0 + C::kBlockK;
      k_copy.load(k + next * p.k_stride[1], p.k_stride[1], p.seqlen_k - next);
      v_copy.load(v + next * p.v_stride[1], p.v_stride[1], p.seqlen_k - next);
    }
    attend_block<C>(t, p.mask, row0, row0 + rows, key0, tx, ty, m, l, o);
  }

  Element* out = static_cast<Element*>(p.o) + b * p.o_stride[0] + h * p.o_stride[2];
  store_output<C>(m, l, o, out, p.o_stride[1], p.lse, static_cast<int64_t>(bh) * p.seqlen_q, row0,
                  p.seqlen_q, tx, ty);
}

}  // namespace flashattn::k2
