#include "kernels/decode/launch.cuh"

namespace flashattn::decoding {
template Status run_decode<__nv_bfloat16, 64>(const DecodeProblem&);
template Status blocks_per_sm<__nv_bfloat16, 64>(int*);
}  // namespace flashattn::decoding
