// Host side of the FA2 backward's main kernel, templated on (element type, head_dim,
// head_dim_v). Each instantiation lives in its own generated file (cmake/instantiations.cmake);
// launch.cu runs the preprocess, dispatches to them, and runs the postprocess.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/backward_problem.h"
#include "common/cuda_check.h"
#include "common/launch_limits.h"
#include "kernels/fa2_bwd_sm80/kernel.cuh"

namespace flashattn::fa2_bwd {

template <typename Element, int kHeadDim, int kHeadDimV>
Status run_main(const BackwardProblem& bp, const Workspace& ws) {
  using C = Config<Element, kHeadDim, kHeadDimV>;
  const Problem& p = bp.fwd;
  const int n_blocks = (p.seqlen_k + C::kBlockN - 1) / C::kBlockN;
  if (n_blocks == 0) return Status::success();
  if (Status s = check_smem_optin("fa2 backward", C::kSmemBytes, kHeadDim); !s.ok()) return s;
  const auto kernel = bwd_kernel<C>;
  FA_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  const dim3 grid(static_cast<unsigned>(n_blocks), static_cast<unsigned>(p.heads_kv),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, C::kThreads, C::kSmemBytes, static_cast<cudaStream_t>(p.stream)>>>(bp, ws);
  FA_CUDA_LAUNCH_CHECK("fa2 bwd_kernel");
  return Status::success();
}

}  // namespace flashattn::fa2_bwd
