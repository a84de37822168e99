// The Hopper backward's main kernel (the shared stages, kernels/bwd_stages, run before and
// after it): bwd_kernel, the helpers both its configurations use, and the MMA warpgroups of
// d 64/128 (bwd_mainloop; d 256's are kernel_bwd_split_d_sm90.cuh). One block of three warpgroups
// owns kBlockN = 128 keys of one KV head of one sequence and walks every query block (kBlockM
// rows: 128 at d 64, 64 at d 128) of every query head of its group that sees one of its keys:
//   warpgroup 0, the producer (24 registers): one thread loads K and V once, then streams Q and
//       dO of each step into a two-stage ring (one transaction barrier per stage); warps 1 and 2
//       are the MMA warpgroups' dQ writers (bwd_dq_writer; d 256: bwd_dq_writer_split_d);
//   warpgroups 1, 2, the MMA warpgroups (240 registers), each owning 64 of the keys, per step:
//       S = Q·K_wᵀ (issued at the end of the step before); the step before's dK_w += dS_wᵀ·Q
//       and dP = dO·V_wᵀ issued, and under both P = exp2(S·scale·log2e − LSE·log2e) → shared
//       memory (softcap: t and 1 − t² first, both GEMMs landed); dV_w += P_wᵀ·dO issued, and
//       under it dP − D and dS = P ∘ (dP − D) → shared memory (double-buffered: the other
//       warpgroup may still read the last step's, and this step's dK reads it in the next);
//       dQ_w = dS·K issued, then the next step's S (the walk's last step: its dK);
//       dQ_w (a (64 rows, kDqN columns) tile, config_bwd.cuh) → fp32 staging buffer (under the
//           next S) → one TMA reduce-add into the fp32 accumulator, issued by its writer warp.
//   dV and dK stay in registers across the walk (GQA: summed over the group's heads in a fixed
//   order) and are written once at the end.
// Deterministic mode: the reduce-adds into one (head, query block, half of the columns) of the
// accumulator happen in a fixed order, key blocks descending, the add's issuer (the warpgroup's
// dQ writer warp, off its path) waiting on that tile's semaphore for its turn and passing it on
// once its add completed. Why
// descending, with the walk going up the query blocks: under a causal mask key block n + 1's walk
// starts two query blocks after n's, so it reaches every query block two steps before n does,
// and n finds its turn already come (ascending order with a downward walk, as the fa2 backward
// does, has all key blocks reach a query block at the same step, and each then trails the one
// before it by the hand-over: a skew that grows with n). The key blocks are dispatched last
// first (blockIdx.x 0 is the last key block), so a warpgroup only waits on blocks of lower
// blockIdx.x, dispatched before it, which never wait on it: the waits cannot deadlock.
// The persistent walk (bwd_persistent; launch_bwd.cuh runs it where a tile's walk is short): one
// block per SM takes tile after tile (a key block of one KV head of one sequence, in the order
// above) from a counter, a scheduler thread claiming the next once the producer has issued the
// current one's loads, and loads its K and V while the MMA warpgroups write the last one's dK and
// dV. In deterministic mode every tile is claimed from the counter, so a block only waits on
// tiles claimed before its own; the earliest tile not yet done is then always running (its
// block finished the tiles it claimed before) and waits on none: no deadlock either.
#pragma once

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <cmath>
#include <type_traits>
#include <cute/tensor.hpp>

#include "common/convert.cuh"
#include "common/mask.h"
#include "common/named_barrier.cuh"
#include "common/sequence_view.cuh"
#include "kernels/bwd_stages/walk.cuh"
#include "kernels/fa3_sm90/config_bwd.cuh"
#include "kernels/fa3_sm90/entry.h"
#include "kernels/fa3_sm90/p_operand_sm90.cuh"
#include "kernels/fa3_sm90/params_bwd_sm90.cuh"
#include "kernels/fa3_sm90/softmax_sm90.cuh"
#include "kernels/fa3_sm90/wgmma_sm90.cuh"

namespace flashattn::fa3 {

// Named barrier ids of the backward kernel (0 is __syncthreads).
enum BwdBarrier : int {
  kBwdDsReady = 1,  // both halves of this step's dS are in shared memory (256 threads)
  kBwdPWG0 = 2,     // + w: warpgroup w's P is in shared memory (128)
  kBwdDqFree0 = 4,  // + w: warpgroup w's dQ staging buffer is free (kBwdDqFreeThreads)
};
// At kBwdDqFree0 + w: MMA warpgroup w (bar.sync) and its dQ writer warp (bar.arrive).
constexpr int kBwdDqFreeThreads = 128 + 32;

// Two floats rounded to the element type (nearest even) and packed low, high.
template <class Element>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  return static_cast<uint32_t>(Element(lo).raw()) |
         (static_cast<uint32_t>(Element(hi).raw()) << 16);
}

// The 32-bit shared-memory address of element e of a (partitioned) shared-memory tensor, for
// st.shared. Through a C++ pointer the swizzle is an XOR on the 64-bit generic address, after
// which the compiler no longer knows the space: it emitted generic 64-bit stores (ST.E) and
// their 64-bit address arithmetic. The swizzle acts on address bits 4-9 only, which the generic
// address shares with the shared-window one (the window is aligned far beyond), so it is applied
// to the 32-bit address instead; e is a compile-time index in the unrolled loops below, so the
// unswizzled offset folds to a constant.
template <class SmemTensor>
__device__ __forceinline__ uint32_t smem_address(const SmemTensor& t, int e) {
  using Iterator = std::remove_cv_t<std::remove_reference_t<decltype(t.data())>>;
  using Swizzle = typename get_swizzle<Iterator>::type;
  const auto* raw = raw_pointer_cast(t.data().get() + t.layout()(e));
  return static_cast<uint32_t>(Swizzle::apply(cast_smem_ptr_to_uint(raw)));
}

// An fp32 accumulator fragment rounded into its place in a 16-bit shared-memory tile, two
// neighbouring columns (one 32-bit store) at a time: the accumulator's elements 2k and 2k + 1
// are columns 2t and 2t + 1 of one row, adjacent in the tile's rows.
// kShared (the config's kSharedStores): st.shared through smem_address, else a C++ store.
template <class Element, bool kShared, class Frag, class Smem>
__device__ __forceinline__ void store_pairs(const Frag& acc, Smem&& smem) {
#pragma unroll
  for (int e = 0; e < size(acc); e += 2) {
    if constexpr (kShared) {
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(smem_address(smem, e)),
                   "r"(pack_pair<Element>(acc(e), acc(e + 1)))
                   : "memory");
    } else {
      *reinterpret_cast<uint32_t*>(&smem(e)) = pack_pair<Element>(acc(e), acc(e + 1));
    }
  }
}

// An fp32 accumulator fragment of `mma` (one warpgroup's tiled wgmma; thread wtid of it) rounded
// into its 16-bit shared-memory tile by stmatrix: four 8 x 8 tiles (a 16 x 16 block, 16 bytes a
// thread) per instruction, where store_pairs takes one st.shared per two values plus the
// swizzled address of each (ncu, H200, d128 s4096: 16 STS and ~36 address instructions per warp
// and step for P alone; cuDNN's backward stores its tiles by stmatrix).
template <class Element, class TiledMma, class Frag, class SmemTensor>
__device__ __forceinline__ void store_stsm(const TiledMma& mma, int wtid, const Frag& acc,
                                           const SmemTensor& smem) {
  Tensor r = make_tensor_like<Element>(acc);
  convert_into(acc, r);
  auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma);
  auto thr = stsm.get_thread_slice(wtid);
  copy(stsm, thr.retile_S(r), thr.partition_D(smem));
}

