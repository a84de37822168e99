#include "kernels/decode/launch.cuh"

namespace flashattn::decoding {
template Status run_decode<__half, 128>(const DecodeProblem&);
template Status blocks_per_sm<__half, 128>(int*);
}  // namespace flashattn::decoding
