// Learnable attention sinks (gpt-oss; ForwardParams::sinks): the end of a softmax row whose
// denominator also holds exp(sink), which contributes no value. One definition for every kernel
// family, the CPU backend and the tests.
//
// A row's online softmax leaves O_unnorm = sum_j 2^(x_j - mx) v_j and sum = sum_j 2^(x_j - mx)
// against its reference max mx (log2 units; -inf for a row that saw no key). With the sink
// (natural-log units, as the user gives it; s = sink * log2 e) the true denominator is
// D = sum * 2^mx + 2^s = 2^top * d, where top = max(mx, s) and d = sum * 2^(mx - top) +
// 2^(s - top) lies in [1, sum + 1]: no overflow whichever term dominates. Then
//     O = O_unnorm * inv,  inv = 2^(mx - top) / d,     LSE = (top + log2 d) * ln 2.
// A row that saw no key gets O = 0 and LSE = sink, exactly. (Without a sink the kernels keep their
// own shorter finalize: inv = 1/sum, LSE = (mx + log2 sum) * ln 2.)
#pragma once

#include <cmath>

#include "common/host_device.h"
#include "common/math_constants.h"

namespace flashattn {

struct SinkNorm {
  float inv;  // what O_unnorm is multiplied by
  float lse;  // natural-log LSE of the row, the sink included
};

FA_HD SinkNorm normalize_with_sink(float sum, float mx, float sink) {
  if (!(sum > 0.f)) return {0.f, sink};  // no key seen (or NaN): O = 0
  const float sink_log2 = sink * kLog2e;
  const float top = fmaxf(mx, sink_log2);
  const float scale = exp2f(mx - top);
  const float d = sum * scale + exp2f(sink_log2 - top);
  return {scale / d, (top + log2f(d)) * kLn2};
}

}  // namespace flashattn
