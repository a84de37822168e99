// Host-side conversions between float and the 16-bit storage types, bit-exact with the device's
// round-to-nearest-even conversions (__float2bfloat16_rn, __float2half_rn). Used by the CPU
// backend, the reference and the tests; no CUDA headers needed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "flashattn/flashattn.h"

namespace flashattn {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    const float a = bits_float(abs);
    // Multiply into the subnormal grid (2^-24 steps); rint rounds half to even.
    const auto m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t mant = abs & 0x7fffffu;
  const uint32_t exp = (abs >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into exponent correctly
  return static_cast<uint16_t>(sign | h);
}
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -f : f;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline float load_as_float(const void* base, int64_t index, DType dtype) {
  const uint16_t h = static_cast<const uint16_t*>(base)[index];
  return dtype == DType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
}
inline void store_from_float(void* base, int64_t index, float value, DType dtype) {
  static_cast<uint16_t*>(base)[index] = dtype == DType::bf16 ? float_to_bf16(value) : float_to_fp16(value);
}
// Rounds a float to the nearest value of `dtype` (used to emulate a kernel's precision).
inline float round_to(float value, DType dtype) {
  return dtype == DType::bf16 ? bf16_to_float(float_to_bf16(value))
                              : fp16_to_float(float_to_fp16(value));
}

}  // namespace flashattn
