#include "kernels/k2_simt/launch.cuh"

namespace flashattn::k2 {
template Status run_forward<__nv_bfloat16, 128, 128>(const Problem&);
}  // namespace flashattn::k2