// dQ's staging stores without bank conflicts. A warp's st.shared.v2 writes 32 bytes of each of 8
// consecutive rows (a half-warp 4 rows, one wavefront at best); in the 128-byte swizzle (16-byte
// chunk ^= row % 8) rows 2i and 2i + 1 land on the same pair of chunks, 2 wavefronts a half-warp
// (ncu, H200, d128 4k: 4 per STS.64 against 2 ideal). k6 therefore adds the accumulator's rows
// of odd index (in the workspace) with their columns XOR 16 (kDqOddRowColXor, entry.h), half a
// 32-float atom row (launch_bwd.cuh checks that the workspace says so: the postprocess undoes
// it). In the swizzled tile that is the byte address XOR 64 (chunk ^ 4: the swizzle reads bits
// above it only), and 4 consecutive rows then cover all 8 chunks. A thread's rows (lane / 4 and
// + 8, a 64-row tile starting at an even row of its sequence) all have one parity, so it flips
// all its stores or none. The flip is worked out where the stores are, from the lane read there
// (volatile): worked out once per tile, ptxas kept the flip or every flipped address live and
// spilled (d 64 84 bytes, d 128 104; from the thread index at the stores, d 128 still 8).
static_assert(kDqOddRowColXor * sizeof(float) == 64, "the flip is chunk ^ 4 (above)");
__device__ __forceinline__ uint32_t dq_staging_flip(int64_t first_row) {
  uint32_t lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return ((lane / 4 + static_cast<uint32_t>(first_row)) & 1) * kDqOddRowColXor *
         static_cast<uint32_t>(sizeof(float));
}

// Whether store_f32_pairs' address split (below) holds on a (64, 64) fp32 staging tile of plain
// (unswizzled) layout `Layout`, for every lane of the wgmma accumulator: a lane's first element
// at row 16 · warp + lane / 4, column 2 · (lane % 4); its others 8 · v1 rows and 8 · j columns on.
template <class Layout>
constexpr bool dq_pairs_split_ok() {
  constexpr Layout tile{};
  for (int warp = 0; warp < 4; ++warp) {
    for (int lane = 0; lane < 32; ++lane) {
      const int row = 16 * warp + lane / 4, col = 2 * (lane % 4);
      const uint32_t at = static_cast<uint32_t>(tile(row, col)) * 4u;
      for (int v1 = 0; v1 < 2; ++v1) {
        for (int j = 0; j < 8; ++j) {
          const uint32_t off = static_cast<uint32_t>(tile(8 * v1, 8 * j) - tile(0, 0)) * 4u;
          if ((at & off & 1023u) != 0) return false;
          const uint32_t to = static_cast<uint32_t>(tile(row + 8 * v1, col + 8 * j)) * 4u;
          if (to != at + off) return false;
        }
      }
    }
  }
  return true;
}

// An fp32 accumulator fragment copied into an fp32 shared-memory tile (dQ's staging), each
// address XOR `flip` (dq_staging_flip): with kShared two neighbouring columns (8 bytes, within
// one 16-byte swizzle chunk) per st.shared, else one C++ store per element.
//
// kShared's addresses: the lane's swizzled address, XORed with the part of each element's
// (compile-time) offset that lands in the bits the swizzle writes, plus the rest as the
// instruction's immediate. That equals the swizzle of (lane + offset) when the two have no bit in
// common below the swizzle's span (1024 bytes for the 128-byte swizzle; the buffer is aligned to
// it): the swizzle is then linear over their sum. In the wgmma accumulator's layout the lane sets
// bits 3-4 (its column pair) and 7-9 (its row % 8) of the tile's offset, an element bits 5-6 (its
// 8-column group in a 128-byte row) and bits from 10 (row + 8, the next 32-column atom). The
// swizzle of each address worked out in full took 4 instructions a store (ncu, d128 s4096: the
// staging's 16 stores ran 64 ALU instructions beside them); this takes an XOR per distinct
// written part (4 at d 64 and 128). The callers check the split on their tile's layout
// (dq_pairs_split_ok).
template <bool kShared, class Frag, class Smem>
__device__ __forceinline__ void store_f32_pairs(const Frag& acc, Smem&& smem, uint32_t flip) {
  if constexpr (kShared) {
    using Iterator = std::remove_cv_t<std::remove_reference_t<decltype(smem.data())>>;
    using Swizzle = typename get_swizzle<Iterator>::type;
    constexpr uint32_t kWritten = Swizzle::zzz_msk::value;
    constexpr uint32_t kSpan = 1u << (Swizzle::num_base + Swizzle::num_shft + Swizzle::num_bits);
    static_assert(kSpan == 1024, "the 128-byte swizzle (dq_pairs_split_ok checks 1024 bytes)");
    // The lane's address through an opaque move: its swizzle, hoisted out of the step loop, held
    // one more register there (d 128 spilled 4 bytes).
    uint32_t lane = cast_smem_ptr_to_uint(raw_pointer_cast(smem.data().get()));
    asm volatile("mov.b32 %0, %0;" : "+r"(lane));
    const uint32_t lane_swizzled = static_cast<uint32_t>(Swizzle::apply(lane)) ^ flip;
    // The stores grouped by that XOR, so that one lane address is live at a time (all of them
    // live at once, d 128 spilled 4 bytes).
    constexpr uint32_t kStep = kWritten & (~kWritten + 1);  // the lowest written bit
#pragma unroll
    for (uint32_t w = 0; w <= kWritten; w += kStep) {
      const uint32_t base = lane_swizzled ^ w;
#pragma unroll
      for (int e = 0; e < size(acc); e += 2) {
        const uint32_t off = static_cast<uint32_t>(smem.layout()(e)) * sizeof(float);
        if ((static_cast<uint32_t>(Swizzle::apply(off)) & kWritten) != w) continue;
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(base + (off & ~kWritten)),
                     "f"(acc(e)), "f"(acc(e + 1))
                     : "memory");
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < size(acc); e += 2) {
      float* at = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(&smem(e)) ^ flip);
      at[0] = acc(e);
      at[1] = acc(e + 1);
    }
  }
}

__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Deterministic mode: once this block's last reduce-add into a tile has completed (not only read
// shared memory), the next key block's turn. No-op without one pending.
__device__ __forceinline__ void release_turn(int*& sem, int turn) {
  if (sem == nullptr) return;
  bulk_wait_all();
  fence_proxy_async_global();
  bwd::store_release(sem, turn + 1);
  sem = nullptr;
}

