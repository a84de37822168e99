// One committed batch of wgmma's over a tiled MMA's k slices: the one way every Hopper mainloop
// (forward, backward) issues its GEMMs.
#pragma once

#include <cute/tensor.hpp>
#include <type_traits>

namespace flashattn::fa3 {

using namespace cute;

// One wgmma batch: C (+)= A·B over the k slices, committed as one group. kWait >= 0 waits until
// at most kWait groups are in flight; -1 returns with the batch in flight. `a` may be a slice
// (a temporary view: one stage of a shared-memory operand).
template <bool kZeroInit, int kWait, class TiledMma, class TA, class TB, class TC>
__device__ __forceinline__ void wgmma(TiledMma& mma, TA&& a, const TB& b, TC& c) {
  // A from registers (P·V) unless its fragment is a shared-memory descriptor (Q·Kᵀ).
  constexpr bool kARegisters =
      !std::is_base_of_v<GMMA::DescriptorIterator,
                         typename std::remove_reference_t<TA>::engine_type::iterator>;
  if constexpr (kARegisters) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = kZeroInit ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  if constexpr (kWait >= 0) warpgroup_wait<kWait>();
  warpgroup_fence_operand(c);
  if constexpr (kARegisters) warpgroup_fence_operand(a);
}

}  // namespace flashattn::fa3
