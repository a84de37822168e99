// k4_forward, k5_forward, k6_forward: the Hopper entry points, dispatching on (dtype, head_dim,
// head_dim_v) to the instantiations in inst/. K4 and K5 are the steps of the story (head dim 128
// only); K6 is the production path with every head dim.
#include "kernels/fa3_sm90/entry.h"
#include "kernels/fa3_sm90/launch.cuh"

namespace flashattn {
namespace {

template <class Element, fa3::Stage kStage>
Status dispatch_head_dim(const Problem& p, const DebugOptions& debug) {
  if constexpr (kStage == fa3::Stage::k6) {
    if (p.head_dim == 192 && p.head_dim_v == 128) {
      return fa3::run_forward<Element, 192, 128, kStage>(p, debug);
    }
    if (p.head_dim == p.head_dim_v) {
      switch (p.head_dim) {
        case 64: return fa3::run_forward<Element, 64, 64, kStage>(p, debug);
        case 96: return fa3::run_forward<Element, 96, 96, kStage>(p, debug);
        case 128: return fa3::run_forward<Element, 128, 128, kStage>(p, debug);
        case 192: return fa3::run_forward<Element, 192, 192, kStage>(p, debug);
        case 256: return fa3::run_forward<Element, 256, 256, kStage>(p, debug);
        default: break;
      }
    }
  } else {
    if (p.head_dim == 128 && p.head_dim_v == 128) {
      return fa3::run_forward<Element, 128, 128, kStage>(p, debug);
    }
  }
  return {StatusCode::unsupported, "hopper kernels: no instantiation for head_dim " +
                                       std::to_string(p.head_dim) + " / head_dim_v " +
                                       std::to_string(p.head_dim_v)};
}

template <fa3::Stage kStage>
Status dispatch(const Problem& p, const DebugOptions& debug) {
  if (p.seqlen_q == 0 || p.batch == 0 || p.heads_q == 0) return Status::success();
  switch (p.dtype) {
    case DType::bf16: return dispatch_head_dim<cutlass::bfloat16_t, kStage>(p, debug);
    case DType::fp16: return dispatch_head_dim<cutlass::half_t, kStage>(p, debug);
  }
  return {StatusCode::unsupported, "hopper kernels: dtype must be bf16 or fp16"};
}

}  // namespace

Status k4_forward(const Problem& problem, const DebugOptions& debug) {
  return dispatch<fa3::Stage::k4>(problem, debug);
}
Status k5_forward(const Problem& problem, const DebugOptions& debug) {
  return dispatch<fa3::Stage::k5>(problem, debug);
}
Status k6_forward(const Problem& problem, const DebugOptions& debug) {
  return dispatch<fa3::Stage::k6>(problem, debug);
}

}  // namespace flashattn
