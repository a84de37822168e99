// The Hopper forward kernel's parameters: the validated problem, the TMA descriptors built on the
// host (launch.cuh), the tile order and the softmax switches. One struct for every collective of
// an instantiation (loader, mainloop, epilogue); a mainloop that needs other operands (FP8
// descales, backward's dO/dQ) gets a params struct of its own beside this one.
#pragma once

#include <cute/tensor.hpp>

#include "common/problem.h"
#include "kernels/fa3_sm90/softmax_sm90.cuh"
#include "kernels/fa3_sm90/tile_scheduler.cuh"

namespace flashattn::fa3 {

template <class C, bool = C::kTmaStoreO>
struct TmaOSlot {
  struct type {};
};
template <class C>
struct TmaOSlot<C, true> {
  using type = typename C::TmaO;
};

// Kernel parameters: the validated problem plus the TMA descriptors built on the host.
template <class C>
struct Params {
  Problem p;
  typename C::Tma::TmaQ tma_q;
  typename C::Tma::TmaK tma_k;
  typename C::Tma::TmaV tma_v;
  typename C::Tma::GmemShape shape_q, shape_k, shape_v;  // (tokens, dim, heads, batch)
  // O's TMA store (C::kTmaStoreO; an empty placeholder otherwise).
  typename TmaOSlot<C>::type tma_o;
  typename C::Tma::GmemShape shape_o;
  TileScheduler scheduler;
  SoftmaxOptions softmax;
  // K6 with uneven tiles (causal, window, varlen): after its first tile (blockIdx.x) a block
  // draws the next from this counter (zeroed before the launch), so blocks that drew short tiles
  // come back for more: greedy longest-processing-time over the scheduler's longest-first order.
  // Null: the static rounds of TileScheduler::tile_of.
  int* tile_counter;
};

}  // namespace flashattn::fa3
