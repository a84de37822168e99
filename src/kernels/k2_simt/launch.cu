// k2_forward: the K2 entry point, dispatching on (dtype, head_dim, head_dim_v) to the
// generated instantiations (cmake/instantiations.cmake). This file sees only the declaration of
// run_forward (launch.cuh defines it), so it instantiates nothing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "common/head_dims.h"
#include "kernels/k2_simt/entry.h"

namespace flashattn::k2 {

template <typename Element, int kHeadDim, int kHeadDimV>
Status run_forward(const Problem& p);  // launch.cuh

}  // namespace flashattn::k2

namespace flashattn {

Status k2_forward(const Problem& problem) {
  if (problem.seqlen_q == 0 || problem.batch == 0 || problem.heads_q == 0) {
    return Status::success();
  }
  return dispatch<kHeadDims>(
      "k2", problem.dtype, problem.head_dim, problem.head_dim_v, [&](auto dtype, auto dims) {
        using Element =
            std::conditional_t<decltype(dtype)::value == DType::bf16, __nv_bfloat16, __half>;
        return k2::run_forward<Element, decltype(dims)::qk, decltype(dims)::v>(problem);
      });
}

}  // namespace flashattn
