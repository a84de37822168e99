// Constants of the softmax's base change, one definition each: kernels compute exp2 of scores
// pre-multiplied by scale * log2(e) and report the LSE in natural-log units (times ln 2).
#pragma once

namespace flashattn {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

}  // namespace flashattn
