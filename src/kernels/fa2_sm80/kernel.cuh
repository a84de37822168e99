// FA2: the FlashAttention-2 forward on tensor cores (mma.sync, cp.async, ldmatrix), sm_80 and up.
//
// One thread block owns one (query tile, head_q, sequence). It loads its Q tile once, then walks
// the key blocks the mask allows, from the last to the first, and for each block runs
//     S = Q·Kᵀ (mma.sync),  mask,  online softmax (rescale O),  O += P·V (mma.sync)
// with S and P in registers. Warps tile along M: warp w owns query rows
// [w·kMFrags·16, (w+1)·kMFrags·16) of the tile for S and O alike, so a row's max and sum are quad
// shuffles. K and V move through cp.async (tile_size() picks double buffering or FA2's split
// overlap); the epilogue stages O through shared memory for 16-byte stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cute/arch/copy_sm80.hpp>

#include "common/problem.h"
#include "common/convert.cuh"
#include "common/mask.h"
#include "common/sequence_view.cuh"
#include "kernels/fa2_sm80/smem_tile.cuh"
#include "kernels/fa2_sm80/softmax.cuh"
#include "kernels/fa2_sm80/tile_size.h"
#include "kernels/fa2_sm80/warp_mma_sm80.cuh"

namespace flashattn::fa2 {

// The largest dynamic shared memory an sm_80 block may opt into (163 KB).
inline constexpr int kSm80SmemOptin = 163 * 1024;

template <typename Element_, int kHeadDim_, int kHeadDimV_>
struct Config {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr TileSize kTile = tile_size(kHeadDim, kHeadDimV);
  static constexpr int kBlockM = kTile.block_m;
  static constexpr int kBlockN = kTile.block_n;
  static constexpr int kWarps = kTile.warps;
  static constexpr int kStages = kTile.stages;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMFrags = kBlockM / (16 * kWarps);  // m16 tiles per warp
  // Keys per S = Q·Kᵀ ... P·V step. The step is device-side only (grid, threads and shared
  // memory do not depend on it), so the sm_80 SASS may take a shorter one where the longer spills.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static constexpr int kStepN = kTile.step_n_sm80;
#else
  static constexpr int kStepN = kTile.step_n;
#endif
  static constexpr int kNFrags = kStepN / 8;     // 8-key tiles of S
  static constexpr int kOFrags = kHeadDimV / 8;  // 8-column tiles of O
  // Two blocks of 4 warps per SM: caps registers at 255 per thread, what one block of 8 gets too.
  static constexpr int kMinBlocksPerSm = kWarps == 4 ? 2 : 1;

  using QTile = SmemTile<kBlockM, kHeadDim>;  // also stages O (Q's layout, first kHeadDimV columns)
  using KTile = SmemTile<kBlockN, kHeadDim>;
  using VTile = SmemTile<kBlockN, kHeadDimV>;
  static constexpr int kSmemBytes = (QTile::kElems + kStages * (KTile::kElems + VTile::kElems)) *
                                    static_cast<int>(sizeof(Element));

  static_assert(kBlockM % (16 * kWarps) == 0 && kStepN % 16 == 0 && kBlockN % kStepN == 0,
                "whole m16 / k16 tiles, whole steps per key block");
  static_assert(kHeadDim % 16 == 0 && kHeadDimV % 16 == 0 && kHeadDimV <= kHeadDim,
                "k16 steps; O staged in Q's place");
  static_assert(kStages == 1 || kStages == 2, "single or double K/V buffers");
  static_assert(kStages == 2 || kStepN == kBlockN, "one stage reloads K during the block's step");
  static_assert(kSmemBytes <= kSm80SmemOptin, "every tile plan must run on sm_80");
};

// O (already divided by l) rounded to Element, staged in the warp's own rows of the Q tile, then
// written with 16-byte stores of whole rows; rows past the sequence end are skipped. Warp-private
// rows make __syncwarp enough: no other warp reads or writes them.
template <class C>
__device__ __forceinline__ void store_output(const typename C::Element* q_s_const,
                                             const Frag (&o)[C::kMFrags][C::kOFrags],
                                             typename C::Element* out, int64_t row_stride,
                                             int warp_row0, int valid_rows, int lane) {
  using Element = typename C::Element;
  using QTile = typename C::QTile;
  Element* stage = const_cast<Element*>(q_s_const);
  const int g = lane / 4, t = lane % 4;
  __syncwarp();  // the warp's last ldmatrix of these Q rows is done
#pragma unroll
  for (int mi = 0; mi < C::kMFrags; ++mi)
#pragma unroll
    for (int di = 0; di < C::kOFrags; ++di)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = warp_row0 + mi * 16 + g + 8 * h;
        *reinterpret_cast<uint32_t*>(stage + QTile::offset(row, di * 8 + 2 * t)) =
            pack2<Element>(o[mi][di][2 * h], o[mi][di][2 * h + 1]);
      }
  __syncwarp();
  constexpr int kChunksPerRow = C::kHeadDimV / 8;
  constexpr int kChunks = C::kMFrags * 16 * kChunksPerRow;
  static_assert(kChunks % 32 == 0, "whole chunks per lane");
#pragma unroll
  for (int i = 0; i < kChunks / 32; ++i) {
    const int idx = lane + 32 * i;
    const int row = warp_row0 + idx / kChunksPerRow;
    const int col = idx % kChunksPerRow * 8;
    if (row < valid_rows) {
      *reinterpret_cast<uint4*>(out + row * row_stride + col) =
          *reinterpret_cast<const uint4*>(stage + QTile::offset(row, col));
    }
  }
}