// Where a backward block walks (grid (key blocks, heads_kv, batch)): key block n_block of KV head
// h_kv of sequence b — deterministic mode dispatches the key blocks last first (see the top) —
// that sequence's mask, and the steps: every query block [m_lo, m_hi) that sees one of the
// block's keys, for every query head of the KV head's group (one sequence, the same blocks).
template <int kBlockM, int kBlockN>
struct BwdWalk {
  int n_block, h_kv, b, key0;
  SequenceView seq_kv;
  Mask mask;
  int m_lo, steps_per_head, steps, group;
  int batch_index;  // of the tensors' batch mode: 0 when packed (varlen)

  // The block's coordinates and sequence; plan() the rest, once the block is known not empty().
  __device__ __forceinline__ BwdWalk(const Problem& p, bool deterministic) {
    init(p, deterministic ? gridDim.x - 1 - blockIdx.x : blockIdx.x, blockIdx.y, blockIdx.z);
  }
  // The persistent kernel's tile t of n_blocks key blocks a (KV head, sequence), in the order
  // the grid above dispatches its blocks: key blocks fastest (last first in deterministic mode).
  __device__ __forceinline__ BwdWalk(const Problem& p, bool deterministic, int t, int n_blocks) {
    const int n = t % n_blocks, rest = t / n_blocks;
    init(p, deterministic ? n_blocks - 1 - n : n, rest % p.heads_kv, rest / p.heads_kv);
  }
  __device__ __forceinline__ void init(const Problem& p, int n, int h, int seq) {
    n_block = n;
    h_kv = h;
    b = seq;
    seq_kv = sequence_view(p, b, h_kv * p.group, h_kv);
    key0 = n_block * kBlockN;
  }
  // varlen: this sequence is shorter than the longest, and the block has no keys.
  __device__ __forceinline__ bool empty() const { return key0 >= seq_kv.len_k; }
  __device__ __forceinline__ void plan(const Problem& p) {
    mask = p.mask;
    mask.seqlen_q = seq_kv.len_q;
    mask.seqlen_k = seq_kv.len_k;
    int m_hi;
    bwd::query_blocks<kBlockM, kBlockN>(mask, n_block, m_lo, m_hi);
    steps_per_head = m_hi - m_lo;
    group = p.group;
    steps = steps_per_head * group;
    batch_index = p.cu_seqlens_q != nullptr ? 0 : b;
  }
  // Step i's query head h and query block m.
  __device__ __forceinline__ void step_at(int i, int& h, int& m) const {
    const int gi = i / steps_per_head, j = i - gi * steps_per_head;
    h = h_kv * group + gi;
    m = m_lo + j;
  }
};

// The persistent kernel's readers of a tile slot, one arrival each: the MMA warpgroups' and the
// dQ writer warps' threads, and the producer thread.
template <class C>
constexpr int kTileReaders = C::kMmaThreads + 32 * C::kMmaWarpGroups + 1;

// The block's setup: thread 0 initialises K and V's barrier and prefetches the TMA descriptors,
// every thread builds the Q/dO pipeline (a stage is released by `consumers` arrivals), and the
// block syncs.
template <class C, bool kPersistent>
__device__ __forceinline__ typename C::Tma::PipelineQ bwd_pipeline(const ParamsBwd<C>& params,
                                                                   typename C::SharedStorage& ss,
                                                                   int consumers) {
  using PipelineQ = typename C::Tma::PipelineQ;
  if (threadIdx.x == 0) {
    cutlass::arch::ClusterTransactionBarrier::init(&ss.sync.kv_full, 1);
    if constexpr (kPersistent) {
      cutlass::arch::ClusterBarrier::init(&ss.tiles.kv_empty, C::kMmaThreads / 32);
      for (int s = 0; s < 2; ++s) {
        cutlass::arch::ClusterBarrier::init(&ss.tiles.tile_full[s], 1);
        cutlass::arch::ClusterBarrier::init(&ss.tiles.tile_empty[s], kTileReaders<C>);
      }
      cutlass::arch::ClusterBarrier::init(&ss.tiles.tile_loaded, 1);
    }
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_do.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
    for (int w = 0; w < C::kMmaWarpGroups; ++w) {  // dQ's hand-over to the writer warps
      for (int j = 0; j < C::kDqJobs; ++j) {
        cutlass::arch::ClusterBarrier::init(&ss.dq_staged[w][j], 4);  // a warp of w each
      }
    }
  }
  typename PipelineQ::Params pq;
  pq.role = threadIdx.x / 128 == 0 ? PipelineQ::ThreadCategory::Producer
                                   : PipelineQ::ThreadCategory::Consumer;
  pq.is_leader = threadIdx.x == 0;
  pq.num_consumers = consumers;
  pq.transaction_bytes = 2 * C::Tma::kBytesQ;  // Q and dO
  PipelineQ pipe(ss.sync.pipeline_q, pq, Shape<_1, _1, _1>{});
  cutlass::arch::fence_barrier_init();
  __syncthreads();
  return pipe;
}

// The producer's part of one tile, by thread 0: K and V of key block wk.n_block once, then Q and
// dO of every step into the two-stage ring (one transaction barrier per stage), `state` running
// on across tiles. kv_loads: the K/V loads of the tiles before (persistent kernel: the new K
// and V wait for the MMA warpgroups to be done with the last, behind the first step's Q and dO,
// which only waits for a free stage).
template <class C, bool kPersistent>
__device__ __forceinline__ void bwd_produce_tile(const ParamsBwd<C>& params,
                                                 typename C::SharedStorage& ss,
                                                 typename C::Tma::PipelineQ& pipe,
                                                 cutlass::PipelineState<C::kStages>& state,
                                                 const BwdWalk<C::kBlockM, C::kBlockN>& wk,
                                                 int kv_loads) {
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kD = C::kHeadDim;
  const SequenceView& seq_kv = wk.seq_kv;
  const int h_kv = wk.h_kv, batch_index = wk.batch_index;
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename C::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutK{});
  auto load_kv = [&] {
    Tensor mK = params.tma_k.get_tma_tensor(params.shape_k);
    Tensor mV = params.tma_v.get_tma_tensor(params.shape_v);
    Tensor gK =
        local_tile(domain_offset(make_coord(seq_kv.token_k, _0{}), mK(_, _, h_kv, batch_index)),
                   Shape<Int<kBlockN>, Int<kD>>{}, make_coord(wk.n_block, _0{}));
    Tensor gV =
        local_tile(domain_offset(make_coord(seq_kv.token_k, _0{}), mV(_, _, h_kv, batch_index)),
                   Shape<Int<kBlockN>, Int<kD>>{}, make_coord(wk.n_block, _0{}));
    auto [k_src, k_dst] = tma_partition(params.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                        group_modes<0, 2>(gK));
    auto [v_src, v_dst] = tma_partition(params.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                        group_modes<0, 2>(gV));
    if constexpr (kPersistent) {
      if (kv_loads > 0) Barrier::wait(&ss.tiles.kv_empty, (kv_loads - 1) & 1);
    }
    Barrier::arrive_and_expect_tx(&ss.sync.kv_full, 2 * C::Tma::kBytesK);
    copy(params.tma_k.with(ss.sync.kv_full), k_src, k_dst);
    copy(params.tma_v.with(ss.sync.kv_full), v_src, v_dst);
  };
  Tensor mQ = params.tma_q.get_tma_tensor(params.shape_q);
  Tensor mdO = params.tma_do.get_tma_tensor(params.shape_do);
  auto load_step = [&](int i) {
    int h, m;
    wk.step_at(i, h, m);
    const int row = seq_kv.token_q + m * kBlockM;
    Tensor gQ = local_tile(domain_offset(make_coord(row, _0{}), mQ(_, _, h, batch_index)),
                           Shape<Int<kBlockM>, Int<kD>>{}, make_coord(_0{}, _0{}));
    Tensor gdO = local_tile(domain_offset(make_coord(row, _0{}), mdO(_, _, h, batch_index)),
                            Shape<Int<kBlockM>, Int<kD>>{}, make_coord(_0{}, _0{}));
    auto [q_src, q_dst] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                        group_modes<0, 2>(gQ));
    auto [do_src, do_dst] = tma_partition(params.tma_do, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO),
                                          group_modes<0, 2>(gdO));
    pipe.producer_acquire(state);
    auto* full = pipe.producer_get_barrier(state);
    copy(params.tma_q.with(*full), q_src, q_dst(_, state.index()));
    copy(params.tma_do.with(*full), do_src, do_dst(_, state.index()));
    ++state;
  };
  int first = 0;
  if constexpr (kPersistent) {  // the first step's Q and dO, then K and V
    load_step(0);
    first = 1;
  }
  load_kv();
  // Not unrolled: at 24 registers, ptxas's four-fold unrolling spilled once the writer warps'
  // loop (bwd_dq_writer) shared the warpgroup's register budget.
