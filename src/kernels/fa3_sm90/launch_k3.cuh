// Host side of K3, templated on (element type, head_dim): the family's TMA descriptors and tile
// order (make_params from launch.cuh) for K3's 64 x 64 tiles, then one 256-thread block per
// tile. Instantiations are generated (cmake/instantiations.cmake); launch_k3.cu dispatches.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/problem.h"
#include "common/cuda_check.h"
#include "kernels/fa3_sm90/kernel_fwd_sm90_tma_simt.cuh"
#include "kernels/fa3_sm90/launch.cuh"

namespace flashattn::fa3 {

template <class Element, int kHeadDim>
Status run_forward_tma_simt(const Problem& p) {
  using C = TmaSimtConfig<Element, kHeadDim>;
  // The family's descriptors and tile order (launch.cuh); at one block per tile, the
  // longest-first order for causal and windowed masks is K2's launch order.
  Params<C> params;
  int tiles = 0;
  if (Status s = make_params(p, DebugOptions{}, params, tiles); !s.ok()) return s;
  if (tiles == 0) return Status::success();
  const auto kernel = fwd_kernel_tma_simt<C>;
  FA_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  kernel<<<static_cast<unsigned>(tiles), k2::kThreads, C::kSmemBytes,
           static_cast<cudaStream_t>(p.stream)>>>(params);
  FA_CUDA_LAUNCH_CHECK("k3 fwd_kernel_tma_simt");
  return Status::success();
}

}  // namespace flashattn::fa3
