// The MMA warpgroups of the Hopper backward's main kernel (bwd_kernel, kernel_bwd_sm90.cuh) at
// head dim 256 (ConfigBwdSplitD, config_bwd.cuh says why the split): one block of three
// warpgroups owns kBlockN = 64 keys of one KV head of one sequence and walks every query block
// (64 rows) of every query head of its group that sees one of its keys.
//   warpgroup 0, the producer: bwd_producer, as at d 64/128, and warps 1, 2 the dQ writers
//       (bwd_dq_writer), which also hand each stage of Q and dO back to the producer once the
//       reduce-adds of the dQ staged there have read it;
//   warpgroups 1, 2 (w = 0, 1), per step:
//       S_w = Q·K_wᵀ and dP_w = dO·V_wᵀ for keys [32w, 32w + 32);
//       P_w → shared memory (this step's parity buffer), a block barrier, dV_w += Pᵀ·dO_w issued
//           (columns [128w, 128w + 128) of all 64 keys), and under it dS_w = P_w ∘ (dP_w − D) →
//           shared memory, a block barrier;
//       dK_w += dSᵀ·Q_w and two boxes of dQ_w = dS·K_w (64 columns each) issued together;
//       dQ_w → fp32 in this step's Q and dO columns [128w, 128w + 128) (only this warpgroup reads
//           them, and its GEMMs on them have completed), then handed to the writer warp (a job
//           of four TMA boxes; two jobs, since the warpgroup may post step i + 1's before the
//           writer is done with step i's: it needs step i's stage back only at step i + 2).
// Deterministic mode as at d 64/128 (kernel_bwd_sm90.cuh): one semaphore per (head, query block,
// warpgroup's columns), key blocks in descending order, waited for and handed on by the writer.
#pragma once

#include "kernels/fa3_sm90/kernel_bwd_sm90.cuh"

