// Host side of the Hopper family: builds the TMA descriptors and the tile scheduler for one
// (element type, head_dim, head_dim_v, schedule) instantiation and launches the kernel. Each
// instantiation is a generated file (cmake/instantiations.cmake); launch.cu dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "common/problem.h"
#include "common/cuda_check.h"
#include "common/launch_limits.h"
#include "common/workspace.h"
#include "kernels/fa3_sm90/config.cuh"
#include "kernels/fa3_sm90/config_fp8.cuh"
#include "kernels/fa3_sm90/epilogue_fwd_sm90.cuh"
#include "kernels/fa3_sm90/kernel_fwd_sm90.cuh"
#include "kernels/fa3_sm90/mainloop_fwd_sm90_tma_wgmma.cuh"

namespace flashattn::fa3 {

// L2 budget for one longest-first group of (sequence, head) pairs: about half of the H100's
// 50 MB, so a group's K and V stay resident while its tiles run.
inline constexpr int64_t kL2GroupBytes = 24ll << 20;

// Query tiles of one head differ in work when a mask bounds their keys (causal, window).
inline bool masked(const Problem& p) { return p.mask.left >= 0 || p.mask.right >= 0; }

// The family's kernel parameters for config C (K3 to K6): TMA descriptors over q, k, v, the
// softmax switches and the tile order. `tiles` is the number of tiles (0: nothing to launch).
template <class C>
Status make_params(const Problem& p, const DebugOptions& debug, Params<C>& params, int& tiles) {
  constexpr int kHeadDim = C::kHeadDim, kHeadDimV = C::kHeadDimV;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int batch = varlen ? 1 : p.batch;
  const int tokens_q = varlen ? p.total_q : p.seqlen_q;
  const int tokens_k = varlen ? p.total_k : p.seqlen_k;
  params.p = p;
  using E = typename C::Element;
  auto q = gmem_tensor<E>(p.q, tokens_q, kHeadDim, p.heads_q, batch, p.q_stride);
  auto k = gmem_tensor<E>(p.k, tokens_k, kHeadDim, p.heads_kv, batch, p.k_stride);
  auto v = gmem_tensor<E>(p.v, tokens_k, kHeadDimV, p.heads_kv, batch, p.v_stride);
  using Tma = typename C::Tma;
  params.tma_q = make_tma_copy(SM90_TMA_LOAD{}, q, typename C::SmemLayoutQ{}, typename Tma::TileQ{},
                               _1{});
  params.tma_k = make_tma_copy(SM90_TMA_LOAD{}, k, take<0, 2>(typename C::SmemLayoutK{}),
                               typename Tma::TileK{}, _1{});
  params.tma_v = make_tma_copy(SM90_TMA_LOAD{}, v, take<0, 2>(typename C::SmemLayoutV{}),
                               typename Tma::TileV{}, _1{});
  params.shape_q = q.shape();
  params.shape_k = k.shape();
  params.shape_v = v.shape();
  if constexpr (C::kTmaStoreO) {
    auto o =
        gmem_tensor<typename C::ElementO>(p.o, tokens_q, kHeadDimV, p.heads_q, batch, p.o_stride);
    params.tma_o = make_tma_copy(SM90_TMA_STORE{}, o, typename C::SmemLayoutOWG{},
                                 product_each(shape(typename C::SmemLayoutOWG{})), _1{});
    params.shape_o = o.shape();
  }
  params.softmax.conditional_rescale = debug.conditional_rescale;
  params.tile_counter = nullptr;

  const int num_m_blocks = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM;
  const int64_t n = static_cast<int64_t>(num_m_blocks) * p.heads_q * p.batch;
  if (n > INT_MAX) {
    return {StatusCode::unsupported, "hopper kernels: batch * heads_q * ceil(seqlen_q / " +
                                         std::to_string(C::kBlockM) + ") exceeds 2^31 - 1 tiles"};
  }
  // Longest-first groups of (sequence, head) pairs whose K and V fit the L2 budget (a group of
  // more pairs than there are is the same order as one of all of them).
  const int64_t pairs = static_cast<int64_t>(p.heads_q) * p.batch;
  const int64_t kv_bytes = static_cast<int64_t>(std::max(p.seqlen_k, 1)) *
                           (kHeadDim + kHeadDimV) * sizeof(typename C::Element);
  const int group_heads = masked(p) ? static_cast<int>(std::clamp<int64_t>(
                                          kL2GroupBytes / kv_bytes, 1, std::max<int64_t>(pairs, 1)))
                                    : 0;
  params.scheduler = TileScheduler::make(num_m_blocks, p.heads_q, p.batch, group_heads, p.group);
  tiles = static_cast<int>(n);
  return Status::success();
}

// Launches the forward kernel of config C (Config, or ConfigFp8) on a validated problem.
template <class C>
Status run_forward_config(const Problem& p, const DebugOptions& debug) {
  using Schedule = typename C::Schedule;
  Params<C> params;
  int tiles = 0;
  if (Status s = make_params(p, debug, params, tiles); !s.ok()) return s;
  if (tiles == 0) return Status::success();
  int grid = tiles;
  // K6 walks the tiles with one block per SM unless debug.persistent is off, which launches one
  // block per tile instead (the kernel's rounds then end after the first): an ablation of the
  // persistent grid against the hardware's own block scheduling.
  const bool persistent = C::kPersistent && debug.persistent;
  if (persistent) {
    int sms = 0;
    if (Status s = device_sm_count(&sms); !s.ok()) return s;
    grid = std::min(grid, sms);
  }
  const auto kernel = fwd_kernel<Schedule, MainloopFwd<C>, Epilogue<C>>;
  FA_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  const auto stream = static_cast<cudaStream_t>(p.stream);
  // Tiles that differ in work (masks, variable lengths) are drawn from a counter (Params::
  // tile_counter) when there is more than one round of them; equal tiles keep the static rounds,
  // which cost no memset.
  const bool uneven = masked(p) || p.cu_seqlens_q != nullptr;
  void* counter = nullptr;
  if (persistent && uneven && tiles > grid) {
    if (Status s = workspace_alloc(sizeof(int), stream, &counter); !s.ok()) return s;
    params.tile_counter = static_cast<int*>(counter);
    if (const cudaError_t e = cudaMemsetAsync(counter, 0, sizeof(int), stream); e != cudaSuccess) {
      (void)workspace_free(counter, stream);
      return cuda_status(e, "cudaMemsetAsync(tile counter)");
    }
  }
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(params);
  const cudaError_t launched = cudaGetLastError();
  const Status freed = workspace_free(counter, stream);
  if (launched != cudaSuccess) return cuda_status(launched, "hopper fwd_kernel launch");
  FA_TRACE_DUMP(debug.timeline_out);
  return freed;
}

template <class Element, int kHeadDim, int kHeadDimV, class Schedule>
Status run_forward(const Problem& p, const DebugOptions& debug) {
  return run_forward_config<Config<Element, kHeadDim, kHeadDimV, Schedule>>(p, debug);
}

// K7: e4m3 q, k, v; O in ElementO. K8 (kBlockScales): with per-block descales, whose blocks
// must be the config's tiles (fp8_block_rows() hands out these).
template <class ElementO, int kHeadDim, class Schedule, bool kBlockScales = false>
Status run_forward_fp8(const Problem& p, const DebugOptions& debug) {
  using C = ConfigFp8<ElementO, kHeadDim, Schedule, kBlockScales>;
  if constexpr (kBlockScales) {
    if (!p.block_scaled() || p.q_block_rows != C::kBlockM || p.kv_block_rows != C::kBlockN ||
        p.cu_seqlens_q != nullptr) {
      return {StatusCode::invalid_argument,
              "k8: needs q/k/v_block_descale in blocks of " + std::to_string(C::kBlockM) +
                  " query rows and " + std::to_string(C::kBlockN) +
                  " keys (fp8_block_rows) on a dense batch"};
    }
  }
  return run_forward_config<C>(p, debug);
}

}  // namespace flashattn::fa3
