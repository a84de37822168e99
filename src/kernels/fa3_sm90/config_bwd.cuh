// Compile-time shape of one Hopper backward instantiation (kernel_bwd_sm90.cuh): tiles, the
// shared-memory layouts of Q, dO (a two-stage ring), K, V, P, dS and the dQ staging buffer, the
// three tiled wgmma's and the TMA types. Reuses the forward's K-major atoms (config.cuh).
//
// A block owns kBlockN = 128 keys; each of its two MMA warpgroups owns 64 of them in S, dP, dV
// and dK, and a (64 rows, kDqN columns) tile of dQ over all 128 keys (dS from both warpgroups):
// half of the columns at head dim 128 (64-row query blocks), half of the rows at 64 (128-row
// blocks). K's swizzle atom spans kDqN columns, so that a warpgroup's columns of K are a whole
// number of atoms (the N-major B operand of dQ = dS·K): 128-byte at both.
#pragma once

#include <cutlass/numeric_types.h>

#include <type_traits>

// config.cuh includes cute/tensor.hpp before the atom headers (they are not self-contained).
#include "kernels/fa3_sm90/config.cuh"

namespace flashattn::fa3 {

using namespace cute;

// The fp32 dQ accumulator as TMA reduce-adds into it: (token, dim, head, batch), unit dim stride.
using GmemTensorF32 =
    decltype(make_tensor(make_gmem_ptr(static_cast<float*>(nullptr)), GmemShape{}, GmemStride{}));

// What a backward configuration's kernels and host side derive from its shared-memory layouts
// alike: the TMA types over q and dout (LayoutQ: (rows, dim, stage)), k and v (LayoutK) and the
// dQ reduce-add box (LayoutDq), the bytes one stage of Q (dO) and one K (V) carry, and the Q/dO
// pipeline.
template <class Element, class LayoutQ, class LayoutK, class LayoutDq, int kStages>
struct BwdTma {
  using TileQ = decltype(product_each(shape(take<0, 2>(LayoutQ{}))));
  using TileK = decltype(product_each(shape(LayoutK{})));
  using TileDq = decltype(product_each(shape(LayoutDq{})));
  using Q = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<Element>{}, take<0, 2>(LayoutQ{}),
                                   TileQ{}, _1{}));
  using K =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<Element>{}, LayoutK{}, TileK{}, _1{}));
  using Dq =
      decltype(make_tma_copy(SM90_TMA_REDUCE_ADD{}, GmemTensorF32{}, LayoutDq{}, TileDq{}, _1{}));
  static constexpr int kBytesQ = decltype(size(take<0, 2>(LayoutQ{})))::value * sizeof(Element);
  static constexpr int kBytesK = decltype(size(LayoutK{}))::value * sizeof(Element);
  using PipelineQ = cutlass::PipelineTmaAsync<kStages>;
};

// The three tiled wgmma's of a backward step, from the GEMMs' shapes: S = Q·Kᵀ and dP = dO·Vᵀ on
// (64 rows, kSdPKeys keys, d), both operands K-major; dV += Pᵀ·dO and dK += dSᵀ·Q on (kDkvKeys
// keys, kDkvCols columns, 64 rows), both operands read M/N-major; dQ = dS·K on (64 rows, kDqCols
// columns, kDqKeys keys), A K-major and B N-major.
template <class Element, int kHeadDim, int kSdPKeys, int kDkvKeys, int kDkvCols, int kDqCols,
          int kDqKeys>
struct BwdMma {
  using SdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kSdPKeys>, Int<kHeadDim>>>()));
  using Dkv = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kDkvKeys>, Int<kDkvCols>, _64>,
                           GMMA::Major::MN, GMMA::Major::MN>()));
  using Dq = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDqCols>, Int<kDqKeys>>,
                           GMMA::Major::K, GMMA::Major::MN>()));
};

// The tiles every backward configuration keeps in shared memory first: Q and dO (LayoutQ, all
// stages), K and V (LayoutK).
template <class Element, class LayoutQ, class LayoutK>
struct BwdInputTiles {
  alignas(1024) cute::array_aligned<Element, cosize_v<LayoutQ>> q;
  alignas(1024) cute::array_aligned<Element, cosize_v<LayoutQ>> dout;
  alignas(1024) cute::array_aligned<Element, cosize_v<LayoutK>> k;
  alignas(1024) cute::array_aligned<Element, cosize_v<LayoutK>> v;
};

