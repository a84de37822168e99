// K2's compute on CUDA cores, shared by K2 (kernel.cuh: global loads staged through registers)
// and K3 (fa3_sm90/kernel_fwd_sm90_tma_simt.cuh: TMA into a ring of 16-bit stages): the tile plan,
// the fp32 shared-memory tiles, the steps of one key block
//     S = Q·Kᵀ,  mask,  online softmax (running row max m and row sum l),  rescale O,  O += P·V
// and the epilogue. No tensor cores: every product is an fp32 FMA.
//
// Threads: 256 as a 16 x 16 grid, tx = tid % 16, ty = tid / 16. Thread (ty, tx) owns query rows
// ty*4 .. ty*4+3 of the tile for both S and O, so its rows' m and l stay in its registers, and a
// row's max and sum are shuffles among the 16 lanes of one half-warp.
//   S micro-tile: 4 rows x kSVec consecutive keys   tx*kSVec ..              (one K vector per d)
//   O micro-tile: 4 rows x kOGroups x kOVec columns tx*kOVec + g*16*kOVec .. (one V vector per g)
// Shared memory, all fp32 (sizes in Config):
//   q_s [D][Br]   Q transposed and pre-multiplied by scale*log2(e): 4 rows are one float4
//   k_s [D][Bc]   K transposed: a thread's kSVec keys are one vector
//   v_s [Bc][Dv]  V as stored
//   p_s [Bc][Br]  P transposed, row quads XOR-swizzled (store_probs)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "common/convert.cuh"
#include "common/mask.h"
#include "common/math_constants.h"

namespace flashattn::k2 {

inline constexpr int kThreads = 256;
inline constexpr int kRowsPerThread = 4;

struct TileShape {
  int block_q;  // Br, query rows per block
  int block_k;  // Bc, keys per iteration
};

// The one tile-size function of the family. Measured on H100 SXM, bf16, batch 4 x 16 heads,
// seqlen 2048, non-causal, in fp32 TFLOP/s (causal is within 1 %):
// - Br = 64: 16 row groups of 4 rows; 4 rows per thread is what one float4 of q_s / p_s holds.
// - Bc = 64 up to head_dim 192: a 4 x 4 S micro-tile costs 2 shared loads per 16 FMAs, against
//   2 per 8 for a 4 x 2 one. Bc = 32 measured 28.0 (192) and 28.8 (192x128); Bc = 64 gives
//   33.3 and 31.7. 192 with Bc = 64 needs 160 KB, just inside the 163 KB an sm_80 block may opt
//   into.
// - Bc = 32 for head_dim 256: Bc = 64 would need 208 KB. 30.2 TFLOP/s.
// - 64: 30.7, 96: 31.5, 128: 31.5. (K1 on 128: 18.0.)
// - Registers allow one block of 256 threads per SM from head dim 128 up. Capping them at 128
//   for two blocks per SM spilled on 128 and 192 and was not faster elsewhere (27.7-31.2).
// - Unroll depths (d loop of S, key loop of P·V): 32 / 8 was the best of 8/4, 4/4, 4/2, 2/2,
//   16/4, 16/8, 8/8, 32/8 and full/4; against 8/4 it gains 2 % (64), 5 % (128), 6 % (256) and
//   nothing on 96 (which alone lost 5 % at 8/8).
// Smem: 64 -> 64 KB, 96 -> 88 KB, 128 -> 112 KB, 192 -> 160 KB, 192x128 -> 144 KB, 256 -> 136 KB.
constexpr TileShape tile_shape(int head_dim, int /*head_dim_v*/) {
  return {64, head_dim <= 192 ? 64 : 32};
}

template <typename Element_, int kHeadDim_, int kHeadDimV_>
struct Config {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kHeadDimV = kHeadDimV_;
  static constexpr int kBlockQ = tile_shape(kHeadDim, kHeadDimV).block_q;
  static constexpr int kBlockK = tile_shape(kHeadDim, kHeadDimV).block_k;
  static constexpr int kSVec = kBlockK / 16;                 // keys per thread in S
  static constexpr int kOVec = kHeadDimV % 64 == 0 ? 4 : 2;  // 96 is not a multiple of 64
  static constexpr int kOGroups = kHeadDimV / (16 * kOVec);
  static constexpr int kOCols = kOGroups * kOVec;  // O columns per thread