namespace flashattn::fa3 {

// Named barrier ids of the split-D kernel (0 is __syncthreads).
enum BwdSplitDBarrier : int {
  kSplitPReady = 1,   // both halves of this step's P are in shared memory (256 threads)
  kSplitDsReady = 2,  // both halves of this step's dS (256)
};

// Warp 1 + w of the producer warpgroup, the dQ writer of MMA warpgroup w (the d 64/128 kernel's
// bwd_dq_writer says what it does), which also hands each step's stage of Q and dO back to the
// producer once the reduce-adds of the dQ staged there have read it.
template <class C>
__device__ __forceinline__ void bwd_dq_writer_split_d(const ParamsBwd<C>& params,
                                                      typename C::SharedStorage& ss,
                                                      typename C::Tma::PipelineQ& pipe, int steps,
                                                      int w) {
  using Barrier = cutlass::arch::ClusterBarrier;
  const char* base = reinterpret_cast<const char*>(&ss);  // the jobs' offsets are from here
  const bool leader = threadIdx.x % 32 == 0;
  cutlass::PipelineState<C::kStages> stage;
#pragma unroll 1
  for (int i = 0; i < steps; ++i, ++stage) {
    Barrier::wait(&ss.dq_staged[w][i % C::kDqJobs], (i / C::kDqJobs) & 1);
    int* sem = nullptr;
    int turn = 0;
    if (leader) {
      sem =
          add_dq_job(ss.dq_job[w][i % C::kDqJobs], params.tma_dq.get_tma_descriptor(), base, turn);
      pipe.consumer_release(stage);  // the stage's dQ is read
    }
    __syncwarp();
    if (leader) release_turn(sem, turn);  // deterministic: the next key block's turn
  }
}

template <class C>
__device__ __forceinline__ void bwd_mainloop_split_d(const ParamsBwd<C>& params,
                                                     typename C::SharedStorage& ss,
                                                     typename C::Tma::PipelineQ& pipe,
                                                     const BwdWalk<C::kBlockM, C::kBlockN>& wk) {
  using Element = typename C::Element;
  using PipelineState = cutlass::PipelineState<C::kStages>;
  using Barrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int kBlockM = C::kBlockM, kBlockN = C::kBlockN, kD = C::kHeadDim;
  constexpr int kKeysWG = C::kKeysWG, kColsWG = C::kColsWG, kDqBox = C::kDqBox;
  const BackwardProblem& bp = params.bp;
  const Problem& p = bp.fwd;

  const int ctid = threadIdx.x - 128, wg = ctid / 128, wtid = ctid % 128;
  const int key_wg = wk.key0 + wg * kKeysWG;  // this warpgroup's first key of S and dP
  typename C::Mma::SdP mma_sdp;
  typename C::Mma::Dkv mma_dkv;
  typename C::Mma::Dq mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(wtid);
  auto thr_dkv = mma_dkv.get_thread_slice(wtid);
  auto thr_dq = mma_dq.get_thread_slice(wtid);

  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename C::SmemLayoutQ{});
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout.data()), typename C::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(ss.k.data()), typename C::SmemLayoutK{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v.data()), typename C::SmemLayoutK{});
  Tensor sKw = local_tile(sK, Shape<Int<kKeysWG>, Int<kD>>{}, make_coord(wg, _0{}));
  Tensor sVw = local_tile(sV, Shape<Int<kKeysWG>, Int<kD>>{}, make_coord(wg, _0{}));
  Tensor tSrQ = thr_sdp.partition_fragment_A(sQ);
  Tensor tSrK = thr_sdp.partition_fragment_B(sKw);
  Tensor tdPrdO = thr_sdp.partition_fragment_A(sdO);
  Tensor tdPrV = thr_sdp.partition_fragment_B(sVw);
  // dQ's B operand: this warpgroup's two 64-column boxes of K (column, key).
  Element* k_half = ss.k.data() + wg * C::kHalfElems;
  Tensor tdQrK0 = thr_dq.partition_fragment_B(
      make_tensor(make_smem_ptr(k_half), typename C::SmemLayoutKBoxT{}));
  Tensor tdQrK1 = thr_dq.partition_fragment_B(make_tensor(
      make_smem_ptr(k_half + cosize_v<typename C::SmemLayoutKBox>), typename C::SmemLayoutKBoxT{}));
  Tensor coords = rowcol(thr_sdp.partition_C(make_identity_tensor(Shape<_64, Int<kKeysWG>>{})));

  Tensor tdVrdV = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kColsWG>>{});
  Tensor tdKrdK = partition_fragment_C(mma_dkv, Shape<Int<kBlockN>, Int<kColsWG>>{});
  clear(tdVrdV);
  clear(tdKrdK);

  const int64_t row_base = p.cu_seqlens_q != nullptr ? static_cast<int64_t>(wk.seq_kv.token_q)
                                                     : static_cast<int64_t>(wk.b) * p.seqlen_q;
  PipelineState state;
  if (wk.steps > 0) Barrier::wait(&ss.sync.kv_full, 0);
  for (int i = 0; i < wk.steps; ++i, ++state) {
    int h, m;
    wk.step_at(i, h, m);
    if (bp.deterministic && wtid == 0) {
      ss.sync.dq_next_turn[wg] =
          bwd::add_order_descending<kBlockM, kBlockN>(wk.mask, wk.n_block, m);
    }
    const int row0 = m * kBlockM;
    const int64_t ws_row0 = static_cast<int64_t>(h) * params.ws.rows + row_base + row0;
    float lse[2], dsum[2];
    load_lse_dsum(params.ws, coords, ws_row0, row0, wk.seq_kv.len_q, lse, dsum);
    pipe.consumer_wait(state);
    const int st = state.index();

    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<_64, Int<kKeysWG>>{});
    Tensor tdPrdP = partition_fragment_C(mma_sdp, Shape<_64, Int<kKeysWG>>{});
    wgmma<true, -1>(mma_sdp, tSrQ(_, _, _, st), tSrK, tSrS);
    wgmma<true, -1>(mma_sdp, tdPrdO(_, _, _, st), tdPrV, tdPrdP);
    warpgroup_wait<1>();  // S landed; P's math and store run under dP's GEMM
    warpgroup_fence_operand(tSrS);
    Tensor s = rowcol(tSrS);
    Tensor dp = rowcol(tdPrdP);
    if (p.has_softcap()) {  // dS's factor 1 − t² comes from S: dP first
      warpgroup_wait<0>();
      warpgroup_fence_operand(tdPrdP);
      softcap_logits(s, dp, p, dsum);
    }
    p_from_s<kBlockM, kKeysWG>(s, coords, p, wk.mask, wk.seq_kv, row0, key_wg, lse);
    // P and dS of this step's parity: both warpgroups read the other parity's last step, and
    // each waited for all its GEMMs before this step's first barrier.
    Element* p_buf = ss.p.data() + (i & 1) * cosize_v<typename C::SmemLayoutP>;
    Element* ds_buf = ss.ds.data() + (i & 1) * cosize_v<typename C::SmemLayoutP>;
    Tensor sP = make_tensor(make_smem_ptr(p_buf), typename C::SmemLayoutP{});
    Tensor sdS = make_tensor(make_smem_ptr(ds_buf), typename C::SmemLayoutP{});
    store_pairs<Element, C::kSharedStores>(
        tSrS,
        thr_sdp.partition_C(local_tile(sP, Shape<_64, Int<kKeysWG>>{}, make_coord(_0{}, wg))));
    cutlass::arch::fence_view_async_shared();
    named_barrier_sync(kSplitPReady, C::kMmaThreads);
    // This warpgroup's columns of this stage's Q and dO.
    Element* q_half = ss.q.data() + st * C::kStageElems + wg * C::kHalfElems;
    Element* do_half = ss.dout.data() + st * C::kStageElems + wg * C::kHalfElems;
    Tensor tdVrPt =
        thr_dkv.partition_fragment_A(make_tensor(make_smem_ptr(p_buf), typename C::SmemLayoutPt{}));
    Tensor tdVrdOt = thr_dkv.partition_fragment_B(
        make_tensor(make_smem_ptr(do_half), typename C::SmemLayoutHalfT{}));
    wgmma<false, -1>(mma_dkv, tdVrPt, tdVrdOt, tdVrdV);  // under dS's math
    warpgroup_wait<1>();  // dP landed (groups complete in order), dV in flight
    warpgroup_fence_operand(tdPrdP);
    if (!p.has_softcap()) dp_minus_d(dp, dsum);

