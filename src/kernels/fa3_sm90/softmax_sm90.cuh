// Masking and the online softmax on wgmma accumulator fragments, plus the layout view that lets
// the softmax read the accumulator as (row, column) (P·V's view of it: p_operand_sm90.cuh).
//
// A thread of a 64-row wgmma holds two rows (lane/4 and lane/4 + 8 of its warp's 16) and, of
// each row, columns 2t, 2t+1 (t = lane % 4) of every 8-column group. The four lanes of a quad
// share the rows, so a row's max and sum are two xor-shuffles; the row sum stays a per-thread
// partial until finalize().
#pragma once

#include <cmath>
#include <cute/tensor.hpp>

#include "common/convert.cuh"
#include "common/exp2_poly.h"
#include "common/mask.h"
#include "common/math_constants.h"
#include "common/sink.h"
#include "kernels/fa3_sm90/p_operand_sm90.cuh"

namespace flashattn::fa3 {

using namespace cute;


// ((2, 2, V), M, N) accumulator layout -> ((2, M), (2, V, N)): rows, then columns.
template <class L>
__device__ __forceinline__ constexpr auto rowcol_layout(L l) {
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)),
                     make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

template <class Tensor>
__device__ __forceinline__ auto rowcol(Tensor&& t) {
  return make_tensor(t.data(), rowcol_layout(t.layout()));
}

