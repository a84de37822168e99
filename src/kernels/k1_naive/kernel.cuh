// K1, the naive baseline: three launches with the score matrix S materialised in device memory.
//   1. scores_kernel   S = scale * Q·Kᵀ in fp32, -inf where the mask hides the pair
//   2. softmax_kernel  P = softmax(S) row by row, in place; LSE
//   3. pv_kernel       O = P·V, rounded to the element type
// Both GEMMs share one shared-memory tiled SIMT GEMM (gemm_tile). Values are fp32 from the load on;
// only O is rounded. K1 exists to be obviously right and to be the yardstick for K2 and later.
// Included by launch.cu only: softmax_kernel is not a template, so a second including TU would
// define it twice.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/problem.h"
#include "common/convert.cuh"

namespace flashattn::k1 {

struct TileShape {
  int m, n, k;  // output tile m x n, reduction chunk k
  int threads;
};

// The one tile-size function of the family. A 64 x 64 output tile with a 4 x 4 micro-tile per
// thread (256 threads as 16 x 16) and 32-deep reduction chunks: every thread then moves exactly one
// 16-byte vector of each 16-bit operand per chunk (64 * 32 / 256 = 8 elements), every supported
// head dim (a multiple of 32) is whole chunks, and the two fp32 operand tiles (17 KB of static
// shared memory) leave room for several blocks per SM. Not tuned further: K1 is the baseline.
constexpr TileShape tile_shape() {
  return {64, 64, 32, 256};
}

inline constexpr int kBlockM = tile_shape().m;
inline constexpr int kBlockN = tile_shape().n;
inline constexpr int kBlockK = tile_shape().k;
inline constexpr int kThreads = tile_shape().threads;
// A tiles are row-major [m][k] padded to 36 floats: 16-byte aligned rows for float4 reads, and the
// 8-float stores of a 16-bit vector land 4 banks apart from row to row (no conflicts).
inline constexpr int kLdA = kBlockK + 4;
inline constexpr int kSoftmaxRowsPerBlock = kThreads / 32;  // one warp per row

static_assert(kThreads == 256 && kBlockM == 64 && kBlockN == 64 && kBlockK == 32,
              "the loaders and the 16 x 16 thread grid below assume this shape");

// ---- element conversion ------------------------------------------------------------------------
// Eight elements at `src` (16-byte aligned) as floats; zeros when !valid.
template <typename Element>
__device__ __forceinline__ void load8(const Element* src, bool valid, float (&out)[8]) {
  uint4 raw = make_uint4(0, 0, 0, 0);
  if (valid) raw = *reinterpret_cast<const uint4*>(src);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = to_float<Element>(static_cast<unsigned short>(words[i] & 0xffffu));
    out[2 * i + 1] = to_float<Element>(static_cast<unsigned short>(words[i] >> 16));
  }
}

// ---- the shared GEMM step ----------------------------------------------------------------------
// acc (rows ty*4+i, columns tx*4+j) += A[64][kBlockK] · B[kBlockK][64], both fp32 in shared memory.
__device__ __forceinline__ void gemm_tile(const float (&a)[kBlockM][kLdA],
                                          const float (&b)[kBlockK][kBlockN], int tx, int ty,
                                          float (&acc)[4][4]) {
#pragma unroll
  for (int k0 = 0; k0 < kBlockK; k0 += 4) {
    float4 a4[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a4[i] = *reinterpret_cast<const float4*>(&a[ty * 4 + i][k0]);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const float4 b4 = *reinterpret_cast<const float4*>(&b[k0 + kk][tx * 4]);
      const float bv[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float av = kk == 0 ? a4[i].x : kk == 1 ? a4[i].y : kk == 2 ? a4[i].z : a4[i].w;
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av, bv[j], acc[i][j]);
      }
    }
  }
}

