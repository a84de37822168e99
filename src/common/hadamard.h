// K8's incoherent rotation M = diag(s)·H/√d (flashattn/fp8.h), the pieces the host reference and
// the GPU pre-pass share so that they compute the same fp32 values: the random signs s_j and the
// 1/√d factor. The butterfly stages themselves are written out by each side, in the documented
// order (stage h pairs channel j, bit h clear, with j + h: (a, b) -> (a + b, a - b)).
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

// Vigna's splitmix64 finaliser of seed + j.
FA_HD uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// s_j: -1 when bit 0 of splitmix64(seed + j) is set, else +1.
FA_HD float hadamard_sign(uint64_t seed, int j) {
  return (splitmix64(seed + static_cast<uint64_t>(j)) & 1u) ? -1.f : 1.f;
}

// 1/√d rounded to fp32 for the head dims the rotation runs (powers of two: 64, 128, 256).
FA_HD float hadamard_norm(int d) {
  return d == 64 ? 0.125f : d == 128 ? 0.0883883476483184405f : d == 256 ? 0.0625f : 0.f;
}

}  // namespace flashattn
