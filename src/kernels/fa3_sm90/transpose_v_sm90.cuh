// The FP8 mainloop's V, transposed in shared memory by the producer warpgroup. 8-bit wgmma reads
// its B operand K-major only, and P·V's K is the key: V arrives from TMA key-major ((keys, dv),
// dv contiguous) and the GEMM needs Vᵀ ((dv, keys), keys contiguous). Producer warps 1-3 turn
// each landed block around while the consumers compute, with the keys in the order of P's
// A-operand positions (p_operand_sm90.cuh, key_of_a_position), so that P needs no shuffle.
//
// Each half of a warp's step moves 16 keys x 32 columns (512 bytes) with two instructions of data
// movement: ldmatrix.x4.trans reads four 8 x 8 matrices of 16-bit pairs (keys 0-7 and 8-15
// of the step, columns 0-15 and 16-31) transposed, so thread t holds, of column pair c = t / 4,
// the two keys 2q, 2q + 1 (q = t % 4) of each 8-key half: A = (k, k+1 | col 2c, 2c+1) and B the
// same 8 keys on. Positions 4q..4q+3 of P's A operand hold exactly keys 2q, 2q+1, 2q+8, 2q+9, so
// one byte permute per word gives column 2c's (A.0, A.2, B.0, B.2) and column 2c+1's (A.1, A.3,
// B.1, B.3); stmatrix.x4 writes those words as four 8 x 8 matrices of Vᵀ rows. Lanes 16-31 give
// their odd column to the first matrix and their even one to the second, so each matrix's 8
// rows differ in row % 8 and hit 8 different 16-byte chunks under the swizzle: no bank conflict
// on either side (ldmatrix's 8 rows are 8 consecutive keys).
//
// Measured before (d 128, H100): a transpose of 4 x 4 byte squares through 32-bit loads and
// stores, ~1150 warp instructions per block, held K7 to 472-525 TFLOP/s (900 with the transpose
// left out): the consumers' softmax is issue-bound and the transpose's instructions share their
// schedulers. ldmatrix/stmatrix at 32 columns a step: 706 (~21 instructions a step, 32 steps a
// block). Steps of 64 columns share their address arithmetic: ~30 instructions, 16 steps. Each
// warp's steps unrolled, addresses an XOR and an immediate from two lane bases (~7 instructions
// a half step): d 256 16k 866 -> 1120 TFLOP/s with Q in registers (flashattn-bench, N(0,1)
// inputs; k7_smoke's memset inputs gave 888 -> 1207), d 128 +3.4% (transpose_v_unrolled).
#pragma once

#include <cute/tensor.hpp>
#include <cstdint>

#include "kernels/fa3_sm90/p_operand_sm90.cuh"

