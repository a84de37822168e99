// The Hopper forward kernel, kernel<Schedule, Mainloop, Epilogue>: assigns warp roles and walks
// tiles; the work is in the collectives: the TMA load collective (load_sm90_tma.cuh), the
// mainloop (mainloop_fwd_sm90_tma_wgmma.cuh) and the epilogue (epilogue_fwd_sm90.cuh).
//
//   ScheduleK4: every warpgroup consumes; thread 0 also issues every TMA, in line with its compute.
//   ScheduleK5/K6: warpgroup 0 is the producer (one thread issues TMA; the group drops to 24
//          registers), the others consume (240 registers each, 160 with three at d 64). The
//          FP8 loader keeps warps 1-3 of the producer warpgroup to transpose V (kFollowers).
//   ScheduleK6 also runs persistently: one block per SM walks the scheduler's tiles in rounds.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <type_traits>

#include "kernels/fa3_sm90/load_sm90_tma.cuh"
#include "kernels/fa3_sm90/params_fwd_sm90.cuh"
#include "kernels/fa3_sm90/schedule.cuh"
#include "kernels/fa3_sm90/tile_work.cuh"
#include "kernels/fa3_sm90/timeline.cuh"

namespace flashattn::fa3 {

// MainloopT is a mainloop collective over an instantiation's Config (MainloopT::Cfg), with its
// kernel parameters (MainloopT::Params) and load collective (MainloopT::Load); EpilogueT stores
// what it leaves in registers. The schedule says which warp does what.
// K6's late claim (kLateClaim, kernel below): one lane of producer warp 1 draws each
// counter tile when thread 0 asks (claim_now) and hands it over as a consumer otherwise would
// (next_tile, next_ready). Kept out of line: the leader's 24 registers have no room to spare.
template <class SharedStorage>
__device__ __noinline__ void draw_tiles_late(SharedStorage& ss, int* counter, int grid_blocks,
                                             int num_tiles) {
  using Barrier = cutlass::arch::ClusterBarrier;
  for (int k = 0;; ++k) {
    Barrier::wait(&ss.claim_now, k & 1);
    const int next = atomicAdd(counter, 1) + grid_blocks;
    store_shared_int(&ss.next_tile, next);
    Barrier::arrive(&ss.next_ready);
    if (next >= num_tiles) return;
  }
}

template <class ScheduleT, class MainloopT, class EpilogueT, class C = typename MainloopT::Cfg>
__global__ void __launch_bounds__(C::kThreads, 1)
    fwd_kernel(const __grid_constant__ typename MainloopT::Params params) {
  static_assert(std::is_same_v<ScheduleT, typename C::Schedule>);
  using SharedStorage = typename C::SharedStorage;
  using PipelineKV = typename C::PipelineKV;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  using Barrier = cutlass::arch::ClusterBarrier;
  extern __shared__ __align__(1024) unsigned char smem[];
  SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem);

  const int warp_group = threadIdx.x / 128;
  const bool producer = role_of<ScheduleT>(warp_group) == Role::producer;
  using Load = typename MainloopT::Load;
  const Load loader{params};
  // Tiles drawn from the counter (uneven work) are claimed late (the producer's comment below)
  // with two consumer warpgroups, by K7's leader itself or K6's producer warp 1. Not with three
  // (d 64): without the consumer's atomic, K6 d 64's 160-register consumers spilled 176 bytes
  // (K7 d 64 and d 128, also three warpgroups, keep the early claim: with K7's leader claiming
  // late, d 64 compiled clean but measured +1-2% on causal rows of 512-2k and -2.5 / -4.3% at 4k /
  // 16k (H200, bench/results/2026-11-28_h200_k7_d64_late_claim_ab.txt); d 128's 32-register
  // leader spilled 64 bytes).
  constexpr bool kLateClaim = C::kConsumerWarpGroups == 2;
  constexpr bool kLeaderClaims = kLateClaim && Load::kFollowers > 0;
  constexpr bool kHelperClaims = kLateClaim && Load::kFollowers == 0;
  if (threadIdx.x == 0) {
    Barrier::init(&ss.q_full, 1);
    Barrier::init(&ss.q_empty, C::kConsumerThreads);
    Barrier::init(&ss.next_ready, 1);
    if constexpr (kHelperClaims) Barrier::init(&ss.claim_now, 1);
    loader.prefetch_descriptors();
    Load::init_shared(ss);
    FA_TRACE_INIT();
  }
  using Category = typename PipelineKV::ThreadCategory;
  auto ring = Load::make_ring(ss, !ScheduleT::kWarpSpecialized ? Category::ProducerConsumer
                                  : producer                   ? Category::Producer
                                                               : Category::Consumer);
  cutlass::arch::fence_barrier_init();
  __syncthreads();
  FA_TRACE(warp_group, kBegin, 0);

