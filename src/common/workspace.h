// Stream-ordered device scratch memory for kernel families that need a workspace (K1's score
// matrix today; split-KV partials later).
//
// Allocations come from one library-private memory pool per device whose release threshold is
// unbounded: after the first call, freed blocks stay cached in the pool, so later allocations cost
// neither a cudaMalloc nor the device-wide synchronisation of a cudaFree. The price is that the
// pool keeps its high-water mark of device memory until the process exits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "flashattn/flashattn.h"

namespace flashattn {

// Allocates `bytes` (> 0) on the current device, ordered on `stream`. On failure *ptr is null and
// the Status is cuda_error carrying the CUDA error (the sticky last-error is cleared, so a later
// launch check does not report this failure again).
Status workspace_alloc(size_t bytes, cudaStream_t stream, void** ptr);

// Returns a workspace_alloc block to the pool once the work queued on `stream` before it is done.
// `stream` must be the stream (or one ordered after the stream) the block was used on.
Status workspace_free(void* ptr, cudaStream_t stream);

}  // namespace flashattn
