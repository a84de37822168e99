// Host-side helpers shared by the fp64 reference, the checker and the CPU backend: a work-sharing
// loop over std::thread workers, strided element addressing, and the one place the reference
// code turns ForwardParams into a Mask (through make_problem, so the causal -> right = 0 rule is
// written exactly once in the project).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/problem.h"
#include "common/mask.h"
#include "flashattn/flashattn.h"

namespace flashattn::host {

// Workers a loop over `items` independent items uses: one per hardware thread, never more than
// there are items, at least one.
inline int worker_count(int64_t items) {
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, std::min(hw, items)));
}

// Calls fn(worker, item) for every item in [0, items), items handed out one at a time from a
// shared counter so that uneven items (causal tiles, rows of different visible length) balance.
// `worker` is in [0, worker_count(items)) and lets callers keep per-worker scratch and results.
template <class Fn>
void parallel_for(int64_t items, Fn&& fn) {
  const int workers = worker_count(items);
  if (workers == 1) {
    for (int64_t i = 0; i < items; ++i) fn(0, i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto body = [&](int worker) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < items;
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(worker, i);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers - 1));
  for (int w = 1; w < workers; ++w) threads.emplace_back(body, w);
  body(0);
  for (auto& t : threads) t.join();
}

// Element offset of (batch, row, head, 0) in a (batch, seqlen, heads, dim) tensor.
inline int64_t offset(const int64_t (&stride)[4], int batch, int row, int head) {
  return batch * stride[0] + row * stride[1] + head * stride[2];
}

// The visibility mask of `params`, built by make_problem like every kernel's.
inline Mask mask_of(const ForwardParams& params) {
  return make_problem(params).mask;
}

inline int head_dim_v_of(const ForwardParams& params) {
  return params.head_dim_v > 0 ? params.head_dim_v : params.head_dim;
}

}  // namespace flashattn::host
