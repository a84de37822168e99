// Where a short decode step spends its time: the split and combine kernels of the library, with
// %globaltimer and clock64 stamps compiled in (the FA_TRACE hooks of kernel.cuh and combine.cuh,
// common/trace.h; empty in the library), with 4- and 8-warp split blocks at several split counts,
// timed as flashattn-bench --decode times them (events around each call, enqueued back to back,
// inputs rotated over > 256 MB, median of 30) beside a plain read of the same bytes. A diagnosis
// tool, not part of the library build: the stamps cost a global store each. Build and run on the
// GPU machine (from the repository root):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude -o /tmp/dtl
//     bench/decode_timeline.cu src/api/decode_splits.cpp   (one command), then /tmp/dtl
// For each shape it prints the event-timed median with stamps off and on, and the medians over
// the timed calls of the stamps relative to the first split block's start (microseconds).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kRec = 32;                         // stamps per block (slots: stamp_split)
__device__ unsigned long long* g_tl = nullptr;   // [call][block][kRec], null: stamps off
__device__ unsigned long long* g_tlc = nullptr;  // [call][combine block][8]
__device__ int g_call = 0;

__device__ __forceinline__ unsigned long long now(int dep) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "r"(dep) : "memory");
  return t;
}

// Split kernel slots: 0 start, 1 the length is known, 15 every warp done streaming (first
// barrier), 4 the warps' states are merged, 5 end (thread 0); 6+w first tile landed, 10+w stream
// done (lane 0 of warp w); 14 the SM. Slot 16 + i holds the SM clock (clock64) at stamp i.
__device__ __forceinline__ void stamp_split(int slot, int dep) {
  unsigned long long* tl = g_tl;
  if (tl == nullptr) return;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int idx = slot;
  if (slot == 2 || slot == 3) {
    if (lane != 0) return;
    idx = (slot == 2 ? 6 : 10) + warp;
  } else if (slot == 6) {
    if (threadIdx.x != 0) return;
    idx = 15;
  } else if (threadIdx.x != 0) {
    return;
  }
  const unsigned long long t = now(dep);
  const int nb = gridDim.x * gridDim.y * gridDim.z;
  const int bl = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned long long* rec = tl + (size_t(g_call) * nb + bl) * kRec;
  rec[idx] = t;
  rec[16 + idx] = clock64();
  if (slot == 0) {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    rec[14] = s;
  }
}
__device__ __forceinline__ void stamp_combine(int slot) {
  unsigned long long* tl = g_tlc;
  if (tl == nullptr || threadIdx.x != 0) return;
  tl[(size_t(g_call) * gridDim.x + blockIdx.x) * 8 + slot] = now(0);
  tl[(size_t(g_call) * gridDim.x + blockIdx.x) * 8 + 4 + slot] = clock64();
}
// The library's trace hooks (common/trace.h): role 0 is the split kernel, 1 the combine.
#define FA_TRACE_HOOK(role, slot, after) \
  ((role) == 0 ? stamp_split(slot, after) : stamp_combine(slot))
// The plain read's start and end in the same record slots as a split block's (0 and 5).
#define READ_FLOOR_BEGIN()                 \
  if (g_tl != nullptr && threadIdx.x == 0) \
  g_tl[(size_t(g_call) * gridDim.x + blockIdx.x) * kRec] = now(0)
#define READ_FLOOR_END(dep)                \
  __syncthreads();                         \
  if (g_tl != nullptr && threadIdx.x == 0) \
  g_tl[(size_t(g_call) * gridDim.x + blockIdx.x) * kRec + 5] = now(dep)
#include "common/decode_problem.h"
#include "api/decode_splits.h"
#include "kernels/decode/combine.cuh"
#include "kernels/decode/kernel.cuh"
#include "read_floor.cuh"

using namespace flashattn;
using namespace flashattn::decoding;

__global__ void next_call() {
  ++g_call;
}
using C = Config<__nv_bfloat16, 128>;      // the library's block: 4 warps, two blocks per SM
using C8 = Config<__nv_bfloat16, 128, 8>;  // 8 warps, one block per SM

