// Named barriers (bar.sync / bar.arrive) for warp-specialized kernels: a subset of a block's warps
// meets at barrier `id` once `threads` threads have arrived. Id 0 is __syncthreads(); each kernel
// lists the ids it uses in one enum so two roles never share one by accident.
#pragma once

namespace flashattn {

// Blocks until `threads` threads (a multiple of 32, this warp included) arrived at barrier `id`.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Counts this warp towards barrier `id` without waiting for the others.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flashattn
