// What each kernel family can do: the table can_implement() checks a request against, and the
// order select_kernel() prefers built families in. A family not built yet has built = false.
#pragma once

#include <iterator>

#include "common/head_dims.h"
#include "flashattn/flashattn.h"

// The lineage K1-K5 is built unless CMake's FLASHATTN_LINEAGE is OFF (defined 0 for the library).
#ifndef FLASHATTN_LINEAGE
#define FLASHATTN_LINEAGE 1
#endif

namespace flashattn {

inline constexpr bool kLineageBuilt = FLASHATTN_LINEAGE != 0;

struct KernelCaps {
  bool built = false;
  bool host = false;         // runs on the CPU over host memory
  int min_cc = 0;            // compute capability, major*10 + minor (GPU families)
  int max_cc_major = 0;      // 0: any newer major too; else the last major it runs on
  bool varlen = false;       // cu_seqlens_q / cu_seqlens_k
  bool hdim_v_differs = false;  // head_dim_v != head_dim (the 192/128 pair)
  int only_head_dim = 0;        // 0: every head dim; else the one head dim it is built for
  bool tma = false;             // q/k/v read by TMA: a dimension of extent > 1 needs a stride
                                // in (0, 2^40) bytes
  bool sinks = false;           // ForwardParams::sinks (learnable attention sinks)
  // ForwardParams::softcap. A family without it must refuse softcap > 0: make_problem then sets
  // scale_log2 = softcap·log2(e) for kernels that apply the tanh, which would be garbage to one
  // that does not.
  bool softcap = false;
  // The backward of a family built for some head dims only (a kHeadDims subset): the list,
  // else null (every pair).
  const HeadDims* head_dims = nullptr;
  int num_head_dims = 0;
};

constexpr KernelCaps kernel_caps(Kernel kernel) {
  switch (kernel) {
    case Kernel::cpu:
      return {.built = true, .host = true, .varlen = true, .hdim_v_differs = true, .sinks = true,
              .softcap = true};
    case Kernel::k1:
    case Kernel::k2:
      return {.built = kLineageBuilt, .min_cc = 80, .hdim_v_differs = true};
    case Kernel::fa2:
      return {.built = true, .min_cc = 80, .varlen = true, .hdim_v_differs = true, .sinks = true,
              .softcap = true};
    // Hopper (sm_90a only): K3, K4 and K5 are steps of the story, built for head dim 128.
    case Kernel::k3:
    case Kernel::k4:
    case Kernel::k5:
      return {.built = kLineageBuilt, .min_cc = 90, .max_cc_major = 9, .varlen = true,
              .only_head_dim = 128, .tma = true};
    case Kernel::k6:
      return {.built = true, .min_cc = 90, .max_cc_major = 9, .varlen = true,
              .hdim_v_differs = true, .tma = true, .sinks = true, .softcap = true};
    default:
      return {};
  }
}

// What each family's backward supports: the table can_implement(BackwardParams) checks against.
// Families without a backward have built = false.
constexpr KernelCaps backward_kernel_caps(Kernel kernel) {
  switch (kernel) {
    case Kernel::cpu:
      return {.built = true, .host = true, .varlen = true, .hdim_v_differs = true, .sinks = true,
              .softcap = true};
    case Kernel::fa2:
      return {.built = true, .min_cc = 80, .varlen = true, .hdim_v_differs = true, .sinks = true,
              .softcap = true};
    // Hopper (sm_90a): the wgmma backward, head dims 64 and 128 (kBwdSm90HeadDims).
    case Kernel::k6:
      return {.built = true, .min_cc = 90, .max_cc_major = 9, .varlen = true, .tma = true,
              .sinks = true, .softcap = true, .head_dims = kBwdSm90HeadDims,
              .num_head_dims = static_cast<int>(std::size(kBwdSm90HeadDims))};
    default:
      return {};
  }
}

// GPU families with a backward, fastest first: the first the device supports is `auto`'s.
inline constexpr Kernel kBackwardGpuPreference[] = {Kernel::k6, Kernel::fa2};

// Element types some kernel of this build runs. e4m3 and e5m2 are dtypes of the API and the C ABI
// that no kernel runs yet: can_implement answers `unsupported` for them (FP8 forward will be a
// mainloop of the Hopper family).
constexpr bool dtype_has_kernel(DType dtype) {
  return dtype == DType::bf16 || dtype == DType::fp16;
}
constexpr bool dtype_is_fp8(DType dtype) {
  return dtype == DType::e4m3 || dtype == DType::e5m2;
}

// GPU families from fastest to slowest: the first built one the device supports is `auto`.
inline constexpr Kernel kGpuPreference[] = {Kernel::k6, Kernel::k5, Kernel::k4, Kernel::k3,
                                            Kernel::fa2, Kernel::k2, Kernel::k1};

}  // namespace flashattn
