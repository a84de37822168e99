#include "kernels/fa3_sm90/launch.cuh"

namespace flashattn::fa3 {
template Status run_forward<cutlass::half_t, 96, 96, Stage::k6>(const Problem&, const DebugOptions&);
}  // namespace flashattn::fa3
