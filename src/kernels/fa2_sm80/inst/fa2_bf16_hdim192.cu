#include "kernels/fa2_sm80/launch.cuh"

namespace flashattn::fa2 {
template Status run_forward<__nv_bfloat16, 192, 192>(const Problem&);
}  // namespace flashattn::fa2
