// The FA2 backward's main kernel on tensor cores (mma.sync m16n8k16, cp.async, ldmatrix), sm_80
// and up; the preprocess and postprocess kernels are the shared stages (kernels/bwd_stages).
//
// One thread block of 8 warps owns one key block (kBlockN keys) of one KV head of one sequence.
// It loads its K and V tiles once, then walks every query block (kBlockM rows) of every query
// head of its group that sees one of its keys, and for each runs
//     S  = Q·Kᵀ,  P = exp2(S·scale·log2e − LSE·log2e)    (P from the forward's LSE: no softmax)
//     dP = dO·Vᵀ, dS = P ∘ (dP − D)                       (D = rowsum(dO ∘ O), the preprocess's)
//     dV += Pᵀ·dO,  dK += dSᵀ·Q                           (registers, across the whole walk)
//     dQ += dS·K                                          (fp32 accumulator in global memory)
// P and dS go through shared memory as Element tiles [query][key]: each of the five GEMMs then
// reads its operands with ldmatrix (normal or transposed) and tiles its own output over the 8
// warps, so no GEMM constrains another's warp layout. Q, dO (and their LSE and D rows) are double
// buffered: the next query block's cp.async runs under this block's GEMMs.
//
// GQA: the block loops over the query heads of its KV head, so dK and dV sum the group in
// registers in a fixed order (no atomics, nothing to reduce afterwards).
// dQ: red.add into the fp32 accumulator. Deterministic mode orders those adds: the blocks that
// touch one (query head, query block) add in ascending key-block order, each waiting on a
// per-tile semaphore until the key blocks before it that touch the tile have added. A block only
// waits on blocks of lower blockIdx.x, dispatched before it, so the waits cannot deadlock however
// few blocks are resident. Every block walks its query blocks from the last down: under a causal
// mask all the key blocks of a head then reach a query block at the same step of their walks
// and add one after the other, a skew of a few adds; walking up, key block n started 2n query
// blocks later than block 0 and trailed its predecessor's whole walk (measured at hd128 causal
// 8k: the deterministic mode 30% slower than the other walking up, 20% walking down).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cute/arch/copy_sm80.hpp>

#include "common/backward_problem.h"
#include "common/convert.cuh"
#include "common/mask.h"
#include "common/sequence_view.cuh"
#include "kernels/bwd_stages/stages.h"
#include "kernels/bwd_stages/walk.cuh"
#include "kernels/fa2_sm80/smem_tile.cuh"
#include "kernels/fa2_sm80/warp_mma_sm80.cuh"

namespace flashattn::fa2_bwd {

using fa2::Frag;
using fa2::LaneOffsets;
using fa2::SmemTile;

using bwd::add_order;
using bwd::kMinBlockM;
using bwd::load_acquire;
using bwd::query_blocks;
using bwd::store_release;
using bwd::Workspace;

inline constexpr int kWarps = 8;

// How 8 warps tile an R x C output: kWR x kWC warps of kRows x kCols each. Of the splits into
// whole m16 x n16 tiles, the one with the fewest ldmatrix per k16 step (kRF + kCF / 2, for
// kRF·kCF MMAs): the squarest warp tile.
template <int R, int C>
struct WarpGrid {
  static constexpr int cost(int wr) {
    return (R % (16 * wr) != 0 || C % (16 * (kWarps / wr)) != 0)
               ? 1 << 20
               : R / wr / 16 + C / (kWarps / wr) / 16;
  }
  static constexpr int pick() {
    int best = 1;
    for (int wr = 2; wr <= kWarps; wr *= 2) {
      if (cost(wr) < cost(best)) best = wr;
    }
    return best;
  }
  static constexpr int kWR = pick();
  static constexpr int kWC = kWarps / kWR;
  static constexpr int kRows = R / kWR, kCols = C / kWC;
  static constexpr int kRF = kRows / 16, kCF = kCols / 8;
  static_assert(kWR * kWC == kWarps && kRows % 16 == 0 && kCols % 16 == 0, "whole m16/n16 tiles");
  __device__ __forceinline__ static int row0(int warp) { return warp / kWC * kRows; }
  __device__ __forceinline__ static int col0(int warp) { return warp % kWC * kCols; }
};

template <typename Element_, int kHeadDim_, int kHeadDimV_>
struct Config {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  // dK and dV hold kBlockN x kHeadDim fp32 accumulators across the walk, S and dP kBlockM x
  // kBlockN each step; registers (255) bound the tiles. Measured on the H100 (bf16, 16k tokens):
  // hd128 at 64 x 128 runs 196-201 TFLOP/s against 149 at 64 x 64, for a few spilled words
  // (stored and reloaded once per step); hd256 at 32 x 64 133-141 against 93-95 at 64 x 32.
  static constexpr int kBlockM = kHeadDim <= 128 ? 64 : 32;
  static constexpr int kBlockN = kHeadDim <= 128 ? 128 : 64;
  static_assert(kBlockM % kMinBlockM == 0, "semaphores are sized by kMinBlockM");
  static constexpr int kThreads = 32 * kWarps;