// As run_decode launches them (launch.cuh); `combine` false leaves the partials unmerged.
template <class CC = C>
void launch_decode(const DecodeProblem& p, bool combine = true) {
  const dim3 grid(p.row_chunks * p.num_splits, p.heads_kv, p.batch);
  split_kernel<CC><<<grid, CC::kThreads, CC::kSmemBytes, 0>>>(p);
  if (p.num_splits == 1 || !combine) return;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(p.batch * p.seqlen_q * p.heads_q);
  cfg.blockDim = dim3(32 * kCombineWarps);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, combine_kernel<__nv_bfloat16, 128>, p));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `launch(i)` (i: the input set) `iters` times; with stamps, copies them back.
template <class F>
double timed(F&& launch, int iters, unsigned long long* tl, unsigned long long* tlc) {
  unsigned long long* null = nullptr;
  for (int i = 0; i < 4; ++i) launch(i);
  CK(cudaDeviceSynchronize());
  const int zero = 0;
  CK(cudaMemcpyToSymbol(g_call, &zero, sizeof zero));
  if (tl) CK(cudaMemset(tl, 0, size_t(iters) * 4096 * kRec * 8));
  CK(cudaMemcpyToSymbol(g_tl, tl ? &tl : &null, sizeof tl));
  CK(cudaMemcpyToSymbol(g_tlc, tlc ? &tlc : &null, sizeof tlc));
  std::vector<cudaEvent_t> ev(2 * iters);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(ev[2 * i]);
    launch(i);
    cudaEventRecord(ev[2 * i + 1]);
    next_call<<<1, 1>>>();
  }
  CK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]);
    t.push_back(1000.0 * ms);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  CK(cudaMemcpyToSymbol(g_tl, &null, sizeof null));
  CK(cudaMemcpyToSymbol(g_tlc, &null, sizeof null));
  return median(t);
}

