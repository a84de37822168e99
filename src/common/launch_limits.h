// Checks a launcher makes before enqueuing a one-block-per-tile kernel: that the grid fits, and
// that the device lets a block have the shared memory the tile plan needs (sm_86/89 allow 99 KB
// per block, sm_80 163 KB, Hopper 227 KB). Each failure is `unsupported`, naming the family and
// the limit, instead of a bare CUDA error from the launch or the attribute call. And the current
// device's SM count, which persistent grids and split counts are sized by.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "common/cuda_check.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// `blocks` = ceil(seqlen_q / block_m) * batch * heads_q must fit a 1-D grid.
inline Status check_grid_blocks(const char* family, int64_t blocks, int block_m) {
  if (blocks <= INT_MAX) return Status::success();
  return {StatusCode::unsupported, std::string(family) + ": batch * heads_q * ceil(seqlen_q / " +
                                       std::to_string(block_m) +
                                       ") exceeds the launch grid (2^31 - 1 blocks)"};
}

// The current device must allow `smem_bytes` of dynamic shared memory per block.
inline Status check_smem_optin(const char* family, int smem_bytes, int head_dim) {
  int device = 0, optin = 0;
  FA_CUDA_TRY(cudaGetDevice(&device));
  FA_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (smem_bytes <= optin) return Status::success();
  return {StatusCode::unsupported, std::string(family) + ": head_dim " + std::to_string(head_dim) +
                                       " needs " + std::to_string(smem_bytes / 1024) +
                                       " KB of shared memory per block; this device allows " +
                                       std::to_string(optin / 1024) + " KB"};
}

// The current device's multiprocessor count (132 on the H100 SXM and the H200).
inline Status device_sm_count(int* sms) {
  int device = 0;
  FA_CUDA_TRY(cudaGetDevice(&device));
  FA_CUDA_TRY(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, device));
  return Status::success();
}

}  // namespace flashattn
