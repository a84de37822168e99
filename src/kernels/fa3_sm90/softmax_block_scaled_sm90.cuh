// K8's online softmax: FP8 inputs with one descale per block of rows (ForwardParams::
// q/k/v_block_descale). A score block S_n = Q·K_nᵀ (raw e4m3 products) of row r is worth
//     S_n · scale_log2 · dq(r) · dk(n)        (log2 units)
// with dq(r) the descale of row r's query block and dk(n) key block n's, so each block's exponent
// is one FFMA per element with a per-(row, block) factor, as K7's is with a per-tile one: no extra
// GEMM and no extra pass over S. The running max is kept in those scaled units (blocks of
// different dk are not comparable raw).
//
// V's blocks have descales dv(n) too. P·V_n is accumulated into O as P_n·dv(n)/dv_max with dv_max
// the tile's largest dv (read once per tile): the factor is folded into P's exponent (the FFMA's
// addend), so P stays within e4m3's range (0, 2^kPOffset], and divided back out of the row sum (one
// multiply per row and block); O is multiplied by dv_max at the end.
#pragma once

#include <cmath>
#include <cute/tensor.hpp>

#include "common/exp2_poly.h"
#include "common/math_constants.h"
#include "common/sink.h"
#include "kernels/fa3_sm90/softmax_sm90.cuh"

namespace flashattn::fa3 {

// log2(x) and 1/x on the SFU, denormals flushed: no range fix-ups around the MUFU operation
// (the caller keeps x normal).
__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// kLateDescales: step() reads the block's descales itself instead of load_block() reading them
// before the block's scores are waited for. Read early, the loads are in flight under the GEMM but
// hold two registers through it; with Q in registers (d 256) the softmax then spilled 24 bytes.
// kFtzVFactors: a block's v factors by the SFU's flush-to-zero forms from one clamped ratio (see
// step()); otherwise by __log2f and __fdividef, with their range fix-ups.
template <int kRows, int kPOffset, bool kLateDescales = false, bool kFtzVFactors = false>
struct BlockScaledSoftmax {
  static constexpr float kSlack = kRescaleSlack - kPOffset;

  float m[kRows];          // reference max per row, log2 units (scale and descales applied)
  float l[kRows];          // partial row sums, in P's units (offset 2^kPOffset)
  float row_scale[kRows];  // scale_log2 · dq(row)
  float v_ref = 1.f;       // 1 / dv_max (kFtzVFactors) or dv_max, the tile's largest dv
  const float* k_blocks;   // dk(n), dv(n) of the tile's (sequence, KV head)
  const float* v_blocks;
  float dk = 1.f, dv = 1.f;  // key block's descales: read by load_block() (kLateDescales: step())
  int block = 0;             // kLateDescales: the block load_block() named

  __device__ __forceinline__ BlockScaledSoftmax() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) m[r] = -INFINITY, l[r] = 0.f;
  }

  // O's final factor dv_max. With kFtzVFactors only its inverse is held through the tile, and
  // dv_max comes back once at the end (exact for the pre-pass's powers of two, else within an
  // ulp of fp32).
  __device__ __forceinline__ void set_v_max(float vm) { v_ref = kFtzVFactors ? 1.f / vm : vm; }
  __device__ __forceinline__ float v_max() const { return kFtzVFactors ? 1.f / v_ref : v_ref; }

  // Reads key block n's descales; called before the block's scores are waited for, so that the
  // loads are in flight under the GEMM.
  __device__ __forceinline__ void load_block(int n) {
    if constexpr (kLateDescales) {
      block = n;
    } else {
      dk = k_blocks[n];
      dv = v_blocks[n];
    }
  }

  // One key block, as OnlineSoftmax::step (same contract for factor and the return value).
  template <class Frag>
  __device__ __forceinline__ bool step(Frag& s, float (&factor)[kRows], const SoftmaxOptions& opt) {
    // v_log2 = log2(dv/dv_max) <= 0 keeps P·dv/dv_max <= 2^kPOffset; v_inv = dv_max/dv.
    if constexpr (kLateDescales) dk = k_blocks[block], dv = v_blocks[block];
    float v_log2, v_inv;
    if constexpr (!kFtzVFactors) {
      v_log2 = __log2f(__fdividef(dv, v_ref));
      v_inv = __fdividef(v_ref, dv);
    } else {
      // rv = dv/dv_max in (0, 1], clamped to the smallest normal float so that the SFU's
      // flush-to-zero forms need no range fix-ups (__log2f's and __fdividef's: ~13 instructions
      // per block and thread, ncu at d 128). Nothing changes for ratios from 2^-126; below, the
      // block's P·rv is under e4m3's smallest value (0 in the GEMM) either way, and 1/rv stays
      // finite (a row sum of 0 times an infinite 1/rv was NaN).
      const float rv = fmaxf(dv * v_ref, 1.175494351e-38f);
      v_log2 = log2_approx(rv);
      v_inv = rcp_approx(rv);
    }
    bool moved = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float sc = row_scale[r] * dk;
      float part[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) part[c] = -INFINITY;
#pragma unroll
      for (int j = 0; j < size<1>(s); ++j) part[j % kChains] = fmaxf(part[j % kChains], s(r, j));
      float mx = quad_max(merge_chains(part, [](float a, float b) { return fmaxf(a, b); }));
      mx = fmaxf(m[r], mx * sc);  // sc > 0; -inf stays -inf
      if (kSlack > 0.f && opt.conditional_rescale && mx - m[r] <= kSlack) mx = m[r];
      const float ref = mx == -INFINITY ? 0.f : mx;
      const float bias = kPOffset - ref + v_log2;
      factor[r] = mx == m[r] ? 1.f : exp2_approx(m[r] - ref);
      moved |= mx != m[r];
      m[r] = mx;
#pragma unroll
      for (int c = 0; c < kChains; ++c) part[c] = 0.f;
#pragma unroll
      for (int j = 0; j < size<1>(s); ++j) {
        const float p = exp2_approx(fmaf(s(r, j), sc, bias));
        s(r, j) = p;
        part[j % kChains] += p;
      }
      l[r] = fmaf(l[r], factor[r], merge_chains(part, [](float a, float b) { return a + b; }) * v_inv);
    }
    return __any_sync(0xffffffffu, moved);
  }

  // As OnlineSoftmax::finalize; m is already in scaled log2 units.
  __device__ __forceinline__ void finalize(float (&inv)[kRows], float (&lse)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      finalize_row(l[r], [&] { return m[r] - kPOffset; }, inv[r], lse[r]);
    }
  }

  __device__ __forceinline__ void finalize_with_sink(float sink, float (&inv)[kRows],
                                                     float (&lse)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const SinkNorm n = normalize_with_sink(quad_sum(l[r]), m[r] - kPOffset, sink);
      inv[r] = n.inv;
      lse[r] = n.lse;
    }
  }
};

}  // namespace flashattn::fa3
