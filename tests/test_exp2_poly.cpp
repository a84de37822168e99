// CPU tests of exp2_poly, the FMA-pipe 2^x of the Hopper softmax's exp2-emulation ablation: the
// host runs the same float operations as the GPU (src/common/exp2_poly.h), so these bounds hold
// for what the kernels compute.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/exp2_poly.h"

namespace {

using flashattn::exp2_poly;

// Relative error against 2^x in double over the softmax's range (scores at most the rescale slack,
// 8, above the reference), densely sampled; normal results only (below 2^-126 nothing is kept).
TEST(Exp2Poly, RelativeErrorUnderFp16HalfUlp) {
  double worst = 0.0;
  float worst_x = 0.f;
  for (int i = 0; i <= 4'000'000; ++i) {
    const float x = -126.f + 134.f * static_cast<float>(i) / 4'000'000.f;
    const double want = std::exp2(static_cast<double>(x));
    const double err = std::fabs(exp2_poly(x) / want - 1.0);
    if (err > worst) worst = err, worst_x = x;
  }
  EXPECT_LT(worst, 1.02e-4) << "at x = " << worst_x;
}

TEST(Exp2Poly, IntegersAreExact) {
  for (int k = -126; k <= 8; ++k) {
    EXPECT_EQ(exp2_poly(static_cast<float>(k)), std::ldexp(1.f, k)) << "k = " << k;
  }
}

// Masked scores are -inf: their P must be exactly +0 (a row with no visible key sums to 0).
TEST(Exp2Poly, MaskedAndTinyGiveZeroOrTinyPositive) {
  const float zero_inputs[] = {-std::numeric_limits<float>::infinity(), -1e30f, -300.f, -127.f};
  for (float x : zero_inputs) {
    const float y = exp2_poly(x);
    EXPECT_EQ(y, 0.f) << "x = " << x;
    EXPECT_FALSE(std::signbit(y)) << "x = " << x;
  }
  for (int i = 1; i < 1000; ++i) {  // (-127, -126): no wrap into the sign or exponent bits
    const float x = -127.f + static_cast<float>(i) / 1000.f;
    const float y = exp2_poly(x);
    EXPECT_TRUE(y >= 0.f && y <= std::ldexp(1.f, -125)) << "x = " << x << " gave " << y;
  }
}

}  // namespace
