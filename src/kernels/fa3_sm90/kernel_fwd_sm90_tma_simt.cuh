// K3: the Hopper family's load path feeding K2's CUDA-core compute. Q, K and V arrive by TMA in
// 16-bit tiles: Q in one buffer, K and V in a ring of kStages stages, each completed on its full
// mbarrier and handed back on its empty one (cutlass::PipelineTmaAsync, the same Loader, TileWork,
// Params and tile order as K4-K6). Thread 0 issues every TMA in line with its own compute (as in
// K4); all 256 threads consume. Per key block each thread copies its share of the landed stage
// into K2's fp32 tiles (k2::TileCopy's vectors, read from shared memory instead of global),
// releases the stage, and runs K2's steps (k2::attend_block). So K3 - K2 is the load path alone:
// TMA and mbarriers in place of K2's register-staged global loads; K4 then replaces the compute.
//
// Measured on the H100 (bf16, d 128, seqlen 8192, batch 2 x 16 heads), TFLOP/s non-causal /
// causal: K2 31.4 / 32.2, K3 33.9 / 34.5. Both execute the same instructions (ncu: 2.81e9 at
// seqlen 4096); K3 stalls less on shared-memory results (short scoreboard 0.90 vs 1.34 cycles per
// issued instruction). K2 holds its prefetched K/V block in 32 registers across the math (173 vs
// 141 registers), so ptxas issues K3's shared loads earlier (48 vs 40 instructions before first
// use). K2's launch order run on K3 measured the same (34.0 / 34.6): the tile order is not it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>

#include <cute/tensor.hpp>
#include <type_traits>

#include "kernels/fa3_sm90/config.cuh"
#include "kernels/fa3_sm90/load_sm90_tma.cuh"
#include "kernels/fa3_sm90/params_fwd_sm90.cuh"
#include "kernels/fa3_sm90/tile_work.cuh"
#include "kernels/k2_simt/compute.cuh"

namespace flashattn::fa3 {

// The shape of a K3 instantiation: K2's tile plan (64 query rows x 64 keys, 256 threads) for the
// compute, and the members Loader<C> and Params<C> read, for the TMA side.
template <class Element_, int kHeadDim_>
struct TmaSimtConfig {
  using Element = Element_;  // cutlass::bfloat16_t or cutlass::half_t: what TMA is typed by
  using Simt = k2::Config<
      std::conditional_t<std::is_same_v<Element, cutlass::bfloat16_t>, __nv_bfloat16, __half>,
      kHeadDim_, kHeadDim_>;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDim_;
  static constexpr int kBlockM = Simt::kBlockQ;
  static constexpr int kBlockN = Simt::kBlockK;
  static constexpr bool kFastDivide = true;  // tile_work's divisions by FastDiv (tile_scheduler.cuh)
  static constexpr bool kTmaStoreO = false;  // its own plain epilogue
  static constexpr bool kAlignTilesToEnd = false;  // tiles from row 0 (tile_work)
  // Two stages suffice: a stage is refilled as soon as its block is copied out, so its TMA has a
  // whole block of SIMT math (~16k cycles at d = 128) to land. A third would still fit (224 KB
  // with the 112 KB of fp32 tiles) but has nothing left to hide.
  static constexpr int kStages = 2;

  // 128-byte swizzled rows, as for K4: a warp reading one 16-byte column chunk of 8 consecutive
  // rows (TileCopy's transposed pattern, for Q and K) hits 8 distinct chunks of a 128-byte line.
  using SmemLayoutQ =
      decltype(tile_to_shape(SmemAtomK<Element, kHeadDim>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK<Element, kHeadDim>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtomK<Element, kHeadDimV>{},
                                             Shape<Int<kBlockN>, Int<kHeadDimV>, Int<kStages>>{}));
  static constexpr int kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr int kBytesK = kBlockN * kHeadDim * sizeof(Element);  // one stage
  static constexpr int kBytesV = kBlockN * kHeadDimV * sizeof(Element);

  using PipelineKV = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>> v;
    alignas(16) float simt[Simt::kSmemBytes / sizeof(float)];  // K2's fp32 tiles
    alignas(16) uint64_t q_full;                               // Q landed
    typename PipelineKV::SharedStorage pipeline_k;
    typename PipelineKV::SharedStorage pipeline_v;
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "tile plan exceeds Hopper shared memory");

  using Tma = TmaCopies<Element, SmemLayoutQ, SmemLayoutK, SmemLayoutV>;
};