// What a thread block owns: query tile row0 of head h of sequence b. With a mask, query tiles
// are counted down from the last, so that under a causal mask the longest tiles start first and
// the short ones fill the tail; without one, the tiles of one (sequence, head) are adjacent, as
// in FA2's grid. With the mask's order on a dense problem, the 264 blocks resident at seqlen 1024
// (hdim 128) belong to 256 different heads, so no two of them share K/V in L2. Measured (H100,
// against the previous run, so within ~2%): d256 dense s512 / s1024 / s2048 +4.7 / +3.5 / +2.7%
// (the order is d256's only change), d128 about +2% together with the split prologue, d64 -1%
// (noise). %ctaid is read through
// asm volatile so that the epilogue's second call reads it again: with one read, ptxas kept b, h
// and row0 (and what derives from them) live through the key loop, registers the 128 x 64 tiles
// do not have.
struct BlockCoords {
  int row0, b, h;
};
template <int kBlockM>
__device__ __forceinline__ BlockCoords block_coords(const Problem& p) {
  unsigned block;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block));
  const int bh_count = p.batch * p.heads_q;
  const int m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;
  int m, bh;
  if (p.mask.left < 0 && p.mask.right < 0) {
    // No mask: every tile does the same work. The query tiles of one (sequence, head) run side by
    // side and share its K/V in L2.
    m = static_cast<int>(block) % m_blocks;
    bh = static_cast<int>(block) / m_blocks;
  } else {
    // Every (sequence, head) of a query tile before the next tile, from the last tile down: under
    // a causal mask the longest tiles start first and the short ones fill the tail.
    m = static_cast<int>(block) / bh_count;
    bh = static_cast<int>(block) % bh_count;
  }
  return {(m_blocks - 1 - m) * kBlockM, bh / p.heads_q, bh % p.heads_q};
}
// threadIdx.x, read again for the same reason.
__device__ __forceinline__ int thread_index() {
  unsigned tid;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid));
  return static_cast<int>(tid);
}

