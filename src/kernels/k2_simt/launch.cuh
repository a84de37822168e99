// Host side of K2, templated on (element type, head_dim, head_dim_v). Each instantiation lives in
// its own generated file (cmake/instantiations.cmake); launch.cu dispatches to them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/problem.h"
#include "common/cuda_check.h"
#include "common/launch_limits.h"
#include "kernels/k2_simt/kernel.cuh"

namespace flashattn::k2 {

template <typename Element, int kHeadDim, int kHeadDimV>
Status run_forward(const Problem& p) {
  using C = Config<Element, kHeadDim, kHeadDimV>;
  const int64_t q_tiles = (p.seqlen_q + C::kBlockQ - 1) / C::kBlockQ;
  const int64_t blocks = q_tiles * p.batch * p.heads_q;
  if (Status s = check_grid_blocks("k2", blocks, C::kBlockQ); !s.ok()) return s;
  if (Status s = check_smem_optin("k2", C::kSmemBytes, kHeadDim); !s.ok()) return s;
  const auto kernel = fwd_kernel<C>;
  // Every K2 tile plan is above the 48 KB default; the attribute is per device, so it is set at
  // every launch rather than cached (a cheap driver call).
  FA_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  kernel<<<static_cast<unsigned>(blocks), kThreads, C::kSmemBytes,
           static_cast<cudaStream_t>(p.stream)>>>(p);
  FA_CUDA_LAUNCH_CHECK("k2 fwd_kernel");
  return Status::success();
}

}  // namespace flashattn::k2
