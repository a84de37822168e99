// CPU tests of tanh_poly, soft-capping's one-SFU tanh (src/common/tanh_poly.h): the host runs the
// kernels' float operations after the exponential (exp2f here, ex2.approx's 2^-22 on the GPU), so
// the bounds hold for what the kernels compute up to that exponential's rounding.
#include <gtest/gtest.h>

#include <cmath>

#include "common/tanh_poly.h"

namespace {

using flashattn::tanh_poly;
using flashattn::tanh_poly_quotient;

// The quotient alone against (1 - w)/(1 + w) in double over [0, 1], densely sampled.
TEST(TanhPoly, QuotientAbsoluteErrorUnder2p7e6) {
  double worst = 0.0;
  for (int i = 0; i <= 2'000'000; ++i) {
    const float w = static_cast<float>(i) / 2'000'000.f;
    const double want = (1.0 - w) / (1.0 + w);
    worst = std::fmax(worst, std::fabs(tanh_poly_quotient(w) - want));
  }
  EXPECT_LT(worst, 2.7e-6);
}

// tanh itself over the range soft-capping meets (|x| up to 12, where it is 1 in fp32), and the
// softcap-50 consequence the kernels' accuracy argument rests on: < 1.5e-4 logits.
TEST(TanhPoly, AbsoluteErrorUnder3e6) {
  double worst = 0.0;
  float worst_x = 0.f;
  for (int i = -3'000'000; i <= 3'000'000; ++i) {
    const float x = 12.f * static_cast<float>(i) / 3'000'000.f;
    const double err = std::fabs(tanh_poly(x) - std::tanh(static_cast<double>(x)));
    if (err > worst) worst = err, worst_x = x;
  }
  EXPECT_LT(worst, 3e-6) << "at x = " << worst_x;
  EXPECT_LT(50.0 * worst, 1.5e-4);
}

TEST(TanhPoly, OddExactZeroAndSaturation) {
  EXPECT_EQ(tanh_poly(0.f), 0.f);
  for (float x : {1e-30f, 1e-6f, 0.1f, 0.5f, 1.f, 2.5f, 7.f, 20.f}) {
    EXPECT_EQ(tanh_poly(-x), -tanh_poly(x)) << "x = " << x;
    EXPECT_LE(std::fabs(tanh_poly(x)), 1.f) << "x = " << x;
  }
  for (float x : {20.f, 100.f, 1e4f, 1e30f}) {
    EXPECT_EQ(tanh_poly(x), 1.f) << "x = " << x;
    EXPECT_EQ(tanh_poly(-x), -1.f) << "x = " << x;
  }
}

// Monotone (non-decreasing) on a fine grid: the kernels' row max may be taken on either side.
TEST(TanhPoly, NonDecreasing) {
  float prev = tanh_poly(-12.f);
  for (int i = -1'200'000; i <= 1'200'000; ++i) {
    const float t = tanh_poly(static_cast<float>(i) * 1e-5f);
    ASSERT_GE(t, prev) << "x = " << static_cast<float>(i) * 1e-5f;
    prev = t;
  }
}

}  // namespace
