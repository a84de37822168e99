#include "kernels/fa2_sm80/launch.cuh"

namespace flashattn::fa2 {
template Status run_forward<__half, 128, 128>(const Problem&);
}  // namespace flashattn::fa2
