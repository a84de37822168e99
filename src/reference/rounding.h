// The rounding floor of FlashAttention's oracle, shared by the forward check (check.cpp) and the
// gradient check (check_backward.cpp).
#pragma once

#include <cmath>

#include "common/host_dtype.h"
#include "flashattn/flashattn.h"

namespace flashattn::reference {

// The error of representing a value of this magnitude in `dtype`, FlashAttention's way:
// (ref + 0.3 - 0.3) evaluated in the output type, minus ref. The 0.3 shift keeps values near zero
// from getting a near-zero floor (the kernel's error there is set by the larger terms it summed).
inline double rounding_floor(double ref, DType dtype) {
  const float up = round_to(static_cast<float>(ref + 0.3), dtype);
  const float back = round_to(up - 0.3f, dtype);
  return std::abs(double{back} - ref);
}

// forward_row at fp64, also giving the largest |scale|·Σ_i |q_i·k_i| over the row's visible keys
// (0 for a row that sees none): the FP8 check's bound on a score's accumulation error (check.cpp).
void forward_row_fp64_score_abs(const ForwardParams& params, int batch, int head, int row,
                                double* out, double* lse, double* score_abs);

}  // namespace flashattn::reference
