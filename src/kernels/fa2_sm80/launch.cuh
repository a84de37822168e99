// Host side of FA2, templated on (element type, head_dim, head_dim_v). Each instantiation lives in
// its own generated file (cmake/instantiations.cmake); launch.cu dispatches to them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/problem.h"
#include "common/cuda_check.h"
#include "common/launch_limits.h"
#include "kernels/fa2_sm80/kernel.cuh"

namespace flashattn::fa2 {

template <typename Element, int kHeadDim, int kHeadDimV>
Status run_forward(const Problem& p) {
  using C = Config<Element, kHeadDim, kHeadDimV>;
  const int64_t m_blocks = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM;
  const int64_t blocks = m_blocks * p.batch * p.heads_q;
  if (Status s = check_grid_blocks("fa2", blocks, C::kBlockM); !s.ok()) return s;
  if (Status s = check_smem_optin("fa2", C::kSmemBytes, kHeadDim); !s.ok()) return s;
  const auto kernel = fwd_kernel<C>;
  // The attribute is per device, so it is set at every launch rather than cached (a cheap call).
  FA_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  kernel<<<static_cast<unsigned>(blocks), C::kThreads, C::kSmemBytes,
           static_cast<cudaStream_t>(p.stream)>>>(p);
  FA_CUDA_LAUNCH_CHECK("fa2 fwd_kernel");
  return Status::success();
}

}  // namespace flashattn::fa2
