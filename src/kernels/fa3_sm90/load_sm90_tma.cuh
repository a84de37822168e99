// The TMA load collective of the Hopper family: the K and V rings (one PipelineTmaAsync each, a
// ring of shared-memory stages completed on mbarriers) and the Loader, whose one thread issues
// every TMA of a tile (Q once, then K and V per key block). Shared by K3 and K4-K6; FP8 and the
// backward pass load through it too.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "kernels/fa3_sm90/params_fwd_sm90.cuh"
#include "kernels/fa3_sm90/tile_work.cuh"
#include "kernels/fa3_sm90/timeline.cuh"

namespace flashattn::fa3 {

// An int in shared memory written and read by asm volatile, so the compiler keeps each access
// on its side of the (also asm volatile) mbarrier arrivals and waits that publish it; the
// mbarrier's release and acquire order it for the hardware.
__device__ __forceinline__ void store_shared_int(int* slot, int value) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(cute::cast_smem_ptr_to_uint(slot)), "r"(value)
               : "memory");
}
__device__ __forceinline__ int load_shared_int(const int* slot) {
  int value;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(value) : "r"(cute::cast_smem_ptr_to_uint(slot))
               : "memory");
  return value;
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

// Producer side: one thread issues every TMA of a tile. The interface every load collective of
// the forward kernel offers (the FP8 one, load_sm90_tma_transpose_v.cuh, too):
//   kFollowers     producer threads besides the leader that stay (here 0: one thread loads);
//   Ring           the pipelines the mainloop reads (k, v), made by make_ring for a thread's role;
//   ProducerState  where the producer is in them; load_tile() fills one tile's key blocks.
template <class C>
struct Loader {
  using Element = typename C::Element;
  using SharedStorage = typename C::SharedStorage;
  using PipelineKV = typename C::PipelineKV;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  using Ring = KVRing<C>;
  using ProducerState = PipelineState;
  static constexpr int kFollowers = 0;
  const Params<C>& params;

  __device__ __forceinline__ static Ring make_ring(SharedStorage& ss,
                                                   typename PipelineKV::ThreadCategory role) {
    return make_kv_ring<C>(ss, role, C::kConsumerThreads);
  }
  __device__ __forceinline__ static ProducerState start_state() {
    return cutlass::make_producer_start_state<PipelineKV>();
  }
  // The hooks of a loader with followers (LoaderTransposeV): nothing to do here. (Its
  // follow_transposes is called only where kFollowers > 0.)
  __device__ __forceinline__ static void init_shared(SharedStorage&) {}
  __device__ __forceinline__ void finish(SharedStorage&, Ring&, ProducerState&) const {}

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
    FA_TRACE(0, kProdQ, 0);
  }

  // Key block n of K into the K ring's stage `state`.
  __device__ __forceinline__ void load_k(SharedStorage& ss, PipelineKV& pipe_k,
                                         PipelineState state, const TileWork& w, int n) const {
    Tensor mK = params.tma_k.get_tma_tensor(params.shape_k);
    Tensor gK = local_tile(domain_offset(make_coord(w.seq.token_k, _0{}),
                                         mK(_, _, w.h_kv, batch_index(w))),
                           Shape<Int<C::kBlockN>, Int<C::kHeadDim>>{}, make_coord(n, _0{}));
    Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{});
    auto [k_src, k_dst] = tma_partition(params.tma_k, _0{}, Layout<_1>{},
                                        group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    pipe_k.producer_acquire(state);
    copy(params.tma_k.with(*pipe_k.producer_get_barrier(state)), k_src, k_dst(_, state.index()));
    FA_TRACE(0, kProdK, 0);
  }

  // Key block n of V as stored (keys, dv) into stage `state` of the C::SmemLayoutV buffer at
  // `smem`, on `pipe` (a TMA pipeline over those stages).
  template <class Pipe, class State>
  __device__ __forceinline__ void load_v(Element* smem, Pipe& pipe, State state,
                                         const TileWork& w, int n) const {
    Tensor mV = params.tma_v.get_tma_tensor(params.shape_v);
    Tensor gV = local_tile(domain_offset(make_coord(w.seq.token_k, _0{}),
                                         mV(_, _, w.h_kv, batch_index(w))),
                           Shape<Int<C::kBlockN>, Int<C::kHeadDimV>>{}, make_coord(n, _0{}));
    Tensor sV = make_tensor(make_smem_ptr(smem), typename C::SmemLayoutV{});
    auto [v_src, v_dst] = tma_partition(params.tma_v, _0{}, Layout<_1>{},
                                        group_modes<0, 2>(sV), group_modes<0, 2>(gV));
    pipe.producer_acquire(state);
    copy(params.tma_v.with(*pipe.producer_get_barrier(state)), v_src, v_dst(_, state.index()));
  }

  // K and V of key block n into the stage `state` names, each on its own pipeline.
  __device__ __forceinline__ void load_kv(SharedStorage& ss, PipelineKV& pipe_k,
                                          PipelineKV& pipe_v, PipelineState state,
                                          const TileWork& w, int n) const {
    load_k(ss, pipe_k, state, w, n);
    load_v(ss.v.data(), pipe_v, state, w, n);
  }

  // Every key block of a tile, last to first (the order the mainloop visits them).
  __device__ __forceinline__ void load_tile(SharedStorage& ss, Ring& ring, ProducerState& state,
                                            const TileWork& w) const {
    for (int n = w.n_max - 1; n >= w.n_min; --n, ++state) {
      load_kv(ss, ring.k, ring.v, state, w, n);
      FA_TRACE(0, kProdKV, 0);
    }
  }
};

}  // namespace flashattn::fa3