  const int num_tiles = params.scheduler.num_tiles();
  // Persistent (K6): gridDim.x blocks walk the tiles, in static rounds or drawing from
  // params.tile_counter; otherwise one tile per block. (K6 launched with one block per tile,
  // DebugOptions::persistent off, ends after its first tile.)
  const int grid_blocks = ScheduleT::kPersistent ? gridDim.x : num_tiles;
  if constexpr (ScheduleT::kWarpSpecialized) {
    if (producer) {
      cutlass::arch::warpgroup_reg_dealloc<C::kProducerRegs>();
      if constexpr (Load::kFollowers > 0) {
        if (threadIdx.x >= 128 - Load::kFollowers) {  // FP8: they transpose V
          loader.follow_transposes(ss, ring);
          return;
        }
      }
      if constexpr (kHelperClaims) {
        // (a warp-uniform test: testing threadIdx.x == 32 here moved the leader's tile
        // arithmetic out of uniform registers and spilled its 24)
        if (cutlass::canonical_warp_idx_sync() % 4 == 1) {
          if (cute::elect_one_sync() && params.tile_counter != nullptr) {
            draw_tiles_late(ss, params.tile_counter, grid_blocks, num_tiles);
          }
          return;
        }
      }
      if (threadIdx.x != 0) return;
      // One thread announces the block's tiles, each through ss.tile with q_full (Q's TMA, or a
      // plain arrival for a tile with nothing to load), and issues the loads; the tile after it
      // comes through ss.next_tile and next_ready. From the static rounds (even tiles) a
      // consumer thread hands it over when a tile starts. From the counter (uneven tiles) the
      // same, unless kLateClaim: then it is drawn once this tile's last K/V is issued,
      // which the ring allows only about kStages blocks before the consumers finish: as late as
      // the next Q load allows. Drawn when a tile started, each block held one tile in reserve,
      // and under the longest-first order that left SMs idle at the end (K7 d256 8k causal: the
      // mean SM busy 0.885 of the busiest one's time by ncu, 0.878 simulated, 0.997 simulated
      // with the late claim; bench/tile_order_sim.py). K7's leader draws it itself; K6's
      // 24-register leader spilled doing so, so it asks producer warp 1 (claim_now), idle
      // otherwise.
      typename Load::ProducerState state = Load::start_state();
      int tile = params.scheduler.tile_of(0, blockIdx.x, grid_blocks);
      for (int announced = 0;; ++announced) {
        // The tile's coordinates are worked out before waiting for Q's buffer, so that the Q
        // load is issued as soon as the consumers' last Q·Kᵀ of the tile before frees it.
        TileWork w;
        if (tile < num_tiles) w = tile_work(params, tile);
        if (announced > 0) Barrier::wait(&ss.q_empty, (announced - 1) & 1);  // slot, Q free
        FA_TRACE(0, kProdTile, 0);
        store_shared_int(&ss.tile, min(tile, num_tiles));
        if (tile >= num_tiles) {
          Barrier::arrive(&ss.q_full);
          loader.finish(ss, ring, state);
          FA_TRACE(0, kExit, 0);
          return;
        }
        if (w.skip || w.empty()) {
          Barrier::arrive(&ss.q_full);
        } else {
          loader.load_q(ss, w);
          loader.load_tile(ss, ring, state, w);
        }
        // K6: producer warp 1 may draw the next tile now (unconditional: with no counter no one
        // waits on claim_now and its phases just pass).
        if constexpr (kHelperClaims) Barrier::arrive(&ss.claim_now);
        Barrier::wait(&ss.next_ready, announced & 1);
        tile = load_shared_int(&ss.next_tile);
        if constexpr (kLeaderClaims) {
          if (tile < 0) tile = atomicAdd(params.tile_counter, 1) + grid_blocks;
        }
        FA_TRACE(0, kProdNext, 0);
      }
    }
    cutlass::arch::warpgroup_reg_alloc<C::kConsumerRegs>();
  }

