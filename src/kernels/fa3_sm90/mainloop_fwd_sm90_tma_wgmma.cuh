// The Hopper forward mainloop: TMA loads into a ring of shared-memory stages completed on
// mbarriers (the producer side), and the consumer side that runs, per key block,
//     S = Q·Kᵀ (wgmma, both from shared memory),  mask,  online softmax,  rescale O,
//     O += P·V (wgmma, P from registers).
// Two consumer schedules: `plain` (K4, K5) waits for each GEMM before the next step; `overlap`
// (K6) issues Q·K(j+1)ᵀ and P(j)·V(j) together and runs the softmax of block j+1 while P(j)·V(j)
// is still on the tensor cores, with ping-pong barriers ordering the two warpgroups' GEMMs.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "common/problem.h"
#include "common/mask.h"
#include "common/named_barrier.cuh"
#include "common/sequence_view.cuh"
#include "kernels/fa3_sm90/config.cuh"
#include "kernels/fa3_sm90/softmax_sm90.cuh"
#include "kernels/fa3_sm90/tile_scheduler.cuh"
#include "kernels/fa3_sm90/timeline.cuh"

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

// Barrier ids (bar.sync): 0 is __syncthreads.
enum Barrier : int {
  kPingpongWG0 = 1,   // + w: consumer warpgroup w may issue its GEMMs (w < 3)
  kEpilogueWG0 = 4,   // + w: warpgroup w's rows of the O staging buffer are written / read
};

// What one tile is: its coordinates, its sequence, and the key blocks [n_min, n_max) it visits
// (last to first). `skip` tiles lie past the end of a variable-length sequence: nothing to write.
struct TileWork {
  TileCoord c;
  int h_kv;
  SequenceView seq;
  Mask mask;
  int row0;
  int n_min, n_max;
  bool skip;
  __device__ __forceinline__ bool empty() const { return n_max <= n_min; }
  // Whether tile row `row` (row0 + offset) is a row of the sequence, to be stored: rows before 0
  // (a first tile aligned to the end, top_rows) and past the end are not.
  __device__ __forceinline__ bool stores_row(int row) const { return row >= 0 && row < seq.len_q; }
};

// Rows before the sequence's first that the first query tile covers. Under a mask with a right
// bound (causal), later rows see more keys, so the tiles are aligned to the sequence's end: the
// partial tile is the first, the cheapest, rather than the last, the dearest (d 64's 192-row tiles
// at seqlen 512: 27 warpgroup-blocks per head -> 24). Rows before 0 see no key or (seqlen_k >
// seqlen_q) read zero-filled or neighbouring Q rows; they are never stored.
template <class C>
__device__ __forceinline__ int top_rows(const Problem& p, int len_q) {
  return fa3::top_rows(C::kBlockM, len_q, C::kAlignTilesToEnd && p.mask.right >= 0);
}

template <class C>
__device__ __forceinline__ TileWork tile_work(const Params<C>& params, int tile) {
  const Problem& p = params.p;
  TileWork w;
  w.c = params.scheduler.template coord<C::kFastDivide>(tile);
  w.h_kv = params.scheduler.template kv_head<C::kFastDivide>(w.c.head);
  w.seq = sequence_view(p, w.c.batch, w.c.head, w.h_kv);
  w.mask = Mask{w.seq.len_q, w.seq.len_k, p.mask.left, p.mask.right};
  w.row0 = w.c.m_block * C::kBlockM - top_rows<C>(p, w.seq.len_q);
  w.skip = w.row0 >= w.seq.len_q;
  int key_begin = 0, key_end = 0;
  if (!w.skip) w.mask.key_range(w.row0, min(w.seq.len_q, w.row0 + C::kBlockM), key_begin, key_end);
  w.n_min = key_begin / C::kBlockN;
  w.n_max = key_end > key_begin ? (key_end + C::kBlockN - 1) / C::kBlockN : w.n_min;
  return w;
}

