// CPU tests of the FP8 KV cache's number format (decode.h): the host e4m3 conversions in
// common/host_dtype.h against a brute-force table built from the format's definition over all
// 256 codes, and the quantisation rule of appended rows, e4m3 = satfinite_rne(x / scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/host_dtype.h"
#include "flashattn/reference.h"

namespace fa = flashattn;

namespace {

// The value of code b from the definition alone (sign, 4-bit exponent of bias 7, 3-bit
// mantissa; exponent 0 subnormal; S.1111.111 NaN), in double.
double e4m3_definition(int b) {
  const int sign = b >> 7, exp = (b >> 3) & 15, mant = b & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = exp == 0 ? std::ldexp(mant / 8.0, -6) : std::ldexp(1.0 + mant / 8.0, exp - 7);
  return sign ? -mag : mag;
}

// Brute force over the table: the nearest finite code (ties to the even code, i.e. even
// mantissa), magnitudes above 448 saturated, the sign kept, NaN to 0x7F.
uint8_t nearest_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const double x = f;
  const int sign = std::signbit(f) ? 0x80 : 0;
  if (std::fabs(x) >= 448.0) return static_cast<uint8_t>(sign | 0x7e);
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 0x7f; ++c) {  // non-negative finite codes, ascending magnitude
    const double err = std::fabs(std::fabs(x) - e4m3_definition(c));
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8KvFormat, DecodeMatchesTheDefinitionForAll256Codes) {
  for (int b = 0; b < 256; ++b) {
    const double want = e4m3_definition(b);
    const float got = fa::e4m3_to_float(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << b;
      EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << "code " << b;
    }
  }
  EXPECT_EQ(fa::e4m3_to_float(0x7e), 448.f);
  EXPECT_EQ(fa::e4m3_to_float(0x01), std::ldexp(1.f, -9));
}

// Every finite code round-trips; every midpoint between neighbours goes to the even code and
// the floats one ulp either side of it to the nearer code; all against the brute force.
TEST(Fp8KvFormat, EncodeMatchesBruteForceAtEveryCodeAndMidpoint) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float v = fa::e4m3_to_float(static_cast<uint8_t>(b));
    EXPECT_EQ(fa::float_to_e4m3(v), static_cast<uint8_t>(b)) << "code " << b;
  }
  for (int sign : {0, 0x80}) {
    for (int c = 0; c < 0x7e; ++c) {
      const double lo = e4m3_definition(c), hi = e4m3_definition(c + 1);
      const auto mid = static_cast<float>((lo + hi) / 2);  // exact in float
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      for (float f : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
        const float x = sign ? -f : f;
        EXPECT_EQ(fa::float_to_e4m3(x), nearest_e4m3(x)) << "x = " << x;
      }
      const uint8_t even = static_cast<uint8_t>(sign | ((c & 1) == 0 ? c : c + 1));
      EXPECT_EQ(fa::float_to_e4m3(sign ? -mid : mid), even) << "midpoint above code " << c;
    }
  }
}

TEST(Fp8KvFormat, SaturatesAndKeepsSignAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.f, 449.f, 464.f, 479.f, 480.f, 1e6f, 3.4e38f, inf})
    EXPECT_EQ(fa::float_to_e4m3(x), 0x7e) << x;
  for (float x : {-448.f, -464.f, -1e6f, -inf}) EXPECT_EQ(fa::float_to_e4m3(x), 0xfe) << x;
  EXPECT_EQ(fa::float_to_e4m3(0.f), 0x00);
  EXPECT_EQ(fa::float_to_e4m3(-0.f), 0x80);
  EXPECT_EQ(fa::float_to_e4m3(std::ldexp(1.f, -11)), 0x00);  // 1/4 of the smallest: 0
  EXPECT_EQ(fa::float_to_e4m3(std::ldexp(1.f, -10)), 0x00);  // half way: even (0)
  EXPECT_EQ(fa::float_to_e4m3(std::ldexp(3.f, -10)), 0x02);  // 1.5 steps: even (2)
  EXPECT_EQ(fa::float_to_e4m3(std::ldexp(3.f, -11)), 0x01);  // 0.75 steps: 1
  EXPECT_EQ(fa::float_to_e4m3(std::nextafter(std::ldexp(1.f, -10), 1.f)), 0x01);
  EXPECT_EQ(fa::float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(fa::float_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

// Random floats over the whole range the format covers (and past it), against the brute force.
TEST(Fp8KvFormat, EncodeMatchesBruteForceOnRandomFloats) {
  std::mt19937 rng(20);
  std::uniform_real_distribution<float> exponent(-14.f, 10.f), mantissa(1.f, 2.f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::ldexp(mantissa(rng), static_cast<int>(std::floor(exponent(rng))));
    if (rng() & 1) x = -x;
    ASSERT_EQ(fa::float_to_e4m3(x), nearest_e4m3(x)) << "x = " << x;
  }
}

// The append rule: one fp32 division, then the rounding; dequantisation multiplies back.
TEST(Fp8KvFormat, QuantizeIsDivisionThenRounding) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (float scale : {1.f, 0.0173f, 0.5f, 3.7f}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = normal(rng);
      const volatile float q = x / scale;  // one IEEE division, as on the device (__fdiv_rn)
      const uint8_t b = fa::quantize_e4m3(x, scale);
      ASSERT_EQ(b, nearest_e4m3(q)) << "x = " << x << " scale " << scale;
      ASSERT_EQ(fa::dequantize_e4m3(b, scale), fa::e4m3_to_float(b) * scale);
    }
  }
  EXPECT_EQ(fa::quantize_e4m3(1000.f, 1.f), 0x7e);  // saturates
  EXPECT_EQ(fa::quantize_e4m3(1000.f, 4.f), 0x78);  // 250: between 240 and 256, nearer 256 = 2^8
}

}  // namespace

namespace {

// The public host helpers (reference.h) that tests and flashattn-bench build e4m3 caches with:
// the same rule, element for element, from bf16 and fp16 inputs; dequantised back into the dtype.
TEST(Fp8KvFormat, ReferenceHelpersApplyTheRule) {
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
    std::vector<uint16_t> x(4096), back(x.size());
    fa::reference::fill_normal(x.data(), std::ssize(x), dtype, 22, 40.f);  // past 448 too
    std::vector<uint8_t> q(x.size());
    fa::reference::quantize_e4m3(dtype, x.data(), std::ssize(x), 0.25f, q.data());
    fa::reference::dequantize_e4m3(q.data(), std::ssize(q), 0.25f, dtype, back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(q[i], fa::quantize_e4m3(fa::load_as_float(x.data(), int64_t(i), dtype), 0.25f));
      // Power-of-two scale: exact in the dtype.
      ASSERT_EQ(fa::load_as_float(back.data(), int64_t(i), dtype),
                fa::e4m3_to_float(q[i]) * 0.25f);
    }
  }
}

}  // namespace
