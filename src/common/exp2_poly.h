// 2^x on the FMA pipe (FlashAttention-4's partial exp2 emulation, an ablation of the Hopper
// softmax: docs/perf/forward-hopper.md). Host and device run the same IEEE float operations
// (FMAs, adds, a max, one integer add), so the CPU tests check exactly what the GPU computes.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "host_device.h"

namespace flashattn {

FA_HD float exp2_poly_bits_to_float(std::int32_t i) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(i);
#else
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
#endif
}

FA_HD std::int32_t exp2_poly_float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_int(f);
#else
  std::int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
#endif
}

// 9 instructions: x = j + f with j = round(x), f in [-1/2, 1/2]; 2^f by a degree-3 polynomial
// with p(0) = 1 exactly, fitted for relative error (< 1.02e-4: under fp16's half ulp, 2.4e-4, and
// bf16's), 2^j added to the exponent bits. Adding 1.5·2^23 rounds x to an integer held in the low
// mantissa bits, whose shift by 23 is j in the exponent field (two's complement, so negative j
// works). x is clamped at -127, where f = 0 and p = 1 give +0 exactly, as masked (-inf) scores
// need; j = -127 only ever meets f >= 0, p >= 1, so the exponent field never wraps. Meant for
// x <= 0 (the softmax's exponents, at most its rescale slack above 0); x < 128 keeps it finite.
FA_HD float exp2_poly(float x) {
  constexpr float kRound = 12582912.f;
  const float xc = std::fmax(x, -127.f);
  const float t = xc + kRound;
  const float f = xc - (t - kRound);
  float p = std::fma(0.05500892f, f, 0.24221098f);
  p = std::fma(p, f, 0.69328290f);
  p = std::fma(p, f, 1.f);
  // The shift on the unsigned value: j < 0 sets the high bits, as two's complement wants.
  const auto j_bits = static_cast<std::uint32_t>(exp2_poly_float_to_bits(t)) << 23;
  return exp2_poly_bits_to_float(
      static_cast<std::int32_t>(static_cast<std::uint32_t>(exp2_poly_float_to_bits(p)) + j_bits));
}

}  // namespace flashattn