// The K and V rings of a block (one PipelineTmaAsync each, `C::kStages` stages) for threads of
// the given role; `consumers` threads release each stage. Call from every thread, then
// fence_barrier_init and a block barrier before first use. Shared by K3 and K4-K6.
template <class C>
struct KVRing {
  typename C::PipelineKV k, v;
};
template <class C, class SharedStorage>
__device__ __forceinline__ KVRing<C> make_kv_ring(
    SharedStorage& ss, typename C::PipelineKV::ThreadCategory role, int consumers) {
  using PipelineKV = typename C::PipelineKV;
  typename PipelineKV::Params pk;
  pk.role = role;
  pk.is_leader = threadIdx.x == 0;  // the thread that issues TMA
  pk.num_consumers = consumers;
  typename PipelineKV::Params pv = pk;
  pk.transaction_bytes = C::kBytesK;
  pv.transaction_bytes = C::kBytesV;
  return {PipelineKV(ss.pipeline_k, pk, Shape<_1, _1, _1>{}),
          PipelineKV(ss.pipeline_v, pv, Shape<_1, _1, _1>{})};
}

// Producer side: one thread issues every TMA of a tile.
template <class C>
struct Loader {
  using Element = typename C::Element;
  using SharedStorage = typename C::SharedStorage;
  using PipelineKV = typename C::PipelineKV;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  const Params<C>& params;

  // The three TMA descriptors into the descriptor cache (one thread, at kernel start).
  __device__ __forceinline__ void prefetch_descriptors() const {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
    if constexpr (C::kTmaStoreO) cute::prefetch_tma_descriptor(params.tma_o.get_tma_descriptor());
  }

  __device__ __forceinline__ int batch_index(const TileWork& w) const {
    return params.p.cu_seqlens_q != nullptr ? 0 : w.c.batch;
  }

  __device__ __forceinline__ void load_q(SharedStorage& ss, const TileWork& w) const {
    Tensor mQ = params.tma_q.get_tma_tensor(params.shape_q);
    // Rows from row0, which may lie before the sequence's start (top_rows): TMA zero-fills
    // coordinates before the tensor's first row.
    Tensor gQ = local_tile(domain_offset(make_coord(w.seq.token_q + w.row0, _0{}),
                                         mQ(_, _, w.c.head, batch_index(w))),
                           Shape<Int<C::kBlockM>, Int<C::kHeadDim>>{}, make_coord(_0{}, _0{}));
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
    auto [src, dst] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                    group_modes<0, 2>(gQ));
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.q_full, C::kBytesQ);
    copy(params.tma_q.with(ss.q_full), src, dst);
    FA_TL(0, kProdQ);
  }

  // K and V of key block n into the stage `state` names, each on its own pipeline.
  __device__ __forceinline__ void load_kv(SharedStorage& ss, PipelineKV& pipe_k,
                                          PipelineKV& pipe_v, PipelineState state,
                                          const TileWork& w, int n) const {
    Tensor mK = params.tma_k.get_tma_tensor(params.shape_k);
    Tensor mV = params.tma_v.get_tma_tensor(params.shape_v);
    const int b = batch_index(w);
    Tensor gK = local_tile(domain_offset(make_coord(w.seq.token_k, _0{}), mK(_, _, w.h_kv, b)),
                           Shape<Int<C::kBlockN>, Int<C::kHeadDim>>{}, make_coord(n, _0{}));
    Tensor gV = local_tile(domain_offset(make_coord(w.seq.token_k, _0{}), mV(_, _, w.h_kv, b)),
                           Shape<Int<C::kBlockN>, Int<C::kHeadDimV>>{}, make_coord(n, _0{}));
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{});
    Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutV{});
    auto [k_src, k_dst] = tma_partition(params.tma_k, _0{}, Layout<_1>{},
                                        group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [v_src, v_dst] = tma_partition(params.tma_v, _0{}, Layout<_1>{},
                                        group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    pipe_k.producer_acquire(state);
    copy(params.tma_k.with(*pipe_k.producer_get_barrier(state)), k_src, k_dst(_, state.index()));
    FA_TL(0, kProdK);
    pipe_v.producer_acquire(state);
    copy(params.tma_v.with(*pipe_v.producer_get_barrier(state)), v_src, v_dst(_, state.index()));
  }
};

// One wgmma batch: C (+)= A·B over the k slices, committed as one group. kWait >= 0 waits until
// at most kWait groups are in flight; -1 returns with the batch in flight.
template <bool kZeroInit, int kWait, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma(TiledMma& mma, TA& a, const TB& b, TC& c) {
  // A from registers (P·V) unless its fragment is a shared-memory descriptor (Q·Kᵀ).
  constexpr bool kARegisters =
      !std::is_base_of_v<GMMA::DescriptorIterator, typename TA::engine_type::iterator>;
  if constexpr (kARegisters) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(c);
  if constexpr (kARegisters) warpgroup_fence_operand(a);
}