#pragma unroll 1
  for (int i = first; i < wk.steps; ++i) load_step(i);
}

// The producer warpgroup of the one-tile kernel (split-D): gives up its registers, and its
// thread 0 produces the block's tile. Warps 1 and 2 go on to be the dQ writers.
template <class C>
__device__ __forceinline__ void bwd_producer(const ParamsBwd<C>& params,
                                             typename C::SharedStorage& ss,
                                             typename C::Tma::PipelineQ& pipe,
                                             const BwdWalk<C::kBlockM, C::kBlockN>& wk) {
  cutlass::arch::warpgroup_reg_dealloc<C::kProducerRegs>();
  if (threadIdx.x != 0 || wk.steps == 0) return;
  auto state = cutlass::make_producer_start_state<typename C::Tma::PipelineQ>();
  bwd_produce_tile<C, false>(params, ss, pipe, state, wk, 0);
}

// The persistent kernel's tiles, claimed by its scheduler (bwd_scheduler): the block's own first
// (blockIdx.x; deterministic mode claims every tile from the counter, so that a tile is only
// ever waited for by ones claimed before it, by blocks already running: see the top), then
// gridDim.x + the counter's next, until none is left.
template <class C>
__device__ __forceinline__ int bwd_claim_tile(const ParamsBwd<C>& params, bool first) {
  if (first && !params.bp.deterministic) return blockIdx.x;
  return (params.bp.deterministic ? 0 : gridDim.x) + atomicAdd(params.ws.tile_counter, 1);
}

// The persistent kernel's scheduler, the first thread of the producer warpgroup's last warp
// (its own 24 registers, which the producer thread's could not also hold without spilling):
// posts tile after tile with its steps in the tile ring (slot k % 2, once every reader of tile
// k - 2 took it), (-1, 0) last. Tile k + 1 is claimed once the producer has issued tile k's
// loads (tile_loaded), two steps before the MMA warpgroups end it: claimed earlier, a block's
// next tiles were fixed before it was known which block would be free first, and causal tiles,
// whose lengths differ, were dealt out unevenly (H200, d 128 16k causal: 14% slower than one
// block per tile).
template <class C>
__device__ __forceinline__ void bwd_scheduler(const ParamsBwd<C>& params,
                                              typename C::SharedStorage& ss) {
  using Barrier = cutlass::arch::ClusterBarrier;
  const Problem& p = params.bp.fwd;
#pragma unroll 1
  for (int k = 0;; ++k) {
    if (k > 0) Barrier::wait(&ss.tiles.tile_loaded, (k - 1) & 1);
    int steps = 0, t = bwd_claim_tile(params, k == 0);
#pragma unroll 1
    for (; t < params.tiles; t = bwd_claim_tile(params, false)) {
      BwdWalk<C::kBlockM, C::kBlockN> wk(p, params.bp.deterministic, t, params.n_blocks);
      if (!wk.empty()) {
        wk.plan(p);
        steps = wk.steps;
        break;
      }
    }
    const bool done = t >= params.tiles;
    const int slot = k & 1;
    if (k >= 2) Barrier::wait(&ss.tiles.tile_empty[slot], ((k >> 1) - 1) & 1);
    ss.tiles.tile[slot] = make_int2(done ? -1 : t, steps);
    Barrier::arrive(&ss.tiles.tile_full[slot]);
    if (done) return;
  }
}

// A reader of the persistent kernel's tile ring (each thread of the MMA warpgroups and the dQ
// writer warps, and the producer thread): tile k's (tile, steps), the slot handed back.
template <class C>
__device__ __forceinline__ int2 bwd_take_tile(typename C::SharedStorage& ss, int k) {
  const int slot = k & 1;
  cutlass::arch::ClusterBarrier::wait(&ss.tiles.tile_full[slot], (k >> 1) & 1);
  const int2 tile = ss.tiles.tile[slot];
  cutlass::arch::ClusterBarrier::arrive(&ss.tiles.tile_empty[slot]);
  return tile;
}

// The forward's LSE (log2 units) and D of this thread's kRows rows (two per 64-row slice) of
// query block row0; rows past the sequence get LSE = +inf (P = 0) and D = 0, so they contribute
// nothing.
template <int kRows, class Coords>
__device__ __forceinline__ void load_lse_dsum(const bwd::Workspace& ws, const Coords& coords,
                                              int64_t ws_row0, int row0, int len_q,
                                              float (&lse)[kRows], float (&dsum)[kRows]) {
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = get<0>(coords(r, 0));
    const bool valid = row0 + row < len_q;
    lse[r] = valid ? ws.lse_log2[ws_row0 + row] : INFINITY;
    dsum[r] = valid ? ws.dsum[ws_row0 + row] : 0.f;
  }
}

// A step's elementwise math on S and dP (rowcol), for the keys [key_first, key_first + kKeys) of
// the kRows-row query block at row0, in three parts. With softcap (the logit softcap·t, t =
// tanh(q·k·softcap_scale)) S becomes t and dP − D is times dS's factor 1 − t², once both GEMMs
// landed (softcap_logits); without, dP − D alone (dp_minus_d), after P. S becomes P =
// exp2(S·scale·log2e − LSE) (p_from_s): without softcap, under dP's GEMM.
template <class S, class DP, int kThreadRows>
__device__ __forceinline__ void softcap_logits(S& s, DP& dp, const Problem& p,
                                               const float (&dsum)[kThreadRows]) {
#pragma unroll
  for (int r = 0; r < size<0>(s); ++r)
#pragma unroll
    for (int j = 0; j < size<1>(s); ++j) {
      const float t = tanh_accurate(s(r, j) * p.softcap_scale);
      s(r, j) = t;
      dp(r, j) = (dp(r, j) - dsum[r]) * fmaf(-t, t, 1.f);
    }
}

