// fa2_forward: the FA2 entry point, dispatching on (dtype, head_dim, head_dim_v) to the
// instantiations in inst/.
#include "kernels/fa2_sm80/entry.h"
#include "kernels/fa2_sm80/launch.cuh"

namespace flashattn {
namespace {

template <typename Element>
Status dispatch_head_dim(const Problem& p) {
  if (p.head_dim == 192 && p.head_dim_v == 128) return fa2::run_forward<Element, 192, 128>(p);
  if (p.head_dim == p.head_dim_v) {
    switch (p.head_dim) {
      case 64: return fa2::run_forward<Element, 64, 64>(p);
      case 96: return fa2::run_forward<Element, 96, 96>(p);
      case 128: return fa2::run_forward<Element, 128, 128>(p);
      case 192: return fa2::run_forward<Element, 192, 192>(p);
      case 256: return fa2::run_forward<Element, 256, 256>(p);
      default: break;
    }
  }
  return {StatusCode::unsupported, "fa2: no instantiation for head_dim " +
                                       std::to_string(p.head_dim) + " / head_dim_v " +
                                       std::to_string(p.head_dim_v)};
}

}  // namespace

Status fa2_forward(const Problem& problem) {
  if (problem.seqlen_q == 0 || problem.batch == 0 || problem.heads_q == 0) {
    return Status::success();
  }
  switch (problem.dtype) {
    case DType::bf16: return dispatch_head_dim<__nv_bfloat16>(problem);
    case DType::fp16: return dispatch_head_dim<__half>(problem);
  }
  return {StatusCode::unsupported, "fa2: dtype must be bf16 or fp16"};
}

}  // namespace flashattn