  const int ctid = threadIdx.x - (ScheduleT::kWarpSpecialized ? 128 : 0);
  MainloopT consumer{{}, {}, params.p, params.softmax, ctid, ctid / 128};
  const EpilogueT epilogue{params};
  // Ping-pong: the warpgroups issue their GEMMs in turn, 0, 1, (2,) 0, ...: each waits on its
  // own barrier and then arrives on the next one's. Warpgroup 0 goes first: the last one's
  // standing arrival lets it.
  if constexpr (ScheduleT::kPingpong) {
    if (consumer.wg == C::kConsumerWarpGroups - 1) named_barrier_arrive(kPingpongWG0, 2 * 128);
  }
  PipelineState state;
  PipelineState load_state = cutlass::make_producer_start_state<PipelineKV>();  // K4 only
  // One tile whose Q has landed (or no key is visible to it).
  auto compute_tile = [&](int tile, const TileWork& w) {
    if (w.empty()) {
      epilogue.store_empty(w);
      if constexpr (ScheduleT::kWarpSpecialized) Barrier::arrive(&ss.q_empty);
      return;
    }
    // K4: thread 0 refills a stage as soon as it is released.
    auto refill = [&](int visited) {
      if constexpr (!ScheduleT::kWarpSpecialized) {
        const int next = visited + C::kStages;
        if (threadIdx.x == 0 && next < w.n_max - w.n_min) {
          loader.load_kv(ss, ring.k, ring.v, load_state, w, w.n_max - 1 - next);
          ++load_state;
        }
      }
    };
    typename MainloopT::Softmax softmax = consumer.make_softmax(w);
    typename MainloopT::FragO tOrO;
    if constexpr (ScheduleT::kOverlap) {
      consumer.mainloop_overlap(ss, ring.k, ring.v, state, w, tOrO, softmax);
    } else {
      consumer.mainloop_plain(ss, ring.k, ring.v, state, w, tOrO, softmax, refill);
    }
    // The tile's coordinates are derived again rather than kept live across the mainloop: the
    // loop needs every register it can get, and re-reading them costs a few cached loads.
    epilogue.store(ss, tile_work(params, tile), tOrO, softmax, consumer.mma_pv);
  };

  if constexpr (ScheduleT::kWarpSpecialized) {
    // The producer announces each tile (above); the first consumer thread hands it the one
    // after it as soon as this one is known: from the static rounds, or from the counter, or
    // with the late claim -1 (K7's leader draws it; in K6 producer warp 1 hands it over instead).
    for (int t = 0;; ++t) {
      Barrier::wait(&ss.q_full, t & 1);
      const int tile = load_shared_int(&ss.tile);
      if (tile >= num_tiles) {
        FA_TRACE(1 + consumer.wg, kExit, 0);
        epilogue.finish();
        break;
      }
      FA_TRACE(1 + consumer.wg, kTile, 0);
      if (ctid == 0 && !(kHelperClaims && params.tile_counter != nullptr)) {
        const int next =
            params.tile_counter != nullptr
                ? (kLeaderClaims ? -1 : atomicAdd(params.tile_counter, 1) + grid_blocks)
                : params.scheduler.tile_of(t + 1, blockIdx.x, grid_blocks);
        store_shared_int(&ss.next_tile, next);
        Barrier::arrive(&ss.next_ready);
      }
      const TileWork w = tile_work(params, tile);
      if (w.skip) {
        Barrier::arrive(&ss.q_empty);
        continue;
      }
      compute_tile(tile, w);
      FA_TRACE(1 + consumer.wg, kEpilogue, 0);
    }
  } else {
    // K4: every thread walks the tiles; thread 0 loads Q and fills the ring in line.
    int q_reads = 0;
    for (int round = 0, tile; (tile = params.scheduler.tile_of(round, blockIdx.x, grid_blocks)) < num_tiles; ++round) {
      const TileWork w = tile_work(params, tile);
      if (w.skip) continue;
      if (!w.empty()) {
        if (threadIdx.x == 0) {
          loader.load_q(ss, w);
          for (int i = 0; i < C::kStages && i < w.n_max - w.n_min; ++i, ++load_state) {
            loader.load_kv(ss, ring.k, ring.v, load_state, w, w.n_max - 1 - i);
          }
        }
        Barrier::wait(&ss.q_full, q_reads & 1);
        ++q_reads;
      }
      compute_tile(tile, w);
    }
  }
}

}  // namespace flashattn::fa3