// ---- 1. S = scale * Q·Kᵀ -----------------------------------------------------------------------
// Grid (batch * heads_q, query tiles, key tiles). A tile no row of which sees any of its keys
// skips the GEMM and only writes -inf.
template <typename Element>
__global__ void __launch_bounds__(kThreads) scores_kernel(const Problem p, float* __restrict__ s) {
  __shared__ __align__(16) float q_s[kBlockM][kLdA];     // Q rows, [row][d]
  __shared__ __align__(16) float k_s[kBlockK][kBlockN];  // K transposed, [d][key]
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int bh = blockIdx.x, b = bh / p.heads_q, h = bh % p.heads_q;
  const int row0 = blockIdx.y * kBlockM, key0 = blockIdx.z * kBlockN;
  const int rows = min(kBlockM, p.seqlen_q - row0), keys = min(kBlockN, p.seqlen_k - key0);

  float acc[4][4] = {};
  int key_lo = 0, key_hi = 0;
  p.mask.key_range(row0, row0 + rows, key_lo, key_hi);
  if (key_lo < key0 + keys && key_hi > key0) {
    const Element* q = static_cast<const Element*>(p.q) + b * p.q_stride[0] + h * p.q_stride[2] +
                       row0 * p.q_stride[1];
    const Element* k = static_cast<const Element*>(p.k) + b * p.k_stride[0] +
                       (h / p.group) * p.k_stride[2] + key0 * p.k_stride[1];
    // Q: 4 lanes per row, each 8 consecutive d (coalesced 64-byte rows).
    const int q_row = tid / 4, q_col = (tid % 4) * 8;
    // K: lanes on consecutive keys, so the transposed scalar stores hit 32 distinct banks.
    const int k_row = tid % kBlockN, k_col = (tid / kBlockN) * 8;
    for (int d0 = 0; d0 < p.head_dim; d0 += kBlockK) {
      float v[8];
      load8(q + q_row * p.q_stride[1] + d0 + q_col, q_row < rows, v);
      *reinterpret_cast<float4*>(&q_s[q_row][q_col]) = make_float4(v[0], v[1], v[2], v[3]);
      *reinterpret_cast<float4*>(&q_s[q_row][q_col + 4]) = make_float4(v[4], v[5], v[6], v[7]);
      load8(k + k_row * p.k_stride[1] + d0 + k_col, k_row < keys, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) k_s[k_col + e][k_row] = v[e];
      __syncthreads();
      gemm_tile(q_s, k_s, tx, ty, acc);
      __syncthreads();
    }
  }

  float* out = s + (static_cast<int64_t>(bh) * p.seqlen_q + row0) * p.seqlen_k + key0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = tx * 4 + j;
      if (c >= keys) continue;
      out[r * static_cast<int64_t>(p.seqlen_k) + c] =
          p.mask.visible(row0 + r, key0 + c) ? acc[i][j] * p.scale : -INFINITY;
    }
  }
}

// ---- 2. row softmax, in place ------------------------------------------------------------------
// One warp per row of S (rows are (batch, head_q, query) in S's own order, which is also LSE's).
// Pass 1 keeps a running max and sum per lane and merges them across the warp; pass 2 writes P.
// -inf entries (masked) are skipped, so a row that sees nothing ends with max = -inf: its P is
// all 0 and its LSE -inf, never NaN.
__global__ void __launch_bounds__(kThreads)
    softmax_kernel(float* __restrict__ s, float* __restrict__ lse, int64_t num_rows, int seqlen_k) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kSoftmaxRowsPerBlock + threadIdx.x / 32;
  if (row >= num_rows) return;
  float* srow = s + row * seqlen_k;

  float m = -INFINITY, l = 0.f;
  for (int j = lane; j < seqlen_k; j += 32) {
    const float x = srow[j];
    if (x == -INFINITY) continue;
    if (x > m) {
      l *= exp2f((m - x) * kLog2e);  // m = -inf: l is 0 and stays 0
      m = x;
    }
    l += exp2f((x - m) * kLog2e);
  }
  float row_max = m;
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    row_max = fmaxf(row_max, __shfl_xor_sync(~0u, row_max, off));
  float row_sum = m == -INFINITY ? 0.f : l * exp2f((m - row_max) * kLog2e);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) row_sum += __shfl_xor_sync(~0u, row_sum, off);

  const bool empty = row_max == -INFINITY;
  const float inv_sum = empty ? 0.f : 1.f / row_sum;
  for (int j = lane; j < seqlen_k; j += 32) {
    srow[j] = empty ? 0.f : exp2f((srow[j] - row_max) * kLog2e) * inv_sum;
  }
  if (lse != nullptr && lane == 0) lse[row] = empty ? -INFINITY : row_max + logf(row_sum);
}

