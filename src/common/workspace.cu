#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "common/cuda_check.h"
#include "common/workspace.h"

namespace flashattn {
namespace {

// The pool of `device`, created on first use. Pools are never destroyed: destroying them from a
// static destructor would race the CUDA runtime's own teardown at process exit.
Status device_pool(int device, cudaMemPool_t* pool) {
  static std::mutex mutex;
  static std::unordered_map<int, cudaMemPool_t> pools;
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = pools.find(device); it != pools.end()) {
    *pool = it->second;
    return Status::success();
  }
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t created = nullptr;
  FA_CUDA_TRY(cudaMemPoolCreate(&created, &props));
  // Keep freed memory cached in the pool instead of returning it to the device at every
  // stream synchronisation (the default threshold of 0 would).
  uint64_t threshold = UINT64_MAX;
  const Status st =
      cuda_status(cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &threshold),
                  "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
  if (!st.ok()) {
    cudaMemPoolDestroy(created);
    return st;
  }
  pools.emplace(device, created);
  *pool = created;
  return Status::success();
}

}  // namespace

Status workspace_alloc(size_t bytes, cudaStream_t stream, void** ptr) {
  *ptr = nullptr;
  int device = 0;
  FA_CUDA_TRY(cudaGetDevice(&device));
  cudaMemPool_t pool = nullptr;
  if (Status st = device_pool(device, &pool); !st.ok()) return st;
  const cudaError_t err = cudaMallocFromPoolAsync(ptr, bytes, pool, stream);
  if (err != cudaSuccess) {
    *ptr = nullptr;
    (void)cudaGetLastError();  // an out-of-memory is not sticky: clear it for later launch checks
    return cuda_status(err, "cudaMallocFromPoolAsync(workspace)");
  }
  return Status::success();
}

Status workspace_free(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return Status::success();
  return cuda_status(cudaFreeAsync(ptr, stream), "cudaFreeAsync(workspace)");
}

}  // namespace flashattn