template <class DP, int kThreadRows>
__device__ __forceinline__ void dp_minus_d(DP& dp, const float (&dsum)[kThreadRows]) {
  static_assert(decltype(size<0>(dp))::value == kThreadRows, "one D per row of dP");
#pragma unroll
  for (int r = 0; r < size<0>(dp); ++r)
#pragma unroll
    for (int j = 0; j < size<1>(dp); ++j) dp(r, j) -= dsum[r];
}

template <int kRows, int kKeys, int kThreadRows, class S, class Coords>
__device__ __forceinline__ void p_from_s(S& s, const Coords& coords, const Problem& p,
                                         const Mask& mask, const SequenceView& seq, int row0,
                                         int key_first, const float (&lse)[kThreadRows]) {
  static_assert(decltype(size<0>(s))::value == kThreadRows, "one LSE per row of S");
  const bool full =
      key_first + kKeys <= seq.len_k &&
      mask.tile_all_visible(row0, min(row0 + kRows, seq.len_q), key_first, key_first + kKeys);
  if (!full) apply_mask(s, coords, mask, row0, key_first);
#pragma unroll
  for (int r = 0; r < size<0>(s); ++r)
#pragma unroll
    for (int j = 0; j < size<1>(s); ++j) s(r, j) = exp2_approx(s(r, j) * p.scale_log2 - lse[r]);
}

// dK (scaled: S was scale·Q·Kᵀ) and dV of a warpgroup's (kKeys, kCols) accumulators, keys from
// key_first and columns from col_first, the keys that exist.
template <int kKeys, int kCols, class Element, class ThrMma, class Acc>
__device__ __forceinline__ void store_dk_dv(const BackwardProblem& bp, const SequenceView& seq_kv,
                                            int b, int h_kv, int key_first, int col_first,
                                            const ThrMma& thr_dkv, Acc& tdKrdK, Acc& tdVrdV) {
  const Problem& p = bp.fwd;
  Tensor kv_coords =
      rowcol(thr_dkv.partition_C(make_identity_tensor(Shape<Int<kKeys>, Int<kCols>>{})));
  Tensor dk = rowcol(tdKrdK);
  Tensor dv = rowcol(tdVrdV);
  const bool varlen = p.cu_seqlens_k != nullptr;
  Element* dk_g = static_cast<Element*>(bp.dk) +
                  (varlen ? seq_kv.token_k * bp.dk_stride[1] : b * bp.dk_stride[0]) +
                  h_kv * bp.dk_stride[2] + col_first;
  Element* dv_g = static_cast<Element*>(bp.dv) +
                  (varlen ? seq_kv.token_k * bp.dv_stride[1] : b * bp.dv_stride[0]) +
                  h_kv * bp.dv_stride[2] + col_first;
#pragma unroll
  for (int r = 0; r < size<0>(dk); ++r) {
    const int key = key_first + get<0>(kv_coords(r, 0));
    if (key < seq_kv.len_k) {
#pragma unroll
      for (int j = 0; j < size<1>(dk); j += 2) {
        const int col = get<1>(kv_coords(r, j));
        *reinterpret_cast<uint32_t*>(dk_g + key * bp.dk_stride[1] + col) =
            pack_pair<Element>(dk(r, j) * p.scale, dk(r, j + 1) * p.scale);
        *reinterpret_cast<uint32_t*>(dv_g + key * bp.dv_stride[1] + col) =
            pack_pair<Element>(dv(r, j), dv(r, j + 1));
      }
    }
  }
}

// A dQ writer's step, by its first thread: in deterministic mode (job.sem not null) waits for the
// job's turn, then issues the job's reduce-adds (box x staged at staged + job.offset[x]) and
// waits for them to have read the staging. Returns the semaphore whose turn (`turn`) to hand on
// once the adds completed.
template <class Job, class T>
__device__ __forceinline__ int* add_dq_job(const Job& job, const void* tma_desc, const T* staged,
                                           int& turn) {
  int* sem = job.sem;
  turn = job.turn;
  if (sem != nullptr) {
    while (bwd::load_acquire(sem) != turn) {
    }
    fence_proxy_async_global();
  }
#pragma unroll
  for (int x = 0; x < Job::kBoxes; ++x) {
    const int* crd = job.crd[x];
    SM90_TMA_REDUCE_ADD_4D::copy(tma_desc, staged + job.offset[x], crd[0], crd[1], crd[2], crd[3]);
  }
  tma_store_arrive();
  tma_store_wait<0>();  // the adds have read the staging
  return sem;
}

// Warp 1 + w of the producer warpgroup (24 registers), the dQ writer of MMA warpgroup w (d 64/128):
// per step (`it` counting them across a persistent block's tiles), once the warpgroup staged its
// dQ tile (mbarrier dq_staged[w][0]), the TMA reduce-adds of it into the fp32 accumulator at the
// boxes it left in dq_job (rows past the sequence add zeros; past the tensor they are clipped) —
// in deterministic mode after waiting for this key block's turn at the tile's semaphore, handed
// on once the adds completed — and the buffer released (named barrier kBwdDqFree0 + w) as soon
// as the adds have read it. So the turn's wait, the issue and the completion are off the MMA
// warpgroup's path: it only waits if the last add has not read the buffer a step later. A
// persistent block calls it once per tile: the buffer's first arrival per tile stands for the
// last tile's final one, which it skips.
template <class C>
__device__ __forceinline__ void bwd_dq_writer(const ParamsBwd<C>& params,
                                              typename C::SharedStorage& ss, int steps, int w,
                                              int& it) {
  if (steps == 0) return;
  using Barrier = cutlass::arch::ClusterBarrier;
  const float* staged = ss.dq.data() + w * cosize_v<typename C::SmemLayoutDq>;
  const bool leader = threadIdx.x % 32 == 0;
  named_barrier_arrive(kBwdDqFree0 + w, kBwdDqFreeThreads);  // the buffer starts free
#pragma unroll 1
  for (int i = 0; i < steps; ++i, ++it) {
    Barrier::wait(&ss.dq_staged[w][0], it & 1);
    int* sem = nullptr;
    int turn = 0;
    if (leader) sem = add_dq_job(ss.dq_job[w][0], params.tma_dq.get_tma_descriptor(), staged, turn);
    __syncwarp();
    // The warpgroup syncs once per step: no arrival past its last.
    if (i + 1 < steps) named_barrier_arrive(kBwdDqFree0 + w, kBwdDqFreeThreads);
    if (leader) release_turn(sem, turn);  // deterministic: the next key block's turn
  }
}