#pragma unroll
    for (int e = 0; e < size(tdPrdP); ++e) tdPrdP(e) *= tSrS(e);  // dS = P ∘ (dP − D)
    store_pairs<Element, C::kSharedStores>(
        tdPrdP,
        thr_sdp.partition_C(local_tile(sdS, Shape<_64, Int<kKeysWG>>{}, make_coord(_0{}, wg))));
    cutlass::arch::fence_view_async_shared();
    named_barrier_sync(kSplitDsReady, C::kMmaThreads);

    Tensor tdKrdSt = thr_dkv.partition_fragment_A(
        make_tensor(make_smem_ptr(ds_buf), typename C::SmemLayoutPt{}));
    Tensor tdKrQt = thr_dkv.partition_fragment_B(
        make_tensor(make_smem_ptr(q_half), typename C::SmemLayoutHalfT{}));
    Tensor tdQrdS = thr_dq.partition_fragment_A(sdS);
    Tensor tdQrdQ0 = partition_fragment_C(mma_dq, Shape<_64, Int<kDqBox>>{});
    Tensor tdQrdQ1 = partition_fragment_C(mma_dq, Shape<_64, Int<kDqBox>>{});
    wgmma<false, -1>(mma_dkv, tdKrdSt, tdKrQt, tdKrdK);
    wgmma<true, -1>(mma_dq, tdQrdS, tdQrK0, tdQrdQ0);
    wgmma<true, 0>(mma_dq, tdQrdS, tdQrK1, tdQrdQ1);
    warpgroup_fence_operand(tdVrdV);
    warpgroup_fence_operand(tdKrdK);

    // dQ_w's two tiles: fp32 over this warpgroup's (now read) columns of Q and of dO, then handed
    // to the writer warp, which adds them and gives the stage back (bwd_dq_writer).
    Tensor sdQ0 =
        make_tensor(make_smem_ptr(reinterpret_cast<float*>(q_half)), typename C::SmemLayoutDq{});
    Tensor sdQ1 =
        make_tensor(make_smem_ptr(reinterpret_cast<float*>(do_half)), typename C::SmemLayoutDq{});
    Tensor tdQsdQ0 = thr_dq.partition_C(sdQ0);
    Tensor tdQsdQ1 = thr_dq.partition_C(sdQ1);
    static_assert(
        dq_pairs_split_ok<std::remove_cv_t<std::remove_reference_t<decltype(sdQ0.layout())>>>(),
        "store_f32_pairs' address split holds on dQ's staging tile");
    const uint32_t dq_flip = dq_staging_flip(row_base);
    store_f32_pairs<C::kSharedStores>(tdQrdQ0, tdQsdQ0, dq_flip);
    store_f32_pairs<C::kSharedStores>(tdQrdQ1, tdQsdQ1, dq_flip);
    tma_store_fence();
    if (wtid == 0) {
      Tensor mdQ = params.tma_dq.get_tma_tensor(params.shape_dq);
      Tensor gdQ = local_tile(
          domain_offset(make_coord(wk.seq_kv.token_q + row0, _0{}), mdQ(_, _, h, wk.batch_index)),
          Shape<_64, Int<kDqBox>>{}, make_coord(_0{}, _));
      auto& job = ss.dq_job[wg][i % C::kDqJobs];
      const char* base = reinterpret_cast<const char*>(&ss);
      dq_job_boxes<C>(params, job, 0, sdQ0, gdQ(_, _, 2 * wg), base);
      dq_job_boxes<C>(params, job, 2, sdQ1, gdQ(_, _, 2 * wg + 1), base);
      dq_job_turn<C>(params, ss, job, wk.b, h, m, wg);
    }
    __syncwarp();
    if (wtid % 32 == 0) cutlass::arch::ClusterBarrier::arrive(&ss.dq_staged[wg][i % C::kDqJobs]);
  }
  store_dk_dv<kBlockN, kColsWG, Element>(bp, wk.seq_kv, wk.b, wk.h_kv, wk.key0, wg * kColsWG,
                                         thr_dkv, tdKrdK, tdVrdV);
}

}  // namespace flashattn::fa3