// The synchronisation part of a backward kernel's shared memory, after its tiles.
template <class PipelineQ, int kMmaWarpGroups>
struct BwdSync {
  alignas(16) uint64_t kv_full;                  // K and V landed (TMA transaction barrier)
  typename PipelineQ::SharedStorage pipeline_q;  // Q and dO of one step, one barrier
  // Deterministic mode, per MMA warpgroup: this step's turn at its dQ tile's semaphore, worked
  // out at the step's start (where few registers are live).
  int dq_next_turn[kMmaWarpGroups];
};

// The persistent walk's synchronisation (kernel_bwd_sm90.cuh), at the end of the shared storage
// (so the one-tile kernel's layout is that of a configuration without it): the MMA warpgroups
// are done reading this tile's K and V (one arrival per warp); the producer has issued a tile's
// loads; and a two-slot ring of the tiles the scheduler claimed, (tile, steps) or (-1, 0) once
// none is left, full (the scheduler's arrival) and empty (an arrival per reader).
struct BwdTileSync {
  alignas(8) uint64_t kv_empty;
  uint64_t tile_loaded;
  uint64_t tile_full[2], tile_empty[2];
  int2 tile[2];
};

// A step's staged dQ reduce-adds, from an MMA warpgroup to its writer warp: each TMA box's
// coordinates and place (d 64/128: in floats from the warpgroup's staging buffer; d 256: in bytes
// from the shared storage's start), and in deterministic mode the tile's semaphore (else
// null) and the turn. A (64, 64) fp32 tile is two boxes (a 128-byte swizzle limits a box's rows
// to 32 floats): one tile a step at d 64/128, two at d 256 (in the step's Q and dO).
template <int kBoxes_>
struct BwdDqJob {
  static constexpr int kBoxes = kBoxes_;
  int crd[kBoxes][4];
  int offset[kBoxes];
  int* sem;
  int turn;
};

