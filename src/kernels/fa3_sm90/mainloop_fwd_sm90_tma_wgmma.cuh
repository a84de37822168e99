// The Hopper forward mainloop collective (bf16/fp16, and e4m3 with ConfigFp8): a consumer
// warpgroup's 64 query rows of a tile, per key block
//     S = Q·Kᵀ (wgmma, both from shared memory),  mask,  online softmax,  rescale O,
//     O += P·V (wgmma, P from registers),
// reading K and V from the ring the TMA load collective (load_sm90_tma.cuh) fills. Two consumer
// loops, picked by the schedule: `plain` (K4, K5) waits for each GEMM before the next step;
// `overlap` (K6) issues Q·K(j+1)ᵀ and P(j)·V(j) together and runs the softmax of block j+1 while
// P(j)·V(j) is still on the tensor cores, with ping-pong barriers ordering the warpgroups' GEMMs.
// The epilogue (epilogue_fwd_sm90.cuh) takes O and the softmax state from here. What an FP8
// config changes comes from the config, not from branches here: how P becomes P·V's A operand
// (C::POperand), the pipeline V arrives on and its loader (C::kTransposeV), P's offset and the
// descales (C::kPOffset, C::kDescales), or K8's per-block descales (C::kBlockScales:
// softmax_block_scaled_sm90.cuh).
#pragma once

#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "common/mask.h"
#include "common/named_barrier.cuh"
#include "kernels/fa3_sm90/config.cuh"
#include "kernels/fa3_sm90/load_sm90_tma.cuh"
#include "kernels/fa3_sm90/load_sm90_tma_transpose_v.cuh"
#include "kernels/fa3_sm90/params_fwd_sm90.cuh"
#include "kernels/fa3_sm90/schedule.cuh"
#include "kernels/fa3_sm90/softmax_block_scaled_sm90.cuh"
#include "kernels/fa3_sm90/softmax_sm90.cuh"
#include "kernels/fa3_sm90/tile_work.cuh"
#include "kernels/fa3_sm90/timeline.cuh"
#include "kernels/fa3_sm90/wgmma_sm90.cuh"

namespace flashattn::fa3 {

// A consumer warpgroup's 64 query rows of the tile. Register tensors are partitioned per call
// (compile-time layouts, a few address adds).
template <class C>
struct MainloopFwd {
  // What the kernel instantiates around this mainloop: the instantiation's Config, the kernel
  // parameters and the load collective that fills the ring this mainloop reads.
  using Cfg = C;
  using Params = fa3::Params<C>;
  using Load = std::conditional_t<C::kTransposeV, LoaderTransposeV<C>, Loader<C>>;
  using Element = typename C::Element;
  using SharedStorage = typename C::SharedStorage;
  using PipelineKV = typename C::PipelineKV;
  using PipelineV = typename C::PipelineV;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  using Softmax =
      std::conditional_t<C::kBlockScales,
                         BlockScaledSoftmax<2, C::kPOffset, C::kQInRegisters, C::kFtzVFactors>,
                         OnlineSoftmax<2, C::kPOffset>>;
  using POperand = typename C::POperand;
  using FragO = decltype(partition_fragment_C(typename C::TiledMmaPV{},
                                              Shape<Int<C::kBlockM>, Int<C::kHeadDimV>>{}));

  typename C::TiledMmaQK mma_qk;
  typename C::TiledMmaPV mma_pv;
  const Problem& problem;        // in the kernel's parameter space
  const SoftmaxOptions& opt;     // likewise
  int ctid;                // thread index among the consumers
  int wg;                  // consumer warpgroup

  __device__ __forceinline__ void pingpong_sync() const {
    if constexpr (C::kPingpong) named_barrier_sync(kPingpongWG0 + wg, 2 * 128);
  }
  __device__ __forceinline__ void pingpong_arrive() const {
    if constexpr (C::kPingpong) {
      named_barrier_arrive(kPingpongWG0 + (wg + 1) % C::kConsumerWarpGroups, 2 * 128);
    }
  }

