// Warp-level tensor-core GEMMs of the FA2 mainloop: S = Q·Kᵀ and O += P·V with mma.sync
// m16n8k16 (fp32 accumulation), operands from swizzled shared memory through ldmatrix.
//
// Fragments (PTX ISA, "mma.m16n8k16"), lane = 4·g + t:
//   accumulator of one 16x8 tile: c[0], c[1] = (row g, cols 2t, 2t+1); c[2], c[3] = (row g+8, ...)
//   A (16x16, row-major):  a[0] = (row g, k 2t..2t+1), a[1] = (row g+8, k 2t..),
//                          a[2] = (row g, k 8+2t..),   a[3] = (row g+8, k 8+2t..)
//   B (16x8, "col"):       b[0] = (k 2t..2t+1, col g), b[1] = (k 8+2t.., col g)
// So the accumulators of two adjacent 16x8 S tiles, rounded pairwise, are exactly the A fragment
// of P for the next MMA: P never leaves registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cute/arch/copy_sm75.hpp>
#include <cute/arch/mma_sm80.hpp>
#include <type_traits>

#include "common/convert.cuh"
#include "kernels/fa2_sm80/smem_tile.cuh"

namespace flashattn::fa2 {

template <typename Element>
using MmaAtom =
    std::conditional_t<std::is_same_v<Element, __nv_bfloat16>, cute::SM80_16x8x16_F32BF16BF16F32_TN,
                       cute::SM80_16x8x16_F32F16F16F32_TN>;

using Frag = float[4];  // one 16x8 fp32 accumulator tile

template <typename Element>
__device__ __forceinline__ void mma(Frag& c, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  MmaAtom<Element>::fma(c[0], c[1], c[2], c[3], a[0], a[1], a[2], a[3], b0, b1, c[0], c[1], c[2],
                        c[3]);
}

template <typename Element>
__device__ __forceinline__ const cute::uint128_t& smem_chunk(const Element* p) {
  return *reinterpret_cast<const cute::uint128_t*>(p);
}

// Lane offsets of the three operand fragments (see LaneOffsets):
// A, 16 x 16 of a row-major [m][k] tile: lanes 0-7 address the rows of a[0], 8-15 of a[1]
// (rows +8), 16-23 of a[2] (k +8), 24-31 of a[3].
template <class Tile>
__device__ __forceinline__ LaneOffsets<Tile> a_offsets(int lane) {
  return LaneOffsets<Tile>(lane % 16, lane / 16 * 8);
}
// B of two adjacent 8-column tiles (n0, n0+8) from a tile stored [n][k] (K as in memory):
// b[0], b[1] for columns n0.., b[2], b[3] for columns n0+8...
template <class Tile>
__device__ __forceinline__ LaneOffsets<Tile> b_nk_offsets(int lane) {
  return LaneOffsets<Tile>(lane % 8 + lane / 16 * 8, lane / 8 % 2 * 8);
}
// The same two B fragments from a tile stored [k][n] (V as in memory), transposed by
// ldmatrix.trans on the way into registers: rows are k, columns n.
template <class Tile>
__device__ __forceinline__ LaneOffsets<Tile> b_kn_offsets(int lane) {
  return LaneOffsets<Tile>(lane % 16, lane / 16 * 8);
}

template <typename Element>
__device__ __forceinline__ void ldsm(const Element* p, uint32_t (&r)[4]) {
  cute::SM75_U32x4_LDSM_N::copy(smem_chunk(p), r[0], r[1], r[2], r[3]);
}
template <typename Element>
__device__ __forceinline__ void ldsm_trans(const Element* p, uint32_t (&r)[4]) {
  cute::SM75_U16x8_LDSM_T::copy(smem_chunk(p), r[0], r[1], r[2], r[3]);
}

// acc[mi][ni] += Q[rows of m16 tile mi] · K[keys ni*8 ..]ᵀ over the whole head dim.
// q_row0: the warp's first row in the Q tile.
template <typename Element, class QTile, class KTile, int kMFrags, int kNFrags, int kHeadDim>
__device__ __forceinline__ void gemm_qk(Frag (&acc)[kMFrags][kNFrags], const Element* q_s,
                                        const LaneOffsets<QTile>& q_lane, const Element* k_s,
                                        const LaneOffsets<KTile>& k_lane, int q_row0) {
  const LaneOffsets<QTile> qo = q_lane.opaque();
  const LaneOffsets<KTile> ko = k_lane.opaque();
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    uint32_t a[kMFrags][4];
#pragma unroll
    for (int mi = 0; mi < kMFrags; ++mi) ldsm(q_s + qo.at(q_row0 + mi * 16, kk * 16), a[mi]);
#pragma unroll
    for (int nj = 0; nj < kNFrags / 2; ++nj) {
      uint32_t b[4];
      ldsm(k_s + ko.at(nj * 16, kk * 16), b);
#pragma unroll
      for (int mi = 0; mi < kMFrags; ++mi) {
        mma<Element>(acc[mi][2 * nj], a[mi], b[0], b[1]);
        mma<Element>(acc[mi][2 * nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

// P (fp32 accumulators of S after softmax) rounded to Element, in A-fragment order:
// p[mi][kk] covers keys kk*16 .. kk*16+15.
template <typename Element, int kMFrags, int kNFrags>
__device__ __forceinline__ void convert_p(const Frag (&s)[kMFrags][kNFrags],
                                          uint32_t (&p)[kMFrags][kNFrags / 2][4]) {
#pragma unroll
  for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
    for (int kk = 0; kk < kNFrags / 2; ++kk) {
      p[mi][kk][0] = pack2<Element>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
      p[mi][kk][1] = pack2<Element>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
      p[mi][kk][2] = pack2<Element>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
      p[mi][kk][3] = pack2<Element>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
    }
}

// acc[mi][di] += P[mi] · V[:, di*8 ..] over the block's keys.
template <typename Element, class VTile, int kMFrags, int kNFrags, int kOFrags>
__device__ __forceinline__ void gemm_pv(Frag (&acc)[kMFrags][kOFrags],
                                        const uint32_t (&p)[kMFrags][kNFrags / 2][4],
                                        const Element* v_s, const LaneOffsets<VTile>& v_lane) {
  const LaneOffsets<VTile> vo = v_lane.opaque();
#pragma unroll
  for (int kk = 0; kk < kNFrags / 2; ++kk) {
#pragma unroll
    for (int dj = 0; dj < kOFrags / 2; ++dj) {
      uint32_t b[4];
      ldsm_trans(v_s + vo.at(kk * 16, dj * 16), b);
#pragma unroll
      for (int mi = 0; mi < kMFrags; ++mi) {
        mma<Element>(acc[mi][2 * dj], p[mi][kk], b[0], b[1]);
        mma<Element>(acc[mi][2 * dj + 1], p[mi][kk], b[2], b[3]);
      }
    }
  }
}

}  // namespace flashattn::fa2
