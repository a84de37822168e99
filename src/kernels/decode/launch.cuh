// Host side of the decode family, templated on (element type, head dim, e4m3 cache). Each
// instantiation is a generated file (cmake/instantiations.cmake); launch.cu dispatches to them.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>

#include "common/cuda_check.h"
#include "common/decode_problem.h"
#include "kernels/decode/combine.cuh"
#include "kernels/decode/kernel.cuh"

namespace flashattn::decoding {

// Raises the kernel's shared-memory limit and measures its occupancy, once per device: both are
// driver calls whose cost would show in the host time of every decode step otherwise.
template <typename Element, int kHeadDim, bool kKvE4m3>
Status prepare_split_kernel(int* blocks_per_sm) {
  using C = Config<Element, kHeadDim, kDecodeWarps, kKvE4m3>;
  static std::array<std::atomic<int>, 64> prepared{};  // blocks per SM + 1; 0: not yet
  int device = 0, smem_optin = 0;
  FA_CUDA_TRY(cudaGetDevice(&device));
  if (device < 64 && prepared[device] > 0) {
    if (blocks_per_sm != nullptr) *blocks_per_sm = prepared[device] - 1;
    return Status::success();
  }
  FA_CUDA_TRY(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (C::kSmemBytes > smem_optin) {
    return {StatusCode::unsupported, "decode: head_dim " + std::to_string(kHeadDim) + " needs " +
                                         std::to_string(C::kSmemBytes / 1024) +
                                         " KB of shared memory per block; this device allows " +
                                         std::to_string(smem_optin / 1024) + " KB"};
  }
  // Above the 48 KB default; the attribute is per device, so it is set at every call. The
  // occupancy is the least of the three layouts' kernels (their registers differ by a few).
  int blocks = 0;
  for (auto kernel : {split_kernel<C, kDecodeContiguous>, split_kernel<C, kDecodeTilePages>,
                      split_kernel<C, kDecodeRowPages>}) {
    FA_CUDA_TRY(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    int here = 0;
    FA_CUDA_TRY(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&here, kernel, C::kThreads, C::kSmemBytes));
    blocks = blocks == 0 ? here : std::min(blocks, here);
  }
  if (blocks_per_sm != nullptr) *blocks_per_sm = blocks;
  if (device < 64) prepared[device] = blocks + 1;
  return Status::success();
}

template <typename Element, int kHeadDim, bool kKvE4m3>
Status blocks_per_sm(int* blocks) {
  return prepare_split_kernel<Element, kHeadDim, kKvE4m3>(blocks);
}

// The split kernel, then (num_splits > 1) the combine kernel. On sm_90 the combine kernel is a
// programmatic dependent launch: its blocks are scheduled while the split grid drains and wait in
// griddepcontrol.wait, which hides the launch gap between the two (a few microseconds, a tenth
// of a short decode step).
template <typename Element, int kHeadDim, bool kKvE4m3>
Status run_decode(const DecodeProblem& p) {
  using C = Config<Element, kHeadDim, kDecodeWarps, kKvE4m3>;
  if (Status s = prepare_split_kernel<Element, kHeadDim, kKvE4m3>(nullptr); !s.ok()) return s;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  const dim3 grid(static_cast<unsigned>(p.row_chunks * p.num_splits),
                  static_cast<unsigned>(p.heads_kv), static_cast<unsigned>(p.batch));
  const auto kernel = !p.paged                                ? split_kernel<C, kDecodeContiguous>
                      : p.page_size % kDecodeKeysPerTile == 0 ? split_kernel<C, kDecodeTilePages>
                                                              : split_kernel<C, kDecodeRowPages>;
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  FA_CUDA_LAUNCH_CHECK("decode split_kernel");
  if (p.num_splits == 1) return Status::success();

  int device = 0, major = 0;
  FA_CUDA_TRY(cudaGetDevice(&device));
  FA_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const int64_t rows = int64_t(p.batch) * p.seqlen_q * p.heads_q;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(rows));
  cfg.blockDim = dim3(32 * kCombineWarps);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = major >= 9 ? 1 : 0;
  FA_CUDA_TRY(cudaLaunchKernelEx(&cfg, combine_kernel<Element, kHeadDim>, p));
  return Status::success();
}

}  // namespace flashattn::decoding
