#include "kernels/decode/launch.cuh"

namespace flashattn::decoding {
template Status run_decode<__half, 256>(const DecodeProblem&);
template Status blocks_per_sm<__half, 256>(int*);
}  // namespace flashattn::decoding
