// The Hopper forward epilogue: O divided by l, rounded to the input type, staged through shared
// memory by stmatrix, then written by one TMA store per consumer warpgroup (its 64 rows; the
// store clips rows past the sequence's end) or, for variable-length batches and rows before the
// sequence's start, by 16-byte stores of whole rows; where the buffer holds half of O's columns
// (d 256), in two passes. Each consumer warpgroup owns its 64 rows of the staging buffer, so a
// warpgroup barrier (not a block barrier) orders writes and reads and the warpgroups never wait
// for each other here.
#pragma once

#include <cute/atom/copy_traits_sm90.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "common/named_barrier.cuh"
#include "kernels/fa3_sm90/config.cuh"
#include "kernels/fa3_sm90/params_fwd_sm90.cuh"
#include "kernels/fa3_sm90/schedule.cuh"
#include "kernels/fa3_sm90/softmax_sm90.cuh"
#include "kernels/fa3_sm90/tile_work.cuh"
#include "kernels/fa3_sm90/timeline.cuh"

namespace flashattn::fa3 {

template <class C>
struct Epilogue {
  using Element = typename C::ElementO;  // O's type
  using SharedStorage = typename C::SharedStorage;
  static constexpr int kChunksPerRow = C::kHeadDimV / 8;  // 16-byte chunks
  static constexpr int kRowsPerWG = 64;

  const Params<C>& params;  // the problem, and the TMA store's descriptor and O's shape

  // The thread's index among the consumers, read afresh from %tid.x: the epilogue's row and
  // column offsets derive from it, and a plain threadIdx.x let the compiler hoist them to kernel
  // start, where they stayed live across the mainloop (and spilled). Recomputing is a few ALU ops.
  __device__ __forceinline__ static int consumer_tid() {
    int tid;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
    return tid - (C::kWarpSpecialized ? 128 : 0);
  }

  __device__ __forceinline__ Element* out_rows(const TileWork& w) const {
    return static_cast<Element*>(params.p.o) + w.seq.o_offset;
  }