  // The tile's softmax: scale_log2 > 0 (a negative scale flips S instead), times the q and k
  // descales of the tile's sequence and KV head (C::kDescales; null: 1), or (C::kBlockScales)
  // with the per-block descales of the tile's rows and keys.
  __device__ __forceinline__ Softmax make_softmax(const TileWork& w) const {
    float scale_log2 = fabsf(problem.scale_log2);
    if constexpr (C::kBlockScales) {
      return make_block_scaled_softmax(w, scale_log2);
    } else {
      if constexpr (C::kDescales) {
        const int i = w.c.batch * problem.heads_kv + w.h_kv;
        if (problem.q_descale != nullptr) scale_log2 *= problem.q_descale[i];
        if (problem.k_descale != nullptr) scale_log2 *= problem.k_descale[i];
      }
      return Softmax(scale_log2);
    }
  }

  // K8: each of the thread's two rows takes its query block's descale (a tile aligned to the
  // sequence's end straddles two blocks); dv_max is the largest v descale of the key blocks the
  // tile visits, a max over the warp's lanes.
  __device__ __forceinline__ Softmax make_block_scaled_softmax(const TileWork& w,
                                                               float scale_log2) const {
    const Problem& p = problem;
    const int q_blocks = (p.seqlen_q + C::kBlockM - 1) / C::kBlockM;
    const int kv_blocks = (p.seqlen_k + C::kBlockN - 1) / C::kBlockN;
    const float* dq =
        p.q_block_descale + (static_cast<int64_t>(w.c.batch) * p.heads_q + w.c.head) * q_blocks;
    const int64_t kv = (static_cast<int64_t>(w.c.batch) * p.heads_kv + w.h_kv) * kv_blocks;
    Softmax softmax;
    softmax.k_blocks = p.k_block_descale + kv;
    softmax.v_blocks = p.v_block_descale + kv;
    auto thr_qk = mma_qk.get_thread_slice(ctid);
    Tensor coords = rowcol(thr_qk.partition_C(
        make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kBlockN>>{})));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = min(max(w.row0 + get<0>(coords(r, 0)), 0), w.seq.len_q - 1);
      softmax.row_scale[r] = scale_log2 * dq[row / C::kBlockM];
    }
    float v_max = 0.f;
    for (int n = w.n_min + ctid % 32; n < w.n_max; n += 32) v_max = fmaxf(v_max, softmax.v_blocks[n]);
#pragma unroll
    for (int lanes = 16; lanes > 0; lanes /= 2) {
      v_max = fmaxf(v_max, __shfl_xor_sync(0xffffffffu, v_max, lanes));
    }
    softmax.set_v_max(v_max > 0.f ? v_max : 1.f);
    return softmax;
  }

  // Key block n's per-block descales, read before its scores are waited for (C::kBlockScales).
  __device__ __forceinline__ void load_block_scales(Softmax& softmax, int n) const {
    if constexpr (C::kBlockScales) softmax.load_block(n);
  }

  // O of a finished tile times the v descale of its sequence and KV head (C::kDescales), or the
  // tile's largest v block descale (C::kBlockScales).
  __device__ __forceinline__ void descale_o(FragO& tOrO, const TileWork& w,
                                            const Softmax& softmax) const {
    if constexpr (C::kBlockScales) {
      Tensor o = rowcol(tOrO);
      const float vm = softmax.v_max();
      const float factor[2] = {vm, vm};
      scale_rows(o, factor);
    } else if constexpr (C::kDescales) {
      if (problem.v_descale != nullptr) {
        const float f = problem.v_descale[w.c.batch * problem.heads_kv + w.h_kv];
        Tensor o = rowcol(tOrO);
        const float factor[2] = {f, f};
        scale_rows(o, factor);
      }
    }
  }

  // S of key block n, fresh from Q·Kᵀ: soft-capped (t = tanh(S · softcap_scale), the sign of
  // the scale inside it) or sign flipped for a negative scale, then masked where the block is
  // not wholly visible to the tile (diagonal, window edges, ragged last block). Both switches
  // are read from the kernel parameters at each use, not kept in registers.
  template <class FragS, class Coords>
  __device__ __forceinline__ void prepare_scores(FragS& s, const Coords& coords, const TileWork& w,
                                                 int n) const {
    if (problem.has_softcap()) {
#pragma unroll
      for (int i = 0; i < size(s); ++i) s(i) = tanh_accurate(s(i) * problem.softcap_scale);
    } else if (problem.scale < 0.f) {
#pragma unroll
      for (int i = 0; i < size(s); ++i) s(i) = -s(i);
    }
    const int key0 = n * C::kBlockN;
    const int row_end = min(w.seq.len_q, w.row0 + C::kBlockM);
    if (!w.mask.tile_all_visible(w.row0, row_end, key0, key0 + C::kBlockN)) {
      apply_mask(s, coords, w.mask, w.row0, key0);
    }
  }

  // What both schedules read: this thread's views of the GEMM operands (wgmma descriptors for
  // Q, K and V transposed, one slice per stage for K and V; with C::kQInRegisters, Q's A
  // fragment, loaded here from the landed tile) and the (row, key) coordinates of its S
  // elements, in S's rowcol order. With Q in registers its buffer is released here: the
  // producer may load the next tile's Q while this one runs.
  __device__ __forceinline__ auto operands(SharedStorage& ss) const {
    auto thr_qk = mma_qk.get_thread_slice(ctid);
    auto thr_pv = mma_pv.get_thread_slice(ctid);
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
    auto tSrQ = thr_qk.partition_fragment_A(sQ);
    if constexpr (C::kQInRegisters) {
      // ldmatrix (16-bit 8 x 8 matrices, not transposed): a thread's word of a matrix is 4
      // bytes of one row, which is what an 8-bit wgmma's A fragment holds (p_operand_sm90.cuh).
      auto copy_q = make_tiled_copy_A(Copy_Atom<SM75_U32x4_LDSM_N, Element>{}, mma_qk);
      auto thr_copy = copy_q.get_thread_slice(ctid);
      copy(copy_q, thr_copy.partition_S(as_position_independent_swizzle_tensor(sQ)),
           thr_copy.retile_D(tSrQ));
      release_q(ss);
    }
    return cute::make_tuple(
        tSrQ,
        thr_qk.partition_fragment_B(
            make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{})),
        thr_pv.partition_fragment_B(
            make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutVt{})),
        rowcol(thr_qk.partition_C(
            make_identity_tensor(Shape<Int<C::kBlockM>, Int<C::kBlockN>>{}))));
  }

  // K4, K5: each GEMM waited for before the next step. `after_block(i)` runs once the i-th
  // visited key block's stage is released (K4 refills it from there).
  template <class AfterBlock>
  __device__ __forceinline__ void mainloop_plain(SharedStorage& ss, PipelineKV& pipe_k,
                                                 PipelineV& pipe_v, PipelineState& state,
                                                 const TileWork& w, FragO& tOrO,
                                                 Softmax& softmax, AfterBlock&& after_block) {
    auto [tSrQ, tSrK, tOrV, coords] = operands(ss);
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<C::kBlockM>, Int<C::kBlockN>>{});
    Tensor rP = POperand::template fragment<Element>(tSrS);
    Tensor tOrP = POperand::as_a_operand(rP);
    clear(tOrO);
    for (int n = w.n_max - 1, i = 0; n >= w.n_min; --n, ++i) {
      load_block_scales(softmax, n);
      pipe_k.consumer_wait(state);
      wgmma<true, 0>(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
      pipe_k.consumer_release(state);
      release_q_after_last_qk(ss, w, n);
      Tensor s = rowcol(tSrS);
      prepare_scores(s, coords, w, n);
      float factor[2];
      if (softmax.step(s, factor, opt)) {
        Tensor o = rowcol(tOrO);
        scale_rows(o, factor);
      }
      POperand::convert(tSrS, rP);
      pipe_v.consumer_wait(state);
      wgmma<false, 0>(mma_pv, tOrP, tOrV(_, _, _, state.index()), tOrO);
      pipe_v.consumer_release(state);
      ++state;
      after_block(i);
    }
    descale_o(tOrO, w, softmax);
  }

  // K6: Q·K(j+1)ᵀ and P(j)·V(j) issued back to back; the softmax of block j+1 runs while
  // P(j)·V(j) is on the tensor cores; O is rescaled once that GEMM is done.
  __device__ __forceinline__ void mainloop_overlap(SharedStorage& ss, PipelineKV& pipe_k,
                                                   PipelineV& pipe_v, PipelineState& state,
                                                   const TileWork& w, FragO& tOrO,
                                                   Softmax& softmax) {
    auto [tSrQ, tSrK, tOrV, coords] = operands(ss);
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<C::kBlockM>, Int<C::kBlockN>>{});
    Tensor rP = POperand::template fragment<Element>(tSrS);
    Tensor tOrP = POperand::as_a_operand(rP);
    Tensor s = rowcol(tSrS);
    Tensor o = rowcol(tOrO);
    float factor[2];
    clear(tOrO);

    // Key blocks hidden from all of this warpgroup's rows (above own_blocks_end) are passed:
    // no GEMM, no softmax, but the protocol kept, one ping-pong turn per block (every
    // warpgroup takes n_max - n_min + 1 turns a tile) and each stage waited for, then released.
    // It never reaches block n_min (own_blocks_end > n_min), after whose Q·Kᵀ Q is released.
    // Not with Q in registers (FP8 d 256): its 232 registers spilled 16 bytes with this loop,
    // placed here or before Q's fragment is loaded.
    // Not unrolled: ptxas copied the loop 16 times (~1200 instructions), and K7 d 64 ran 8%
    // slower at seqlen 16k dense, where the loop never runs.
    int n = w.n_max - 1;