// ---- 3. O = P·V --------------------------------------------------------------------------------
// Grid (batch * heads_q, query tiles, head_dim_v tiles). Key chunks outside the tile's mask range
// hold only zeros of P and are skipped. With seqlen_k == 0 (no P at all) it writes zeros.
template <typename Element>
__global__ void __launch_bounds__(kThreads)
    pv_kernel(const Problem p, const float* __restrict__ s) {
  __shared__ __align__(16) float p_s[kBlockM][kLdA];     // P rows, [row][key]
  __shared__ __align__(16) float v_s[kBlockK][kBlockN];  // V, [key][column]
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int bh = blockIdx.x, b = bh / p.heads_q, h = bh % p.heads_q;
  const int row0 = blockIdx.y * kBlockM, col0 = blockIdx.z * kBlockN;
  const int rows = min(kBlockM, p.seqlen_q - row0);

  float acc[4][4] = {};
  int key_lo = 0, key_hi = 0;
  p.mask.key_range(row0, row0 + rows, key_lo, key_hi);
  const float* prow = s + (static_cast<int64_t>(bh) * p.seqlen_q + row0) * p.seqlen_k;
  const Element* v =
      static_cast<const Element*>(p.v) + b * p.v_stride[0] + (h / p.group) * p.v_stride[2] + col0;
  // P: lanes on consecutive keys of a row (coalesced 128-byte reads); 8 rows per pass.
  const int p_key = tid % kBlockK, p_row = tid / kBlockK;
  // V: 8 lanes per key row, each 8 consecutive columns.
  const int v_key = tid / 8, v_col = (tid % 8) * 8;
  for (int kc = key_lo - key_lo % kBlockK; kc < key_hi; kc += kBlockK) {
#pragma unroll
    for (int r = p_row; r < kBlockM; r += kThreads / kBlockK) {
      const bool valid = r < rows && kc + p_key < p.seqlen_k;
      p_s[r][p_key] = valid ? prow[r * static_cast<int64_t>(p.seqlen_k) + kc + p_key] : 0.f;
    }
    float vv[8];
    load8(v + (kc + v_key) * p.v_stride[1] + v_col,
          kc + v_key < p.seqlen_k && col0 + v_col < p.head_dim_v, vv);
    *reinterpret_cast<float4*>(&v_s[v_key][v_col]) = make_float4(vv[0], vv[1], vv[2], vv[3]);
    *reinterpret_cast<float4*>(&v_s[v_key][v_col + 4]) = make_float4(vv[4], vv[5], vv[6], vv[7]);
    __syncthreads();
    gemm_tile(p_s, v_s, tx, ty, acc);
    __syncthreads();
  }

  // head_dim_v is a multiple of 32, so a thread's 4 columns are all in range or all out.
  const int c = col0 + tx * 4;
  if (c >= p.head_dim_v) return;
  Element* o = static_cast<Element*>(p.o) + b * p.o_stride[0] + h * p.o_stride[2] + c;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty * 4 + i;
    if (r >= rows) continue;
    const uint2 packed =
        make_uint2(pack2<Element>(acc[i][0], acc[i][1]), pack2<Element>(acc[i][2], acc[i][3]));
    *reinterpret_cast<uint2*>(o + (row0 + r) * p.o_stride[1]) = packed;
  }
}

}  // namespace flashattn::k1
