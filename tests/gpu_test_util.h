// Helpers shared by the GPU test suites: device detection, the printed per-process seed, and an
// owning device buffer. Tests skip (GTEST_SKIP) when have_gpu() is false.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>

namespace flashattn::testing {

inline bool have_gpu() {
  static const bool ok = [] {
    int n = 0;
    const bool r = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    (void)cudaGetLastError();  // a machine without a driver leaves an error behind
    return r;
  }();
  return ok;
}

// Fresh every run unless FLASHATTN_SEED is set; printed once so a failure can be repeated.
inline uint64_t run_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("FLASHATTN_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::cout << "[gpu tests] seed " << s << " (set FLASHATTN_SEED to repeat)\n";
    return s;
  }();
  return seed;
}

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t n) {
    if (cudaMalloc(&ptr, n ? n : 16) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace flashattn::testing
