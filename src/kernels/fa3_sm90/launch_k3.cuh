// Host side of K3, templated on (element type, head_dim): the family's TMA descriptors and tile
// order (Params, TileScheduler, gmem_tensor from launch.cuh) for K3's 64 x 64 tiles, then one
// 256-thread block per tile. Instantiations in inst/k3_*; launch_k3.cu dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "api/problem.h"
#include "common/cuda_check.h"
#include "kernels/fa3_sm90/kernel_fwd_sm90_tma_simt.cuh"
#include "kernels/fa3_sm90/launch.cuh"

namespace flashattn::fa3 {

template <class Element, int kHeadDim>
Status run_forward_tma_simt(const Problem& p) {
  using C = TmaSimtConfig<Element, kHeadDim>;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int batch = varlen ? 1 : p.batch;
  const int tokens_q = varlen ? p.total_q : p.seqlen_q;
  const int tokens_k = varlen ? p.total_k : p.seqlen_k;

  Params<C> params;
  params.p = p;
  auto q = gmem_tensor<C>(p.q, tokens_q, kHeadDim, p.heads_q, batch, p.q_stride);
  auto k = gmem_tensor<C>(p.k, tokens_k, kHeadDim, p.heads_kv, batch, p.k_stride);
  auto v = gmem_tensor<C>(p.v, tokens_k, kHeadDim, p.heads_kv, batch, p.v_stride);
  params.tma_q = make_tma_copy(SM90_TMA_LOAD{}, q, typename C::SmemLayoutQ{},
                               Shape<Int<C::kBlockM>, Int<kHeadDim>>{}, _1{});
  params.tma_k = make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename C::SmemLayoutK{}),
                               Shape<Int<C::kBlockN>, Int<kHeadDim>>{}, _1{});
  params.tma_v = make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename C::SmemLayoutV{}),
                               Shape<Int<C::kBlockN>, Int<kHeadDim>>{}, _1{});
  params.shape_q = q.shape();
  params.shape_k = k.shape();
  params.shape_v = v.shape();

  // The family's tile order: dense masks walk a head's query tiles together (K and V shared in
  // L2); causal and windowed ones go longest first within L2-sized groups of heads, which at one
  // block per tile is K2's longest-first launch order.
  TileScheduler& sched = params.scheduler;
  sched.num_m_blocks = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM;
  sched.heads = p.heads_q;
  sched.batch = p.batch;
  const bool uneven = p.mask.left >= 0 || p.mask.right >= 0;
  const int64_t kv_bytes = static_cast<int64_t>(std::max(p.seqlen_k, 1)) * 2 * kHeadDim *
                           static_cast<int64_t>(sizeof(Element));
  sched.group_heads =
      uneven ? static_cast<int>(std::clamp<int64_t>(kL2GroupBytes / kv_bytes, 1, INT_MAX)) : 0;
  const int64_t tiles = static_cast<int64_t>(sched.num_m_blocks) * p.heads_q * p.batch;
  if (tiles == 0) return Status::success();
  if (tiles > INT_MAX) {
    return {StatusCode::unsupported,
            "k3: batch * heads_q * ceil(seqlen_q / 64) exceeds the launch grid (2^31 - 1 blocks)"};
  }
  const auto kernel = fwd_kernel_tma_simt<C>;
  FA_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  kernel<<<static_cast<unsigned>(tiles), k2::kThreads, C::kSmemBytes,
           static_cast<cudaStream_t>(p.stream)>>>(params);
  FA_CUDA_LAUNCH_CHECK("k3 fwd_kernel_tma_simt");
  return Status::success();
}

extern template Status run_forward_tma_simt<cutlass::bfloat16_t, 128>(const Problem&);
extern template Status run_forward_tma_simt<cutlass::half_t, 128>(const Problem&);

}  // namespace flashattn::fa3
