// Compile-time shape of one Hopper backward instantiation (kernel_bwd_sm90.cuh): tiles, the
// shared-memory layouts of Q, dO (a two-stage ring), K, V, P, dS and the dQ staging buffer, the
// three tiled wgmma's and the TMA types. Reuses the forward's K-major atoms (config.cuh).
//
// A block owns kBlockN = 128 keys; each of its two MMA warpgroups owns 64 of them in S, dP, dV
// and dK, and half of dQ's columns over all 128 keys (dS from both warpgroups). K's swizzle atom
// spans half a row, so that half of K's columns is a whole number of atoms (the N-major B
// operand of dQ = dS·K): 128-byte at head dim 128, 64-byte at 64.
#pragma once

#include <cutlass/numeric_types.h>

// config.cuh includes cute/tensor.hpp before the atom headers (they are not self-contained).
#include "kernels/fa3_sm90/config.cuh"

namespace flashattn::fa3 {

using namespace cute;

// The fp32 dQ accumulator as TMA reduce-adds into it: (token, dim, head, batch), unit dim stride.
using GmemTensorF32 =
    decltype(make_tensor(make_gmem_ptr(static_cast<float*>(nullptr)), GmemShape{}, GmemStride{}));

template <class Element_, int kHeadDim_>
struct ConfigBwd {
  using Element = Element_;  // cutlass::bfloat16_t or cutlass::half_t
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the Hopper backward is built for d 64, 128");
  static constexpr int kBlockM = 64;   // query rows per step of the walk
  static constexpr int kBlockN = 128;  // keys per block
  static constexpr int kStages = 2;    // Q / dO ring
  static constexpr int kMmaWarpGroups = 2;
  static constexpr int kMmaThreads = 128 * kMmaWarpGroups;
  static constexpr int kThreads = 128 + kMmaThreads;        // producer warpgroup first
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
  // dQ's split between the warpgroups: kDqN columns each, over all kBlockN keys.
  static constexpr int kDqN = kHeadDim / kMmaWarpGroups;

  using AtomD = SmemAtomK<Element, kHeadDim>;  // rows of kHeadDim (128-byte swizzle)
  using AtomK = SmemAtomK<Element, kDqN>;      // K and V: an atom spans half a row (see the top)
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
  static constexpr int kKDqOffset = kBlockN * kDqN;  // per warpgroup
  // dQ's fp32 staging: one (64, kDqN) buffer per warpgroup, 128-byte swizzled (32 floats per
  // atom row), the box of its TMA reduce-add.
  using SmemLayoutDq =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<float>{}, Shape<Int<kBlockM>, Int<kDqN>>{}));

  // S = Q·K_wᵀ and dP = dO·V_wᵀ: (64 rows, 64 keys, d), both operands K-major.
  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kKeysWG>, Int<kHeadDim>>>()));
  // dV += P_wᵀ·dO and dK += dS_wᵀ·Q: (64 keys, d, 64 rows), both operands M/N-major.
  using TiledMmaDkv = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kKeysWG>, Int<kHeadDim>, _64>,
                           GMMA::Major::MN, GMMA::Major::MN>()));
  // dQ_w = dS·K: (64 rows, kDqN columns, kBlockN keys); A K-major, B N-major.
  using TiledMmaDq = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDqN>, Int<kBlockN>>,
                           GMMA::Major::K, GMMA::Major::MN>()));

  using TileQ = decltype(product_each(shape(take<0, 2>(SmemLayoutQ{}))));
  using TileK = decltype(product_each(shape(SmemLayoutK{})));
  using TileDq = decltype(product_each(shape(SmemLayoutDq{})));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<Element>{},
                                      take<0, 2>(SmemLayoutQ{}), TileQ{}, _1{}));
  using TmaK =
      decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor<Element>{}, SmemLayoutK{}, TileK{}, _1{}));
  using TmaDq = decltype(make_tma_copy(SM90_TMA_REDUCE_ADD{}, GmemTensorF32{}, SmemLayoutDq{},
                                       TileDq{}, _1{}));

  static constexpr int kBytesQ = kBlockM * kHeadDim * sizeof(Element);  // one stage (dO alike)
  static constexpr int kBytesK = kBlockN * kHeadDim * sizeof(Element);  // V alike
  using PipelineQ = cutlass::PipelineTmaAsync<kStages>;

  struct SharedStorage {
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> q;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutQ>> dout;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> k;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutK>> v;
    alignas(1024) cute::array_aligned<Element, cosize_v<SmemLayoutP>> p;
    alignas(1024) cute::array_aligned<Element, 2 * cosize_v<SmemLayoutP>> ds;  // two buffers
    alignas(1024) cute::array_aligned<float, kMmaWarpGroups * cosize_v<SmemLayoutDq>> dq;
    alignas(16) uint64_t kv_full;                  // K and V landed (TMA transaction barrier)
    typename PipelineQ::SharedStorage pipeline_q;  // Q and dO of one step, one barrier
    // Deterministic mode, per MMA warpgroup: the semaphore (null: none) and turn of its last
    // reduce-add, passed on once the add completed (kernel_bwd_sm90.cuh). In shared memory: held
    // across the walk in registers, they spilled.
    int* dq_sem[kMmaWarpGroups];
    int dq_turn[kMmaWarpGroups];
    int dq_next_turn[kMmaWarpGroups];  // this step's turn, worked out at the step's start
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "backward tiles exceed Hopper shared memory");
};

}  // namespace flashattn::fa3
