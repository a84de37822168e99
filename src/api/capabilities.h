// What each kernel family can do: the table can_implement() checks a request against, and the
// order select_kernel() prefers built families in. A family not built yet has built = false.
#pragma once

#include <iterator>
#include <string>

#include "common/head_dims.h"
#include "flashattn/flashattn.h"

// The lineage K1-K5 is built unless CMake's FLASHATTN_LINEAGE is OFF (defined 0 for the library).
#ifndef FLASHATTN_LINEAGE
#define FLASHATTN_LINEAGE 1
#endif

namespace flashattn {

inline constexpr bool kLineageBuilt = FLASHATTN_LINEAGE != 0;

// Element types as a set of bits (KernelCaps::dtypes): what a family runs is listed, never implied.
constexpr unsigned dtype_bit(DType dtype) {
  return 1u << static_cast<unsigned>(dtype);
}
inline constexpr unsigned k16BitDTypes = dtype_bit(DType::bf16) | dtype_bit(DType::fp16);
inline constexpr unsigned kE4m3DTypes = dtype_bit(DType::e4m3);

constexpr bool dtype_is_16bit(DType dtype) {
  return dtype == DType::bf16 || dtype == DType::fp16;
}
constexpr bool dtype_is_fp8(DType dtype) {
  return dtype == DType::e4m3 || dtype == DType::e5m2;
}

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
  bool paged = true;  // ForwardParams::block_table (through the gather)
  // ForwardParams' q/k/v_block_descale (K8's block quantisation): refused, accepted beside the
  // per-head descales, or required (a family that runs block-quantised inputs only).
  enum class BlockDescales : unsigned char { refused, accepted, required };
  BlockDescales block_descales = BlockDescales::refused;
  // The element types of q, k and v it runs (dtype_bit()s; o is that type, or out_dtype for FP8).
  unsigned dtypes = 0;
  // A family built for some head dims only (a kHeadDims subset): the list, else null (every
  // pair the library accepts).
  const HeadDims* head_dims = nullptr;
  int num_head_dims = 0;
};

constexpr bool runs_dtype(const KernelCaps& caps, DType dtype) {
  return (caps.dtypes & dtype_bit(dtype)) != 0;
}
constexpr bool runs_head_dims(const KernelCaps& caps, int qk, int v) {
  if (caps.head_dims == nullptr) return true;
  for (int i = 0; i < caps.num_head_dims; ++i) {
    if (caps.head_dims[i].qk == qk && caps.head_dims[i].v == v) return true;
  }
  return false;
}
// "64, 128 or 256": the head_dim values of caps.head_dims, for messages.
inline std::string head_dims_text(const KernelCaps& caps) {
  std::string out;
  for (int i = 0; i < caps.num_head_dims; ++i) {
    if (i > 0) out += i + 1 == caps.num_head_dims ? " or " : ", ";
    out += std::to_string(caps.head_dims[i].qk);
  }
  return out;
}

constexpr KernelCaps kernel_caps(Kernel kernel) {
  switch (kernel) {
    // The reference path of every dtype the library runs: FP8 inputs are dequantised on load.
    case Kernel::cpu:
      return {.built = true, .host = true, .varlen = true, .hdim_v_differs = true, .sinks = true,
              .softcap = true, .block_descales = KernelCaps::BlockDescales::accepted,
              .dtypes = k16BitDTypes | kE4m3DTypes};
    case Kernel::k1:
    case Kernel::k2:
      return {.built = kLineageBuilt, .min_cc = 80, .hdim_v_differs = true,
              .dtypes = k16BitDTypes};
    case Kernel::fa2:
      return {.built = true, .min_cc = 80, .varlen = true, .hdim_v_differs = true, .sinks = true,
              .softcap = true, .dtypes = k16BitDTypes};
    // Hopper (sm_90a only): K3, K4 and K5 are steps of the story, built for head dim 128.
    case Kernel::k3:
    case Kernel::k4:
    case Kernel::k5:
      return {.built = kLineageBuilt, .min_cc = 90, .max_cc_major = 9, .varlen = true,
              .only_head_dim = 128, .tma = true, .dtypes = k16BitDTypes};
    case Kernel::k6:
      return {.built = true, .min_cc = 90, .max_cc_major = 9, .varlen = true,
              .hdim_v_differs = true, .tma = true, .sinks = true, .softcap = true,
              .dtypes = k16BitDTypes};
    // K6's schedule with the FP8 mainloop: e4m3 q, k, v (o bf16 or fp16), kFp8HeadDims.
    case Kernel::k7:
      return {.built = true, .min_cc = 90, .max_cc_major = 9, .varlen = true, .tma = true,
              .paged = false, .dtypes = kE4m3DTypes, .head_dims = kFp8HeadDims,
              .num_head_dims = static_cast<int>(std::size(kFp8HeadDims))};
    // K7 with one descale per block of rows (ForwardParams::q/k/v_block_descale), dense batches.
    case Kernel::k8:
      return {.built = true, .min_cc = 90, .max_cc_major = 9, .tma = true, .paged = false,
              .block_descales = KernelCaps::BlockDescales::required, .dtypes = kE4m3DTypes,
              .head_dims = kFp8HeadDims,
              .num_head_dims = static_cast<int>(std::size(kFp8HeadDims))};
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
              .softcap = true, .dtypes = k16BitDTypes};
    case Kernel::fa2:
      return {.built = true, .min_cc = 80, .varlen = true, .hdim_v_differs = true, .sinks = true,
              .softcap = true, .dtypes = k16BitDTypes};
    // Hopper (sm_90a): the wgmma backward, head dims 64, 128 and 256 (kBwdSm90HeadDims).
    case Kernel::k6:
      return {.built = true, .min_cc = 90, .max_cc_major = 9, .varlen = true, .tma = true,
              .sinks = true, .softcap = true, .dtypes = k16BitDTypes,
              .head_dims = kBwdSm90HeadDims,
              .num_head_dims = static_cast<int>(std::size(kBwdSm90HeadDims))};
    default:
      return {};
  }
}

// GPU families with a backward, fastest first: the first the device supports is `auto`'s.
inline constexpr Kernel kBackwardGpuPreference[] = {Kernel::k6, Kernel::fa2};

// A capability table: kernel_caps or backward_kernel_caps.
using CapsOf = KernelCaps (*)(Kernel);

// Whether some built family of `caps` runs `dtype`. A dtype none runs (e5m2; e4m3 for the
// backward) is refused as `unsupported` before any family's own rules.
constexpr bool dtype_has_kernel(DType dtype, CapsOf caps) {
  for (Kernel k : kAllKernels) {
    if (caps(k).built && runs_dtype(caps(k), dtype)) return true;
  }
  return false;
}

// GPU families from fastest to slowest: the first built one the device supports (and that runs
// the dtype) is `auto`. k8 and k7 run e4m3 only, k8 with block descales and k7 without, and the
// others 16-bit types only, so they never compete (the forward's auto considers only the families
// whose block-descale rule the request meets: validate.cpp).
inline constexpr Kernel kGpuPreference[] = {Kernel::k8, Kernel::k7, Kernel::k6, Kernel::k5,
                                            Kernel::k4, Kernel::k3, Kernel::fa2, Kernel::k2,
                                            Kernel::k1};

}  // namespace flashattn
