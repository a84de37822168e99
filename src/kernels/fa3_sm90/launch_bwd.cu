// k6_backward: the shared backward stages (kernels/bwd_stages) around the Hopper main kernel
// (kernel_bwd_sm90.cuh), dispatched on (dtype, head dims) over kBwdSm90HeadDims to the generated
// instantiations. This file sees only the declaration of run_backward_main.
#include <cutlass/numeric_types.h>

#include <type_traits>

#include "common/head_dims.h"
#include "kernels/bwd_stages/stages.h"
#include "kernels/fa2_bwd_sm80/entry.h"
#include "kernels/fa3_sm90/entry.h"

namespace flashattn::fa3 {

template <class Element, int kHeadDim>
Status run_backward_main(const BackwardProblem& bp, const bwd::Workspace& ws);  // launch_bwd.cuh

}  // namespace flashattn::fa3

namespace flashattn {

Status k6_backward(const BackwardProblem& bp) {
  const Problem& p = bp.fwd;
  // No query rows at all: nothing to stream, and q's TMA descriptor would have no extent; fa2's
  // backward writes the zero dK, dV (and dsinks) such a call asks for.
  if ((p.cu_seqlens_q != nullptr ? p.total_q : p.seqlen_q) == 0) return fa2_backward(bp);
  return dispatch<kBwdSm90HeadDims>(
      "kernel k6 backward", p.dtype, p.head_dim, p.head_dim_v, [&](auto dtype, auto dims) {
        using Element = std::conditional_t<decltype(dtype)::value == DType::bf16,
                                           cutlass::bfloat16_t, cutlass::half_t>;
        return bwd::run_backward_stages(bp, &fa3::run_backward_main<Element, decltype(dims)::qk>,
                                        "kernel k6", kDqOddRowColXor);
      });
}

}  // namespace flashattn
