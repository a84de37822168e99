#include "kernels/fa3_sm90/launch.cuh"

namespace flashattn::fa3 {
template Status run_forward<cutlass::bfloat16_t, 128, 128, Stage::k5>(const Problem&, const DebugOptions&);
}  // namespace flashattn::fa3
