// K8's block descales (flashattn/fp8.h), shared by the host reference and the GPU pre-pass so that
// both compute the same fp32 values: q's and k's descale is amax/448; v's is the power of two at
// or above amax/448, so that the kernel's fold of v's block descale into P (dv / dv_max, an exact
// power of two) keeps P's largest value, 2^8, exactly representable in e4m3.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct Fp8BlockScale {
  float descale;  // stored: x ≈ descale · e4m3
  float factor;   // x is multiplied by it before rounding: 1 / descale
};

// One IEEE division each way (amax > 0), or {1, 1} for an all-zero block.
FA_HD Fp8BlockScale fp8_block_scale(float amax, bool power_of_two) {
  constexpr float kE4m3Max = 448.f;
  if (!(amax > 0.f)) return {1.f, 1.f};
  if (!power_of_two) return {amax / kE4m3Max, kE4m3Max / amax};
  float d = amax / kE4m3Max;
  if (d < 1.17549435e-38f) d = 1.17549435e-38f;  // the smallest normal float
  uint32_t u = __builtin_bit_cast(uint32_t, d);
  if ((u & 0x7fffffu) != 0) u = (u & 0x7f800000u) + 0x00800000u;  // up to the next power of two
  d = __builtin_bit_cast(float, u);
  return {d, 1.f / d};  // exact
}

}  // namespace flashattn