  static constexpr int kQFloats = kHeadDim * kBlockQ;
  static constexpr int kKFloats = kHeadDim * kBlockK;
  static constexpr int kVFloats = kBlockK * kHeadDimV;
  static constexpr int kPFloats = kBlockK * kBlockQ;
  static constexpr int kSmemBytes =
      (kQFloats + kKFloats + kVFloats + kPFloats) * static_cast<int>(sizeof(float));

  static_assert(kBlockQ == 16 * kRowsPerThread, "16 row groups of 4 rows");
  static_assert(kSVec == 2 || kSVec == 4, "S keys per thread must be one float2/float4");
  static_assert(kHeadDimV % (16 * kOVec) == 0, "O columns must split evenly over 16 lanes");
  static_assert(kSmemBytes <= 160 * 1024, "must fit an sm_80 block (163 KB opt-in)");
};

// The four fp32 tiles, carved in order from one shared-memory buffer of C::kSmemBytes.
template <class C>
struct SmemTiles {
  float* q;
  float* k;
  float* v;
  float* p;
  __device__ __forceinline__ explicit SmemTiles(float* base)
      : q(base), k(q + C::kQFloats), v(k + C::kKFloats), p(v + C::kVFloats) {}
};

// ---- small device helpers ----------------------------------------------------------------------
// N consecutive floats of shared memory as one vector load (N * 4-byte aligned).
template <int N>
__device__ __forceinline__ void load_smem(const float* src, float (&v)[N]) {
  if constexpr (N == 4) {
    const float4 t = *reinterpret_cast<const float4*>(src);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else {
    static_assert(N == 2);
    const float2 t = *reinterpret_cast<const float2*>(src);
    v[0] = t.x, v[1] = t.y;
  }
}

// ---- global -> registers -> shared tile copy ---------------------------------------------------
// A kRows x kCols tile of 16-bit elements moves as 16-byte vectors (8 elements), each thread
// holding kVecs of them in registers between load() and store(). Rows at or past `valid_rows` read
// as zero (a ragged last key block must give V = 0, or 0 * garbage could be NaN).
// Transposed destinations ([col][row]) give the 32 lanes of a warp 32 consecutive rows, so each of
// the 8 scalar stores of a vector hits 32 distinct banks; row-major destinations give lanes
// consecutive vectors of a row (coalesced reads, two float4 stores each). K3 fills `regs` from a
// TMA-landed tile in shared memory instead of load(), by the same coords().
template <typename Element, int kRows, int kCols, bool kTransposed>
struct TileCopy {
  static constexpr int kVecsPerRow = kCols / 8;
  static constexpr int kVecs = kRows * kVecsPerRow / kThreads;
  static_assert(kCols % 8 == 0 && kRows * kVecsPerRow % kThreads == 0, "whole vectors per thread");

  uint4 regs[kVecs];

  __device__ static void coords(int i, int& row, int& col) {
    const int idx = static_cast<int>(threadIdx.x) + i * kThreads;
    row = kTransposed ? idx % kRows : idx / kVecsPerRow;
    col = (kTransposed ? idx / kRows : idx % kVecsPerRow) * 8;
  }

  __device__ void load(const Element* src, int64_t row_stride, int valid_rows) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      int row, col;
      coords(i, row, col);
      regs[i] = row < valid_rows ? *reinterpret_cast<const uint4*>(src + row * row_stride + col)
                                 : make_uint4(0, 0, 0, 0);
    }
  }

  __device__ void store(float* dst, float scale) const {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      int row, col;
      coords(i, row, col);
      const uint32_t words[4] = {regs[i].x, regs[i].y, regs[i].z, regs[i].w};
      float f[8];
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        f[2 * w] = to_float<Element>(static_cast<unsigned short>(words[w] & 0xffffu)) * scale;
        f[2 * w + 1] = to_float<Element>(static_cast<unsigned short>(words[w] >> 16)) * scale;
      }
      if constexpr (kTransposed) {
#pragma unroll
        for (int e = 0; e < 8; ++e) dst[(col + e) * kRows + row] = f[e];
      } else {
        float* d = dst + row * kCols + col;
        *reinterpret_cast<float4*>(d) = make_float4(f[0], f[1], f[2], f[3]);
        *reinterpret_cast<float4*>(d + 4) = make_float4(f[4], f[5], f[6], f[7]);
      }
    }
  }
};

