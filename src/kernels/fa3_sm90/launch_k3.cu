// k3_forward: the K3 entry point, a step of the lineage built for kLineageHeadDims (head dim 128;
// can_implement refuses the others, K6 has every head dim). Instantiations are generated
// (cmake/instantiations.cmake); this file sees only the declaration.
#include <cutlass/numeric_types.h>

#include <type_traits>

#include "common/head_dims.h"
#include "kernels/fa3_sm90/entry.h"

namespace flashattn::fa3 {

template <class Element, int kHeadDim>
Status run_forward_tma_simt(const Problem& p);  // launch_k3.cuh

}  // namespace flashattn::fa3

namespace flashattn {

Status k3_forward(const Problem& problem) {
  if (problem.seqlen_q == 0 || problem.batch == 0 || problem.heads_q == 0) {
    return Status::success();
  }
  return dispatch<kLineageHeadDims>(
      "k3", problem.dtype, problem.head_dim, problem.head_dim_v, [&](auto dtype, auto dims) {
        using Element = std::conditional_t<decltype(dtype)::value == DType::bf16,
                                           cutlass::bfloat16_t, cutlass::half_t>;
        static_assert(decltype(dims)::qk == decltype(dims)::v);
        return fa3::run_forward_tma_simt<Element, decltype(dims)::qk>(problem);
      });
}

}  // namespace flashattn
