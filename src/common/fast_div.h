// Division by a divisor fixed on the host, as a multiply-high and a shift (Granlund and
// Montgomery's round-up method). The GPU has no integer divider: `n / d` with a run-time d is a
// dozen instructions around a MUFU reciprocal and two conversions, and the Hopper kernels derive
// every tile's coordinates that way at the tile's start and again in its epilogue, where the MUFU
// queue is full of the other warpgroup's exponentials (docs/perf/forward-hopper.md, timelines).
// Valid for 0 <= n < 2^31 and 1 <= d < 2^31; the CPU tests check it against `/` and `%`.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace flashattn {

struct FastDiv {
  int divisor = 1;
  uint32_t multiplier = 1;  // ceil(2^(32 + shift) / d) - 2^32, so that d = 1 and 2^k are exact
  uint32_t shift = 0;       // ceil(log2 d)

  FastDiv() = default;
  explicit FastDiv(int d) : divisor(d) {
    while ((uint64_t{1} << shift) < static_cast<uint64_t>(d)) ++shift;
    multiplier = static_cast<uint32_t>(
        (uint64_t{1} << 32) * ((uint64_t{1} << shift) - static_cast<uint64_t>(d)) /
            static_cast<uint64_t>(d) +
        1);
  }

  FA_HD int div(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(u, multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(u) * multiplier) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);  // hi <= u < 2^31: the sum does not wrap
  }
  FA_HD void divmod(int n, int& quotient, int& remainder) const {
    quotient = div(n);
    remainder = n - quotient * divisor;
  }

  // kFast = false: the same by the hardware's division (for kernels with no register to spare
  // for the multiplier and shift).
  template <bool kFast>
  FA_HD int div_by(int n) const {
    if constexpr (kFast) {
      return div(n);
    } else {
      return n / divisor;
    }
  }
  template <bool kFast>
  FA_HD void divmod_by(int n, int& quotient, int& remainder) const {
    quotient = div_by<kFast>(n);
    remainder = n - quotient * divisor;
  }
};

}  // namespace flashattn