  using QTile = SmemTile<kBlockM, kHeadDim>;
  using DoTile = SmemTile<kBlockM, kHeadDimV>;
  using KTile = SmemTile<kBlockN, kHeadDim>;
  using VTile = SmemTile<kBlockN, kHeadDimV>;
  using PTile = SmemTile<kBlockM, kBlockN>;  // P and dS, [query][key]

  using GridS = WarpGrid<kBlockM, kBlockN>;     // S and dP
  using GridDk = WarpGrid<kBlockN, kHeadDim>;   // dK
  using GridDv = WarpGrid<kBlockN, kHeadDimV>;  // dV
  using GridDq = WarpGrid<kBlockM, kHeadDim>;   // dQ

  // dQ's fp32 staging rows, padded by 8 floats: the fragment stores of 8 rows land in distinct
  // bank groups (two wavefronts per float2 store, the minimum).
  static constexpr int kDqStride = kHeadDim + 8;
  static constexpr int kElemBytes = static_cast<int>(sizeof(Element));
  static constexpr int kSmemBytes =
      (2 * (QTile::kElems + DoTile::kElems) + KTile::kElems + VTile::kElems + 2 * PTile::kElems) *
          kElemBytes +
      (2 * 2 * kBlockM + kBlockM * kDqStride) * static_cast<int>(sizeof(float));
};

// acc[RF][CF] += A (rows r0.., k) · B (k, cols c0..) over kK, operands in shared memory.
// A is stored [r][k] (kATrans false: ldmatrix) or [k][r] (true: ldmatrix.trans); B is stored
// [c][k] (kBTrans false) or [k][c] (true). Lane offsets: normal A and transposed B address with
// lane_rows(), normal B and transposed A with lane_pairs() (see the fragment maps in
// warp_mma_sm80.cuh).
template <typename Element, bool kATrans, bool kBTrans, int kRF, int kCF, int kK, class ATile,
          class BTile>
__device__ __forceinline__ void warp_gemm(Frag (&acc)[kRF][kCF], const Element* a_s,
                                          const LaneOffsets<ATile>& ao, int r0, const Element* b_s,
                                          const LaneOffsets<BTile>& bo, int c0) {
  static_assert(kCF % 2 == 0 && kK % 16 == 0, "n16 and k16 steps");
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) {
    uint32_t a[kRF][4];
#pragma unroll
    for (int mi = 0; mi < kRF; ++mi) {
      if constexpr (kATrans) {
        fa2::ldsm_trans(a_s + ao.at(kk * 16, r0 + mi * 16), a[mi]);
      } else {
        fa2::ldsm(a_s + ao.at(r0 + mi * 16, kk * 16), a[mi]);
      }
    }
#pragma unroll
    for (int nj = 0; nj < kCF / 2; ++nj) {
      uint32_t b[4];
      if constexpr (kBTrans) {
        fa2::ldsm_trans(b_s + bo.at(kk * 16, c0 + nj * 16), b);
      } else {
        fa2::ldsm(b_s + bo.at(c0 + nj * 16, kk * 16), b);
      }
#pragma unroll
      for (int mi = 0; mi < kRF; ++mi) {
        fa2::mma<Element>(acc[mi][2 * nj], a[mi], b[0], b[1]);
        fa2::mma<Element>(acc[mi][2 * nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
}

template <class Tile>
__device__ __forceinline__ LaneOffsets<Tile> lane_rows(int lane) {
  return LaneOffsets<Tile>(lane % 16, lane / 16 * 8);
}
template <class Tile>
__device__ __forceinline__ LaneOffsets<Tile> lane_pairs(int lane) {
  return LaneOffsets<Tile>(lane % 8 + lane / 16 * 8, lane / 8 % 2 * 8);
}

template <int kRF, int kCF>
__device__ __forceinline__ void zero(Frag (&acc)[kRF][kCF]) {
#pragma unroll
  for (int i = 0; i < kRF; ++i)
#pragma unroll
    for (int j = 0; j < kCF; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// 16-byte fire-and-forget add (red, not atom: atomicAdd(float4*) compiles to ATOMG, which
// returns the old value and holds a register quad until it does).
__device__ __forceinline__ void add_dq4(float* p, const float4& v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w)
               : "memory");
#else
  atomicAdd(p, v.x);
  atomicAdd(p + 1, v.y);
  atomicAdd(p + 2, v.z);
  atomicAdd(p + 3, v.w);
#endif
}

// One warp's share of a [key][dim] accumulator (dK or dV), times `scale`, rounded and stored
// through `stride` (batch, token, head) for the block's first `keys` keys.
template <class Grid, typename Element, int kRF, int kCF>
__device__ __forceinline__ void store_key_rows(const Frag (&acc)[kRF][kCF], void* base,
                                               const int64_t (&stride)[3], const Problem& p,
                                               const SequenceView& seq_kv, int b, int h_kv,
                                               int key0, int keys, float scale, int warp,
                                               int lane) {
  Element* out = static_cast<Element*>(base) +
                 (p.cu_seqlens_k != nullptr ? seq_kv.token_k * stride[1] : b * stride[0]) +
                 h_kv * stride[2] + key0 * stride[1];
  const int r0 = Grid::row0(warp), c0 = Grid::col0(warp), g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kRF; ++mi)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = r0 + mi * 16 + g + 8 * hh;
      if (r < keys) {
#pragma unroll
        for (int ni = 0; ni < kCF; ++ni) {
          const int c = c0 + ni * 8 + 2 * t;
          *reinterpret_cast<uint32_t*>(out + r * stride[1] + c) =
              pack2<Element>(acc[mi][ni][2 * hh] * scale, acc[mi][ni][2 * hh + 1] * scale);
        }
      }
    }
}

// Grid (key blocks, heads_kv, batch); 8 warps.
template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    bwd_kernel(const BackwardProblem bp, const Workspace ws) {
  using Element = typename C::Element;
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kD = C::kHeadDim, kDV = C::kHeadDimV;
  using QTile = typename C::QTile;
  using DoTile = typename C::DoTile;
  using KTile = typename C::KTile;
  using VTile = typename C::VTile;
  using PTile = typename C::PTile;
  using GridS = typename C::GridS;
  using GridDk = typename C::GridDk;
  using GridDv = typename C::GridDv;
  using GridDq = typename C::GridDq;
  const Problem& p = bp.fwd;

  extern __shared__ uint4 smem[];
  Element* q_s = reinterpret_cast<Element*>(smem);         // [2][M][D]
  Element* do_s = q_s + 2 * QTile::kElems;                  // [2][M][DV]
  Element* k_s = do_s + 2 * DoTile::kElems;                 // [N][D]
  Element* v_s = k_s + KTile::kElems;                       // [N][DV]
  Element* p_s = v_s + VTile::kElems;                       // [M][N]
  Element* ds_s = p_s + PTile::kElems;                      // [M][N]
  float* lse_s = reinterpret_cast<float*>(ds_s + PTile::kElems);  // [2][M]
  float* dsum_s = lse_s + 2 * kBlockM;                            // [2][M]
  float* dq_s = dsum_s + 2 * kBlockM;                             // [M][kDqStride]

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int n_block = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z;
  const SequenceView seq_kv = sequence_view(p, b, h_kv * p.group, h_kv);
  const int key0 = n_block * kBlockN;
  if (key0 >= seq_kv.len_k) return;  // varlen: this sequence is shorter than the longest
  const int keys = min(kBlockN, seq_kv.len_k - key0);
  Mask mask = p.mask;
  mask.seqlen_q = seq_kv.len_q;
  mask.seqlen_k = seq_kv.len_k;

  const Element* k_g = static_cast<const Element*>(p.k) + seq_kv.k_offset + key0 * p.k_stride[1];
  const Element* v_g = static_cast<const Element*>(p.v) + seq_kv.v_offset + key0 * p.v_stride[1];
  fa2::copy_tile_async<Element, kBlockN, kD, C::kThreads>(k_s, k_g, p.k_stride[1], keys, tid);
  fa2::copy_tile_async<Element, kBlockN, kDV, C::kThreads>(v_s, v_g, p.v_stride[1], keys, tid);
  cute::cp_async_fence();

  int m_lo, m_hi;
  query_blocks<kBlockM, kBlockN>(mask, n_block, m_lo, m_hi);

  // Per-warp lane offsets, one per (tile, addressing pattern).
  const LaneOffsets<QTile> q_rows = lane_rows<QTile>(lane);
  const LaneOffsets<DoTile> do_rows = lane_rows<DoTile>(lane);
  const LaneOffsets<KTile> k_pairs = lane_pairs<KTile>(lane), k_rows = lane_rows<KTile>(lane);
  const LaneOffsets<VTile> v_pairs = lane_pairs<VTile>(lane);
  const LaneOffsets<PTile> p_pairs = lane_pairs<PTile>(lane), p_rows = lane_rows<PTile>(lane);

  const int s_r0 = GridS::row0(warp), s_c0 = GridS::col0(warp);
  const int dk_r0 = GridDk::row0(warp), dk_c0 = GridDk::col0(warp);
  const int dv_r0 = GridDv::row0(warp), dv_c0 = GridDv::col0(warp);
  const int dq_r0 = GridDq::row0(warp), dq_c0 = GridDq::col0(warp);
  const int g = lane / 4, t = lane % 4;

  Frag dk_acc[GridDk::kRF][GridDk::kCF];
  Frag dv_acc[GridDv::kRF][GridDv::kCF];
  zero(dk_acc);
  zero(dv_acc);

  for (int gi = 0; gi < p.group && m_lo < m_hi; ++gi) {
    const int h = h_kv * p.group + gi;
    const SequenceView seq = sequence_view(p, b, h, h_kv);
    const int64_t row_base = (p.cu_seqlens_q != nullptr ? seq.token_q
                                                         : static_cast<int64_t>(b) * p.seqlen_q);
    const int64_t ws_row0 = static_cast<int64_t>(h) * ws.rows + row_base;
    const Element* q_g = static_cast<const Element*>(p.q) + seq.q_offset;
    const Element* do_g = static_cast<const Element*>(bp.dout) +
                          (p.cu_seqlens_q != nullptr ? seq.token_q * bp.dout_stride[1]
                                                     : b * bp.dout_stride[0]) +
                          h * bp.dout_stride[2];

    auto load = [&](int m, int stage) {
      const int row0 = m * kBlockM;
      const int rows = min(kBlockM, seq.len_q - row0);
      fa2::copy_tile_async<Element, kBlockM, kD, C::kThreads>(
          q_s + stage * QTile::kElems, q_g + row0 * p.q_stride[1], p.q_stride[1], rows, tid);
      fa2::copy_tile_async<Element, kBlockM, kDV, C::kThreads>(
          do_s + stage * DoTile::kElems, do_g + row0 * bp.dout_stride[1], bp.dout_stride[1], rows,
          tid);
      cute::cp_async_fence();
      if (tid < kBlockM) {
        const bool valid = tid < rows;
        lse_s[stage * kBlockM + tid] = valid ? ws.lse_log2[ws_row0 + row0 + tid] : INFINITY;
        dsum_s[stage * kBlockM + tid] = valid ? ws.dsum[ws_row0 + row0 + tid] : 0.f;
      }
    };

    // Deterministic: from the last query block down (see the top); otherwise up, 4% faster
    // causal at hd128 8k (the long walks of the first key blocks start first).
    const int step = bp.deterministic ? -1 : 1;
    const int m_first = bp.deterministic ? m_hi - 1 : m_lo;
    load(m_first, 0);
    for (int i = 0; i < m_hi - m_lo; ++i) {
      const int m = m_first + i * step;
      const int st = i & 1;
      if (i + 1 < m_hi - m_lo) {
        load(m + step, st ^ 1);
        cute::cp_async_wait<1>();
      } else {
        cute::cp_async_wait<0>();
      }
      __syncthreads();
      const Element* qs = q_s + st * QTile::kElems;
      const Element* dos = do_s + st * DoTile::kElems;
      const float* lse_row = lse_s + st * kBlockM;
      const float* dsum_row = dsum_s + st * kBlockM;
      const int row0 = m * kBlockM;

      // S = Q·Kᵀ and dP = dO·Vᵀ, both [query][key] over the same warp tiles.
      Frag s[GridS::kRF][GridS::kCF];
      Frag dp[GridS::kRF][GridS::kCF];
      zero(s);
      zero(dp);
      warp_gemm<Element, false, false, GridS::kRF, GridS::kCF, kD>(s, qs, q_rows, s_r0, k_s,
                                                                    k_pairs, s_c0);
      warp_gemm<Element, false, false, GridS::kRF, GridS::kCF, kDV>(dp, dos, do_rows, s_r0, v_s,
                                                                     v_pairs, s_c0);
      const bool softcap = p.has_softcap();
      const bool full = mask.tile_all_visible(row0, min(row0 + kBlockM, seq.len_q), key0,
                                              key0 + keys) &&
                        keys == kBlockN;
#pragma unroll
      for (int mi = 0; mi < GridS::kRF; ++mi)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = s_r0 + mi * 16 + g + 8 * hh;
          const float lse = lse_row[r], dsum = dsum_row[r];
#pragma unroll
          for (int ni = 0; ni < GridS::kCF; ++ni) {
            const int c = s_c0 + ni * 8 + 2 * t;
            float pv[2], dsv[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const bool vis = full || mask.visible(row0 + r, key0 + c + e);
              float sv = s[mi][ni][2 * hh + e];
              float dtanh = 1.f;
              if (softcap) {  // S' = softcap·t, t = tanh(q·k·softcap_scale): dS'/dS = 1 − t²
                sv = tanh_accurate(sv * p.softcap_scale);
                dtanh = fmaf(-sv, sv, 1.f);
              }
              const float x = sv * p.scale_log2 - lse;
              pv[e] = vis ? exp2_approx(x) : 0.f;
              dsv[e] = pv[e] * (dp[mi][ni][2 * hh + e] - dsum) * dtanh;
            }
            *reinterpret_cast<uint32_t*>(p_s + PTile::offset(r, c)) = pack2<Element>(pv[0], pv[1]);
            *reinterpret_cast<uint32_t*>(ds_s + PTile::offset(r, c)) =
                pack2<Element>(dsv[0], dsv[1]);
          }
        }
      __syncthreads();

      // dV += Pᵀ·dO and dK += dSᵀ·Q: A = P/dS stored [query][key] = [k][r] (transposed), B =
      // dO/Q stored [query][dim] = [k][c] (transposed).
      warp_gemm<Element, true, true, GridDv::kRF, GridDv::kCF, kBlockM>(dv_acc, p_s, p_pairs,
                                                                         dv_r0, dos, do_rows, dv_c0);
      warp_gemm<Element, true, true, GridDk::kRF, GridDk::kCF, kBlockM>(dk_acc, ds_s, p_pairs,
                                                                         dk_r0, qs, q_rows, dk_c0);
      // dQ (this key block's share) = dS·K: A = dS [query][key] (normal), B = K [key][dim] =
      // [k][c] (transposed), staged in shared memory as fp32 and then added to the accumulator
      // row by row with 16-byte red.add (coalesced, a quarter of the scalar adds). Wide warp
      // tiles run in chunks of kDqCF 8-column tiles, so the temporary stays small beside dK and
      // dV (head dims 192 and 256 spilled without).
      constexpr int kDqCF = GridDq::kCF <= 8 ? GridDq::kCF : GridDq::kCF % 8 == 0 ? 4 : 6;
      static_assert(GridDq::kCF % kDqCF == 0, "whole chunks");
#pragma unroll 1
      for (int chunk = 0; chunk < GridDq::kCF / kDqCF; ++chunk) {
        const int c0 = dq_c0 + chunk * kDqCF * 8;
        Frag dq[GridDq::kRF][kDqCF];
        zero(dq);
        warp_gemm<Element, false, true, GridDq::kRF, kDqCF, kBlockN>(dq, ds_s, p_rows, dq_r0, k_s,
                                                                      k_rows, c0);
#pragma unroll
        for (int mi = 0; mi < GridDq::kRF; ++mi)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int r = dq_r0 + mi * 16 + g + 8 * hh;
#pragma unroll
            for (int ni = 0; ni < kDqCF; ++ni) {
              const int c = c0 + ni * 8 + 2 * t;
              *reinterpret_cast<float2*>(dq_s + r * C::kDqStride + c) =
                  make_float2(dq[mi][ni][2 * hh], dq[mi][ni][2 * hh + 1]);
            }
          }
      }
      int* sem = nullptr;
      int order = 0;
      if (bp.deterministic) {
        sem = ws.sems + (static_cast<int64_t>(h) * p.batch + b) * ws.m_blocks + m;
        if (tid == 0) {
          // The earlier key blocks that touch this query block add first.
          order = add_order<kBlockM, kBlockN>(mask, n_block, m);
          while (load_acquire(sem) != order) {
          }
        }
      }
      __syncthreads();  // dq_s complete (and, deterministic, this block's turn)
      const int rows = min(kBlockM, seq.len_q - row0);
      float* dq_g = ws.dq_accum + (ws_row0 + row0) * kD;
      constexpr int kVecPerRow = kD / 4;
#pragma unroll 2
      for (int i = tid; i < kBlockM * kVecPerRow; i += C::kThreads) {
        const int r = i / kVecPerRow, c = i % kVecPerRow * 4;
        if (r < rows) add_dq4(dq_g + r * kD + c, *reinterpret_cast<const float4*>(dq_s + r * C::kDqStride + c));
      }
      if (bp.deterministic) {
        __threadfence();
        __syncthreads();
        if (tid == 0) store_release(sem, order + 1);
      }
      __syncthreads();  // this step's Q, dO, P and dS are read: the next load may overwrite them
    }
  }

  cute::cp_async_wait<0>();  // a block that saw no query still has K and V in flight

  // dK (scaled: S was scale·Q·Kᵀ) and dV, rows of this block's keys only.
  store_key_rows<GridDk, Element>(dk_acc, bp.dk, bp.dk_stride, p, seq_kv, b, h_kv, key0, keys, p.scale,
                         warp, lane);
  store_key_rows<GridDv, Element>(dv_acc, bp.dv, bp.dv_stride, p, seq_kv, b, h_kv, key0, keys, 1.f, warp,
                         lane);
}

}  // namespace flashattn::fa2_bwd
