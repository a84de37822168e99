// Compile-time shape of one Hopper forward instantiation: its schedule (schedule.cuh), tile sizes,
// the register budgets of its warp roles, shared-memory layouts (the 128-byte swizzles wgmma and
// TMA agree on), the two tiled wgmma's and the TMA copy types.
#pragma once

// cute/tensor.hpp first: the atom headers below are not self-contained without it.
#include <cute/tensor.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include <algorithm>
#include <cstdint>

#include "kernels/fa3_sm90/p_operand_sm90.cuh"
#include "kernels/fa3_sm90/schedule.cuh"
#include "kernels/fa3_sm90/tile_size.h"

namespace flashattn::fa3 {

using namespace cute;

// K-major shared-memory atom for rows of kCols elements: the widest swizzle whose span divides
// the row (128-byte swizzle needs rows of a multiple of 128 bytes: 64 16-bit or 128 8-bit
// elements).
template <class Element, int kCols>
using SmemAtomK = std::conditional_t<
    kCols * sizeof(Element) % 128 == 0, GMMA::Layout_K_SW128_Atom<Element>,
    std::conditional_t<kCols * sizeof(Element) % 64 == 0, GMMA::Layout_K_SW64_Atom<Element>,
                       GMMA::Layout_K_SW32_Atom<Element>>>;

// How the family's TMA reads q, k and v into a config's shared-memory layouts (Q: (rows, dim);
// K, V: (keys, dim, stage)). Global tensors are (token, dim, head, batch) with a unit dim stride;
// packed (varlen) tensors are one batch of total tokens, a tile's sequence start a coordinate
// offset. Tile* are the boxes one copy moves.
using GmemShape = Shape<int32_t, int32_t, int32_t, int32_t>;
using GmemStride = Stride<int64_t, _1, int64_t, int64_t>;
template <class Element>
using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<const Element*>(nullptr)),
                                        GmemShape{}, GmemStride{}));

// A global tensor of Element as TMA reads or writes it: (token, dim, head, batch). Modes of extent
// 1 get a stride TMA accepts whatever the caller passed there (their stride is never used).
template <class Element>
auto gmem_tensor(const void* data, int tokens, int dim, int heads, int batch,
                 const int64_t (&stride)[3]) {
  // (16 bytes: TMA wants strides of a multiple of 16 bytes, whatever the mode's extent.)
  auto used = [](int extent, int64_t s) {
    return extent > 1 ? s : int64_t{16 / static_cast<int>(sizeof(Element))};
  };
  return make_tensor(make_gmem_ptr(static_cast<const Element*>(data)),
                     make_shape(std::max(tokens, 1), dim, heads, batch),
                     make_stride(used(tokens, stride[1]), _1{}, used(heads, stride[2]),
                                 used(batch, stride[0])));
}

template <class Element, class LayoutQ, class LayoutK, class LayoutV>
struct TmaCopies {
  using GmemShape = fa3::GmemShape;
  using GmemTensor = fa3::GmemTensor<Element>;
  using TileQ = decltype(product_each(shape(LayoutQ{})));
  using TileK = decltype(product_each(shape(take<0, 2>(LayoutK{}))));
  using TileV = decltype(product_each(shape(take<0, 2>(LayoutV{}))));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, LayoutQ{}, TileQ{}, _1{}));
  using TmaK =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(LayoutK{}), TileK{}, _1{}));
  using TmaV =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(LayoutV{}), TileV{}, _1{}));
};

// The TMA store of O: one consumer warpgroup's 64 rows (LayoutOWG: (rows, dv)) per copy.
template <class Element, class LayoutOWG>
struct TmaStoreO {
  using GmemTensor = fa3::GmemTensor<Element>;
  using Tile = decltype(product_each(shape(LayoutOWG{})));
  using TmaO = decltype(make_tma_copy(SM90_TMA_STORE{}, GmemTensor{}, LayoutOWG{}, Tile{}, _1{}));
};

template <class Element_, int kHeadDim_, int kHeadDimV_, class Schedule_>
struct Config {
  using Element = Element_;  // cutlass::bfloat16_t or cutlass::half_t
  using ElementO = Element;  // O's element type (the FP8 config's differs)
  // How P becomes the A operand of P·V (p_operand_sm90.cuh): the S accumulator converted in place.
  using POperand = POperand16;
  static constexpr int kPOffset = 0;  // log2 offset of P (OnlineSoftmax)
  static constexpr bool kDescales = false;   // FP8's per-(sequence, KV head) descales
  static constexpr bool kBlockScales = false;  // K8's per-block descales
  static constexpr bool kFtzVFactors = false;  // (K8 only; config_fp8.cuh)
  static constexpr bool kTransposeV = false;  // V read by P·V as TMA lands it
  static constexpr bool kQInRegisters = false;  // Q·Kᵀ reads Q from shared memory
  using Schedule = Schedule_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr bool kWarpSpecialized = Schedule::kWarpSpecialized;
  static constexpr bool kPingpong = Schedule::kPingpong;
  static constexpr bool kOverlap = Schedule::kOverlap;
  static constexpr bool kPersistent = Schedule::kPersistent;

  static constexpr TileSize kTile = tile_size(kHeadDim, kHeadDimV);
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  static constexpr int kConsumerWarpGroups = kBlockM / 64;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpGroups;
  static constexpr int kThreads = kConsumerThreads + (kWarpSpecialized ? 128 : 0);
  static_assert(kConsumerWarpGroups == 2 || kConsumerWarpGroups == 3, "2 or 3 consumer warpgroups");
  // Registers per thread of the warp-specialized schedules (setmaxnreg; the table in schedule.cuh).
  static constexpr int kProducerRegs = role_registers(Role::producer, kConsumerWarpGroups);
  static constexpr int kConsumerRegs = role_registers(Role::consumer, kConsumerWarpGroups);