// Consumer side: a warpgroup's 64 query rows of the tile. Register tensors are partitioned per
// call (compile-time layouts, a few address adds).
template <class C>
struct Consumer {
  using Element = typename C::Element;
  using SharedStorage = typename C::SharedStorage;
  using PipelineKV = typename C::PipelineKV;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  using Softmax = OnlineSoftmax<2>;
  using FragO = decltype(partition_fragment_C(typename C::TiledMmaPV{},
                                              Shape<Int<C::kBlockM>, Int<C::kHeadDimV>>{}));

  typename C::TiledMmaQK mma_qk;
  typename C::TiledMmaPV mma_pv;
  const Problem& problem;        // in the kernel's parameter space
  const SoftmaxOptions& opt;     // likewise
  int ctid;                // thread index among the consumers
  int wg;                  // consumer warpgroup

  __device__ __forceinline__ void pingpong_sync() const {
    if constexpr (C::kPingpong) named_barrier_sync(kPingpongWG0 + wg, 2 * 128);
  }
  __device__ __forceinline__ void pingpong_arrive() const {
    if constexpr (C::kPingpong) {
      named_barrier_arrive(kPingpongWG0 + (wg + 1) % C::kConsumerWarpGroups, 2 * 128);
    }
  }

  // S of key block n, fresh from Q·Kᵀ: sign flipped for a negative scale, then masked where
  // the block is not wholly visible to the tile (diagonal, window edges, ragged last block).
  // The sign is read from the kernel parameters at each use, not kept in a register.
  template <class FragS, class Coords>
  __device__ __forceinline__ void prepare_scores(FragS& s, const Coords& coords, const TileWork& w,
                                                 int n) const {
    if (problem.scale < 0.f) {
#pragma unroll
      for (int i = 0; i < size(s); ++i) s(i) = -s(i);
    }
    const int key0 = n * C::kBlockN;
    const int row_end = min(w.seq.len_q, w.row0 + C::kBlockM);
    if (!w.mask.tile_all_visible(w.row0, row_end, key0, key0 + C::kBlockN)) {
      apply_mask(s, coords, w.mask, w.row0, key0);
    }
  }