#pragma unroll 1
    for (const int n_end = C::kQInRegisters ? w.n_max : own_blocks_end(w); n >= n_end; --n) {
      pipe_k.consumer_wait(state);
      pingpong_sync();
      pingpong_arrive();
      pipe_k.consumer_release(state);
      pipe_v.consumer_wait(state);
      pipe_v.consumer_release(state);
      ++state;
    }
    PipelineState state_v = state;
    load_block_scales(softmax, n);
    pipe_k.consumer_wait(state);
    FA_TRACE(1 + wg, kKWait, 0);
    pingpong_sync();
    FA_TRACE(1 + wg, kSlot, 0);
    wgmma<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
    pingpong_arrive();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    FA_TRACE(1 + wg, kS, 0);
    pipe_k.consumer_release(state);
    ++state;
    release_q_after_last_qk(ss, w, n);
    prepare_scores(s, coords, w, n);
    softmax.step(s, factor, opt);  // O is still zero: nothing to rescale
    FA_TRACE(1 + wg, kSoftmax, 0);

    // The loop is rotated: each pass first finishes the previous block (waits for its P·V,
    // rescales O, converts P) and ends with the softmax of its own block. ptxas puts a wgmma
    // wait, which reads no register, at the top of its basic block; with the wait after the
    // softmax in one block it landed above the softmax and the overlap was lost in every K6
    // kernel. At the head of the loop (and after its exit) the wait can only follow the
    // softmax, under which P·V runs. cmake/hopper_compile_check.sh checks the SASS for it. (The
    // wait in the two branches of the per-warp rescale vote also kept it below the softmax, but
    // warps of one warpgroup then reached different wgmma.wait_group instructions: a sequence
    // error under compute-sanitizer synccheck.)
    bool rescale = false, pv_issued = false;
    for (--n;; --n) {
      warpgroup_wait<0>();  // the previous block's P·V (none before the first pass)
      warpgroup_fence_operand(tOrO);
      if (pv_issued) {  // its V stage is free
        FA_TRACE(1 + wg, kPV, 0);
        pipe_v.consumer_release(state_v);
        ++state_v;
      }
      if (rescale) scale_rows(o, factor);
      POperand::convert(tSrS, rP);
      if (n < w.n_min) break;

      load_block_scales(softmax, n);
      pipe_k.consumer_wait(state);
      FA_TRACE(1 + wg, kKWait, 0);
      pingpong_sync();
      FA_TRACE(1 + wg, kSlot, 0);
      wgmma<true, -1>(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
      pipe_v.consumer_wait(state_v);
      wgmma<false, -1>(mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO);
      pv_issued = true;
      pingpong_arrive();
      warpgroup_wait<1>();  // S of block n is in; P·V of the previous block may still run
      warpgroup_fence_operand(tSrS);
      FA_TRACE(1 + wg, kS, 0);
      pipe_k.consumer_release(state);
      ++state;
      release_q_after_last_qk(ss, w, n);
      prepare_scores(s, coords, w, n);
      rescale = softmax.step(s, factor, opt);
      FA_TRACE(1 + wg, kSoftmax, 0);
    }

    pipe_v.consumer_wait(state_v);
    pingpong_sync();
    FA_TRACE(1 + wg, kSlot, 0);
    wgmma<false, -1>(mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO);
    pingpong_arrive();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    FA_TRACE(1 + wg, kLastPV, 0);
    pipe_v.consumer_release(state_v);
    descale_o(tOrO, w, softmax);
  }

  // The end of the key blocks this warpgroup computes: the last block any of its 64 rows may
  // see, at least w.n_min + 1 (a non-empty tile). Under a right-bounded mask a tile's upper
  // warpgroups see fewer blocks than its last (d 64's 192-row tiles at seqlen 512 causal:
  // 24 warpgroup-blocks per head, 20 of them with a visible key), and a warpgroup with no row
  // of the sequence (a tile's partial end) or none that sees a key computes one block, masked
  // or past the end, so that mainloop_overlap keeps one path: an early return that joined the
  // epilogue with a zero O, or a separate path for such a warpgroup, spilled d 64's
  // 160-register consumers.
  __device__ __forceinline__ int own_blocks_end(const TileWork& w) const {
    // wg broadcast from lane 0: warp-uniform to the compiler, so the pass count, and with it
    // the ring's state, stays in uniform registers (derived from the thread index, it moved
    // the d 64 mainloop's barrier addresses into regular registers: -7% at seqlen 2048-16k).
    const int row = w.row0 + 64 * __shfl_sync(0xffffffffu, wg, 0);
    const int first = max(row, 0);
    const int last = min(row + 64, w.seq.len_q) - 1;
    const int key_end = last < first ? 0 : w.mask.key_end(last);
    return max(w.n_min + 1, min(w.n_max, (key_end + C::kBlockN - 1) / C::kBlockN));
  }

  // Q's buffer may be refilled once this thread's last Q·Kᵀ is done.
  __device__ __forceinline__ void release_q(SharedStorage& ss) const {
    cutlass::arch::ClusterBarrier::arrive(&ss.q_empty);
  }
  // Called after block n's Q·Kᵀ. Q read from shared memory: released after the tile's last one
  // (block n_min: the blocks run from n_max - 1 down). Q in registers: operands() released it.
  __device__ __forceinline__ void release_q_after_last_qk(SharedStorage& ss, const TileWork& w,
                                                          int n) const {
    if (!C::kQInRegisters && n == w.n_min) release_q(ss);
  }
};

}  // namespace flashattn::fa3
