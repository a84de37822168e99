// Host-side conversions between float and the storage types (bf16, fp16, e4m3), bit-exact with
// the device's round-to-nearest-even conversions (__float2bfloat16_rn, __float2half_rn, and
// __nv_cvt_float_to_fp8 with saturation). Used by the CPU backend, the reference and the tests;
// no CUDA headers needed.
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

// FP8 e4m3 (OCP E4M3FN: bias 7, 3 mantissa bits, no infinities, largest finite 448, NaN 0x7F).
// Every e4m3 value is exact in fp32 (and in bf16 and fp16).
inline float e4m3_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu;
  const uint32_t mant = b & 0x7u;
  if (exp == 15 && mant == 7) return bits_float(sign | 0x7fc00000u);  // NaN
  if (exp == 0) {
    const float f = static_cast<float>(mant) * 0.001953125f;  // 2^-9
    return sign ? -f : f;
  }
  return bits_float(sign | ((exp - 7 + 127) << 23) | (mant << 20));
}

// Round to nearest e4m3, ties to even, saturating to ±448 (infinity included); NaN -> 0x7F. Bit
// for bit __nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3) (decode.h states the rule).
inline uint8_t float_to_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7f;                                // NaN
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448: saturate
  if (abs < 0x3c800000u) {  // below 2^-6, the smallest normal: the subnormal grid (2^-9 steps)
    // Exact scaling by a power of two; nearbyint rounds half to even. 8 steps carry into the
    // smallest normal, whose encoding (0x08) is the same integer.
    const auto m = static_cast<uint32_t>(std::nearbyint(bits_float(abs) * 512.0f));
    return static_cast<uint8_t>(sign | m);
  }
  const uint32_t mant = abs & 0x7fffffu;
  const uint32_t exp = (abs >> 23) - 127 + 7;  // 1..8+7
  uint32_t h = (exp << 3) | (mant >> 20);
  const uint32_t rest = mant & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (h & 1u))) ++h;  // carries into the exponent
  // Below 448 rounding is monotone, so h <= 0x7e (448) here.
  return static_cast<uint8_t>(sign | h);
}

// Element `index` of a tensor of `dtype` (bf16, fp16 or e4m3) as float; exact.
inline float load_as_float(const void* base, int64_t index, DType dtype) {
  if (dtype == DType::e4m3) return e4m3_to_float(static_cast<const uint8_t*>(base)[index]);
  const uint16_t h = static_cast<const uint16_t*>(base)[index];
  return dtype == DType::bf16 ? bf16_to_float(h) : fp16_to_float(h);
}
// Stores `value` rounded to nearest even in `dtype` (e4m3: saturating, float_to_e4m3).
inline void store_from_float(void* base, int64_t index, float value, DType dtype) {
  if (dtype == DType::e4m3) {
    static_cast<uint8_t*>(base)[index] = float_to_e4m3(value);
    return;
  }
  static_cast<uint16_t*>(base)[index] =
      dtype == DType::bf16 ? float_to_bf16(value) : float_to_fp16(value);
}
// Rounds a float to the nearest value of `dtype` (used to emulate a kernel's precision).
inline float round_to(float value, DType dtype) {
  switch (dtype) {
    case DType::bf16: return bf16_to_float(float_to_bf16(value));
    case DType::e4m3: return e4m3_to_float(float_to_e4m3(value));
    default: return fp16_to_float(float_to_fp16(value));
  }
}

// The FP8 KV cache's quantisation of one appended value (decode.h): x / scale as one fp32
// division (round to nearest even), then float_to_e4m3.
inline uint8_t quantize_e4m3(float x, float scale) {
  return float_to_e4m3(x / scale);
}
// The cache's value of one e4m3 element: float(e4m3) * scale in fp32.
inline float dequantize_e4m3(uint8_t b, float scale) {
  return e4m3_to_float(b) * scale;
}

}  // namespace flashattn