// 1-D grid over (query tile, sequence, head); block_coords() gives the order.
template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocksPerSm) fwd_kernel(const Problem p) {
  using Element = typename C::Element;
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kStepN = C::kStepN;
  constexpr int kStages = C::kStages;
  constexpr int kMFrags = C::kMFrags, kNFrags = C::kNFrags, kOFrags = C::kOFrags;
  using QTile = typename C::QTile;
  using KTile = typename C::KTile;
  using VTile = typename C::VTile;

  extern __shared__ uint4 smem[];  // 16-byte aligned: cp.async and ldmatrix move 16-byte chunks
  Element* q_s = reinterpret_cast<Element*>(smem);
  Element* k_s = q_s + QTile::kElems;
  Element* v_s = k_s + kStages * KTile::kElems;

  const int tid = thread_index(), lane = tid % 32, warp = tid / 32;
  const BlockCoords coords = block_coords<kBlockM>(p);
  const int b = coords.b, h = coords.h, row0 = coords.row0;
  const SequenceView seq = sequence_view(p, b, h, h / p.group);
  if (row0 >= seq.len_q) return;  // varlen: this sequence is shorter than the longest
  const int rows = min(kBlockM, seq.len_q - row0);
  Mask mask = p.mask;  // bottom-right aligned on this sequence's own lengths
  mask.seqlen_q = seq.len_q;
  mask.seqlen_k = seq.len_k;

  const Element* q = static_cast<const Element*>(p.q) + seq.q_offset + row0 * p.q_stride[1];
  const Element* k = static_cast<const Element*>(p.k) + seq.k_offset;
  const Element* v = static_cast<const Element*>(p.v) + seq.v_offset;
  // Only the last key block can be ragged, and it is loaded first: every `next` block is whole,
  // and passing kBlockN folds away the row predicates and pointer clamps in the key loop.
  const auto load_k = [&](int buf, int key0, int valid_rows) {
    copy_tile_async<Element, kBlockN, C::kHeadDim, C::kThreads>(
        k_s + buf * KTile::kElems, k + key0 * p.k_stride[1], p.k_stride[1], valid_rows, tid);
  };
  const auto load_v = [&](int buf, int key0, int valid_rows) {
    copy_tile_async<Element, kBlockN, C::kHeadDimV, C::kThreads>(
        v_s + buf * VTile::kElems, v + key0 * p.v_stride[1], p.v_stride[1], valid_rows, tid);
  };

  // Key blocks are aligned to kBlockN from key 0, so interior blocks of a causal or window mask
  // pass tile_all_visible and skip element masking.
  int key_lo = 0, key_hi = 0;
  mask.key_range(row0, row0 + rows, key_lo, key_hi);
  const int n_first = key_lo / kBlockN;
  const int n_end = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN : n_first;
  const int num_blocks = n_end - n_first;

  // Blocks of keys [key0, key0 + kBlockN) with full_lo <= key0 and key0 + kBlockN <= full_hi are
  // visible to every row of the tile (Mask::tile_all_visible as two compares) and skip element
  // masking. diag0: the diagonal of the thread's first row, less its first key column 2t.
  const int full_lo = mask.key_begin(row0 + rows - 1), full_hi = mask.key_end(row0);
  const int diag0 = mask.diagonal(row0 + warp * kMFrags * 16 + lane / 4) - 2 * (lane % 4);

  // A negative softmax scale flips the sign of S so that the running max stays a max.
  const bool negate = p.scale_log2 < 0.f;
  const float scale_log2 = fabsf(p.scale_log2);
  const int warp_row0 = warp * kMFrags * 16;

  Frag o[kMFrags][kOFrags];
#pragma unroll
  for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
    for (int di = 0; di < kOFrags; ++di)
      o[mi][di][0] = o[mi][di][1] = o[mi][di][2] = o[mi][di][3] = 0.f;
  OnlineSoftmax<kMFrags> softmax;
  const LaneOffsets<QTile> q_offsets = a_offsets<QTile>(lane);
  const LaneOffsets<KTile> k_offsets = b_nk_offsets<KTile>(lane);
  const LaneOffsets<VTile> v_offsets = b_kn_offsets<VTile>(lane);

  if (num_blocks > 0) {
    // Q and K_0 in one group, V_0 (two stages) in the next: S_0 = Q·K_0ᵀ and its softmax start
    // while V_0 is still in flight, as in FA2 (one more barrier, in block 0 only). It also moved
    // ptxas's allocation so that d128 in one 64-key step fits 255 registers on sm_90 (tile_size).
    copy_tile_async<Element, kBlockM, C::kHeadDim, C::kThreads>(q_s, q, p.q_stride[1], rows, tid);
    load_k(0, (n_end - 1) * kBlockN, seq.len_k - (n_end - 1) * kBlockN);
    cute::cp_async_fence();
    if constexpr (kStages == 2) {
      load_v(0, (n_end - 1) * kBlockN, seq.len_k - (n_end - 1) * kBlockN);
      cute::cp_async_fence();
    }
  }
  // The threads' own source chunks of the last block loaded (two stages; stepped down per block).
  const Element* k_next =
      k + (n_end - 1) * kBlockN * p.k_stride[1] +
      CopyPlan<kBlockN, C::kHeadDim, C::kThreads>::src_offset(p.k_stride[1], tid);
  const Element* v_next =
      v + (n_end - 1) * kBlockN * p.v_stride[1] +
      CopyPlan<kBlockN, C::kHeadDimV, C::kThreads>::src_offset(p.v_stride[1], tid);
  // Blocks from the last down: the ragged end and the causal diagonal come first.
  for (int i = 0; i < num_blocks; ++i) {
    const int key0 = (n_end - 1 - i) * kBlockN;
    const int next_key0 = key0 - kBlockN;
    const bool has_next = i + 1 < num_blocks;
    const int buf = kStages == 2 ? i % 2 : 0;
    // Two stages: one commit group per block (K_i and V_i, one barrier per block; block 0 has
    // two, see the prologue), and block i+1 is loaded at the top of block i, where only O is
    // live: issued after the softmax (S and O live), the V copies' 64-bit address arithmetic cost
    // the registers the 128 x 64 tiles lack.
    // One stage: K_i in flight here.
    if constexpr (kStages == 2) {
      if (i == 0) {
        cute::cp_async_wait<1>();  // Q and K_0 landed (V_0 may not have)
      } else {
        cute::cp_async_wait<0>();  // K_i and V_i landed
      }
      __syncthreads();  // ... for every thread; and block i-1 is done with buffer buf^1
      if (has_next) {
        k_next -= kBlockN * p.k_stride[1];
        v_next -= kBlockN * p.v_stride[1];
        copy_whole_tile_async<Element, kBlockN, C::kHeadDim, C::kThreads>(
            k_s + (buf ^ 1) * KTile::kElems, k_next, p.k_stride[1], tid);
        copy_whole_tile_async<Element, kBlockN, C::kHeadDimV, C::kThreads>(
            v_s + (buf ^ 1) * VTile::kElems, v_next, p.v_stride[1], tid);
      }
    } else {
      cute::cp_async_wait<0>();  // K_i landed
      __syncthreads();           // ... for every thread; and block i-1 is done with V
      load_v(0, key0, seq.len_k - key0);
    }
    cute::cp_async_fence();

    // The block's keys in steps of kStepN under the one barrier above: S of a step is what must
    // fit in registers beside O, the barrier and copy issue are paid once per kBlockN keys.
#pragma unroll 1
    for (int step = 0; step < kBlockN / kStepN; ++step) {
      const int skey0 = key0 + step * kStepN;
      Frag s[kMFrags][kNFrags];
#pragma unroll
      for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNFrags; ++ni)
          s[mi][ni][0] = s[mi][ni][1] = s[mi][ni][2] = s[mi][ni][3] = 0.f;
      // Rows step·kStepN.. of a swizzled tile: whole 8-row groups, so a plain offset per panel.
      gemm_qk<Element, QTile, KTile, kMFrags, kNFrags, C::kHeadDim>(
          s, q_s, q_offsets, k_s + buf * KTile::kElems + step * kStepN * KTile::kPanel, k_offsets,
          warp_row0);
      if (p.has_softcap()) {  // t = tanh(S · softcap_scale); the softmax's factor is softcap·log2e
#pragma unroll
        for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
          for (int ni = 0; ni < kNFrags; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              s[mi][ni][e] = tanh_accurate(s[mi][ni][e] * p.softcap_scale);
            }
      } else if (negate) {
#pragma unroll
        for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
          for (int ni = 0; ni < kNFrags; ++ni)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mi][ni][e] = -s[mi][ni][e];
      }
      // Element masking only where the step is not wholly visible (mask edges, ragged end).
      if (skey0 < full_lo || skey0 + kStepN > full_hi) {
        apply_mask(s, p.mask, skey0 - diag0, seq.len_k - skey0 - 2 * (lane % 4));
      }

      if constexpr (kStages == 2) {
        softmax.template update<C::kTile.lazy_rescale>(s, o, scale_log2);
      } else {
        cute::cp_async_wait<0>();  // V_i landed
        __syncthreads();           // ... and every warp is done reading K_i
        if (has_next) load_k(0, next_key0, kBlockN);
        cute::cp_async_fence();
        softmax.template update<C::kTile.lazy_rescale>(s, o, scale_log2);
      }

      uint32_t pf[kMFrags][kNFrags / 2][4];
      convert_p<Element>(s, pf);
      if (kStages == 2 && i == 0 && step == 0) {
        cute::cp_async_wait<1>();  // V_0 landed (only block 1's group may be in flight)
        __syncthreads();           // ... for every thread
      }
      gemm_pv<Element, VTile, kMFrags, kNFrags, kOFrags>(
          o, pf, v_s + buf * VTile::kElems + step * kStepN * VTile::kPanel, v_offsets);
    }
  }

  // Everything the epilogue needs besides O, l, m is recomputed rather than kept live through the
  // key loop (registers).
  const BlockCoords out_coords = block_coords<kBlockM>(p);
  float lse[kMFrags][2];
  if (p.sinks != nullptr) {
    softmax.finalize(o, scale_log2, lse, true, p.sinks[out_coords.h]);
  } else {
    softmax.finalize(o, scale_log2, lse);
  }
  const SequenceView out_seq = sequence_view(p, out_coords.b, out_coords.h, 0);
  const int out_row0 = out_coords.row0, out_rows = min(kBlockM, out_seq.len_q - out_row0);
  const int out_lane = thread_index() % 32, out_warp_row0 = thread_index() / 32 * kMFrags * 16;
  Element* out = static_cast<Element*>(p.o) + out_seq.o_offset + out_row0 * p.o_stride[1];
  store_output<C>(q_s, o, out, p.o_stride[1], out_warp_row0, out_rows, out_lane);
  if (p.lse != nullptr && out_lane % 4 == 0) {
    float* lse_out = p.lse + out_seq.lse_offset + out_row0;
#pragma unroll
    for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int row = out_warp_row0 + mi * 16 + out_lane / 4 + 8 * hh;
        if (row < out_rows) lse_out[row] = lse[mi][hh];
      }
  }
}

}  // namespace flashattn::fa2