template <class Element_, int kHeadDim_>
struct ConfigBwd {
  using Element = Element_;  // cutlass::bfloat16_t or cutlass::half_t
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the Hopper backward is built for d 64, 128");
  static constexpr bool kSplitD = false;
  // P, dS and dQ's staging written with st.shared at 32-bit swizzled addresses (smem_address in
  // kernel_bwd_sm90.cuh) instead of C++ stores, which compile to generic 64-bit ST.E. Measured on
  // the H100 (2026-11-25, A/B in one call each): +3.2% at d 128 (2k dense, 8k causal); at d 64
  // -1.0% / -4.8% on 64-row query blocks, but +2.6-4.5% on today's 128-row ones.
  static constexpr bool kSharedStores = true;
  // P and dS rounded into shared memory by stmatrix (store_stsm in kernel_bwd_sm90.cuh) rather
  // than st.shared pairs; dQ's fp32 staging keeps kSharedStores' pairs (stmatrix is 16-bit).
  // Build define FLASHATTN_BWD_NO_STMATRIX: the pairs again, for an A/B.
#ifdef FLASHATTN_BWD_NO_STMATRIX
  static constexpr bool kStmatrix = false;
#else
  static constexpr bool kStmatrix = true;
#endif
  // Query rows per step of the walk: 128 at d 64, where a 64-row step's GEMMs (2.6 MFLOP a
  // warpgroup) left the step's fixed costs (barriers, waits, LSE/D loads, dQ's staging) large.
  static constexpr int kBlockM = kHeadDim == 64 ? 128 : 64;
  static constexpr int kBlockN = 128;  // keys per block
  static constexpr int kStages = 2;    // Q / dO ring
  // Has the persistent walk: one block per SM walks the key blocks (tiles) it claims from a
  // counter, the next tile's K and V loaded while the MMA warpgroups write the last one's dK
  // and dV (kernel_bwd_sm90.cuh; launch_bwd.cuh says when it runs).
  static constexpr bool kPersistent = true;
  static constexpr int kMmaWarpGroups = 2;
  static constexpr int kMmaThreads = 128 * kMmaWarpGroups;
  static constexpr int kThreads = 128 + kMmaThreads;        // producer warpgroup first
  static constexpr int kStageReleasers = kMmaThreads;       // arrivals that free a Q/dO stage
  static constexpr int kKeysWG = kBlockN / kMmaWarpGroups;  // 64
  // setmaxnreg moves registers within what the launch gave the block (168 per thread at 384
  // threads: 64512), so producer x 128 + consumers x 256 must stay within it: 24 + 2 x 240 is
  // exact. (A 32-register producer with 240-register consumers hung the kernel: their
  // setmaxnreg.inc waited forever for registers the block never had.)
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kMmaThreads <=
                    (65536 / kThreads) / 8 * 8 * kThreads,
                "setmaxnreg cannot hand out more registers than the launch gave the block");
  // dQ = dS·K over all kBlockN keys, split between the warpgroups into (64 rows, kDqN columns)
  // tiles: by columns in a 64-row block (d 128: 64 each), by rows in a 128-row one (d 64: rows
  // [64w, 64w + 64), all columns), so each is an n64 GEMM and one (64, 64) fp32 staging tile.
  static constexpr bool kDqSplitRows = kBlockM == 128;
  static constexpr int kDqRows = 64;
  static constexpr int kDqN = kDqSplitRows ? kHeadDim : kHeadDim / kMmaWarpGroups;
  static_assert(kDqRows * (kDqSplitRows ? kMmaWarpGroups : 1) == kBlockM,
                "dQ's tiles cover the block");

  using AtomD = SmemAtomK<Element, kHeadDim>;  // rows of kHeadDim (128-byte swizzle)
  using AtomK = SmemAtomK<Element, kDqN>;      // K and V: an atom spans kDqN columns (see the top)
  using Atom64 = SmemAtomK<Element, 64>;
  // Q and dO: (rows, dim, stage); K, V: (keys, dim).
  using SmemLayoutQ =
      decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutK = decltype(tile_to_shape(AtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // Q (and dO) read as the N-major B operand of dK = dSᵀ·Q (dV = Pᵀ·dO): (dim, row, stage).
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{},
      make_ordered_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{}, Step<_2, _1, _3>{})));
  // One warpgroup's 64 keys of K (V): rows [64w, 64w + 64) of SmemLayoutK, a slice of it.
  // P and dS: [query][key], 64 keys per warpgroup, the warpgroups' halves one after the other
  // (tile_to_shape lays atoms down the rows first, so the (64, 128) tile is two (64, 64) ones).
  using SmemLayoutPWG = decltype(tile_to_shape(Atom64{}, Shape<Int<kBlockM>, Int<kKeysWG>>{}));
  using SmemLayoutP = decltype(tile_to_shape(Atom64{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  // A warpgroup's P (dS) read as the M-major A operand of dV = Pᵀ·dO: (key, row).
  using SmemLayoutPWGt = decltype(composition(
      SmemLayoutPWG{}, make_ordered_layout(Shape<Int<kKeysWG>, Int<kBlockM>>{}, Step<_2, _1>{})));
  // The B operand of dQ = dS·K: all kBlockN keys x kDqN columns of K, read N-major: (col, key).
  // K's layout puts a kDqN-column block of all keys contiguously (block w at w·kBlockN·kDqN).
  using SmemLayoutKDq = decltype(tile_to_shape(AtomK{}, Shape<Int<kBlockN>, Int<kDqN>>{}));
  using SmemLayoutKDqt = decltype(composition(
      SmemLayoutKDq{}, make_ordered_layout(Shape<Int<kDqN>, Int<kBlockN>>{}, Step<_2, _1>{})));
  static constexpr int kKDqOffset = kDqSplitRows ? 0 : kBlockN * kDqN;  // per warpgroup
  // dQ jobs (and their mbarriers) per warpgroup: the staging buffer comes back only once its
  // writer read the job, so one is enough.
  static constexpr int kDqJobs = 1;
  // dQ's fp32 staging: one (64, kDqN) buffer per warpgroup, 128-byte swizzled (32 floats per
  // atom row), the box of its TMA reduce-add.
  using SmemLayoutDq =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<float>{}, Shape<Int<kDqRows>, Int<kDqN>>{}));

  // S_w = Q·K_wᵀ, dP_w = dO·V_wᵀ over the warpgroup's 64 keys; dV_w += P_wᵀ·dO and
  // dK_w += dS_wᵀ·Q over all of d; dQ_w = dS·K: kDqN columns over all kBlockN keys.
  using Mma = BwdMma<Element, kHeadDim, kKeysWG, kKeysWG, kHeadDim, kDqN, kBlockN>;

  using Tma = BwdTma<Element, SmemLayoutQ, SmemLayoutK, SmemLayoutDq, kStages>;

  struct SharedStorage : BwdInputTiles<Element, SmemLayoutQ, SmemLayoutK> {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutP>> p;
    alignas(1024) cute::array_aligned<Element, 2 * cosize_v<SmemLayoutP>> ds;  // two buffers
    alignas(1024) cute::array_aligned<float, kMmaWarpGroups * cosize_v<SmemLayoutDq>> dq;
    BwdSync<typename Tma::PipelineQ, kMmaWarpGroups> sync;
    // Per MMA warpgroup: its dQ staged, one arrival per warp (the buffer's way back is a named
    // barrier, kernel_bwd_sm90.cuh).
    alignas(8) uint64_t dq_staged[kMmaWarpGroups][kDqJobs];
    BwdDqJob<2> dq_job[kMmaWarpGroups][kDqJobs];
    BwdTileSync tiles;  // the persistent walk's
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "backward tiles exceed Hopper shared memory");
};