// ---- the steps of one key block ----------------------------------------------------------------
// S (log2 units, since q_s carries scale*log2(e)) = Q·Kᵀ for this thread's 4 rows x kSVec keys.
template <class C>
__device__ __forceinline__ void compute_scores(const float* q_s, const float* k_s, int tx, int ty,
                                               float (&s)[kRowsPerThread][C::kSVec]) {
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
#pragma unroll
    for (int j = 0; j < C::kSVec; ++j) s[i][j] = 0.f;
  }
  // Unroll depths: see tile_shape.
#pragma unroll 32
  for (int d = 0; d < C::kHeadDim; ++d) {
    float q[kRowsPerThread], k[C::kSVec];
    load_smem(q_s + d * C::kBlockQ + ty * kRowsPerThread, q);
    load_smem(k_s + d * C::kBlockK + tx * C::kSVec, k);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
      for (int j = 0; j < C::kSVec; ++j) s[i][j] = fmaf(q[i], k[j], s[i][j]);
  }
}

// Keys a row may not see get S = -inf. Only where the block is not wholly visible to the tile's
// rows [row0, row_end) (mask edges, ragged last block); interior blocks skip the per-element test.
template <class C>
__device__ __forceinline__ void mask_scores(const Mask& mask, int row0, int row_end, int key0,
                                            int tx, int ty, float (&s)[kRowsPerThread][C::kSVec]) {
  if (mask.tile_all_visible(row0, row_end, key0, key0 + C::kBlockK)) return;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < C::kSVec; ++j)
      if (!mask.visible(row0 + ty * kRowsPerThread + i, key0 + tx * C::kSVec + j))
        s[i][j] = -INFINITY;
}

// Online softmax over one block. Turns s into P = 2^(s - m_new), rescales the O accumulator and
// the running sum by 2^(m_old - m_new). A row whose max is still -inf (nothing visible yet)
// subtracts 0 instead, so it gets P = 0 and alpha = 0 rather than (-inf) - (-inf) = NaN.
// l stays a per-thread partial sum (each lane's share of the row); the epilogue adds the lanes.
template <class C>
__device__ __forceinline__ void online_softmax(float (&s)[kRowsPerThread][C::kSVec],
                                               float (&m)[kRowsPerThread],
                                               float (&l)[kRowsPerThread],
                                               float (&o)[kRowsPerThread][C::kOCols]) {
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    float m_new = m[i];
#pragma unroll
    for (int j = 0; j < C::kSVec; ++j) m_new = fmaxf(m_new, s[i][j]);
#pragma unroll
    for (int lanes = 8; lanes > 0; lanes /= 2)  // the 16 lanes of this row's half-warp
      m_new = fmaxf(m_new, __shfl_xor_sync(~0u, m_new, lanes));
    const float m_sub = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = exp2_approx(m[i] - m_sub);
    m[i] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < C::kSVec; ++j) {
      s[i][j] = exp2_approx(s[i][j] - m_sub);
      sum += s[i][j];
    }
    l[i] = l[i] * alpha + sum;
#pragma unroll
    for (int c = 0; c < C::kOCols; ++c) o[i][c] *= alpha;
  }
}

// The swizzle of p_s: key `key`'s 4-row quad `quad` sits at quad ^ (writer's tx & 7). The 8 lanes
// of a float4 store phase (tx 0..7 or 8..15, one ty) then hit 8 distinct 16-byte bank groups; an
// unswizzled [Bc][64] layout would put all 8 in the same one.
template <class C>
__device__ __forceinline__ int p_offset(int key, int quad) {
  return key * C::kBlockQ + (quad ^ ((key / C::kSVec) & 7)) * kRowsPerThread;
}

