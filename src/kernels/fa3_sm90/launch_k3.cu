// k3_forward: the K3 entry point. A step of the Hopper story, built for head dim 128 only
// (can_implement refuses the others; K6 has every head dim).
#include "kernels/fa3_sm90/entry.h"
#include "kernels/fa3_sm90/launch_k3.cuh"

namespace flashattn {

Status k3_forward(const Problem& problem) {
  if (problem.seqlen_q == 0 || problem.batch == 0 || problem.heads_q == 0) {
    return Status::success();
  }
  if (problem.head_dim != 128 || problem.head_dim_v != 128) {
    return {StatusCode::unsupported, "k3: built for head_dim 128 only"};
  }
  switch (problem.dtype) {
    case DType::bf16: return fa3::run_forward_tma_simt<cutlass::bfloat16_t, 128>(problem);
    case DType::fp16: return fa3::run_forward_tma_simt<cutlass::half_t, 128>(problem);
  }
  return {StatusCode::unsupported, "k3: dtype must be bf16 or fp16"};
}

}  // namespace flashattn