namespace flashattn::fa3 {

using namespace cute;

// Four 8 x 8 matrices of 16-bit elements, transposed (`addr`: this lane's row of matrix lane / 8).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// Four 8 x 8 matrices of 16-bit elements (`addr`: this lane's row of matrix lane / 8).
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

// The lanes' roles in a half step (see the top): ldmatrix matrix m = lane / 8 reads keys
// 8·(m % 2) + i (i = lane % 8) at columns 16·(m / 2)..+15 of V; stmatrix matrix m writes Vᵀ row
// 16·(m / 2) + 2i + ((m % 2) ^ (i >= 4)); the byte permutes' selectors put this thread's even
// column 2c first for threads of c < 4, the odd one first for the others.
struct TransposeLane {
  int read_key, read_col, write_row;
  uint32_t sel_first, sel_second;
  __host__ __device__ constexpr explicit TransposeLane(int lane)
      : read_key(8 * ((lane / 8) % 2) + lane % 8),
        read_col(16 * (lane / 16)),
        write_row(16 * (lane / 16) + 2 * (lane % 8) +
                  (((lane / 8) % 2) ^ (lane % 8 >= 4 ? 1 : 0))),
        sel_first(lane < 16 ? 0x6420u : 0x7531u),
        sel_second(lane < 16 ? 0x7531u : 0x6420u) {}
};

// One half step, 16 keys x 32 columns: read transposed from V at `from`, each output word made of
// keys 2q, 2q+1, 2q+8, 2q+9 of a column (one byte permute), written to Vᵀ at `to`.
__device__ __forceinline__ void transpose_half_step(uint32_t from, uint32_t to,
                                                    const TransposeLane& l) {
  uint32_t r[4], w[4];
  ldsm_x4_trans(from, r);
  w[0] = __byte_perm(r[0], r[1], l.sel_first);
  w[1] = __byte_perm(r[0], r[1], l.sel_second);
  w[2] = __byte_perm(r[2], r[3], l.sel_first);
  w[3] = __byte_perm(r[2], r[3], l.sel_second);
  stsm_x4(to, w);
}

// A step's byte offset in a swizzled layout splits in two: the bits the swizzle writes (4-6: the
// 16-byte chunk within 128 bytes), which a lane's own offset also sets and which must be XORed
// in, and the rest, which a lane's offset never sets and which can ride in the instruction's
// immediate offset. transpose_offsets_split() checks that this holds for every lane and step.
inline constexpr uint32_t kSwizzledBits = 0x70u;

// V's (keys, columns) and Vᵀ's (rows, A positions) offsets of half step (ks, cs, half) against
// those of the lane (the layouts are XOR-linear: a swizzle of a sum of offsets with disjoint
// bits is the XOR of their swizzles).
template <class C>
__host__ __device__ constexpr uint32_t transpose_raw_step(int ks, int cs, int half) {
  return typename C::SmemLayoutV{}(16 * ks, 64 * cs + 32 * half, 0);
}
template <class C>
__host__ __device__ constexpr uint32_t transpose_vt_step(int ks, int cs, int half) {
  return typename C::SmemLayoutVt{}(64 * cs + 32 * half, 16 * ks, 0);
}
__host__ __device__ constexpr uint32_t split_offset(uint32_t lane_offset, uint32_t step) {
  return (lane_offset ^ (step & kSwizzledBits)) + (step & ~kSwizzledBits);
}

// Whether lane offset + step offset, computed as split_offset does, equals the layouts' own
// offset for every step and half of config C, for lanes [kLane0, kLane0 + 8) (static_assert'ed
// below a group of 8 lanes at a time: all 32 in one expression exceed the front end's constexpr
// evaluation budget at 192 keys).
template <class C, int kLane0>
constexpr bool transpose_offsets_split() {
  constexpr auto raw = typename C::SmemLayoutV{};
  constexpr auto vt = typename C::SmemLayoutVt{};
  for (int lane = kLane0; lane < kLane0 + 8; ++lane) {
    const TransposeLane l(lane);
    const uint32_t raw_lane = raw(l.read_key, l.read_col, 0);
    const uint32_t vt_lane = vt(l.write_row, 0, 0);
    for (int ks = 0; ks < C::kBlockN / 16; ++ks) {
      for (int cs = 0; cs < C::kHeadDimV / 64; ++cs) {
        for (int half = 0; half < 2; ++half) {
          const uint32_t r = raw(16 * ks + l.read_key, 64 * cs + 32 * half + l.read_col, 0);
          const uint32_t v = vt(64 * cs + 32 * half + l.write_row, 16 * ks, 0);
          if (split_offset(raw_lane, transpose_raw_step<C>(ks, cs, half)) != r) return false;
          if (split_offset(vt_lane, transpose_vt_step<C>(ks, cs, half)) != v) return false;
        }
      }
    }
  }
  return true;
}

// transpose_v at d 64: the steps walked at run time, their addresses by additions from each
// 64-column block (one block at d 64: evaluated once). The unrolled form below measured 3-4%
// slower there (d 64 has one column block, so the walk never re-evaluates the layouts; why the
// unrolled one loses is not established), and 3-4% faster at d 128, 24-36% at d 256.
template <class C, int kThreads>
__device__ __forceinline__ void transpose_v_walk(const typename C::Element* raw, int raw_stage,
                                                 typename C::Element* vt, int vt_stage, int ptid) {
  constexpr int kKeySteps = C::kBlockN / 16;    // 16 keys per step
  constexpr int kColSteps = C::kHeadDimV / 64;  // 64 columns per step: two ldmatrix.x4
  static_assert(C::kBlockN % 16 == 0 && C::kHeadDimV % 64 == 0);
  static_assert(sizeof(typename C::Element) == 1);
  // Byte offsets in 32 bits: the layouts' swizzle (layout_a) of their plain offsets (layout_b),
  // the buffers being aligned to the swizzle's span. (CuTe's swizzled pointers did the same in
  // 64-bit arithmetic and spilled the producer's registers.)
  const auto raw_layout = typename C::SmemLayoutV{};
  const auto vt_layout = typename C::SmemLayoutVt{};
  const uint32_t raw_base = cute::cast_smem_ptr_to_uint(raw);
  const uint32_t vt_base = cute::cast_smem_ptr_to_uint(vt);
  const int lane = ptid % 32, warp = ptid / 32;
  const TransposeLane l(lane);
  const int read_key = l.read_key, read_col = l.read_col, write_row = l.write_row;
  // The step's second half, 32 columns on: in V, 16-byte chunk c + 2 of the same rows, which
  // the swizzle places at chunk (c ^ row % 8) ^ 2 (c's bit 1 is 0: the half starts at a
  // multiple of 64 columns): the address XOR 32. In Vᵀ, 32 rows down, the same chunk.
  // (32 rows of Vᵀ: the layout's own offset, a multiple of the swizzle's period.)
  const uint32_t vt_32_rows = vt_layout.layout_b()(32, 0, 0) - vt_layout.layout_b()(0, 0, 0);
  // Addresses move by additions and XORs from a step's column block (evaluated from the layouts
  // only when a warp moves to the next block): 16 keys later, V's rows are 16 rows on (the
  // swizzle repeats every 8); Vᵀ's positions 16 on are the next 16-byte chunk of the same rows,
  // which the swizzle XORs with row % 8 (128-byte rows) or (row / 2) % 4 (64-byte rows): the
  // address XOR 16·ks. (Evaluating both layouts at every step, with the divisions of the step
  // into (ks, cs), took 61 instructions a step where the data movement takes 12; ncu: the three
  // schedulers holding a follower issued 45% more than the fourth, d 128 16k.)
  const uint32_t raw_16_keys = raw_layout.layout_b()(16, 0, 0) - raw_layout.layout_b()(0, 0, 0);
  auto raw_at = [&](int cs) {
    return raw_base +
           raw_layout.layout_a()(raw_layout.layout_b()(read_key, 64 * cs + read_col, raw_stage));
  };
  auto vt_at = [&](int cs) {
    return vt_base + vt_layout.layout_a()(vt_layout.layout_b()(64 * cs + write_row, 0, vt_stage));
  };
  constexpr int kWarps = kThreads / 32;
  static_assert(kKeySteps >= kWarps, "a warp's next step is at most one column block on");
  // (Two steps in flight, unrolled by 2 where the producer has 40 registers, measured the same:
  // d 256 16k 822 against 812-829 TFLOP/s; the transpose's cost is its instructions and shared
  // memory traffic beside the consumers', not its latency.)
  int ks = warp, cs = 0;
  uint32_t from_block = raw_at(0), to_block = vt_at(0);
#pragma unroll 1
  for (int step = warp; step < kKeySteps * kColSteps; step += kWarps) {
    const uint32_t from = from_block + ks * raw_16_keys;
    const uint32_t to = to_block ^ (16u * ks);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      transpose_half_step(half == 0 ? from : from ^ 32u, to + half * vt_32_rows, l);
    }
    ks += kWarps;
    if constexpr (kColSteps > 1) {  // (one column block, d 64: the loop ends first)
      if (ks >= kKeySteps) {
        ks -= kKeySteps;
        ++cs;
        from_block = raw_at(cs);
        to_block = vt_at(cs);
      }
    }
  }
}

