// The combine kernel: merges the splits' partial O and log2-LSE exactly,
//     M = max_s lse_s,  w_s = 2^(lse_s - M),  O = Σ w_s·O_s / Σ w_s,
//     LSE = (M + log2 Σ w_s)·ln 2   (natural log, as forward() reports it).
// A row no split saw a key for (every lse_s = -inf) gets O = 0 and LSE = -inf.
//
// Measured alternative (H100, 2026-11-22, docs/perf/decode.md): the merge folded into the split
// kernel, done by the last split block of each row chunk (an atomic counter per chunk, partials
// read back in split order so the result stays deterministic). The counters must be zero before
// the split kernel runs, which took a small prologue kernel (the split kernel its programmatic
// dependent launch): end to end 1.3 us slower at batch 1 / 16k keys (34.4 vs 33.1 us), 1.3 us at
// 32k, 0.4 us at batch 8 / 4k. The prologue launch costs what the separate combine cost, and the
// last block's merge (an atomic round trip, then the partials from L2) is no shorter than this
// kernel's work once its wait returns. Measured again on 2026-11-23 (docs/perf/decode.md,
// fourth pass): without any prologue (flags in the workspace tagged per call), the last split
// merging in shared memory lost 3.5-5.3 us, because one SM pulls the 31 splits' partials from L2
// at 15-20 GB/s (cp.async or TMA bulk copies alike) where this kernel spreads them over 32 SMs;
// and releasing this kernel's blocks by per-row flags instead of griddepcontrol.wait gained
// nothing (docs/experiments/decode_in_kernel_merge.patch).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/decode_problem.h"
#include "common/convert.cuh"
#include "common/sink.h"
#include "kernels/decode/ptx_sm80.cuh"
#include "kernels/decode/trace.h"

