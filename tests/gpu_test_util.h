// Helpers shared by the GPU test suites: device detection, the printed per-process seed, and an
// owning device buffer with its host copies. Tests skip (GTEST_SKIP) when have_gpu() is false.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"

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

// The Hopper families (k3 to k6) are sm_90a code: they run on compute capability 9.0 only.
inline bool is_hopper_kernel(Kernel k) {
  return k == Kernel::k3 || k == Kernel::k4 || k == Kernel::k5 || k == Kernel::k6;
}

inline bool device_is_sm90() {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major == 9 && minor == 0;
  }();
  return ok;
}

// Whether `k` can run on this machine's device and is in this build (tests of the others skip:
// a build with FLASHATTN_LINEAGE=OFF has no k1-k5).
inline bool kernel_runs_here(Kernel k) {
  return kernel_is_built(k) && have_gpu() && (!is_hopper_kernel(k) || device_is_sm90());
}

// Runs forward() and waits for the device; false (with a test failure) on any error.
inline bool forward_and_sync(const ForwardParams& p, Kernel kernel) {
  const Status s = forward(p, kernel);
  EXPECT_TRUE(s.ok()) << s.message;
  if (!s.ok()) return false;
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return e == cudaSuccess;
}

// What Kernel::automatic picks for a plain device problem here: the production path.
inline Kernel expected_auto_kernel() {
  return device_is_sm90() ? Kernel::k6 : Kernel::fa2;
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

// A host vector into a device buffer of at least its size, and back (fatal gtest failures).
template <typename T>
void upload(DeviceBuffer& buf, const std::vector<T>& host) {
  ASSERT_TRUE(buf.ptr != nullptr) << "cudaMalloc failed";
  ASSERT_EQ(cudaMemcpy(buf.ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}
template <typename T>
void download(std::vector<T>& host, const DeviceBuffer& buf) {
  ASSERT_EQ(cudaMemcpy(host.data(), buf.ptr, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
}

// Readable gtest parameter names: "k2_bf16_h6x2_d128_causal_win37_5". Built with appends only:
// GCC 12 warns falsely (-Wrestrict) on long chains of std::string operator+.
class CaseName {
 public:
  CaseName(Kernel kernel, DType dtype) : name_(kernel_name(kernel)) {
    name_ += "_";
    name_ += dtype_name(dtype);
  }
  CaseName& num(const char* tag, int value) {
    name_ += tag;
    name_ += std::to_string(value);
    return *this;
  }
  CaseName& flag(bool on, const char* tag) {
    if (on) name_ += tag;
    return *this;
  }
  CaseName& head_dims(int d, int dv) {
    num("_d", d);
    return dv != d ? num("x", dv) : *this;
  }
  CaseName& mask(bool causal, int window_left, int window_right) {
    flag(causal, "_causal");
    return window_left >= 0 || window_right >= 0 ? num("_win", window_left).num("_", window_right)
                                                 : *this;
  }
  // gtest names allow letters, digits and '_': a window bound of -1 is spelled m1.
  std::string str() const {
    std::string n = name_;
    for (char& ch : n)
      if (ch == '-') ch = 'm';
    return n;
  }

 private:
  std::string name_;
};

// Every 16-bit element of a device buffer still holds the NaN poison (0xFFFF): nothing wrote it.
inline void expect_all_poisoned(const void* device_ptr, size_t elems) {
  std::vector<uint16_t> host(elems);
  ASSERT_EQ(cudaMemcpy(host.data(), device_ptr, elems * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint16_t x : host) ASSERT_EQ(x, 0xFFFF);
}

}  // namespace flashattn::testing