  static_assert(gmma_n_one_atom(kBlockN) && gmma_n_one_atom(kHeadDimV),
                "a GEMM N needs CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (fa3_sm90/sources.cmake)");

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDimV>, Int<kBlockN>>;
  // Warpgroup w owns query rows [64w, 64w + 64) of the tile in both GEMMs.
  using WarpGroupLayout = Layout<Shape<Int<kConsumerWarpGroups>, _1, _1>>;
  // S = Q·Kᵀ: both operands from shared memory, K-major.
  using TiledMmaQK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, TileShapeQK>(), WarpGroupLayout{}));
  // O += P·V: P from registers (the S accumulator, converted), V from shared memory read
  // transposed (V is stored key-major; as the B operand it is N(=dv)-major).
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileShapePV, GMMA::Major::K,
                           GMMA::Major::MN>(),
      WarpGroupLayout{}));

  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomK<Element, kHeadDim>{},
                                             Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK<Element, kHeadDim>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutV = decltype(tile_to_shape(SmemAtomK<Element, kHeadDimV>{},
                                             Shape<Int<kBlockN>, Int<kHeadDimV>, Int<kStages>>{}));
  // The same bytes as V, indexed (dv, key, stage): the B operand of P·V.
  using SmemLayoutVt = decltype(composition(
      SmemLayoutV{},
      make_ordered_layout(Shape<Int<kHeadDimV>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  static constexpr int kBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr int kBytesK = kBlockN * kHeadDim * sizeof(Element);  // one stage
  static constexpr int kBytesV = kBlockN * kHeadDimV * sizeof(Element);
  static constexpr int kBytesO = kBlockM * kHeadDimV * sizeof(ElementO);
  static constexpr int kSmemOptin = 227 * 1024;
  // O's staging buffer holds all of O's columns where that fits, else half of them, and the
  // epilogue stages and stores O in two passes (d 256). (Staged in Q's buffer, as d 256 once
  // was, O held up the next tile's Q until its stores were done.)
  static constexpr int kOPasses =
      kBytesQ + kStages * (kBytesK + kBytesV) + kBytesO + 1024 > kSmemOptin ? 2 : 1;
  static constexpr int kOCols = kHeadDimV / kOPasses;
  // O's staging buffer: one block of 64 rows per consumer warpgroup, each laid out like a K-major
  // operand (swizzle atoms down the rows first), so that a warpgroup's rows are one contiguous
  // SmemLayoutOWG and its TMA store moves them in kOCols / 64 boxes of 64 rows x 64 columns.
  // (Atoms laid out along the rows first made CuTe issue one store per 8 x 64 atom: 16 TMA
  // instructions per warpgroup at dv 128, ~1100 cycles of the epilogue on the timeline.)
  using SmemLayoutOWG = decltype(tile_to_shape(SmemAtomK<ElementO, kOCols>{},
                                               Shape<_64, Int<kOCols>>{}));
  using SmemLayoutO = decltype(tile_to_shape(SmemLayoutOWG{},
                                             Shape<Int<kBlockM>, Int<kOCols>>{}));
  // P·V's accumulator layout at kOCols columns: one pass's slice of O (the first kOCols / 8
  // column groups of a thread's O fragment are columns [0, kOCols) of its rows), for stmatrix.
  using TiledMmaOPass = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kOCols>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>(),
      WarpGroupLayout{}));

  // tile_work's divisions by multiply-high (FastDiv) rather than the hardware's, which queue
  // behind the softmax's exponentials on the MUFU pipe. d 256 has no registers for the divisors
  // (it spilled 24-64 bytes in its epilogue).
  static constexpr bool kFastDivide = kOPasses == 1;

  using PipelineKV = cutlass::PipelineTmaAsync<kStages>;
  using PipelineV = PipelineKV;  // the V stages the mainloop reads: TMA's own

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>> v;
    alignas(1024) cute::array_aligned<ElementO, cosize_v<SmemLayoutO>> o;
    alignas(16) uint64_t q_full;   // Q landed (TMA transaction barrier)
    alignas(16) uint64_t q_empty;  // consumers are done with Q
    // Warp-specialized schedules hand tiles around through shared memory (kernel_fwd_sm90.cuh):
    // the producer announces `tile` with q_full (>= the tile count: no more tiles); a consumer
    // thread draws the block's next tile into `next_tile` and arrives on next_ready.
    alignas(16) uint64_t next_ready;
    alignas(16) uint64_t claim_now;  // late claims: thread 0 asks warp 1 to draw a tile
    int tile;
    int next_tile;

    typename PipelineKV::SharedStorage pipeline_k;
    typename PipelineKV::SharedStorage pipeline_v;
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= kSmemOptin, "tile plan exceeds Hopper shared memory");

  using Tma = TmaCopies<Element, SmemLayoutQ, SmemLayoutK, SmemLayoutV>;
  // O leaves by TMA store. Variable-length batches store plainly (Params::tma_o unused): a box at
  // a sequence's end would overwrite the next sequence's first rows.
  static constexpr bool kTmaStoreO = true;
  // Query tiles aligned to the sequence's end under a right-bounded mask (tile_work, top_rows).
  static constexpr bool kAlignTilesToEnd = true;
  using TmaO = typename TmaStoreO<ElementO, SmemLayoutOWG>::TmaO;
};

}  // namespace flashattn::fa3