namespace flashattn::decoding {

inline constexpr int kCombineWarps = 4;

// One block per output row (batch, query, head). The combine is latency-bound (the partials are
// L2-resident and few), so the splits are spread over the four warps, each with up to eight
// splits' loads in flight at once; each lane owns kPer columns. Measured on the H100
// (batch 1, 32 splits): a single warp per row looping over the splits took 10.5 us.
// The result is the exact merge up to fp32 rounding, and the same on every run (fixed order).
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(32 * kCombineWarps) combine_kernel(const DecodeProblem p) {
  FA_TRACE(kTraceCombine, 0, 0);
  wait_for_primary();  // the split grid and its partials are complete (programmatic launch)
  FA_TRACE(kTraceCombine, 1, 0);
  // Columns per lane: hd / 32 at hd 64, 128, 256; at hd 96 and 192 (hd / 32 = 3 or 6, which would
  // break the float2 loads and the packed stores) 4 or 8 columns on 24 lanes, so that every lane's
  // loads and stores stay whole aligned vectors. The idle lanes still compute the warp's running
  // max and sum (every lane does), but load and store nothing.
  constexpr int kPer = (kHeadDim / 32) % 3 == 0 ? kHeadDim / 24 : kHeadDim / 32;
  static_assert(kPer * 32 >= kHeadDim && kHeadDim % kPer == 0 && (kPer & (kPer - 1)) == 0,
                "combine: no column plan for this head dim");
  constexpr int kBatch = 8;  // splits per warp in flight
  __shared__ float part[kCombineWarps][kHeadDim];
  __shared__ float warp_max[kCombineWarps], warp_sum[kCombineWarps];
  const int64_t total = int64_t(p.batch) * p.seqlen_q * p.heads_q;
  const int64_t row = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bool has_cols = lane * kPer < kHeadDim;
  const float neg_inf = -__builtin_huge_valf();

  // Each warp merges its splits (warp, warp + 4, ...) eight loads at a time against its own
  // running max m (log2 units), Σ w_s·O_s in acc and Σ w_s in W; the warps then merge in shared
  // memory. One round of loads: a block-wide max first cost a second L2 round trip and a
  // barrier before any partial was requested.
  float m = neg_inf, W = 0.f, acc[kPer] = {};
  for (int s0 = warp; s0 < p.num_splits; s0 += kCombineWarps * kBatch) {
    float ls[kBatch], v[kBatch][kPer];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int s = s0 + u * kCombineWarps;
      ls[u] = neg_inf;
#pragma unroll
      for (int c = 0; c < kPer; ++c) v[u][c] = 0.f;
      if (s < p.num_splits) {
        ls[u] = p.lse_partial[s * total + row];
        const float* src = p.o_partial + (s * total + row) * kHeadDim + lane * kPer;
#pragma unroll
        for (int c = 0; c < kPer; c += 2) {
          if (has_cols) {
            const float2 x = *reinterpret_cast<const float2*>(src + c);
            v[u][c] = x.x;
            v[u][c + 1] = x.y;
          }
        }
      }
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) m_new = fmaxf(m_new, ls[u]);
    if (m_new == neg_inf) continue;  // no split of this batch saw a key
    const float carry = m == neg_inf ? 0.f : exp2f(m - m_new);
    W *= carry;
#pragma unroll
    for (int c = 0; c < kPer; ++c) acc[c] *= carry;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float w = ls[u] == neg_inf ? 0.f : exp2f(ls[u] - m_new);
      W += w;
#pragma unroll
      for (int c = 0; c < kPer; ++c) acc[c] += w * v[u][c];
    }
    m = m_new;
  }
  FA_TRACE(kTraceCombine, 3, 0);
  if (has_cols) {
#pragma unroll
    for (int c = 0; c < kPer; ++c) part[warp][lane * kPer + c] = acc[c];
  }
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = W;
  }
  __syncthreads();
  if (warp != 0 || !has_cols) return;

  float M = neg_inf;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) M = fmaxf(M, warp_max[w]);
  float scale[kCombineWarps];
  W = 0.f;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) {
    scale[w] = warp_max[w] == neg_inf ? 0.f : exp2f(warp_max[w] - M);
    W += warp_sum[w] * scale[w];
  }
  const int h = static_cast<int>(row % p.heads_q);
  float inv = W > 0.f ? 1.f / W : 0.f;
  float lse = W > 0.f ? (M + log2f(W)) * kLn2 : neg_inf;
  if (p.sinks != nullptr) {  // the sink joins the merged denominator once (common/sink.h)
    const SinkNorm n = normalize_with_sink(W, M, p.sinks[h]);
    inv = n.inv;
    lse = n.lse;
  }
#pragma unroll
  for (int c = 0; c < kPer; ++c) {
    float x = 0.f;
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) x += part[w][lane * kPer + c] * scale[w];
    acc[c] = x * inv;
  }
  const int qi = static_cast<int>(row / p.heads_q % p.seqlen_q);
  const int b = static_cast<int>(row / (int64_t(p.heads_q) * p.seqlen_q));
  Element* dst = static_cast<Element*>(p.o) + b * p.o_stride[0] + qi * p.o_stride[1] +
                 h * p.o_stride[2] + lane * kPer;
  uint32_t packed[kPer / 2];
#pragma unroll
  for (int c = 0; c < kPer; c += 2) packed[c / 2] = pack2<Element>(acc[c], acc[c + 1]);
  if constexpr (kPer == 2) {
    *reinterpret_cast<uint32_t*>(dst) = packed[0];
  } else if constexpr (kPer == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
  } else {
#pragma unroll
    for (int c = 0; c < kPer / 2; c += 4) {
      *reinterpret_cast<uint4*>(dst + 2 * c) =
          make_uint4(packed[c], packed[c + 1], packed[c + 2], packed[c + 3]);
    }
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + qi] = lse;
  }
  FA_TRACE(kTraceCombine, 2, 0);
}

}  // namespace flashattn::decoding
