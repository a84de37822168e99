// fa2_backward: the shared backward stages (kernels/bwd_stages: preprocess, postprocess, dsinks)
// around the FA2 main kernel (kernel.cuh), one instantiation per (dtype, head dims), dispatched
// to the generated files (cmake/instantiations.cmake).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/head_dims.h"
#include "kernels/bwd_stages/stages.h"
#include "kernels/fa2_bwd_sm80/entry.h"

namespace flashattn::fa2_bwd {

template <typename Element, int kHeadDim, int kHeadDimV>
Status run_main(const BackwardProblem& bp, const bwd::Workspace& ws);  // launch.cuh

}  // namespace flashattn::fa2_bwd

namespace flashattn {

Status fa2_backward(const BackwardProblem& bp) {
  const Problem& p = bp.fwd;
  return dispatch<kHeadDims>(
      "fa2 backward", p.dtype, p.head_dim, p.head_dim_v, [&](auto dtype, auto dims) {
        using Element =
            std::conditional_t<decltype(dtype)::value == DType::bf16, __nv_bfloat16, __half>;
        return bwd::run_backward_stages(
            bp, &fa2_bwd::run_main<Element, decltype(dims)::qk, decltype(dims)::v>,
            "kernel fa2");
      });
}

}  // namespace flashattn