int main() {
  const int iters = 30;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaFuncSetAttribute(split_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          C::kSmemBytes));
  CK(cudaFuncSetAttribute(split_kernel<C8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          C8::kSmemBytes));
  CK(cudaFuncSetAttribute(read_chunks<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, split_kernel<C>, C::kThreads,
                                                   C::kSmemBytes));
  unsigned long long *tl, *tlc;
  CK(cudaMalloc(&tl, size_t(iters) * 4096 * kRec * 8));
  CK(cudaMalloc(&tlc, size_t(iters) * 4096 * 8 * 8));
  unsigned* sink;
  CK(cudaMalloc(&sink, 1 << 20));
  struct Shape {
    int batch, seqlen;
  };
  for (Shape sh : {Shape{1, 16384}, Shape{1, 32768}, Shape{8, 4096}})
    for (int head_major : {0, 1}) {
      const int hq = 32, hk = 8, d = 128;
      const size_t kv_elems = size_t(sh.batch) * sh.seqlen * hk * d;
      const size_t bytes = 2 * kv_elems * 2;
      const int sets = int(std::max<size_t>(2, (size_t(768) << 20) / bytes + 1));
      std::vector<void*> kbuf(sets), vbuf(sets);
      for (int s = 0; s < sets; ++s) {  // K then V in one allocation, so one kernel can read both
        CK(cudaMalloc(&kbuf[s], bytes));
        CK(cudaMemset(kbuf[s], 0x3c, bytes));
        vbuf[s] = static_cast<char*>(kbuf[s]) + bytes / 2;
      }
      void *q, *o;
      float* lse;
      int32_t* seqlens;
      CK(cudaMalloc(&q, size_t(sh.batch) * hq * d * 2));
      CK(cudaMemset(q, 0x3c, size_t(sh.batch) * hq * d * 2));
      CK(cudaMalloc(&o, size_t(sh.batch) * hq * d * 2));
      CK(cudaMalloc(&lse, size_t(sh.batch) * hq * 4));
      CK(cudaMalloc(&seqlens, sh.batch * 4));
      std::vector<int32_t> lens(sh.batch, sh.seqlen);
      CK(cudaMemcpy(seqlens, lens.data(), sh.batch * 4, cudaMemcpyHostToDevice));

      DecodeProblem p;
      p.batch = sh.batch;
      p.seqlen_q = 1;
      p.heads_q = hq;
      p.heads_kv = hk;
      p.head_dim = d;
      p.group = hq / hk;
      p.rows = p.group;
      p.row_chunks = 1;
      p.q = q;
      p.o = o;
      p.lse = lse;
      p.q_stride[0] = p.o_stride[0] = int64_t(hq) * d;
      p.q_stride[1] = p.o_stride[1] = int64_t(hq) * d;
      p.q_stride[2] = p.o_stride[2] = d;
      // (batch, seqlen, heads, d) as flash_attn_with_kvcache takes it, or head-major
      // (batch, heads, seqlen, d) as SDPA's K/V are: a head's keys contiguous.
      p.k_stride[0] = p.v_stride[0] = int64_t(sh.seqlen) * hk * d;
      p.k_stride[1] = p.v_stride[1] = head_major ? d : int64_t(hk) * d;
      p.k_stride[2] = p.v_stride[2] = head_major ? int64_t(sh.seqlen) * d : d;
      p.cache_batch = sh.batch;
      p.capacity = sh.seqlen;
      p.cache_seqlens = seqlens;
      p.scale_log2 = 1.4426950408889634f / sqrtf(float(d));
      DecodeSplitInputs in;
      in.blocks = sh.batch * hk;
      in.key_tiles = sh.seqlen / kDecodeKeysPerTile;
      in.num_sms = sms;
      in.blocks_per_sm = per_sm;
      p.num_splits = decode_num_splits(in);
      const size_t prow = size_t(64) * sh.batch * hq;
      CK(cudaMalloc(&p.o_partial, prow * (d + 1) * 4));
      p.lse_partial = p.o_partial + prow * d;
      const int nb = p.num_splits * hk * sh.batch;
      const int rows = sh.batch * hq;

      auto decode = [&](int i) {
        DecodeProblem pi = p;
        pi.k_cache = kbuf[i % sets];
        pi.v_cache = vbuf[i % sets];
        launch_decode(pi);
      };
      const double plain = timed(decode, iters, nullptr, nullptr);
      if (!head_major) {
        const double split_only = timed(
            [&](int i) {
              DecodeProblem pi = p;
              pi.k_cache = kbuf[i % sets];
              pi.v_cache = vbuf[i % sets];
              launch_decode(pi, false);
            },
            iters, nullptr, nullptr);
        printf(
            "\n[b%d s%d] event medians: split kernel alone (partials unmerged) %.2f us | with the "
            "combine kernel %.2f us (%d splits)\n",
            sh.batch, sh.seqlen, split_only, plain, p.num_splits);
        const int base = sh.batch == 1 ? 16 : 2;
        for (int warps : {4, 8}) {
          printf("  %d-warp blocks, splits %d/%d/%d:", warps, base / 2, base, base * 2);
          for (int ns : {base / 2, base, base * 2}) {
            printf(" %.2f", timed(
                                [&](int i) {
                                  DecodeProblem pi = p;
                                  pi.num_splits = ns;
                                  pi.k_cache = kbuf[i % sets];
                                  pi.v_cache = vbuf[i % sets];
                                  if (warps == 4)
                                    launch_decode<C>(pi);
                                  else
                                    launch_decode<C8>(pi);
                                },
                                iters, nullptr, nullptr));
          }
          printf(" us\n");
        }
      }
      const double stamped = timed(decode, iters, tl, tlc);
      std::vector<unsigned long long> h(size_t(iters) * nb * kRec), hc(size_t(iters) * rows * 8);
      CK(cudaMemcpy(h.data(), tl, h.size() * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hc.data(), tlc, hc.size() * 8, cudaMemcpyDeviceToHost));

      printf(
          "\n== batch %d, %d keys, 32/8 heads, hd 128, %s: %.1f MB, %d splits, %d split blocks, "
          "%d combine blocks\n",
          sh.batch, sh.seqlen, head_major ? "cache (b, h, s, d)" : "cache (b, s, h, d)",
          bytes / 1e6, p.num_splits, nb, rows);
      printf("event median: %.2f us (stamps off), %.2f us (stamps on)\n", plain, stamped);
      // Per call: times relative to the first split block's start, in us.
      std::vector<double> cyc_bar, cyc_smem, cyc_out, cyc_comb, cyc_wait, cyc_load;
      std::vector<double> start_max, len_med, first_med, first_max, stream_min, stream_med,
          stream_max, merged_max, end_med, end_max, c_start_min, c_wait_min, c_wait_max, c_end_max,
          span;
      unsigned long long min_step = ~0ull;
      for (int c = 0; c < iters; ++c) {
        const unsigned long long* r = &h[size_t(c) * nb * kRec];
        unsigned long long t0 = ~0ull;
        for (int b = 0; b < nb; ++b) t0 = std::min(t0, r[b * kRec]);
        auto rel = [&](unsigned long long t) { return (double(t) - double(t0)) / 1000.0; };
        std::vector<double> st, ln, ft, se, mg, en;
        for (int b = 0; b < nb; ++b) {
          const unsigned long long* x = r + b * kRec;
          st.push_back(rel(x[0]));
          ln.push_back(rel(x[1]) - rel(x[0]));
          ft.push_back(rel(x[6]));
          se.push_back(rel(*std::max_element(x + 10, x + 14)));
          mg.push_back(rel(x[4]));
          en.push_back(rel(x[5]));
          for (int k = 1; k < 6; ++k)
            if (x[k] > x[k - 1] && x[k] - x[k - 1] < min_step) min_step = x[k] - x[k - 1];
        }
        start_max.push_back(*std::max_element(st.begin(), st.end()));
        len_med.push_back(median(ln));
        first_med.push_back(median(ft));
        first_max.push_back(*std::max_element(ft.begin(), ft.end()));
        stream_min.push_back(*std::min_element(se.begin(), se.end()));
        stream_med.push_back(median(se));
        stream_max.push_back(*std::max_element(se.begin(), se.end()));
        merged_max.push_back(*std::max_element(mg.begin(), mg.end()));
        end_med.push_back(median(en));
        end_max.push_back(*std::max_element(en.begin(), en.end()));
        double cs = 1e30, cwmin = 1e30, cwmax = -1e30, ce = -1e30;
        for (int b = 0; b < rows && p.num_splits > 1; ++b) {
          const unsigned long long* x = &hc[(size_t(c) * rows + b) * 8];
          cs = std::min(cs, rel(x[0]));
          cwmin = std::min(cwmin, rel(x[1]));
          cwmax = std::max(cwmax, rel(x[1]));
          ce = std::max(ce, rel(x[2]));
        }
        // SM clock cycles of the split blocks' epilogue and the combine's work (clock64 is
        // per SM, so only differences within one block are taken).
        for (int b = 0; b < nb; ++b) {
          const unsigned long long* x = r + b * kRec;
          const unsigned long long last_warp = *std::max_element(x + 26, x + 30);
          cyc_bar.push_back(double(x[31]) - double(last_warp));
          cyc_smem.push_back(double(x[20]) - double(x[31]));
          cyc_out.push_back(double(x[21]) - double(x[20]));
        }
        for (int b = 0; b < rows && p.num_splits > 1; ++b) {
          const unsigned long long* x = &hc[(size_t(c) * rows + b) * 8];
          cyc_comb.push_back(double(x[6]) - double(x[5]));
          cyc_load.push_back(double(x[7]) - double(x[5]));
          cyc_wait.push_back(double(x[5]) - double(x[4]));
        }
        c_start_min.push_back(cs);
        c_wait_min.push_back(cwmin);
        c_wait_max.push_back(cwmax);
        c_end_max.push_back(ce);
        span.push_back(p.num_splits > 1 ? ce : end_max.back());
      }
      printf("globaltimer: smallest nonzero step seen %llu ns\n", min_step);
      auto pct = [](std::vector<double> v, double q) {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : v[size_t(q * (v.size() - 1))];
      };
      printf(
          "cycles (median / p90 / max over blocks and calls): split epilogue: last warp -> "
          "first barrier %.0f/%.0f/%.0f, warp states to smem + barrier %.0f/%.0f/%.0f, merge + "
          "partial stores %.0f/%.0f/%.0f; combine: start -> wait returns %.0f/%.0f/%.0f, "
          "work %.0f/%.0f/%.0f\n",
          pct(cyc_bar, .5), pct(cyc_bar, .9), pct(cyc_bar, 1), pct(cyc_smem, .5), pct(cyc_smem, .9),
          pct(cyc_smem, 1), pct(cyc_out, .5), pct(cyc_out, .9), pct(cyc_out, 1), pct(cyc_wait, .5),
          pct(cyc_wait, .9), pct(cyc_wait, 1), pct(cyc_comb, .5), pct(cyc_comb, .9),
          pct(cyc_comb, 1));
      printf("cycles: combine, wait returns -> its warps' loads merged %.0f/%.0f/%.0f\n",
             pct(cyc_load, .5), pct(cyc_load, .9), pct(cyc_load, 1));
      printf(
          "split blocks: last start %.2f | length known after %.2f | first tile (warp 0) median "
          "%.2f, last %.2f\n",
          median(start_max), median(len_med), median(first_med), median(first_max));
      printf(
          "split blocks: stream done min %.2f median %.2f max %.2f | merged max %.2f | end "
          "median %.2f max %.2f\n",
          median(stream_min), median(stream_med), median(stream_max), median(merged_max),
          median(end_med), median(end_max));
      if (p.num_splits > 1)
        printf("combine: first start %.2f | wait returns %.2f .. %.2f | last end %.2f\n",
               median(c_start_min), median(c_wait_min), median(c_wait_max), median(c_end_max));
      printf("first split start to last end: %.2f us; event interval minus that: %.2f us\n",
             median(span), stamped - median(span));

      // The same bytes (K and V of each set) read by a plain kernel, timed the same way.
      for (int blocks : {264, 1056}) {
        if (head_major) break;
        const size_t vpb = bytes / 16 / blocks;
        const double us = timed(
            [&](int i) {
              read_chunks<4>
                  <<<blocks, 256>>>(static_cast<const uint4*>(kbuf[i % sets]), vpb, sink, nullptr);
            },
            iters, tl, nullptr);
        h.resize(size_t(iters) * blocks * kRec);
        CK(cudaMemcpy(h.data(), tl, h.size() * 8, cudaMemcpyDeviceToHost));
        std::vector<double> spans, first_end;
        for (int c = 0; c < iters; ++c) {
          unsigned long long lo = ~0ull, hi = 0, fe = ~0ull;
          for (int b = 0; b < blocks; ++b) {
            const unsigned long long* x = &h[(size_t(c) * blocks + b) * kRec];
            lo = std::min(lo, x[0]);
            hi = std::max(hi, x[5]);
            fe = std::min(fe, x[5]);
          }
          spans.push_back((hi - lo) / 1000.0);
          first_end.push_back((fe - lo) / 1000.0);
        }
        printf(
            "plain read of the same %.1f MB (%d x 256 threads, 4 loads in flight each): %.2f us; "
            "first start to last end %.2f us (first block done at %.2f); event minus span %.2f\n",
            bytes / 1e6, blocks, us, median(spans), median(first_end), us - median(spans));
        // The same with 100 KB of dynamic shared memory per block (as the split kernel asks).
        const double us_smem = timed(
            [&](int i) {
              read_chunks<4><<<blocks, 256, 100 * 1024>>>(static_cast<const uint4*>(kbuf[i % sets]),
                                                          vpb, sink, nullptr);
            },
            iters, nullptr, nullptr);
        printf("  ... with 100 KB dynamic shared memory: %.2f us\n", us_smem);
      }
      for (int s = 0; s < sets; ++s) cudaFree(kbuf[s]);
      cudaFree(q);
      cudaFree(o);
      cudaFree(lse);
      cudaFree(seqlens);
      cudaFree(p.o_partial);
    }
  return 0;
}