template <class C>
__device__ __forceinline__ void store_probs(float* p_s, int tx, int ty,
                                            const float (&s)[kRowsPerThread][C::kSVec]) {
#pragma unroll
  for (int j = 0; j < C::kSVec; ++j) {
    *reinterpret_cast<float4*>(p_s + p_offset<C>(tx * C::kSVec + j, ty)) =
        make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
  }
}

// O += P·V for this thread's 4 rows x kOCols columns.
template <class C>
__device__ __forceinline__ void accumulate_pv(const float* p_s, const float* v_s, int tx, int ty,
                                              float (&o)[kRowsPerThread][C::kOCols]) {
  // Unroll depths: see tile_shape.
#pragma unroll 8
  for (int key = 0; key < C::kBlockK; ++key) {
    float p[kRowsPerThread];
    load_smem(p_s + p_offset<C>(key, ty), p);
#pragma unroll
    for (int g = 0; g < C::kOGroups; ++g) {
      float v[C::kOVec];
      load_smem(v_s + key * C::kHeadDimV + (g * 16 + tx) * C::kOVec, v);
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int w = 0; w < C::kOVec; ++w)
          o[i][g * C::kOVec + w] = fmaf(p[i], v[w], o[i][g * C::kOVec + w]);
    }
  }
}

// ---- one key block, and the epilogue ----------------------------------------------------------
// The steps of key block [key0, key0 + Bc) in order. t.k and t.v must hold the block with a
// barrier passed since they were written; the caller must pass a barrier before writing t.k, t.v
// or t.p again (the last step still reads them).
template <class C>
__device__ __forceinline__ void attend_block(const SmemTiles<C>& t, const Mask& mask, int row0,
                                             int row_end, int key0, int tx, int ty,
                                             float (&m)[kRowsPerThread], float (&l)[kRowsPerThread],
                                             float (&o)[kRowsPerThread][C::kOCols]) {
  float s[kRowsPerThread][C::kSVec];
  compute_scores<C>(t.q, t.k, tx, ty, s);
  mask_scores<C>(mask, row0, row_end, key0, tx, ty, s);
  online_softmax<C>(s, m, l, o);
  store_probs<C>(t.p, tx, ty, s);
  __syncthreads();
  accumulate_pv<C>(t.p, t.v, tx, ty, o);
}

// O /= l and LSE = m * ln 2 + ln l (m is in log2 units); l == 0 means the row saw no key: O = 0
// and LSE = -inf. `out` points at row 0 of this (sequence, head), lse[lse_offset] is row 0's LSE
// (lse null: not wanted); rows at or past len_q are not written.
template <class C>
__device__ __forceinline__ void store_output(const float (&m)[kRowsPerThread],
                                             const float (&l)[kRowsPerThread],
                                             const float (&o)[kRowsPerThread][C::kOCols],
                                             typename C::Element* out, int64_t row_stride,
                                             float* lse, int64_t lse_offset, int row0, int len_q,
                                             int tx, int ty) {
  using Element = typename C::Element;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    float sum = l[i];
#pragma unroll
    for (int lanes = 8; lanes > 0; lanes /= 2) sum += __shfl_xor_sync(~0u, sum, lanes);
    const int row = row0 + ty * kRowsPerThread + i;
    if (row >= len_q) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    Element* orow = out + row * row_stride;
#pragma unroll
    for (int g = 0; g < C::kOGroups; ++g) {
      const float* x = &o[i][g * C::kOVec];
      Element* dst = orow + (g * 16 + tx) * C::kOVec;
      if constexpr (C::kOVec == 4) {
        *reinterpret_cast<uint2*>(dst) = make_uint2(pack2<Element>(x[0] * inv, x[1] * inv),
                                                    pack2<Element>(x[2] * inv, x[3] * inv));
      } else {
        *reinterpret_cast<uint32_t*>(dst) = pack2<Element>(x[0] * inv, x[1] * inv);
      }
    }
    if (lse != nullptr && tx == 0) {
      lse[lse_offset + row] = sum > 0.f ? m[i] * kLn2 + logf(sum) : -INFINITY;
    }
  }
}

}  // namespace flashattn::k2
