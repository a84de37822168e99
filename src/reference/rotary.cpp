// Rotary embedding on the host: decode()'s arithmetic (src/kernels/decode/rotary.cuh) repeated in
// fp32 so that tests and the CLI know the appended keys bit for bit, and the standard tables.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/host_dtype.h"
#include "flashattn/reference.h"

namespace flashattn::reference {

void apply_rotary(DType dtype, const void* cos, const void* sin, int rotary_dim, bool interleaved,
                  int64_t position, const void* in, void* out, int head_dim) {
  const int half = rotary_dim / 2;
  std::vector<float> x(static_cast<size_t>(head_dim));
  for (int d = 0; d < head_dim; ++d) x[size_t(d)] = load_as_float(in, d, dtype);
  for (int d = rotary_dim; d < head_dim; ++d) store_from_float(out, d, x[size_t(d)], dtype);
  for (int p = 0; p < half; ++p) {
    const float c = load_as_float(cos, position * half + p, dtype);
    const float s = load_as_float(sin, position * half + p, dtype);
    const int d0 = interleaved ? 2 * p : p;
    const int d1 = interleaved ? 2 * p + 1 : p + half;
    const float x0 = x[size_t(d0)], x1 = x[size_t(d1)];
    // The products are operands of fmaf, never contracted into it: the device's
    // __fmaf_rn(x0, c, -__fmul_rn(x1, s)) exactly.
    const float p1 = x1 * s, p0 = x0 * s;
    store_from_float(out, d0, std::fmaf(x0, c, -p1), dtype);
    store_from_float(out, d1, std::fmaf(x1, c, p0), dtype);
  }
}

void rotary_tables(DType dtype, int seqlen_ro, int rotary_dim, double theta, void* cos, void* sin) {
  const int half = rotary_dim / 2;
  for (int t = 0; t < seqlen_ro; ++t)
    for (int p = 0; p < half; ++p) {
      const double angle = t * std::pow(theta, -2.0 * p / rotary_dim);
      const int64_t i = int64_t(t) * half + p;
      store_from_float(cos, i, static_cast<float>(std::cos(angle)), dtype);
      store_from_float(sin, i, static_cast<float>(std::sin(angle)), dtype);
    }
}

}  // namespace flashattn::reference
