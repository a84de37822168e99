// The FP8 mainloop's V, transposed in shared memory by the producer warpgroup. 8-bit wgmma reads
// its B operand K-major only, and P·V's K is the key: V arrives from TMA key-major ((keys, dv),
// dv contiguous) and the GEMM needs Vᵀ ((dv, keys), keys contiguous). The producer's 128 threads
// turn each landed block around while the consumers compute, with the keys in the order of P's
// A-operand positions (p_operand_sm90.cuh, key_of_a_position), so that P needs no shuffle.
//
// One work item is a 4 x 4 byte square: four keys' 4-byte words of columns d..d+3 in, four
// columns' words of A positions p..p+3 out, transposed by eight byte permutes. A warp's 32
// items per step are 8 column words x 4 position words: the 32 loads then hit 32 banks under
// the 128-byte swizzle (the four keys of a position word differ in row % 8, the two column
// chunks in the chunk index they are XORed with); the stores meet 4-way conflicts (their rows
// d + j share row % 8 across the lanes' column words).
#pragma once

#include <cute/tensor.hpp>
#include <cstdint>

#include "kernels/fa3_sm90/p_operand_sm90.cuh"

namespace flashattn::fa3 {

using namespace cute;

__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

// Stage `raw_stage` of the landed V (C::SmemLayoutV: (keys, dv, stage), bytes) into stage
// `vt_stage` of Vᵀ (C::SmemLayoutVt: (dv, A position, stage)), by kThreads threads (whole warps);
// `ptid` is the caller's index among them.
template <class C, int kThreads>
__device__ __forceinline__ void transpose_v(const typename C::Element* raw, int raw_stage,
                                            typename C::Element* vt, int vt_stage, int ptid) {
  constexpr int kKeyGroups = C::kBlockN / 16;    // 16 A positions: 4 position words
  constexpr int kColGroups = C::kHeadDimV / 32;  // 32 columns: 8 column words
  static_assert(C::kBlockN % 32 == 0 && C::kHeadDimV % 32 == 0);
  static_assert(sizeof(typename C::Element) == 1);
  // Byte offsets in 32 bits: the layouts' swizzle (layout_a) of their plain offsets (layout_b),
  // the buffers being aligned to the swizzle's span. (CuTe's swizzled pointers did the same in
  // 64-bit arithmetic and spilled the producer's 32 registers.)
  const auto raw_layout = typename C::SmemLayoutV{};
  const auto vt_layout = typename C::SmemLayoutVt{};
  const uint32_t raw_base = cute::cast_smem_ptr_to_uint(raw);
  const uint32_t vt_base = cute::cast_smem_ptr_to_uint(vt);
  auto at_raw = [&](int key, int col) {
    return raw_base + raw_layout.layout_a()(raw_layout.layout_b()(key, col, raw_stage));
  };
  auto at_vt = [&](int col, int pos) {
    return vt_base + vt_layout.layout_a()(vt_layout.layout_b()(col, pos, vt_stage));
  };
  const int lane = ptid % 32, warp = ptid / 32;
  const int col_word = (lane & 3) | ((lane >> 4) << 2);  // of the item's 8
  const int pos_word = (lane >> 2) & 3;                  // of the item's 4
#pragma unroll 1
  for (int i = warp; i < kKeyGroups * kColGroups; i += kThreads / 32) {
    const int kg = i % kKeyGroups, cg = i / kKeyGroups;
    const int d = 32 * cg + 4 * col_word;
    const int p = 16 * kg + 4 * pos_word;
    // A positions p..p+3 hold keys key0 + {0, 1, 8, 9} (key_of_a_position).
    const int key0 = key_of_a_position(p);
    const uint32_t w0 = lds32(at_raw(key0, d));
    const uint32_t w1 = lds32(at_raw(key0 + 1, d));
    const uint32_t w2 = lds32(at_raw(key0 + 8, d));
    const uint32_t w3 = lds32(at_raw(key0 + 9, d));
    // o_j = (w0.j, w1.j, w2.j, w3.j): column d + j of the four keys, in position order.
    const uint32_t lo01 = __byte_perm(w0, w1, 0x5140), lo23 = __byte_perm(w2, w3, 0x5140);
    const uint32_t hi01 = __byte_perm(w0, w1, 0x7362), hi23 = __byte_perm(w2, w3, 0x7362);
    sts32(at_vt(d + 0, p), __byte_perm(lo01, lo23, 0x5410));
    sts32(at_vt(d + 1, p), __byte_perm(lo01, lo23, 0x7632));
    sts32(at_vt(d + 2, p), __byte_perm(hi01, hi23, 0x5410));
    sts32(at_vt(d + 3, p), __byte_perm(hi01, hi23, 0x7632));
  }
}

}  // namespace flashattn::fa3
