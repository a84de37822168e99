// The rounding floor of FlashAttention's oracle, shared by the forward check (check.cpp) and the
// gradient check (check_backward.cpp).
#pragma once

#include <cmath>

#include "common/host_dtype.h"

namespace flashattn::reference {

// The error of representing a value of this magnitude in `dtype`, FlashAttention's way:
// (ref + 0.3 - 0.3) evaluated in the output type, minus ref. The 0.3 shift keeps values near zero
// from getting a near-zero floor (the kernel's error there is set by the larger terms it summed).
inline double rounding_floor(double ref, DType dtype) {
  const float up = round_to(static_cast<float>(ref + 0.3), dtype);
  const float back = round_to(up - 0.3f, dtype);
  return std::abs(double{back} - ref);
}

}  // namespace flashattn::reference