// Boxes [first, first + 2) of a dQ job: the TMA boxes of the staged (64, 64) fp32 tile sdq and of
// its tile gdq of the accumulator, their places in T's from `base` (add_dq_job's `staged`).
template <class C, class Job, class SmemDq, class GmemDq, class T>
__device__ __forceinline__ void dq_job_boxes(const ParamsBwd<C>& params, Job& job, int first,
                                             const SmemDq& sdq, const GmemDq& gdq, const T* base) {
  // The TMA's views of both tiles, ((box, boxes)).
  auto [g_v, s_v] = tma_partition(params.tma_dq, _0{}, Layout<_1>{}, group_modes<0, 2>(sdq),
                                  group_modes<0, 2>(gdq));
  Tensor g = tensor<0>(g_v);
  Tensor sm = tensor<0>(s_v);
  static_assert(decltype(size<1>(sm))::value == 2, "a (64, 64) fp32 tile is two boxes");
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const auto crd = g(_, x).data().coord_;
    static_assert(tuple_size<std::remove_cv_t<decltype(crd)>>::value == 4, "a 4-d TMA box");
    job.crd[first + x][0] = get<0>(crd);
    job.crd[first + x][1] = get<1>(crd);
    job.crd[first + x][2] = get<2>(crd);
    job.crd[first + x][3] = get<3>(crd);
    job.offset[first + x] =
        static_cast<int>(reinterpret_cast<const T*>(raw_pointer_cast(sm(_, x).data())) - base);
  }
}

// A dQ job's deterministic part: the semaphore of (head h, query block m, warpgroup wg's tile)
// and this key block's turn at it (worked out at the step's start), or none.
template <class C, class Job>
__device__ __forceinline__ void dq_job_turn(const ParamsBwd<C>& params,
                                            const typename C::SharedStorage& ss, Job& job, int b,
                                            int h, int m, int wg) {
  job.sem = nullptr;
  job.turn = 0;
  if (params.bp.deterministic) {
    job.sem = params.ws.sems +
              (static_cast<int64_t>(h) * params.bp.fwd.batch + b) * params.ws.m_blocks +
              m * (C::kBlockM / bwd::kMinBlockM) + wg;
    job.turn = ss.sync.dq_next_turn[wg];
  }
}

// The job of MMA warpgroup wg's staged dQ tile of query head h, query block m (d 64/128), by
// the warpgroup's first thread.
template <class C, class SmemDq>
__device__ __forceinline__ void post_dq_job(const ParamsBwd<C>& params,
                                            typename C::SharedStorage& ss,
                                            const BwdWalk<C::kBlockM, C::kBlockN>& wk,
                                            const SmemDq& sdQw, int h, int m, int wg) {
  const int row_tile = C::kDqSplitRows ? wg : 0, col_tile = C::kDqSplitRows ? 0 : wg;
  Tensor mdQ = params.tma_dq.get_tma_tensor(params.shape_dq);
  Tensor gdQ = local_tile(domain_offset(make_coord(wk.seq_kv.token_q + m * C::kBlockM, _0{}),
                                        mdQ(_, _, h, wk.batch_index)),
                          Shape<Int<C::kDqRows>, Int<C::kDqN>>{}, make_coord(row_tile, col_tile));
  auto& job = ss.dq_job[wg][0];
  dq_job_boxes<C>(params, job, 0, sdQw, gdQ, raw_pointer_cast(sdQw.data()));
  dq_job_turn<C>(params, ss, job, wk.b, h, m, wg);
}