  template <class FragO, class Softmax>
  __device__ __forceinline__ void store(SharedStorage& ss, const TileWork& w, FragO& tOrO,
                                        Softmax& softmax,
                                        const typename C::TiledMmaPV& mma_pv) const {
    const Problem& p = params.p;
    const int ctid = consumer_tid(), wg = ctid / 128;
    float inv[2], lse[2];
    if (p.sinks != nullptr) {
      softmax.finalize_with_sink(p.sinks[w.c.head], inv, lse);
    } else {
      softmax.finalize(inv, lse);
    }
    Tensor o = rowcol(tOrO);
    scale_rows(o, inv);
    Tensor rO = make_tensor_like<Element>(tOrO);
    convert_into(tOrO, rO);
    FA_TRACE(1 + wg, kEpiConvert, 0);

    auto thr_pv = mma_pv.get_thread_slice(ctid);
    constexpr int kCols = C::kOCols;  // columns staged per pass (C::kOPasses passes)
    Tensor sO = make_tensor(make_smem_ptr(ss.o.data()), typename C::SmemLayoutO{});
    const int wtid = ctid % 128;
    // stmatrix: four 8 x 8 tiles per instruction, straight from the accumulator's layout; pass
    // p stores the slice of the thread's O fragment that holds columns [p * kCols, +kCols).
    typename C::TiledMmaOPass mma_pass;
    auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_pass);
    auto thr_stsm = stsm.get_thread_slice(ctid);
    using PassLayout = decltype(partition_fragment_C(
        mma_pass, Shape<Int<C::kBlockM>, Int<kCols>>{}).layout());
    static_assert(size(PassLayout{}) * C::kOPasses == size(decltype(rO.layout()){}));
#pragma unroll
    for (int pass = 0; pass < C::kOPasses; ++pass) {
      // The warpgroup's rows may be rewritten once the last TMA store has read them (waited for
      // by the thread that issued it) or, plain, its threads' own reads are done.
      if (wtid == 0) tma_store_wait<0>();
      named_barrier_sync(kEpilogueWG0 + wg, 128);
      FA_TRACE(1 + wg, kEpiBar1, 0);
      Tensor rO_pass = make_tensor(rO.data() + pass * size(PassLayout{}), PassLayout{});
      copy(stsm, thr_stsm.retile_S(rO_pass), thr_stsm.partition_D(sO));
      tma_store_fence();                           // the writes, visible to the TMA unit
      named_barrier_sync(kEpilogueWG0 + wg, 128);  // every row of the warpgroup is written
      FA_TRACE(1 + wg, kEpiStaged, 0);

      // One TMA store of the warpgroup's 64 rows (of this pass's columns); rows past the
      // sequence's end are clipped by the tensor's bounds. Left in flight: the next pass or
      // tile waits for it (above). Rows before the sequence's start (a first tile aligned to
      // the end, top_rows) are stored plainly: a TMA store whose box starts at a negative row
      // raised "illegal instruction" on the H100 (a TMA load's is zero-filled).
      if (p.cu_seqlens_q == nullptr && w.row0 + kRowsPerWG * wg >= 0) {
        if (wtid == 0) {
          Tensor mO = params.tma_o.get_tma_tensor(params.shape_o);
          Tensor gO = local_tile(domain_offset(make_coord(w.row0 + kRowsPerWG * wg, _0{}),
                                               mO(_, _, w.c.head, w.c.batch)),
                                 Shape<_64, Int<kCols>>{}, make_coord(_0{}, pass));
          Tensor sOwg = make_tensor(make_smem_ptr(ss.o.data() + wg * kRowsPerWG * kCols),
                                    typename C::SmemLayoutOWG{});
          auto [dst, src] = tma_partition(params.tma_o, _0{}, Layout<_1>{},
                                          group_modes<0, 2>(sOwg), group_modes<0, 2>(gO));
          copy(params.tma_o, src, dst);
          tma_store_arrive();
        }
      } else {
        Element* out = out_rows(w) + pass * kCols;
        const int64_t row_stride = p.o_stride[1];
        constexpr int kChunks = kCols / 8;  // 16-byte chunks per row and pass
#pragma unroll
        for (int i = wtid; i < kRowsPerWG * kChunks; i += 128) {
          const int r = kRowsPerWG * wg + i / kChunks, col = i % kChunks * 8;
          const int row = w.row0 + r;
          if (w.stores_row(row)) {
            *reinterpret_cast<uint4*>(out + row * row_stride + col) =
                *reinterpret_cast<const uint4*>(&sO(r, col));
          }
        }
      }
    }
    FA_TRACE(1 + wg, kEpiStored, 0);

    if (p.lse != nullptr && ctid % 4 == 0) {  // one lane of each quad holds the row's values
      Tensor coords = rowcol(thr_pv.partition_C(
          make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kHeadDimV>>{})));
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = w.row0 + get<0>(coords(r, 0));
        if (w.stores_row(row)) p.lse[w.seq.lse_offset + row] = lse[r];
      }
    }
  }

  // Before the block exits: its TMA stores must have read their shared memory (and the thread
  // that issued them waits for them to complete).
  __device__ __forceinline__ void finish() const {
    if constexpr (C::kTmaStoreO) {
      if (consumer_tid() % 128 == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
  }

  // A tile no key is visible to: O = 0 and LSE = -inf (the sink, with sinks), written without
  // touching shared memory.
  __device__ __forceinline__ void store_empty(const TileWork& w) const {
    const Problem& p = params.p;
    const int ctid = consumer_tid();
    Element* out = out_rows(w);
    const int64_t row_stride = p.o_stride[1];
    for (int i = ctid; i < C::kBlockM * kChunksPerRow; i += C::kConsumerThreads) {
      const int row = w.row0 + i / kChunksPerRow, col = i % kChunksPerRow * 8;
      if (w.stores_row(row)) {
        *reinterpret_cast<uint4*>(out + row * row_stride + col) = uint4{};
      }
    }
    if (p.lse != nullptr) {
      for (int r = ctid; r < C::kBlockM; r += C::kConsumerThreads) {
        const int row = w.row0 + r;
        if (w.stores_row(row)) {
          p.lse[w.seq.lse_offset + row] = p.sinks != nullptr ? p.sinks[w.c.head] : -INFINITY;
        }
      }
    }
  }
};

}  // namespace flashattn::fa3