// Fills a K2 TileCopy's registers from a landed 16-bit tile instead of global memory: the same
// 16-byte vectors for the same threads, so TileCopy::store converts them into K2's fp32 layouts
// unchanged. The swizzle permutes whole 16-byte chunks, so 8 elements from a column that is a
// multiple of 8 stay one aligned vector. No row bound: rows past the sequence hold TMA's zero fill
// (or, packed, another sequence's finite keys), and the mask gives them P = 0.
template <class Copy, class Tile>
__device__ __forceinline__ void load_landed(Copy& copy, const Tile& tile) {
#pragma unroll
  for (int i = 0; i < Copy::kVecs; ++i) {
    int row, col;
    Copy::coords(i, row, col);
    copy.regs[i] = *reinterpret_cast<const uint4*>(&tile(row, col));
  }
}

// One block per tile (blockIdx.x is the scheduler's tile index); 1 block per SM, as K2.
template <class C>
__global__ void __launch_bounds__(k2::kThreads, 1)
    fwd_kernel_tma_simt(const __grid_constant__ Params<C> params) {
  using S = typename C::Simt;
  using SimtElement = typename S::Element;
  using PipelineKV = typename C::PipelineKV;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  using Barrier = cutlass::arch::ClusterBarrier;
  extern __shared__ __align__(1024) unsigned char smem[];
  auto& ss = *reinterpret_cast<typename C::SharedStorage*>(smem);

  const TileWork w = tile_work(params, static_cast<int>(blockIdx.x));
  if (w.skip) return;  // past the end of a variable-length sequence: nothing to write
  const Loader<C> loader{params};
  if (threadIdx.x == 0) {
    Barrier::init(&ss.q_full, 1);
    loader.prefetch_descriptors();
  }
  // Every thread consumes and releases each stage (the empty barriers count 256 arrivals); thread
  // 0 alone produces.
  auto [pipe_k, pipe_v] =
      make_kv_ring<C>(ss, PipelineKV::ThreadCategory::ProducerConsumer, k2::kThreads);
  cutlass::arch::fence_barrier_init();
  __syncthreads();

  // Key blocks in ascending order, as K2 visits them. A tile no key is visible to loads nothing
  // and stores O = 0, LSE = -inf.
  const int blocks = w.n_max - w.n_min;
  PipelineState load_state = cutlass::make_producer_start_state<PipelineKV>();
  if (threadIdx.x == 0 && blocks > 0) {
    loader.load_q(ss, w);
    for (int i = 0; i < C::kStages && i < blocks; ++i, ++load_state) {
      loader.load_kv(ss, pipe_k, pipe_v, load_state, w, w.n_min + i);
    }
  }

  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const k2::SmemTiles<S> t(ss.simt);
  if (blocks > 0) {
    Barrier::wait(&ss.q_full, 0);
    k2::TileCopy<SimtElement, C::kBlockM, C::kHeadDim, true> q_copy;
    load_landed(q_copy, make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{}));
    q_copy.store(t.q, params.p.scale_log2);
  }
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutV{});
  const int row_end = min(w.seq.len_q, w.row0 + C::kBlockM);
  float o[k2::kRowsPerThread][S::kOCols] = {};
  float m[k2::kRowsPerThread], l[k2::kRowsPerThread];
#pragma unroll
  for (int r = 0; r < k2::kRowsPerThread; ++r) m[r] = -INFINITY, l[r] = 0.f;
  PipelineState state;
  for (int i = 0; i < blocks; ++i) {
    const int n = w.n_min + i;
    k2::TileCopy<SimtElement, C::kBlockN, C::kHeadDim, true> k_copy;
    k2::TileCopy<SimtElement, C::kBlockN, C::kHeadDimV, false> v_copy;
    pipe_k.consumer_wait(state);
    load_landed(k_copy, sK(_, _, state.index()));
    pipe_v.consumer_wait(state);
    load_landed(v_copy, sV(_, _, state.index()));
    pipe_k.consumer_release(state);  // this thread's share is in its registers
    pipe_v.consumer_release(state);
    ++state;
    __syncthreads();  // every share is read; the previous block's readers of k_s, v_s, p_s are done
    if (threadIdx.x == 0 && i + C::kStages < blocks) {  // refill the stage just emptied
      loader.load_kv(ss, pipe_k, pipe_v, load_state, w, n + C::kStages);
      ++load_state;
    }
    k_copy.store(t.k, 1.f);
    v_copy.store(t.v, 1.f);
    __syncthreads();
    k2::attend_block<S>(t, w.mask, w.row0, row_end, n * C::kBlockN, tx, ty, m, l, o);
  }

  const Problem& p = params.p;
  SimtElement* out = static_cast<SimtElement*>(p.o) + w.seq.o_offset;
  k2::store_output<S>(m, l, o, out, p.o_stride[1], p.lse, w.seq.lse_offset, w.row0, w.seq.len_q, tx,
                      ty);
}

}  // namespace flashattn::fa3