// The MMA warpgroups of the d 64/128 kernel on one tile (the top says what a step does): `state`
// and `it` (the steps so far) run on across a persistent block's tiles, kv_uses counts the
// tiles before this one whose K and V were loaded.
template <class C, bool kPersistent>
__device__ __forceinline__ void bwd_mainloop(const ParamsBwd<C>& params,
                                             typename C::SharedStorage& ss,
                                             typename C::Tma::PipelineQ& pipe,
                                             const BwdWalk<C::kBlockM, C::kBlockN>& wk,
                                             cutlass::PipelineState<C::kStages>& state, int& it,
                                             int kv_uses) {
  using Element = typename C::Element;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kD = C::kHeadDim;
  constexpr int kKeysWG = C::kKeysWG;
  const BackwardProblem& bp = params.bp;
  const Problem& p = bp.fwd;
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename C::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutK{});
  const int ctid = threadIdx.x - 128, wg = ctid / 128, wtid = ctid % 128;
  const int key_wg = wk.key0 + wg * kKeysWG;  // this warpgroup's first key
  // The rows of this warpgroup's (64 rows, kDqN columns) tile of the step's dQ (config_bwd.cuh).
  const int dq_row_tile = C::kDqSplitRows ? wg : 0;
  typename C::Mma::SdP mma_sdp;
  typename C::Mma::Dkv mma_dkv;
  typename C::Mma::Dq mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(wtid);
  auto thr_dkv = mma_dkv.get_thread_slice(wtid);
  auto thr_dq = mma_dq.get_thread_slice(wtid);

  Tensor sQt = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQt{});
  Tensor sdOt = make_tensor(make_smem_ptr(ss.dout.data()), typename C::SmemLayoutQt{});
  Tensor sKw = local_tile(sK, Shape<Int<kKeysWG>, Int<kD>>{}, make_coord(wg, _0{}));
  Tensor sVw = local_tile(sV, Shape<Int<kKeysWG>, Int<kD>>{}, make_coord(wg, _0{}));
  Element* p_wg = ss.p.data() + wg * kBlockM * kKeysWG;
  Tensor sPw = make_tensor(make_smem_ptr(p_wg), typename C::SmemLayoutPWG{});
  Tensor sPwt = make_tensor(make_smem_ptr(p_wg), typename C::SmemLayoutPWGt{});
  Tensor sKdqt =
      make_tensor(make_smem_ptr(ss.k.data() + wg * C::kKDqOffset), typename C::SmemLayoutKDqt{});
  Tensor sdQw = make_tensor(make_smem_ptr(ss.dq.data() + wg * cosize_v<typename C::SmemLayoutDq>),
                            typename C::SmemLayoutDq{});

  // Operand descriptors (Q, dO: one slice per stage; dS: per buffer, in the loop).
  Tensor tSrQ = thr_sdp.partition_fragment_A(sQ);
  Tensor tSrK = thr_sdp.partition_fragment_B(sKw);
  Tensor tdPrdO = thr_sdp.partition_fragment_A(sdO);
  Tensor tdPrV = thr_sdp.partition_fragment_B(sVw);
  Tensor tdVrPt = thr_dkv.partition_fragment_A(sPwt);
  Tensor tdVrdOt = thr_dkv.partition_fragment_B(sdOt);
  Tensor tdKrQt = thr_dkv.partition_fragment_B(sQt);
  Tensor tdQrKt = thr_dq.partition_fragment_B(sKdqt);
  // Where this thread's accumulator elements go in shared memory, and their (row, key).
  Tensor tPsP = thr_sdp.partition_C(sPw);
  Tensor coords =
      rowcol(thr_sdp.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kKeysWG>>{})));
  constexpr int kThreadRows = kBlockM / 32;  // two rows of each 64-row slice

  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<kKeysWG>, Int<kD>>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<kKeysWG>, Int<kD>>{});
  clear(tdVrdV);
  clear(tdKrdK);

  const int64_t row_base = p.cu_seqlens_q != nullptr ? static_cast<int64_t>(wk.seq_kv.token_q)
                                                     : static_cast<int64_t>(wk.b) * p.seqlen_q;
  Tensor tdQsdQ = thr_dq.partition_C(sdQw);
  static_assert(
      dq_pairs_split_ok<std::remove_cv_t<std::remove_reference_t<decltype(sdQw.layout())>>>(),
      "store_f32_pairs' address split holds on dQ's staging tile");
  if (wk.steps > 0) Barrier::wait(&ss.sync.kv_full, kv_uses & 1);
  // A step's S is issued ahead, at the end of the step before (s_ahead, its LSE and D loaded
  // under it), so that it runs under that step's dQ staging. A step's dK is issued in the next
  // step (issue_dk below), and its Q/dO stage (`last`) given back once that dK landed (or after
  // the walk). A walk's first S is issued before the loop (ptxas waits for it there).
  PipelineState last = state;
  Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kKeysWG>>{});
  float lse[kThreadRows], dsum[kThreadRows];
  auto s_ahead = [&](int i, const PipelineState& st_i) {
    int h, m;
    wk.step_at(i, h, m);
    const int64_t ws_row = static_cast<int64_t>(h) * params.ws.rows + row_base + m * kBlockM;
    load_lse_dsum(params.ws, coords, ws_row, m * kBlockM, wk.seq_kv.len_q, lse, dsum);
    pipe.consumer_wait(st_i);
    wgmma<true, -1>(mma_sdp, tSrQ(_, _, _, st_i.index()), tSrK, tSrS);
  };
  // The dS buffer of the step whose count (`it`) is `count` (two, by its parity), and this
  // warpgroup's half of it.
  auto ds_buffer = [&](int count) { return ss.ds.data() + (count & 1) * kBlockM * kBlockN; };
  auto ds_half = [&](int count) { return ds_buffer(count) + wg * kBlockM * kKeysWG; };
  // dK_w += dS_wᵀ·Q of the step whose count was it_prev, its Q and dO in stage st_prev (its dS
  // buffer is written again two steps later).
  auto issue_dk = [&](int it_prev, int st_prev) {
    Tensor tdKrdSt = thr_dkv.partition_fragment_A(
        make_tensor(make_smem_ptr(ds_half(it_prev)), typename C::SmemLayoutPWGt{}));
    wgmma<false, -1>(mma_dkv, tdKrdSt, tdKrQt(_, _, _, st_prev), tdKrdK);
  };
  if (wk.steps > 0) s_ahead(0, state);
  for (int i = 0; i < wk.steps; ++i, ++state, ++it) {
    // The step's (head, query block) again, as s_ahead worked it out: carried from there in two
    // registers instead, the d 128 one-tile kernel spilled 8 bytes (compiled, 2026-11-28).
    int h, m;
    wk.step_at(i, h, m);
    if (bp.deterministic && wtid == 0) {  // here, where few registers are live
      ss.sync.dq_next_turn[wg] =
          bwd::add_order_descending<kBlockM, kBlockN>(wk.mask, wk.n_block, m);
    }
    const int row0 = m * kBlockM;
    const int st = state.index();

    // S (issued ahead) landed, and the last step's dQ before it. Every group, dP issued after
    // the wait: with dP issued first and a wait that left it pending, ptxas serialized every
    // wgmma (S's accumulators, in flight across the loop's back edge, read after that wait).
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    // The last step's dK, deferred to here so that P's math below runs under two GEMMs (it and
    // dP) instead of dP alone (H200, 2026-11-29: +0.5 to +1.9% at 512-2k, d 64 and 128); issued
    // first, so that it lands first and its Q and dO stage goes back to the producer once P's
    // math is done (dP first, dK after it and the stage back after dS: -1 to -10%).
    if (i > 0) issue_dk(it - 1, last.index());
    Tensor tdPrdP = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kKeysWG>>{});
    wgmma<true, -1>(mma_sdp, tdPrdO(_, _, _, st), tdPrV, tdPrdP);  // P's math runs under it
    Tensor s = rowcol(tSrS);
    Tensor dp = rowcol(tdPrdP);
    if (p.has_softcap()) {  // dS's factor 1 − t² comes from S: dP first
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdPrdP);
      softcap_logits(s, dp, p, dsum);
    }
    p_from_s<kBlockM, kKeysWG>(s, coords, p, wk.mask, wk.seq_kv, row0, key_wg, lse);
    warpgroup_wait<1>();  // the last step's dK landed (groups complete in order)
    warpgroup_fence_operand(tdKrdK);
    if (i > 0) pipe.consumer_release(last);  // its Q and dO are read
    // P_w is read only by this warpgroup's dV GEMM, which the last step waited for.
    if constexpr (C::kStmatrix) {
      store_stsm<Element>(mma_sdp, wtid, tSrS, sPw);
    } else {
      store_pairs<Element, C::kSharedStores>(tSrS, tPsP);
    }
    cutlass::arch::fence_view_async_shared();  // the writes, visible to wgmma
    named_barrier_sync(kBwdPWG0 + wg, 128);
    wgmma<false, -1>(mma_dkv, tdVrPt, tdVrdOt(_, _, _, st), tdVrdV);  // under dS's math
    warpgroup_wait<1>();  // dP landed (groups complete in order), dV in flight
    warpgroup_fence_operand(tdPrdP);
    if (!p.has_softcap()) dp_minus_d(dp, dsum);

#pragma unroll
    for (int e = 0; e < size(tdPrdP); ++e) tdPrdP(e) *= tSrS(e);  // dS = P ∘ (dP − D), dV running
    // dS into this step's buffer: the other warpgroup read the other buffer last step, and
    // this one two steps ago (behind the last kBwdDsReady).
    Element* ds_buf = ds_buffer(it);
    Element* ds_wg = ds_half(it);
    if constexpr (C::kStmatrix) {
      store_stsm<Element>(mma_sdp, wtid, tdPrdP,
                          make_tensor(make_smem_ptr(ds_wg), typename C::SmemLayoutPWG{}));
    } else {
      store_pairs<Element, C::kSharedStores>(
          tdPrdP,
          thr_sdp.partition_C(make_tensor(make_smem_ptr(ds_wg), typename C::SmemLayoutPWG{})));
    }
    cutlass::arch::fence_view_async_shared();
    named_barrier_sync(kBwdDsReady, C::kMmaThreads);

    // dQ's A operand: the (64 rows, all keys) of dS of this warpgroup's dQ tile.
    Tensor tdQrdS = thr_dq.partition_fragment_A(
        local_tile(make_tensor(make_smem_ptr(ds_buf), typename C::SmemLayoutP{}),
                   Shape<Int<C::kDqRows>, Int<kBlockN>>{}, make_coord(dq_row_tile, _0{})));
    Tensor tdQrdQ = partition_fragment_C(mma_dq, Shape<Int<C::kDqRows>, Int<C::kDqN>>{});
    // dQ, then the next step's S, under which dQ's staging below runs (wgmma groups complete
    // in order: waiting down to one pending group means dV and dQ are done); dK waits for the
    // next step (issue_dk).
    wgmma<true, -1>(mma_dq, tdQrdS, tdQrKt, tdQrdQ);
    if (i + 1 < wk.steps) {
      PipelineState next = state;
      ++next;
      s_ahead(i + 1, next);
    } else {
      issue_dk(it, st);  // the walk's last dK
    }
    warpgroup_wait<1>();
    warpgroup_fence_operand(tdQrdQ);
    warpgroup_fence_operand(tdVrdV);

    // dQ_w: staged as fp32 once the writer warp's last reduce-add has read the buffer, then
    // handed to it with the tile's coordinates (bwd_dq_writer): one arrival per warp, its first
    // thread's, after __syncwarp ordered the warp's writes before it.
    named_barrier_sync(kBwdDqFree0 + wg, kBwdDqFreeThreads);
    store_f32_pairs<C::kSharedStores>(tdQrdQ, tdQsdQ, dq_staging_flip(row_base));
    tma_store_fence();  // the writes, visible to the TMA unit
    if (wtid == 0) post_dq_job<C>(params, ss, wk, sdQw, h, m, wg);
    __syncwarp();
    if (wtid % 32 == 0) cutlass::arch::ClusterBarrier::arrive(&ss.dq_staged[wg][0]);
    last = state;  // its dK still to issue
  }
  warpgroup_wait<0>();  // the last dK: its Q and dO are read
  warpgroup_fence_operand(tdKrdK);
  if (wk.steps > 0) pipe.consumer_release(last);
  if constexpr (kPersistent) {  // K and V are read: the next tile's may come in
    __syncwarp();
    if (wk.steps > 0 && wtid % 32 == 0) cutlass::arch::ClusterBarrier::arrive(&ss.tiles.kv_empty);
  }

  store_dk_dv<kKeysWG, kD, Element>(bp, wk.seq_kv, wk.b, wk.h_kv, key_wg, 0, thr_dkv, tdKrdK,
                                    tdVrdV);
}

