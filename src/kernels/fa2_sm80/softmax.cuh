// Masking and the online softmax on mma.sync accumulator fragments.
//
// A thread holds two rows of each of its m16 tiles (g and g+8, lane = 4·g + t) and, of each row,
// the columns 2t, 2t+1 of every 8-column tile. The four lanes of a quad (same g) share a row, so
// a row's max is two xor-shuffles (1, 2) and never touches shared memory. The row sum l stays a
// per-thread partial until the end (one quad reduction, in finalize()).
#pragma once

#include <climits>
#include <cmath>

#include "common/convert.cuh"
#include "common/mask.h"
#include "common/math_constants.h"
#include "common/sink.h"
#include "kernels/fa2_sm80/warp_mma_sm80.cuh"

namespace flashattn::fa2 {


// Sets S to -inf where mask hides (row, key). Per row the visible keys are one interval of the
// shared Mask: key - diagonal(row) in [lo, hi] (lo = -left, hi = right; unbounded when -1) and
// key < seqlen_k. rel0 = key0 + 2t - diagonal(row of the thread's first m16 tile, + g), computed
// per key block by the caller, so every per-row bound is rel0 minus a compile-time constant:
// with per-row [key_begin, key_end) instead, ptxas hoisted 2 x 2 x kMFrags bounds out of the key
// loop and kept them live (registers the 128 x 64 tile did not have). lo, hi come from the
// kernel parameters (uniform registers); keys_left = seqlen_k - key0 - 2t.
template <int kMFrags, int kNFrags>
__device__ __forceinline__ void apply_mask(Frag (&s)[kMFrags][kNFrags], const Mask& mask, int rel0,
                                           int keys_left) {
  const int lo = mask.left < 0 ? INT_MIN : -mask.left;
  const int hi = mask.right < 0 ? INT_MAX : mask.right;
#pragma unroll
  for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rel_row = rel0 - mi * 16 - 8 * h;
#pragma unroll
      for (int ni = 0; ni < kNFrags; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int rel = rel_row + ni * 8 + e;
          if (rel < lo || rel > hi || ni * 8 + e >= keys_left) s[mi][ni][2 * h + e] = -INFINITY;
        }
    }
}

// Running max m (in raw score units) and partial sum l of the thread's 2 x kMFrags rows.
// scale_log2 (softmax scale times log2 e) must be > 0; the kernel flips the sign of S for a
// negative scale.
template <int kMFrags>
struct OnlineSoftmax {
  float m[kMFrags][2];
  float l[kMFrags][2];

  __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
    for (int mi = 0; mi < kMFrags; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.f;
  }

  // One key block: S becomes P = 2^(S·scale_log2 - m_new·scale_log2); O and l are rescaled by
  // alpha = 2^((m_old - m_new)·scale_log2). A row with nothing visible yet (m_new = -inf)
  // subtracts 0, so P = 2^-inf = 0 instead of NaN, and alpha = 0 (O and l are still 0 then).
  // kLazy: O is rescaled only when some row of the warp changed its max. On long rows the max
  // rarely moves, and multiplying by alpha = 1 is exact, so skipping changes no bit of the result
  // and saves kOFrags x 4 multiplies per row pair (as many FP32 ops as the softmax itself); but
  // the branch keeps ptxas from overlapping those multiplies with the P·V MMAs (see tile_size).
  template <bool kLazy, int kNFrags, int kOFrags>
  __device__ __forceinline__ void update(Frag (&s)[kMFrags][kNFrags], Frag (&o)[kMFrags][kOFrags],
                                         float scale_log2) {
    float alpha[kMFrags][2];
    bool rescale = false;
#pragma unroll
    for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = m[mi][h];
#pragma unroll
        for (int ni = 0; ni < kNFrags; ++ni)
          mx = fmaxf(mx, fmaxf(s[mi][ni][2 * h], s[mi][ni][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, 2));
        const float m_scaled = mx == -INFINITY ? 0.f : mx * scale_log2;
        alpha[mi][h] = m[mi][h] == -INFINITY ? 0.f : exp2_approx(m[mi][h] * scale_log2 - m_scaled);
        rescale |= mx != m[mi][h];
        m[mi][h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int ni = 0; ni < kNFrags; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[mi][ni][2 * h + e];
            x = exp2_approx(fmaf(x, scale_log2, -m_scaled));
            sum += x;
          }
        l[mi][h] = l[mi][h] * alpha[mi][h] + sum;
      }
    if (!kLazy || __any_sync(~0u, rescale)) {
#pragma unroll
      for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
        for (int di = 0; di < kOFrags; ++di) {
          o[mi][di][0] *= alpha[mi][0];
          o[mi][di][1] *= alpha[mi][0];
          o[mi][di][2] *= alpha[mi][1];
          o[mi][di][3] *= alpha[mi][1];
        }
    }
  }

  // O /= l (once, at the end) and the natural-log LSE = m·scale + ln l. A row that saw no key
  // (l = 0) gets O = 0 and LSE = -inf exactly. With an attention sink (has_sink; natural-log units)
  // the sink joins the denominator (common/sink.h) and such a row's LSE is the sink.
  template <int kOFrags>
  __device__ __forceinline__ void finalize(Frag (&o)[kMFrags][kOFrags], float scale_log2,
                                           float (&lse)[kMFrags][2], bool has_sink = false,
                                           float sink = 0.f) const {
#pragma unroll
    for (int mi = 0; mi < kMFrags; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = l[mi][h];
        sum += __shfl_xor_sync(~0u, sum, 1);
        sum += __shfl_xor_sync(~0u, sum, 2);
        float inv;
        if (has_sink) {  // common/sink.h
          const SinkNorm n = normalize_with_sink(sum, m[mi][h] * scale_log2, sink);
          inv = n.inv;
          lse[mi][h] = n.lse;
        } else {
          inv = sum > 0.f ? 1.f / sum : 0.f;
          lse[mi][h] = sum > 0.f ? m[mi][h] * scale_log2 * kLn2 + logf(sum) : -INFINITY;
        }
#pragma unroll
        for (int di = 0; di < kOFrags; ++di) {
          o[mi][di][2 * h] *= inv;
          o[mi][di][2 * h + 1] *= inv;
        }
      }
  }
};

}  // namespace flashattn::fa2