// transpose_v from d 128: the block is kKeySteps x kColSteps steps of 16 keys x 64 columns, dealt
// round robin to the warps; each warp's steps are unrolled at compile time (one copy of the code
// per warp), so a step's addresses are the lane's two base addresses with the step's offset split
// as above: one XOR each, the rest in the instruction's immediate. (Before: steps walked at run
// time, their addresses by additions from each 64-column block, evaluated from the layouts when a
// warp moved to the next one: at d 256, whose 4 key steps make a warp move at almost every step,
// ncu counted ~770 follower instructions per 16 KB block against ~200 of data movement.)
template <class C, int kThreads>
__device__ __forceinline__ void transpose_v_unrolled(const typename C::Element* raw, int raw_stage,
                                                     typename C::Element* vt, int vt_stage,
                                                     int ptid) {
  constexpr int kKeySteps = C::kBlockN / 16;    // 16 keys per step
  constexpr int kColSteps = C::kHeadDimV / 64;  // 64 columns per step: two ldmatrix.x4
  constexpr int kSteps = kKeySteps * kColSteps;
  constexpr int kWarps = kThreads / 32;
  static_assert(C::kBlockN % 16 == 0 && C::kHeadDimV % 64 == 0);
  static_assert(sizeof(typename C::Element) == 1);
  static_assert(kWarps == 3, "the warp dispatch below names three warps");
  // One static_assert per 8 lanes: the front end's constexpr budget is per expression.
  static_assert(transpose_offsets_split<C, 0>(), "lanes 0-7: offsets do not split (above)");
  static_assert(transpose_offsets_split<C, 8>(), "lanes 8-15: offsets do not split (above)");
  static_assert(transpose_offsets_split<C, 16>(), "lanes 16-23: offsets do not split (above)");
  static_assert(transpose_offsets_split<C, 24>(), "lanes 24-31: offsets do not split (above)");
  const int lane = ptid % 32, warp = ptid / 32;
  const TransposeLane l(lane);
  // 32-bit shared addresses (CuTe's swizzled pointers computed in 64 bits and spilled the
  // producer's registers); the buffers are aligned to their swizzle's span and a stage is a
  // multiple of it, so the stage offset adds under the swizzle.
  const uint32_t from = cute::cast_smem_ptr_to_uint(raw) +
                        typename C::SmemLayoutV{}(l.read_key, l.read_col, raw_stage);
  const uint32_t to =
      cute::cast_smem_ptr_to_uint(vt) + typename C::SmemLayoutVt{}(l.write_row, 0, vt_stage);
  auto steps_of_warp = [&](auto warp_c) {
    constexpr int w = decltype(warp_c)::value;
    cute::for_each(make_int_sequence<(kSteps - w + kWarps - 1) / kWarps>{}, [&](auto j) {
      constexpr int step = w + kWarps * decltype(j)::value;
      constexpr int ks = step % kKeySteps, cs = step / kKeySteps;
      cute::for_each(make_int_sequence<2>{}, [&](auto half_c) {
        constexpr int half = decltype(half_c)::value;
        constexpr uint32_t raw_step = transpose_raw_step<C>(ks, cs, half);
        constexpr uint32_t vt_step = transpose_vt_step<C>(ks, cs, half);
        transpose_half_step(split_offset(from, raw_step), split_offset(to, vt_step), l);
      });
    });
  };
  if (warp == 0) {
    steps_of_warp(Int<0>{});
  } else if (warp == 1) {
    steps_of_warp(Int<1>{});
  } else {
    steps_of_warp(Int<2>{});
  }
}

// Stage `raw_stage` of the landed V (C::SmemLayoutV: (keys, dv, stage), bytes) into stage
// `vt_stage` of Vᵀ (C::SmemLayoutVt: (dv, A position, stage)), by kThreads threads (whole warps);
// `ptid` is the caller's index among them.
template <class C, int kThreads>
__device__ __forceinline__ void transpose_v(const typename C::Element* raw, int raw_stage,
                                            typename C::Element* vt, int vt_stage, int ptid) {
  if constexpr (C::kHeadDimV >= 128) {
    transpose_v_unrolled<C, kThreads>(raw, raw_stage, vt, vt_stage, ptid);
  } else {
    transpose_v_walk<C, kThreads>(raw, raw_stage, vt, vt_stage, ptid);
  }
}

}  // namespace flashattn::fa3
