#include "kernels/fa3_sm90/launch_k3.cuh"

namespace flashattn::fa3 {
template Status run_forward_tma_simt<cutlass::half_t, 128>(const Problem&);
}  // namespace flashattn::fa3
