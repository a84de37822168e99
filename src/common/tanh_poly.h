// tanh for soft-capping with one SFU op: t = sign(x)·(1 − w)/(1 + w), w = e^(−2|x|) = 2^(−2|x|·log2 e)
// in (0, 1] by ex2 (MUFU.EX2 on the GPU), the quotient by a polynomial on the FMA pipe. The
// two-SFU form 1 − 2/(e^(2x) + 1) (EX2 + RCP) made soft-capping's MUFU work three ops per score
// with the softmax's exponential, which bound K6 (+66%, docs/PERF.md). Host and device run the
// same float operations after the exponential, so the CPU tests bound what the kernels compute.
#pragma once

#include <cmath>

#include "host_device.h"

namespace flashattn {

// (1 − w)/(1 + w) for w in [0, 1] as (1 − w)·h, h = 1 + w·q(w) ≈ 1/(1 + w), q of degree 5 fitted
// (iteratively reweighted least squares towards minimax) for the absolute error of the whole:
// < 2.7e-6, exactly 1 at w = 0 and exactly 0 at w = 1. Seven FMA-pipe ops.
FA_HD float tanh_poly_quotient(float w) {
  float q = std::fma(0.10523014f, w, -0.41225654f);
  q = std::fma(q, w, 0.75699550f);
  q = std::fma(q, w, -0.94380361f);
  q = std::fma(q, w, 0.99379766f);
  q = std::fma(q, w, -0.99977118f);
  const float h = std::fma(w, q, 1.f);
  return std::fma(-w, h, h);
}

// 2^x: ex2.approx.ftz.f32 on the GPU (relative error 2^-22), exp2f on the host.
FA_HD float tanh_poly_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::exp2(x);
#endif
}

// tanh(x), absolute error < 3e-6 (the polynomial's 2.7e-6 and the exponential's 2^-22 relative):
// soft-capping multiplies it by softcap, 1.5e-4 logits at softcap 50, a twentieth of bf16's
// rounding of P. Saturates to exactly ±1; odd; finite x only (the kernels cap raw scores).
FA_HD float tanh_poly(float x) {
  const float w = tanh_poly_exp2(std::fabs(x) * -2.885390081777927f);  // −2·log2(e)
  return std::copysign(tanh_poly_quotient(w), x);
}

}  // namespace flashattn
