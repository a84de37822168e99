// The split combine, run inside the split kernel by the last split block of each row chunk to
// finish: it merges the splits' partial O and log2-LSE exactly,
//     M = max_s lse_s,  w_s = 2^(lse_s - M),  O = Σ w_s·O_s / Σ w_s,
//     LSE = (M + log2 Σ w_s)·ln 2   (natural log, as forward() reports it).
// A row no split saw a key for (every lse_s = -inf) gets O = 0 and LSE = -inf.
//
// Why inside the split kernel: a separate combine kernel (programmatic dependent launch) waited
// for the whole split grid to drain and its memory to be flushed before loading a partial, a few
// microseconds that a one-wave decode step at batch 1 (~30 us) felt. Here the merge of a row
// chunk starts as soon as its own splits are done. Which block merges depends on timing; what it
// computes does not: it reads every split's partial back from the workspace in split order, its
// own included, so the result is bitwise the same whichever block comes last.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "api/decode_problem.h"
#include "common/convert.cuh"
#include "kernels/decode/ptx_sm80.cuh"
#include "kernels/decode/tile_size.h"

namespace flashattn::decoding {

// Row of the partial buffers for (split, batch, query, head): (split, batch, seqlen_q, heads_q).
__device__ __forceinline__ int64_t partial_row(const DecodeProblem& p, int split, int b, int qi,
                                               int h) {
  return ((int64_t(split) * p.batch + b) * p.seqlen_q + qi) * p.heads_q + h;
}

// Merges the partials of rows r0 .. r0 + 15 (packed rows of KV head hk) into O and LSE. Each
// thread owns four consecutive columns of one row and walks the splits in order, kInFlight
// splits' loads at a time (the partials sit in L2, so the merge is a few L2 round trips; with
// 33 splits at hd 128 a thread issues them in three batches). The running maximum is updated
// once per batch: the same algebra as the formula above. At hd 64 only 8 at a time: 16 raise the
// kernel to 193 registers (ptxas, sm_90), which would cost hd 64 its third block per SM.
template <typename Element, int kHeadDim>
__device__ void merge_partials(const DecodeProblem& p, int b, int hk, int r0) {
  constexpr int kVecs = kHeadDim / 4;  // float4 per row
  constexpr int kInFlight = kHeadDim >= 128 ? 16 : 8;
  const float neg_inf = -__builtin_huge_valf();
  const int rows = min(kDecodeRowsPerBlock, p.rows - r0);
  const int64_t split_rows = int64_t(p.batch) * p.seqlen_q * p.heads_q;
  for (int idx = threadIdx.x; idx < rows * kVecs; idx += kThreads) {
    const int r = r0 + idx / kVecs, col = (idx % kVecs) * 4;
    const int qi = r / p.group, h = hk * p.group + r % p.group;
    const int64_t prow0 = partial_row(p, 0, b, qi, h);
    float m = neg_inf, W = 0.f;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s0 = 0; s0 < p.num_splits; s0 += kInFlight) {
      float ls[kInFlight];
      float4 v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        ls[u] = neg_inf;
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (s0 + u < p.num_splits) {
          // .cg: straight from L2, where the other blocks' stores are visible after the fence.
          const int64_t prow = prow0 + (s0 + u) * split_rows;
          ls[u] = __ldcg(p.lse_partial + prow);
          v[u] = __ldcg(reinterpret_cast<const float4*>(p.o_partial + prow * kHeadDim + col));
        }
      }
      float mb = m;
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) mb = fmaxf(mb, ls[u]);
      if (mb == neg_inf) continue;          // no split so far saw a key for this row
      const float rescale = exp2f(m - mb);  // 0 while m is still -inf
      W *= rescale;
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[c] *= rescale;
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const float w = exp2f(ls[u] - mb);  // 0 for an empty split (-inf)
        W += w;
        acc[0] += w * v[u].x;
        acc[1] += w * v[u].y;
        acc[2] += w * v[u].z;
        acc[3] += w * v[u].w;
      }
      m = mb;
    }
    const float inv = W > 0.f ? 1.f / W : 0.f;
    Element* dst = static_cast<Element*>(p.o) + b * p.o_stride[0] + qi * p.o_stride[1] +
                   h * p.o_stride[2] + col;
    *reinterpret_cast<uint2*>(dst) = make_uint2(pack2<Element>(acc[0] * inv, acc[1] * inv),
                                                pack2<Element>(acc[2] * inv, acc[3] * inv));
    if (p.lse != nullptr && col == 0) {
      p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + qi] =
          W > 0.f ? (m + log2f(W)) * 0.6931471805599453f : neg_inf;
    }
  }
}

// Called by every thread of a split block once its partial rows are stored. The block counts
// itself done on its row chunk's counter (zeroed by the prologue kernel); the block that brings
// the count to num_splits merges the chunk, the others return.
template <typename Element, int kHeadDim>
__device__ void combine_if_last(const DecodeProblem& p, int b, int hk, int chunk) {
  __shared__ int last;
  __threadfence();  // this block's partials are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    wait_for_primary();  // the counters were zeroed by the kernel this one was launched after
    int* counter = p.split_counters + (int64_t(b) * p.heads_kv + hk) * p.row_chunks + chunk;
    last = atomicAdd(counter, 1) == p.num_splits - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // order the partial loads after the count that saw every split done
  merge_partials<Element, kHeadDim>(p, b, hk, chunk * kDecodeRowsPerBlock);
}

}  // namespace flashattn::decoding