  // What both schedules read: this thread's views of the shared-memory GEMM operands (wgmma
  // descriptors for Q, K and V transposed, one slice per stage for K and V) and the (row, key)
  // coordinates of its S elements, in S's rowcol order.
  __device__ __forceinline__ auto operands(SharedStorage& ss) const {
    auto thr_qk = mma_qk.get_thread_slice(ctid);
    auto thr_pv = mma_pv.get_thread_slice(ctid);
    return cute::make_tuple(
        thr_qk.partition_fragment_A(
            make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{})),
        thr_qk.partition_fragment_B(
            make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{})),
        thr_pv.partition_fragment_B(
            make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutVt{})),
        rowcol(thr_qk.partition_C(
            make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kBlockN>>{}))));
  }

  // K4, K5: each GEMM waited for before the next step. `after_block(i)` runs once the i-th
  // visited key block's stage is released (K4 refills it from there).
  template <class AfterBlock>
  __device__ __forceinline__ void mainloop_plain(SharedStorage& ss, PipelineKV& pipe_k,
                                                 PipelineKV& pipe_v, PipelineState& state,
                                                 const TileWork& w, FragO& tOrO,
                                                 Softmax& softmax, AfterBlock&& after_block) {
    auto [tSrQ, tSrK, tOrV, coords] = operands(ss);
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<C::kBlockM>, Int<C::kBlockN>>{});
    Tensor rP = make_tensor_like<Element>(tSrS);
    Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));
    clear(tOrO);
    for (int n = w.n_max - 1, i = 0; n >= w.n_min; --n, ++i) {
      pipe_k.consumer_wait(state);
      wgmma<true, 0>(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
      pipe_k.consumer_release(state);
      if (n == w.n_min) release_q(ss);
      Tensor s = rowcol(tSrS);
      prepare_scores(s, coords, w, n);
      float factor[2];
      if (softmax.step(s, factor, opt)) {
        Tensor o = rowcol(tOrO);
        scale_rows(o, factor);
      }
      convert_into(tSrS, rP);
      pipe_v.consumer_wait(state);
      wgmma<false, 0>(mma_pv, tOrP, tOrV(_, _, _, state.index()), tOrO);
      pipe_v.consumer_release(state);
      ++state;
      after_block(i);
    }
  }

  // K6: Q·K(j+1)ᵀ and P(j)·V(j) issued back to back; the softmax of block j+1 runs while
  // P(j)·V(j) is on the tensor cores; O is rescaled once that GEMM is done.
  __device__ __forceinline__ void mainloop_overlap(SharedStorage& ss, PipelineKV& pipe_k,
                                                   PipelineKV& pipe_v, PipelineState& state,
                                                   const TileWork& w, FragO& tOrO,
                                                   Softmax& softmax) {
    auto [tSrQ, tSrK, tOrV, coords] = operands(ss);
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<C::kBlockM>, Int<C::kBlockN>>{});
    Tensor rP = make_tensor_like<Element>(tSrS);
    Tensor tOrP = make_tensor(rP.data(), acc_as_a_operand(rP.layout()));
    Tensor s = rowcol(tSrS);
    Tensor o = rowcol(tOrO);
    PipelineState state_v = state;
    float factor[2];
    clear(tOrO);

    int n = w.n_max - 1;
    pipe_k.consumer_wait(state);
    FA_TL(1 + wg, kKWait);
    pingpong_sync();
    FA_TL(1 + wg, kSlot);
    wgmma<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
    pingpong_arrive();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    FA_TL(1 + wg, kS);
    pipe_k.consumer_release(state);
    ++state;
    if (n == w.n_min) release_q(ss);
    prepare_scores(s, coords, w, n);
    softmax.step(s, factor, opt);  // O is still zero: nothing to rescale
    FA_TL(1 + wg, kSoftmax);

    // The loop is rotated: each pass first finishes the previous block (waits for its P·V,
    // rescales O, converts P) and ends with the softmax of its own block. ptxas puts a wgmma
    // wait, which reads no register, at the top of its basic block; with the wait after the
    // softmax in one block it landed above the softmax and the overlap was lost in every K6
    // kernel. At the head of the loop (and after its exit) the wait can only follow the
    // softmax, under which P·V runs. cmake/hopper_compile_check.sh checks the SASS for it. (The
    // wait in the two branches of the per-warp rescale vote also kept it below the softmax, but
    // warps of one warpgroup then reached different wgmma.wait_group instructions: a sequence
    // error under compute-sanitizer synccheck.)
    bool rescale = false;
    for (--n;; --n) {
      warpgroup_wait<0>();  // the previous block's P·V (none before the first pass)
      warpgroup_fence_operand(tOrO);
      if (n < w.n_max - 2) {  // a P·V was issued: its V stage is free
        FA_TL(1 + wg, kPV);
        pipe_v.consumer_release(state_v);
        ++state_v;
      }
      if (rescale) scale_rows(o, factor);
      convert_into(tSrS, rP);
      if (n < w.n_min) break;

      pipe_k.consumer_wait(state);
      FA_TL(1 + wg, kKWait);
      pingpong_sync();
      FA_TL(1 + wg, kSlot);
      wgmma<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
      pipe_v.consumer_wait(state_v);
      wgmma<false, -1>(mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO);
      pingpong_arrive();
      warpgroup_wait<1>();  // S of block n is in; P·V of the previous block may still run
      warpgroup_fence_operand(tSrS);
      FA_TL(1 + wg, kS);
      pipe_k.consumer_release(state);
      ++state;
      if (n == w.n_min) release_q(ss);
      prepare_scores(s, coords, w, n);
      rescale = softmax.step(s, factor, opt);
      FA_TL(1 + wg, kSoftmax);
    }

    pipe_v.consumer_wait(state_v);
    pingpong_sync();
    FA_TL(1 + wg, kSlot);
    wgmma<false, -1>(mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO);
    pingpong_arrive();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    FA_TL(1 + wg, kLastPV);
    pipe_v.consumer_release(state_v);
  }

  // Q's buffer may be refilled once this thread's last Q·Kᵀ is done.
  __device__ __forceinline__ void release_q(SharedStorage& ss) const {
    cutlass::arch::ClusterBarrier::arrive(&ss.q_empty);
  }
};

}  // namespace flashattn::fa3
