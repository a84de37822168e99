// Device pieces every backward main kernel walks with: the query blocks a key block touches
// under a mask, and the acquire/release pair of the deterministic mode's per-tile semaphores.
#pragma once

#include "common/mask.h"

namespace flashattn::bwd {

// The query blocks [m_lo, m_hi) that key block n (keys n·kBlockN .. of a sequence of
// mask.seqlen_k keys) touches under `mask`. The one definition both the walk and the
// deterministic order use.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void query_blocks(const Mask& mask, int n, int& m_lo, int& m_hi) {
  const int key0 = n * kBlockN;
  const int key1 = min(key0 + kBlockN, mask.seqlen_k);
  const int lo = mask.query_begin(key0), hi = mask.query_end(key1 - 1);
  m_lo = lo / kBlockM;
  m_hi = hi > lo ? (hi + kBlockM - 1) / kBlockM : m_lo;
}

// How many key blocks before n touch query block m: key block n's turn at m's semaphore in
// deterministic mode (adds in ascending key-block order).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int add_order(const Mask& mask, int n, int m) {
  int order = 0;
  for (int j = 0; j < n; ++j) {
    int lo, hi;
    query_blocks<kBlockM, kBlockN>(mask, j, lo, hi);
    order += (lo <= m && m < hi) ? 1 : 0;
  }
  return order;
}

// How many key blocks after n touch query block m (which n touches): key block n's turn at m's
// semaphore when the adds go in descending key-block order. O(1): under a band mask the key
// blocks that touch a query block are contiguous (consecutive rows' key ranges shift by one, and
// a query block's last row always sees a key, since only rows at a sequence's start can see
// none), so they are n + 1 .. the block of the last row's last key.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int add_order_descending(const Mask& mask, int n, int m) {
  const int last_row = min((m + 1) * kBlockM, mask.seqlen_q) - 1;
  return (mask.key_end(last_row) - 1) / kBlockN - n;
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int* p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

}  // namespace flashattn::bwd
