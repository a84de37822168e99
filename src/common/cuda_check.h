// CUDA error handling for host code: every runtime call's result becomes a Status that names the
// call site, so a failed launch or allocation reaches the caller instead of a crash.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "flashattn/flashattn.h"

namespace flashattn {

inline Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::success();
  return {StatusCode::cuda_error, std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                                      cudaGetErrorString(err) + ")"};
}

// Returns from the enclosing function (which returns Status) when the call fails.
#define FA_CUDA_TRY(call)                                                   \
  do {                                                                      \
    const ::flashattn::Status fa_status_ = ::flashattn::cuda_status((call), #call); \
    if (!fa_status_.ok()) return fa_status_;                                \
  } while (0)

// After a kernel launch: reports launch-configuration errors (not asynchronous faults).
#define FA_CUDA_LAUNCH_CHECK(name)                                                  \
  do {                                                                              \
    const ::flashattn::Status fa_status_ = ::flashattn::cuda_status(cudaGetLastError(), name); \
    if (!fa_status_.ok()) return fa_status_;                                        \
  } while (0)

}  // namespace flashattn
