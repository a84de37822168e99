// Device-side element conversions and fast math shared by the kernel families.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/tanh_poly.h"

namespace flashattn {

// One 16-bit element (raw bits) of type Element as a float.
template <typename Element>
__device__ __forceinline__ float to_float(unsigned short bits) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    return __bfloat162float(__ushort_as_bfloat16(bits));
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}

// Two floats rounded to Element (nearest even) and packed low-first into one 32-bit word.
template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<Element, __nv_bfloat16>) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
  } else {
    return __half_as_ushort(__float2half_rn(lo)) |
           (static_cast<uint32_t>(__half_as_ushort(__float2half_rn(hi))) << 16);
  }
}

// tanh(x) for soft-capping's t = tanh(q·k · softcap_scale). Which form is a compile-time
// ablation (-DFLASHATTN_SOFTCAP_TANH=N; docs/PERF.md "Options' cost" has the measurements):
//   0 (default): 1 − 2/(2^(2x·log2 e) + 1), EX2 + RCP, absolute error a few 2^-23;
//   1: tanh_poly.h, EX2 + seven FMAs, absolute error < 3e-6 (one SFU op fewer, yet slower on K6:
//      the soft-capped softmax of a ping-pong warpgroup is bound by its issue, not by MUFU alone);
//   2: tanh.approx.f32, one MUFU op, off by up to 2^-11 relative, which soft-capping multiplies by
//      softcap: 0.025 logits at softcap 50, a 2.5% error in P, six times bf16's rounding. It fails
//      the accuracy rule and is never shipped; it measures the cheapest tanh there is.
#ifndef FLASHATTN_SOFTCAP_TANH
#define FLASHATTN_SOFTCAP_TANH 0
#endif
__device__ __forceinline__ float tanh_accurate(float x) {
#if FLASHATTN_SOFTCAP_TANH == 1
  return tanh_poly(x);
#elif FLASHATTN_SOFTCAP_TANH == 2
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
  return t;
#else
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * 2.885390081777927f));  // 2·log2(e)
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.f));
  return fmaf(-2.f, r, 1.f);
#endif
}

// 2^x on the SFU. Exact +0 for -inf, which the -inf-safe online softmax relies on.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace flashattn
