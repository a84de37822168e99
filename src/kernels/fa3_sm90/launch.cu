// k4_forward .. k7_forward: the Hopper entry points, dispatching on (dtype, head_dim,
// head_dim_v) to the generated instantiations (cmake/instantiations.cmake). K6, the production
// path, has every pair of kHeadDims; K4 and K5 are steps of the lineage (kLineageHeadDims, built
// with FLASHATTN_LINEAGE). This file sees only the declaration of run_forward (launch.cuh defines
// it), so it instantiates nothing and compiles in seconds.
#include <cutlass/numeric_types.h>

#include <type_traits>

#include "common/head_dims.h"
#include "kernels/fa3_sm90/entry.h"
#include "kernels/fa3_sm90/schedule.cuh"

namespace flashattn::fa3 {

template <class Element, int kHeadDim, int kHeadDimV, class Schedule>
Status run_forward(const Problem& p, const DebugOptions& debug);  // launch.cuh
template <class ElementO, int kHeadDim, class Schedule, bool kBlockScales>
Status run_forward_fp8(const Problem& p, const DebugOptions& debug);  // launch.cuh

// The element type TMA and wgmma are typed by, for a dtype.
template <DType kDType>
using Element = std::conditional_t<kDType == DType::bf16, cutlass::bfloat16_t, cutlass::half_t>;

template <class Schedule, const auto& kList>
Status dispatch(const Problem& p, const DebugOptions& debug) {
  if (p.seqlen_q == 0 || p.batch == 0 || p.heads_q == 0) return Status::success();
  return flashattn::dispatch<kList>(Schedule::kName, p.dtype, p.head_dim, p.head_dim_v,
                                    [&](auto dtype, auto dims) {
                                      return run_forward<Element<decltype(dtype)::value>,
                                                         decltype(dims)::qk, decltype(dims)::v,
                                                         Schedule>(p, debug);
                                    });
}

}  // namespace flashattn::fa3

namespace flashattn {

#if FLASHATTN_LINEAGE
Status k4_forward(const Problem& problem, const DebugOptions& debug) {
  return fa3::dispatch<fa3::ScheduleK4, kLineageHeadDims>(problem, debug);
}
Status k5_forward(const Problem& problem, const DebugOptions& debug) {
  return fa3::dispatch<fa3::ScheduleK5, kLineageHeadDims>(problem, debug);
}
#endif
Status k6_forward(const Problem& problem, const DebugOptions& debug) {
  return fa3::dispatch<fa3::ScheduleK6, kHeadDims>(problem, debug);
}
// K7 and K8: dispatched on O's dtype (q, k and v are e4m3).
template <bool kBlockScales>
Status fp8_forward(const char* name, const Problem& p, const DebugOptions& debug) {
  if (p.seqlen_q == 0 || p.batch == 0 || p.heads_q == 0) return Status::success();
  return flashattn::dispatch<kFp8HeadDims>(
      name, p.out_dtype, p.head_dim, p.head_dim_v, [&](auto dtype, auto dims) {
        return fa3::run_forward_fp8<fa3::Element<decltype(dtype)::value>, decltype(dims)::qk,
                                    fa3::ScheduleK6, kBlockScales>(p, debug);
      });
}
Status k7_forward(const Problem& p, const DebugOptions& debug) {
  return fp8_forward<false>("k7", p, debug);
}
Status k8_forward(const Problem& p, const DebugOptions& debug) {
  return fp8_forward<true>("k8", p, debug);
}

}  // namespace flashattn