// Head dim 256: dK and dV of 128 keys would need 256 fp32 accumulator registers per thread, so a
// block owns kBlockN = 64 keys and its two MMA warpgroups split the GEMMs two ways (the "split-D"
// kernel, kernel_bwd_split_d_sm90.cuh):
//   S and dP by keys: warpgroup w computes the (64 rows, 32 keys) slice [32w, 32w + 32) over the
//       whole head dim (wgmma n32);
//   dV, dK and dQ by head-dim columns: warpgroup w owns columns [128w, 128w + 128) of all 64 keys'
//       dV and dK (64 + 64 registers) and of the step's dQ, over the whole P / dS, which both
//       warpgroups write into shared memory (double-buffered, a block barrier each).
// Shared memory: Q and dO in two stages (128 KB), K and V (64 KB), P and dS (2 x 2 x 8 KB) make
// 224 KB, which leaves no room for a dQ staging buffer: a warpgroup stages its dQ (64 x 128 fp32,
// two (64, 64) reduce-add boxes) in the halves of this step's Q and dO that only it reads, and
// hands the stage back to the producer once the reduce-adds have read it.
template <class Element_, int kHeadDim_>
struct ConfigBwdSplitD {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 256, "the split-D backward is built for d 256");
  static constexpr bool kSplitD = true;
  static constexpr bool kPersistent = false;   // one block per tile only
  static constexpr bool kSharedStores = true;  // +3.5% / +4.7% (ConfigBwd says what it is)
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = 64;
  static constexpr int kStages = 2;
  static constexpr int kMmaWarpGroups = 2;
  static constexpr int kMmaThreads = 128 * kMmaWarpGroups;
  static constexpr int kThreads = 128 + kMmaThreads;
  // One arrival per MMA warpgroup frees a Q/dO stage, from its dQ writer once the reduce-adds
  // have read the dQ staged there (kernel_bwd_split_d_sm90.cuh).
  static constexpr int kStageReleasers = kMmaWarpGroups;
  // dQ jobs (and their mbarriers) per warpgroup: a warpgroup can post step i + 1's before its
  // writer is done with step i's, even before the writer waited for it (it needs step i's stage
  // back only at step i + 2): one mbarrier would then complete two phases, and the writer's wait
  // on the first one's parity would see the third.
  static constexpr int kDqJobs = 2;
  static constexpr int kKeysWG = kBlockN / kMmaWarpGroups;   // 32: S and dP
  static constexpr int kColsWG = kHeadDim / kMmaWarpGroups;  // 128: dV, dK, dQ
  static constexpr int kDqBox = 64;                          // columns per reduce-add box
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * kMmaThreads <=
                    (65536 / kThreads) / 8 * 8 * kThreads,
                "setmaxnreg cannot hand out more registers than the launch gave the block");

  using AtomD = SmemAtomK<Element, kHeadDim>;  // 128-byte swizzle, 64 columns
  using Atom64 = SmemAtomK<Element, 64>;
  // Q and dO: (rows, dim, stage); K, V: (keys, dim). A 64-column block of every row is one
  // contiguous 8 KB run, so a warpgroup's 128 columns are 16 KB at element offset 8192·w.
  using SmemLayoutQ =
      decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutK = decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  static constexpr int kStageElems = kBlockM * kHeadDim;  // one stage of Q (dO)
  static constexpr int kHalfElems = kBlockM * kColsWG;    // one warpgroup's columns of it
  static_assert(kBlockM == kBlockN, "Q's, dO's and K's column halves share one layout");
  // A warpgroup's columns of one stage of Q or dO (or of K): (rows, 128 columns), and read as the
  // N-major B operand of dK = dSᵀ·Q, dV = Pᵀ·dO: (column, row).
  using SmemLayoutHalf = decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockM>, Int<kColsWG>>{}));
  using SmemLayoutHalfT = decltype(composition(
      SmemLayoutHalf{}, make_ordered_layout(Shape<Int<kColsWG>, Int<kBlockM>>{}, Step<_2, _1>{})));
  // 64 columns of K read as the N-major B operand of dQ = dS·K: (column, key).
  using SmemLayoutKBox = decltype(tile_to_shape(AtomD{}, Shape<Int<kBlockN>, Int<kDqBox>>{}));
  using SmemLayoutKBoxT = decltype(composition(
      SmemLayoutKBox{}, make_ordered_layout(Shape<Int<kDqBox>, Int<kBlockN>>{}, Step<_2, _1>{})));
  // P and dS: (row, key), one buffer of each per step parity; read transposed (key, row) as the
  // M-major A operand of dV and dK.
  using SmemLayoutP = decltype(tile_to_shape(Atom64{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  using SmemLayoutPt = decltype(composition(
      SmemLayoutP{}, make_ordered_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, Step<_2, _1>{})));
  // dQ's fp32 staging box, (64 rows, 64 columns) 128-byte swizzled: 16 KB, the size of a
  // warpgroup's half of one stage of Q (dO), where it is written.
  using SmemLayoutDq = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<float>{},
                                              Shape<Int<kBlockM>, Int<kDqBox>>{}));
  static_assert(cosize_v<SmemLayoutDq> * sizeof(float) == kHalfElems * sizeof(Element),
                "a dQ box fills a warpgroup's half of a stage");

  // S_w = Q·K_wᵀ, dP_w = dO·V_wᵀ over the warpgroup's 32 keys (n32); dV_w += Pᵀ·dO_w and
  // dK_w += dSᵀ·Q_w: 128 columns of all 64 keys; one box of dQ_w = dS·K: 64 columns.
  using Mma = BwdMma<Element, kHeadDim, kKeysWG, kBlockN, kColsWG, kDqBox, kBlockN>;

  using Tma = BwdTma<Element, SmemLayoutQ, SmemLayoutK, SmemLayoutDq, kStages>;

  struct SharedStorage : BwdInputTiles<Element, SmemLayoutQ, SmemLayoutK> {
    alignas(1024) cute::array_aligned<Element, 2 * cosize_v<SmemLayoutP>> p;   // two buffers
    alignas(1024) cute::array_aligned<Element, 2 * cosize_v<SmemLayoutP>> ds;  // two buffers
    BwdSync<typename Tma::PipelineQ, kMmaWarpGroups> sync;
    // Per MMA warpgroup and job: its dQ staged (one arrival per warp), and the job.
    alignas(8) uint64_t dq_staged[kMmaWarpGroups][kDqJobs];
    BwdDqJob<4> dq_job[kMmaWarpGroups][kDqJobs];
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "backward tiles exceed Hopper shared memory");
};

// The configuration of head dim kHeadDim's backward: split-D at 256, else ConfigBwd.
template <class Element, int kHeadDim>
using BwdConfigFor = std::conditional_t<kHeadDim == 256, ConfigBwdSplitD<Element, kHeadDim>,
                                        ConfigBwd<Element, kHeadDim>>;

}  // namespace flashattn::fa3