// The split-D kernel's MMA warpgroups and dQ writers (kernel_bwd_split_d_sm90.cuh).
template <class C>
__device__ __forceinline__ void bwd_mainloop_split_d(const ParamsBwd<C>& params,
                                                     typename C::SharedStorage& ss,
                                                     typename C::Tma::PipelineQ& pipe,
                                                     const BwdWalk<C::kBlockM, C::kBlockN>& wk);
template <class C>
__device__ __forceinline__ void bwd_dq_writer_split_d(const ParamsBwd<C>& params,
                                                      typename C::SharedStorage& ss,
                                                      typename C::Tma::PipelineQ& pipe, int steps,
                                                      int w);

// One block per tile (split-D; d 64/128 on long walks or with debug.persistent off): grid (key
// blocks, heads_kv, batch); the producer warpgroup, then the configuration's MMA warpgroups.
template <class C>
__device__ __forceinline__ void bwd_one_tile(const ParamsBwd<C>& params,
                                             typename C::SharedStorage& ss) {
  const BackwardProblem& bp = params.bp;
  // Deterministic mode dispatches the key blocks last first (see the top).
  BwdWalk<C::kBlockM, C::kBlockN> wk(bp.fwd, bp.deterministic);
  if (wk.empty()) return;
  wk.plan(bp.fwd);
  typename C::Tma::PipelineQ pipe = bwd_pipeline<C, false>(params, ss, C::kStageReleasers);
  if (threadIdx.x / 128 == 0) {  // the producer warpgroup
    bwd_producer<C>(params, ss, pipe, wk);
    const int warp = threadIdx.x / 32;
    if (warp >= 1 && warp <= C::kMmaWarpGroups) {
      if constexpr (C::kSplitD) {
        bwd_dq_writer_split_d<C>(params, ss, pipe, wk.steps, warp - 1);
      } else {
        int it = 0;
        bwd_dq_writer<C>(params, ss, wk.steps, warp - 1, it);
      }
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<C::kConsumerRegs>();
  if constexpr (C::kSplitD) {
    bwd_mainloop_split_d<C>(params, ss, pipe, wk);
  } else {
    cutlass::PipelineState<C::kStages> state;
    int it = 0;
    bwd_mainloop<C, false>(params, ss, pipe, wk, state, it, 0);
  }
}

// The persistent kernel (C::kPersistent; grid: one block per SM, at most one per tile): the
// scheduler claims and posts tiles (bwd_scheduler; tiles without keys, of a shorter packed
// sequence, it passes over), and every warp that reads the tile ring walks them in the order
// posted, `state` (the Q/dO ring) and `it` (dS's buffers, dQ's hand-over) running on across
// tiles. A tile's K and V come in once the MMA warpgroups are done with the last tile's, while
// they write its dK and dV.
template <class C>
__device__ __forceinline__ void bwd_persistent(const ParamsBwd<C>& params,
                                               typename C::SharedStorage& ss) {
  const Problem& p = params.bp.fwd;
  typename C::Tma::PipelineQ pipe = bwd_pipeline<C, true>(params, ss, C::kStageReleasers);
  if (threadIdx.x / 128 == 0) {  // the producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<C::kProducerRegs>();
    const int warp = threadIdx.x / 32;
    if (warp == C::kMmaWarpGroups + 1) {
      if (threadIdx.x % 32 == 0) bwd_scheduler<C>(params, ss);
    } else if (threadIdx.x == 0) {  // loads each tile's K, V and its steps' Q, dO
      auto state = cutlass::make_producer_start_state<typename C::Tma::PipelineQ>();
      int kv_loads = 0;
#pragma unroll 1
      for (int k = 0;; ++k) {
        const int2 tile = bwd_take_tile<C>(ss, k);
        if (tile.x < 0) return;
        if (tile.y > 0) {
          BwdWalk<C::kBlockM, C::kBlockN> wk(p, params.bp.deterministic, tile.x, params.n_blocks);
          wk.plan(p);
          bwd_produce_tile<C, true>(params, ss, pipe, state, wk, kv_loads++);
        }
        cutlass::arch::ClusterBarrier::arrive(&ss.tiles.tile_loaded);  // the next tile's claim
      }
    } else if (warp >= 1 && warp <= C::kMmaWarpGroups) {  // the dQ writers
      int it = 0;
#pragma unroll 1
      for (int k = 0;; ++k) {
        const int2 tile = bwd_take_tile<C>(ss, k);
        if (tile.x < 0) return;
        bwd_dq_writer<C>(params, ss, tile.y, warp - 1, it);
      }
    }
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<C::kConsumerRegs>();
  cutlass::PipelineState<C::kStages> state;
  int it = 0, kv_uses = 0;
#pragma unroll 1
  for (int k = 0;; ++k) {
    const int2 tile = bwd_take_tile<C>(ss, k);
    if (tile.x < 0) return;
    BwdWalk<C::kBlockM, C::kBlockN> wk(p, params.bp.deterministic, tile.x, params.n_blocks);
    wk.plan(p);
    bwd_mainloop<C, true>(params, ss, pipe, wk, state, it, kv_uses);
    kv_uses += wk.steps > 0 ? 1 : 0;
  }
}

// The backward's main kernel, both configurations: kPersistent (C::kPersistent only) the
// persistent walk, else one block per tile.
template <class C, bool kPersistent>
__global__ void __launch_bounds__(C::kThreads, 1)
    bwd_kernel(const __grid_constant__ ParamsBwd<C> params) {
  extern __shared__ __align__(1024) unsigned char smem[];
  typename C::SharedStorage& ss = *reinterpret_cast<typename C::SharedStorage*>(smem);
  if constexpr (kPersistent) {
    static_assert(C::kPersistent, "a configuration without the persistent walk");
    bwd_persistent<C>(params, ss);
  } else {
    bwd_one_tile<C>(params, ss);
  }
}

}  // namespace flashattn::fa3
