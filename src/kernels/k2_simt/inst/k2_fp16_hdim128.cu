#include "kernels/k2_simt/launch.cuh"

namespace flashattn::k2 {
template Status run_forward<__half, 128, 128>(const Problem&);
}  // namespace flashattn::k2
