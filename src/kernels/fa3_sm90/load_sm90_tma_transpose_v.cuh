// The FP8 forward's load collective: K6's TMA loads, plus V turned around in shared memory by
// warps 1-3 of the producer warpgroup (transpose_v_sm90.cuh), because 8-bit wgmma reads its B
// operand K-major only. Three pipelines instead of two:
//   k      TMA -> consumers                       (as Loader's)
//   v_raw  TMA -> warps 1-3                       V as stored, C::kStages stages
//   v      warps 1-3 -> consumers                 Vᵀ, C::kStages stages: what the mainloop reads
// The leader (thread 0) walks the tiles and issues every TMA exactly as K6's producer thread
// does (and keeps to its registers: a leader that also transposed spilled at d 64, whose three
// consumer warpgroups leave the producer warpgroup 32 registers). Warps 1-3, the followers,
// never look at tiles: they transpose every landed V block in order until the leader, out of
// tiles, completes one more raw stage with no data and the count of blocks it loaded
// (follow_transposes). Waiting on the tile barriers as the leader does would let them fall two
// phases behind (a one-block tile can complete q_empty before a slow warp waited for the
// previous phase) and hang.
#pragma once

#include <climits>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "kernels/fa3_sm90/load_sm90_tma.cuh"
#include "kernels/fa3_sm90/transpose_v_sm90.cuh"

namespace flashattn::fa3 {

template <class C>
struct LoaderTransposeV {
  using SharedStorage = typename C::SharedStorage;
  using PipelineKV = typename C::PipelineKV;
  using PipelineVRaw = typename C::PipelineVRaw;
  using PipelineV = typename C::PipelineV;
  using Category = typename PipelineKV::ThreadCategory;
  static constexpr int kFollowers = 96;  // warps 1-3 of the producer warpgroup transpose V

  struct Ring {
    PipelineKV k;
    PipelineV v;
    PipelineVRaw v_raw;
  };
  // The leader's place in the K and raw V rings, which have the same stages and advance together
  // (one state, as K6's producer keeps: the leader fits K6's registers), and the followers'.
  using ProducerState = cutlass::PipelineState<C::kStages>;
  struct FollowerState {
    cutlass::PipelineState<C::kStages> v, raw;
  };

  Loader<C> tma;  // Q, K and V's TMA copies

  __device__ __forceinline__ explicit LoaderTransposeV(const Params<C>& params) : tma{params} {}

  __device__ __forceinline__ void prefetch_descriptors() const { tma.prefetch_descriptors(); }
  __device__ __forceinline__ void load_q(SharedStorage& ss, const TileWork& w) const {
    tma.load_q(ss, w);
  }

  // `role`: this thread's side of the K ring (Producer: the producer warpgroup; Consumer).
  __device__ __forceinline__ static Ring make_ring(SharedStorage& ss, Category role) {
    const bool producer = role == Category::Producer;
    const bool leader = threadIdx.x == 0;
    typename PipelineKV::Params pk;
    pk.role = role;
    pk.is_leader = leader;
    pk.num_consumers = C::kConsumerThreads;
    pk.transaction_bytes = C::kBytesK;
    typename PipelineVRaw::Params pr;
    using RawCategory = typename PipelineVRaw::ThreadCategory;
    pr.role = !producer ? RawCategory::NonParticipant
              : leader  ? RawCategory::Producer
                        : RawCategory::Consumer;
    pr.is_leader = leader;
    pr.num_consumers = kFollowers;
    pr.transaction_bytes = C::kBytesV;
    typename PipelineV::Params pv;
    using VCategory = typename PipelineV::ThreadCategory;
    pv.role = producer ? VCategory::Producer : VCategory::Consumer;
    pv.producer_arv_count = kFollowers;
    pv.consumer_arv_count = C::kConsumerThreads;
    return {PipelineKV(ss.pipeline_k, pk, Shape<_1, _1, _1>{}), PipelineV(ss.pipeline_v, pv),
            PipelineVRaw(ss.pipeline_v_raw, pr, Shape<_1, _1, _1>{})};
  }

  __device__ __forceinline__ static ProducerState start_state() {
    return cutlass::make_producer_start_state<PipelineKV>();
  }

  // The landed V block st.raw, transposed into the next Vᵀ stage (every follower, after
  // ring.v_raw.consumer_wait(st.raw)).
  __device__ __forceinline__ void transpose_landed(SharedStorage& ss, Ring& ring,
                                                   FollowerState& st) const {
    ring.v.producer_acquire(st.v);
    transpose_v<C, kFollowers>(ss.v_raw.data(), st.raw.index(), ss.v.data(), st.v.index(),
                               threadIdx.x % 128 - (128 - kFollowers));
    // The stores, visible to the consumers' wgmma (the async proxy) before the stage is full.
    cutlass::arch::fence_view_async_shared();
    ring.v.producer_commit(st.v);
    ring.v_raw.consumer_release(st.raw);
    ++st.raw;
    ++st.v;
  }

  // Thread 0 before the block's first barrier: no end of the V blocks known yet.
  __device__ __forceinline__ static void init_shared(SharedStorage& ss) {
    ss.v_blocks = INT_MAX;
  }

  // The leader: every key block of a tile, last to first (the order the mainloop visits them).
  __device__ __forceinline__ void load_tile(SharedStorage& ss, Ring& ring, ProducerState& st,
                                            const TileWork& w) const {
#pragma unroll 1  // (unrolled by 4, the loop spilled the leader's 32 registers at d 64)
    for (int n = w.n_max - 1; n >= w.n_min; --n, ++st) {
      tma.load_k(ss, ring.k, st, w, n);
      tma.load_v(ss.v_raw.data(), ring.v_raw, st, w, n);
    }
  }

  // The leader, out of tiles: waits until the followers have released every block it loaded (so
  // none of them reads v_blocks until the next stage completes: a write while they still read
  // it for earlier blocks was a race under compute-sanitizer racecheck), publishes how many there
  // were, then completes the next raw stage without data, which wakes the followers to read it.
  __device__ __forceinline__ void finish(SharedStorage& ss, Ring& ring, ProducerState& st) const {
    ProducerState drained = st;
    // The stage of block count + s was last filled with block count + s - kStages.
    for (int s = 0; s < C::kStages; ++s, ++drained) {
      ss.pipeline_v_raw.empty_barrier_[drained.index()].wait(drained.phase());
    }
    store_shared_int(&ss.v_blocks, st.count());
    ring.v_raw.producer_acquire(st);  // expects kBytesV on the stage's barrier
    cutlass::arch::ClusterTransactionBarrier::complete_transaction(
        ring.v_raw.producer_get_barrier(st), 0, C::kBytesV);
  }

  // The followers: every landed block, until the leader's count says there are no more. (The
  // count is INT_MAX until the leader is out of tiles, and is published before the stage that
  // follows the last block completes.)
  __device__ __forceinline__ void follow_transposes(SharedStorage& ss, Ring& ring) const {
    FollowerState st{cutlass::make_producer_start_state<PipelineV>(), {}};
    for (int done = 0;; ++done) {
      ring.v_raw.consumer_wait(st.raw);
      if (done == load_shared_int(&ss.v_blocks)) return;
      transpose_landed(ss, ring, st);
    }
  }
};

}  // namespace flashattn::fa3
