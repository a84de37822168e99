// Host side of the Hopper backward's main kernel for one (element type, head dim): the TMA
// descriptors over q, dout, k, v and the fp32 dQ accumulator, and the launch. Each instantiation
// is a generated file (cmake/instantiations.cmake); launch_bwd.cu dispatches and runs the shared
// stages around it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/backward_problem.h"
#include "common/cuda_check.h"
#include "common/launch_limits.h"
#include "kernels/bwd_stages/stages.h"
#include "kernels/fa3_sm90/config_bwd.cuh"
#include "kernels/fa3_sm90/kernel_bwd_sm90.cuh"
#include "kernels/fa3_sm90/kernel_bwd_split_d_sm90.cuh"
#include "kernels/fa3_sm90/params_bwd_sm90.cuh"

namespace flashattn::fa3 {

// The longest walk (steps of the longest tile) the persistent backward runs: measured on the H200
// (2026-11-28, the walk on every shape against one block per tile,
// bench/results/2026-11-28_h200_k6_bwd_persistent_late_claims_ab.txt): d 64 s512 +5.6% (causal
// +7.6%), d 64 1k causal +5.0%, d 128 s512 +1.4% (causal +2.2%), d 128 1k (16 steps) +0.6%; but
// d 128 2k causal (32) -1.0%, 4k (64) -4.4%, 16k -1.1%, d 64 16k -0.8%.
inline constexpr int kBwdPersistentMaxSteps = 16;

template <class Element, int kHeadDim>
Status run_backward_main(const BackwardProblem& bp, const bwd::Workspace& ws) {
  using C = BwdConfigFor<Element, kHeadDim>;
  const Problem& p = bp.fwd;
  const int n_blocks = (p.seqlen_k + C::kBlockN - 1) / C::kBlockN;
  if (n_blocks == 0 || ws.rows == 0) return Status::success();
  if (ws.dq_odd_row_col_xor != kDqOddRowColXor) {  // the order the kernel adds dQ in
    return {StatusCode::unsupported,
            "k6 backward: the workspace's dQ column order is not the kernel's"};
  }
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int batch = varlen ? 1 : p.batch;
  const int tokens_q = varlen ? p.total_q : p.seqlen_q;
  const int tokens_k = varlen ? p.total_k : p.seqlen_k;

  ParamsBwd<C> params;
  params.bp = bp;
  params.ws = ws;
  using E = typename C::Element;
  auto q = gmem_tensor<E>(p.q, tokens_q, kHeadDim, p.heads_q, batch, p.q_stride);
  auto dout = gmem_tensor<E>(bp.dout, tokens_q, kHeadDim, p.heads_q, batch, bp.dout_stride);
  auto k = gmem_tensor<E>(p.k, tokens_k, kHeadDim, p.heads_kv, batch, p.k_stride);
  auto v = gmem_tensor<E>(p.v, tokens_k, kHeadDim, p.heads_kv, batch, p.v_stride);
  // The accumulator: (heads_q, rows, d) with rows = b·seqlen_q + i (padded) or the packed token.
  const int64_t dq_stride[3] = {static_cast<int64_t>(p.seqlen_q) * kHeadDim, kHeadDim,
                                ws.rows * kHeadDim};
  auto used = [](int extent, int64_t s) { return extent > 1 ? s : int64_t{8}; };
  auto dq = make_tensor(make_gmem_ptr(ws.dq_accum),
                        make_shape(std::max(tokens_q, 1), kHeadDim, p.heads_q, batch),
                        make_stride(used(tokens_q, dq_stride[1]), _1{},
                                    used(p.heads_q, dq_stride[2]), used(batch, dq_stride[0])));
  params.tma_q = make_tma_copy(SM90_TMA_LOAD{}, q, take<0, 2>(typename C::SmemLayoutQ{}),
                               typename C::Tma::TileQ{}, _1{});
  params.tma_do = make_tma_copy(SM90_TMA_LOAD{}, dout, take<0, 2>(typename C::SmemLayoutQ{}),
                                typename C::Tma::TileQ{}, _1{});
  params.tma_k =
      make_tma_copy(SM90_TMA_LOAD{}, k, typename C::SmemLayoutK{}, typename C::Tma::TileK{}, _1{});
  params.tma_v =
      make_tma_copy(SM90_TMA_LOAD{}, v, typename C::SmemLayoutK{}, typename C::Tma::TileK{}, _1{});
  params.tma_dq = make_tma_copy(SM90_TMA_REDUCE_ADD{}, dq, typename C::SmemLayoutDq{},
                                typename C::Tma::TileDq{}, _1{});
  params.shape_q = q.shape();
  params.shape_do = dout.shape();
  params.shape_k = k.shape();
  params.shape_v = v.shape();
  params.shape_dq = dq.shape();

  if (Status s = check_smem_optin("k6 backward", C::kSmemBytes, kHeadDim); !s.ok()) return s;
  // The persistent walk where a tile's walk (at most every query block of every query head of
  // the group: `walk` steps) is short. Its gain is the hand-over between tiles, the next K and V
  // loaded under the last dK and dV (ncu, H200: d 64 s512 -6.4% time); on long walks its step
  // loop, compiled inside the tile loop, runs ~2% more instructions (d 128 4k: +2.9%
  // instructions, +2.0% time), so there one block per tile runs instead.
  const int walk = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM * p.group;
  const bool persistent = C::kPersistent && bp.persistent && walk <= kBwdPersistentMaxSteps;
  const auto kernel = persistent ? bwd_kernel<C, C::kPersistent> : bwd_kernel<C, false>;
  FA_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  dim3 grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(p.heads_kv),
            static_cast<unsigned>(p.batch));
  if (persistent) {
    // Tiles (key block, KV head, sequence), claimed by one block per SM from the workspace's
    // counter. Fewer than 2^31: 2^31 would take K and V of over 2^38 keys (2^47 bytes).
    const int64_t tiles = static_cast<int64_t>(n_blocks) * p.heads_kv * p.batch;
    int sms = 0;
    if (Status s = device_sm_count(&sms); !s.ok()) return s;
    params.n_blocks = n_blocks;
    params.tiles = static_cast<int>(tiles);
    grid = dim3(static_cast<unsigned>(std::min<int64_t>(tiles, sms)));
  }
  kernel<<<grid, C::kThreads, C::kSmemBytes, static_cast<cudaStream_t>(p.stream)>>>(params);
  FA_CUDA_LAUNCH_CHECK("k6 bwd_kernel");
  return Status::success();
}

}  // namespace flashattn::fa3