// S (rowcol view) becomes -inf where the mask hides (row0 + row, key0 + col); coordinates come
// from the identity tensor partitioned like S. A row sees the keys [key_begin, key_end) (the same
// bounds as Mask::visible), so each row's bounds are computed once and each element costs one
// unsigned compare: the per-element Mask::visible (four conditions, the mask's fields re-read
// from the parameter space at every element) made a diagonal block's softmax ~3000 cycles
// longer than a full one's (per-warp timeline, d128 s512 causal).
template <class Frag, class Coords>
__device__ __forceinline__ void apply_mask(Frag& s, const Coords& c, const Mask& mask, int row0,
                                           int key0) {
#pragma unroll
  for (int r = 0; r < size<0>(s); ++r) {
    const int row = row0 + get<0>(c(r, 0));
    const int lo = mask.key_begin(row) - key0;
    const int hi = mask.key_end(row) - key0;
    const unsigned span = hi > lo ? static_cast<unsigned>(hi - lo) : 0u;
#pragma unroll
    for (int j = 0; j < size<1>(s); ++j) {
      // col in [lo, hi) <=> (col - lo) as unsigned < hi - lo
      if (static_cast<unsigned>(get<1>(c(r, j)) - lo) >= span) s(r, j) = -INFINITY;
    }
  }
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// FlashAttention-4's two softmax ideas (docs/perf/forward-hopper.md has the ablation on the H100).
struct SoftmaxOptions {
  // Keep a row's reference max while the true max grew by at most kRescaleSlack (log2 units):
  // P may then reach 2^8, harmless in fp32 accumulators and in bf16/fp16 P, and O's rescale is
  // skipped for a warp whose rows all kept theirs. The final 1/l uses the same reference: exact.
  // A run-time switch (DebugOptions::conditional_rescale, flashattn-bench --fa4); on by default:
  // +1-5 % measured.
  bool conditional_rescale = true;
};
inline constexpr float kRescaleSlack = 8.f;
// One exponential in kExp2EmulationPeriod by exp2_poly on the FMA pipe instead of MUFU; 0 = none.
// A compile-time constant (a run-time branch kept both loops and their registers in every
// kernel); -DFLASHATTN_EXP2_EMULATION_PERIOD=N builds the ablation. docs/perf/forward-hopper.md:
// measurements: MUFU.EX2 issues one warp instruction per 8 cycles per SM partition (16 per SM
// per cycle), the softmax's largest single cost on the H100.
#ifndef FLASHATTN_EXP2_EMULATION_PERIOD
#define FLASHATTN_EXP2_EMULATION_PERIOD 0
#endif
inline constexpr int kExp2EmulationPeriod = FLASHATTN_EXP2_EMULATION_PERIOD;

// One row's 1/l (0 for a row that saw no key: its O is 0) and natural-log LSE (-inf then), from
// the thread's partial row sum and ref_log2(), the row's reference max in log2 units with P's
// offset removed (a callable, evaluated after the sum as the softmaxes always have).
template <class RefLog2>
__device__ __forceinline__ void finalize_row(float partial_sum, RefLog2&& ref_log2, float& inv,
                                             float& lse) {
  const float sum = quad_sum(partial_sum);
  const bool empty = sum == 0.f || sum != sum;
  inv = empty ? 0.f : 1.f / sum;
  lse = empty ? -INFINITY : (ref_log2() + __log2f(sum)) * kLn2;
}

// Independent partial chains per row reduction (OnlineSoftmax::step) and their pairwise merge.
inline constexpr int kChains = 4;
template <class Op>
__device__ __forceinline__ float merge_chains(const float (&part)[kChains], Op op) {
  return op(op(part[0], part[1]), op(part[2], part[3]));
}

// Running max m (raw score units) and partial sum l of a thread's kRows rows. scale_log2 > 0
// (the kernel negates S for a negative softmax scale). kPOffset (log2 units) lifts P's range to
// (0, 2^kPOffset] (FP8 P: e4m3 holds up to 448 and flushes below 2^-9, so the offset of 8 keeps
// values down to 2^-17 of the row's max that would otherwise be zero); l carries the same
// factor, so 1/l and the LSE (which subtracts it) are unchanged. The conditional rescale's slack
// shrinks by the offset, so P never exceeds 2^max(8, kPOffset).
template <int kRows, int kPOffset = 0>
struct OnlineSoftmax {
  static constexpr float kSlack = kRescaleSlack - kPOffset;

  float m[kRows];
  float l[kRows];
  float scale_log2;

  __device__ __forceinline__ explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) m[r] = -INFINITY, l[r] = 0.f;
  }

  // One key block: S (rowcol) becomes P = 2^(S·scale_log2 - m·scale_log2) against each row's
  // reference max m; factor[r] is what O's row r must be multiplied by to move to the new
  // reference. Returns whether any row of the warp moved (else O needs no rescale). A row with
  // no visible key so far keeps m = -inf and gets P = 0 (its reference point is taken as 0).
  template <class Frag>
  __device__ __forceinline__ bool step(Frag& s, float (&factor)[kRows], const SoftmaxOptions& opt) {
    bool moved = false;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // The row max and sum run as kChains interleaved partial chains, merged at the end: one
      // chain of 32+ dependent FMNMX / FADD per row left the warps stalled on each result
      // (ncu: "wait" was the top stall reason of K6, 1.7 cycles per issued instruction).
      float part[kChains];
#pragma unroll
      for (int c = 0; c < kChains; ++c) part[c] = c == 0 ? m[r] : -INFINITY;
#pragma unroll
      for (int j = 0; j < size<1>(s); ++j) part[j % kChains] = fmaxf(part[j % kChains], s(r, j));
      float mx = merge_chains(part, [](float a, float b) { return fmaxf(a, b); });
      mx = quad_max(mx);
      // (-inf) - (-inf) is NaN: a row that has seen nothing keeps -inf either way.
      if (kSlack > 0.f && opt.conditional_rescale && (mx - m[r]) * scale_log2 <= kSlack) mx = m[r];
      const float ref = mx == -INFINITY ? 0.f : mx * scale_log2;
      const float neg_ref = kPOffset == 0 ? -ref : kPOffset - ref;  // P's exponent offset
      // Exactly 1 for a row whose reference stayed: O is then the same whether or not the warp
      // rescales (the vote below includes rows past a sequence's end, whose maxima differ
      // between a packed batch and the sequence run alone). m was -inf: 0; l and O are 0 then.
      factor[r] = mx == m[r] ? 1.f : exp2_approx(m[r] * scale_log2 - ref);
      moved |= mx != m[r];
      m[r] = mx;
#pragma unroll
      for (int c = 0; c < kChains; ++c) part[c] = 0.f;
#pragma unroll
      for (int j = 0; j < size<1>(s); ++j) {
        const float x = fmaf(s(r, j), scale_log2, neg_ref);
        const bool emulate =
            kExp2EmulationPeriod > 0 && j % (kExp2EmulationPeriod > 0 ? kExp2EmulationPeriod : 1) == 0;
        const float p = emulate ? exp2_poly(x) : exp2_approx(x);
        s(r, j) = p;
        part[j % kChains] += p;
      }
      l[r] = fmaf(l[r], factor[r], merge_chains(part, [](float a, float b) { return a + b; }));
    }
    return __any_sync(0xffffffffu, moved);
  }

  // 1/l per row (0 for a row that saw no key: its O is 0) and the natural-log LSE (-inf then).
  __device__ __forceinline__ void finalize(float (&inv)[kRows], float (&lse)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      finalize_row(l[r], [&] { return m[r] * scale_log2 - kPOffset; }, inv[r], lse[r]);
    }
  }

  // finalize() for rows whose denominator also holds an attention sink (common/sink.h; natural-log
  // units).
  __device__ __forceinline__ void finalize_with_sink(float sink, float (&inv)[kRows],
                                                     float (&lse)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const SinkNorm n = normalize_with_sink(quad_sum(l[r]), m[r] * scale_log2 - kPOffset, sink);
      inv[r] = n.inv;
      lse[r] = n.lse;
    }
  }
};

// Multiplies row r of an accumulator (rowcol view) by factor[r].
template <class Frag, int kRows>
__device__ __forceinline__ void scale_rows(Frag& o, const float (&factor)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int j = 0; j < size<1>(o); ++j) o(r, j) *= factor[r];
}

}  // namespace flashattn::fa3
