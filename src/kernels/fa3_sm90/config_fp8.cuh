// Compile-time shape of one FP8 (e4m3) Hopper forward instantiation (K7): K6's schedule and
// collectives with e4m3 Q, K, V and O in ElementO (bf16/fp16). What differs from Config
// (config.cuh), and why:
//   - both GEMMs are 8-bit wgmma (k 32); 8-bit B operands are K-major only, so P·V reads Vᵀ,
//     which the producer warpgroup writes from the landed V (LoaderTransposeV): V has two
//     buffers, SmemLayoutV as TMA lands it and SmemLayoutVt as the GEMM reads it;
//   - P is e4m3 in registers (POperandE4m3), its keys relabelled instead of shuffled, and
//     offset by 2^8 (kPOffset) to use e4m3's range;
//   - the q·k and v descales of each (sequence, KV head) scale the softmax and O (kDescales), or
//     (K8, kBlockScales) one descale per block of rows does (BlockScaledSoftmax).
#pragma once

#include <type_traits>

#include "kernels/fa3_sm90/config.cuh"

namespace flashattn::fa3 {

template <class ElementO_, int kHeadDim_, class Schedule_, bool kBlockScales_ = false>
struct ConfigFp8 {
  using Element = cutlass::float_e4m3_t;
  using ElementO = ElementO_;  // cutlass::bfloat16_t or cutlass::half_t
  using POperand = POperandE4m3;
  // P = 2^(x - max + 8) lands in (0, 256] (e4m3 holds 448): values down to 2^-17 of a row's max
  // survive the rounding instead of 2^-9 (OnlineSoftmax; the conditional rescale's slack goes).
  // (Offset 4 with the conditional rescale's slack of 4 back measured the same: d 128 16k 816
  // against 804 TFLOP/s, within noise.)
  static constexpr int kPOffset = 8;
  static constexpr bool kBlockScales = kBlockScales_;  // K8: per-block descales
  static constexpr bool kDescales = !kBlockScales;     // K7: per (sequence, KV head)
  static constexpr bool kTransposeV = true;  // LoaderTransposeV
  // d 256: Q·Kᵀ with Q in registers (loaded once per tile by ldmatrix), not read from shared
  // memory by every wgmma. At 8 bits and 64 keys, Q·Kᵀ with both operands in shared memory reads
  // 4 KB per 32 tensor cycles (m64n64k32), all of the SM's 128 bytes a cycle, beside the
  // producer's transpose and TMA. H100: +6-8% at d 256, ±0 at d 128, -2 to -3% at d 64
  // (docs/PERF.md). K8 too: its softmax then reads a block's descales when it needs them
  // (BlockScaledSoftmax's kLateDescales; held from before the GEMM they spilled 24 bytes).
  static constexpr bool kQInRegisters = kHeadDim_ >= 256;
  // K8's per-block v factors without range fix-ups (BlockScaledSoftmax): d 128 only. H200, one
  // call: d128 16k kernel +2.8% (347 instead of 364 instructions per warp and key block, ncu); d64
  // 16k -7% (the same code, another schedule); at d 256 the softmax spilled 36-40 bytes.
  static constexpr bool kFtzVFactors = kHeadDim_ == 128;
  using Schedule = Schedule_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDim_;
  static constexpr bool kWarpSpecialized = Schedule::kWarpSpecialized;
  static constexpr bool kPingpong = Schedule::kPingpong;
  static constexpr bool kOverlap = Schedule::kOverlap;
  static constexpr bool kPersistent = Schedule::kPersistent;
  static_assert(kWarpSpecialized, "the V transpose needs a producer warpgroup");

  static constexpr TileSizeFp8 kTile = tile_size_fp8(kHeadDim);
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kStages = kTile.stages;
  static constexpr int kConsumerWarpGroups = kBlockM / 64;
  static_assert(kConsumerWarpGroups == 2 || kConsumerWarpGroups == 3);
  static constexpr int kConsumerThreads = 128 * kConsumerWarpGroups;
  static constexpr int kThreads = kConsumerThreads + 128;
  static constexpr int kProducerRegs = role_registers(Role::producer, kConsumerWarpGroups, true);
  static constexpr int kConsumerRegs = role_registers(Role::consumer, kConsumerWarpGroups, true);

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDimV>, Int<kBlockN>>;
  static_assert(gmma_n_one_atom(kBlockN) && gmma_n_one_atom(kHeadDimV),
                "a GEMM N needs CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED (fa3_sm90/sources.cmake)");
  using WarpGroupLayout = Layout<Shape<Int<kConsumerWarpGroups>, _1, _1>>;
  using TiledMmaQK = std::conditional_t<
      kQInRegisters,
      decltype(make_tiled_mma(GMMA::rs_op_selector<Element, Element, float, TileShapeQK>(),
                              WarpGroupLayout{})),
      decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileShapeQK>(),
                              WarpGroupLayout{}))>;
  // O += P·V: P from registers, Vᵀ K-major (keys contiguous) from shared memory.
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileShapePV, GMMA::Major::K,
                           GMMA::Major::K>(),
      WarpGroupLayout{}));

  using SmemLayoutQ = decltype(tile_to_shape(SmemAtomK<Element, kHeadDim>{},
                                             Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(tile_to_shape(SmemAtomK<Element, kHeadDim>{},
                                             Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // V as TMA lands it: (keys, dv, raw stage).
  using SmemLayoutV = decltype(tile_to_shape(
      SmemAtomK<Element, kHeadDimV>{}, Shape<Int<kBlockN>, Int<kHeadDimV>, Int<kStages>>{}));
  // Vᵀ as P·V reads it: (dv, A position, stage), keys in POperandE4m3's order.
  using SmemLayoutVt = decltype(tile_to_shape(SmemAtomK<Element, kBlockN>{},
                                              Shape<Int<kHeadDimV>, Int<kBlockN>, Int<kStages>>{}));
  static constexpr int kBytesQ = kBlockM * kHeadDim;
  static constexpr int kBytesK = kBlockN * kHeadDim;
  static constexpr int kBytesV = kBlockN * kHeadDimV;
  static constexpr int kBytesO = kBlockM * kHeadDimV * sizeof(ElementO);
  static constexpr int kSmemOptin = 227 * 1024;
  static constexpr int kOPasses = kBytesQ + kStages * (kBytesK + 2 * kBytesV) + kBytesO + 1024 >
                                          kSmemOptin
                                      ? 2
                                      : 1;
  static constexpr int kOCols = kHeadDimV / kOPasses;
  using SmemLayoutOWG = decltype(tile_to_shape(SmemAtomK<ElementO, kOCols>{},
                                               Shape<_64, Int<kOCols>>{}));
  using SmemLayoutO = decltype(tile_to_shape(SmemLayoutOWG{},
                                             Shape<Int<kBlockM>, Int<kOCols>>{}));
  // The accumulator layout of one pass's O columns, for the epilogue's stmatrix.
  using TiledMmaOPass = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kOCols>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::K>(),
      WarpGroupLayout{}));
  static constexpr bool kFastDivide = kOPasses == 1;

  using PipelineKV = cutlass::PipelineTmaAsync<kStages>;
  using PipelineVRaw = cutlass::PipelineTmaAsync<kStages>;  // V as landed: K's stages
  using PipelineV = cutlass::PipelineAsync<kStages>;  // Vᵀ: written by the producer's threads

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutVt>> v;  // what P·V reads
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutV>> v_raw;
    alignas(1024) cute::array_aligned<ElementO, cosize_v<SmemLayoutO>> o;
    alignas(16) uint64_t q_full;  // as Config's
    alignas(16) uint64_t q_empty;
    alignas(16) uint64_t next_ready;
    int tile;
    int next_tile;
    int v_blocks;  // V blocks the leader loaded, once it is out of tiles (LoaderTransposeV)

    typename PipelineKV::SharedStorage pipeline_k;
    typename PipelineV::SharedStorage pipeline_v;
    typename PipelineVRaw::SharedStorage pipeline_v_raw;
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= kSmemOptin, "tile plan exceeds Hopper shared memory");

  using Tma = TmaCopies<Element, SmemLayoutQ, SmemLayoutK, SmemLayoutV>;
  static constexpr bool kTmaStoreO = true;
  static constexpr bool kAlignTilesToEnd = true;
  using TmaO = typename TmaStoreO<ElementO, SmemLayoutOWG>::TmaO;
};

}  // namespace flashattn::fa3
