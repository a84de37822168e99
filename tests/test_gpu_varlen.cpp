// GPU variable-length tests (ctest label `gpu`): packed batches of mixed lengths (0, 1, 17, 113,
// 239 and long ones, seqlen_q != seqlen_k per sequence) through the families that support
// cu_seqlens. Each sequence is checked against the fp64 reference on a non-varlen view of the host
// copies (batch 1, pointers offset to the sequence), every token must be written (outputs are
// poisoned with NaN first), and the varlen result must equal, bit for bit, the same sequences run
// one by one without cu_seqlens (the kernels are deterministic and a block's arithmetic depends
// only on its own sequence). Without a CUDA device every test skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/flashattn.h"
#include "flashattn/reference.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

using flashattn::testing::forward_and_sync;

using flashattn::testing::DeviceBuffer;
using flashattn::testing::have_gpu;
using flashattn::testing::run_seed;

struct VarlenCase {
  fa::Kernel kernel;
  fa::DType dtype;
  int hq, hkv, d, dv;
  bool causal;
  int wl, wr;
  float q_sigma;
  std::vector<std::pair<int, int>> lens;  // (seqlen_q, seqlen_k) per sequence
  float softcap = 0.f;                     // ForwardParams::softcap
};

std::string case_name(const VarlenCase& c) {
  const std::string softcap = "_softcap" + std::to_string(static_cast<int>(c.softcap));
  return flashattn::testing::CaseName(c.kernel, c.dtype)
      .num("_h", c.hq)
      .num("x", c.hkv)
      .head_dims(c.d, c.dv)
      .mask(c.causal, c.wl, c.wr)
      .num("_n", static_cast<int>(c.lens.size()))
      .flag(c.q_sigma > 1, "_big")
      .flag(c.softcap > 0, softcap.c_str())
      .str();
}

const std::vector<VarlenCase>& all_cases() {
  using L = std::vector<std::pair<int, int>>;
  const L mixed = {{0, 5}, {1, 1}, {17, 33}, {113, 239},   {239, 113},
                   {0, 0}, {5, 0}, {1, 239}, {1500, 1300}, {2048, 2100}};
  const L square = {{17, 17}, {239, 1}, {0, 10}, {113, 113}, {1024, 1024}, {1, 1}, {799, 3}};
  // Every varlen family gets the same batches: fa2 (sm_80+), and on Hopper k6 over every head dim
  // plus k3/k4/k5 at head dim 128.
  static const std::vector<VarlenCase> cases = [&] {
    std::vector<VarlenCase> all;
    for (fa::Kernel k : {fa::Kernel::fa2, fa::Kernel::k6}) {
      const std::vector<VarlenCase> per_kernel = {
          {k, fa::DType::bf16, 4, 2, 128, 128, false, -1, -1, 1.f, mixed},
          {k, fa::DType::fp16, 4, 2, 128, 128, true, -1, -1, 6.f, mixed},
          {k, fa::DType::fp16, 6, 1, 64, 64, true, -1, -1, 1.f, square},
          {k, fa::DType::bf16, 2, 2, 64, 64, false, 37, 5, 1.f, mixed},
          {k, fa::DType::bf16, 4, 4, 96, 96, false, -1, 0, 1.f, square},
          {k, fa::DType::fp16, 6, 2, 192, 128, true, 64, -1, 1.f, mixed},
          {k, fa::DType::bf16, 2, 1, 256, 256, false, 3, 100, 6.f, square},
          {k, fa::DType::fp16, 2, 2, 192, 192, false, -1, -1, 1.f, square},
      };
      all.insert(all.end(), per_kernel.begin(), per_kernel.end());
      // Softcap 5, 30 and 50 (k6 and fa2 have it; a refusal fails the test): empty sequences,
      // causal rows that see no key, a window, GQA and MQA, large logits.
      for (float cap : {5.f, 30.f, 50.f}) {
        all.push_back({k, fa::DType::bf16, 4, 2, 128, 128, true, -1, -1, 6.f, mixed, cap});
        all.push_back({k, fa::DType::fp16, 6, 1, 64, 64, false, 37, 5, 6.f, square, cap});
        all.push_back({k, fa::DType::bf16, 6, 2, 192, 128, false, -1, -1, 1.f, mixed, cap});
      }
    }
    for (fa::Kernel k : {fa::Kernel::k3, fa::Kernel::k4, fa::Kernel::k5}) {
      all.push_back({k, fa::DType::bf16, 4, 2, 128, 128, true, -1, -1, 6.f, mixed});
      all.push_back({k, fa::DType::fp16, 2, 2, 128, 128, false, 37, 5, 1.f, square});
    }
    return all;
  }();
  return cases;
}

// Packed (total, heads, dim) tensors, dense.
struct Packed {
  int total = 0, heads = 0, dim = 0;
  int64_t row_stride() const { return int64_t(heads) * dim; }
  int64_t elems() const { return int64_t(total) * heads * dim; }
};

class GpuVarlen : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuVarlen, MatchesReferenceAndPerSequenceRuns) {
  const VarlenCase& c = all_cases()[GetParam()];
  if (!flashattn::testing::kernel_runs_here(c.kernel)) {
    GTEST_SKIP() << "no device for " << fa::kernel_name(c.kernel);
  }
  const uint64_t seed = run_seed() + GetParam() * 104729;
  const int batch = static_cast<int>(c.lens.size());
  std::vector<int32_t> cu_q(batch + 1, 0), cu_k(batch + 1, 0);
  int max_q = 0, max_k = 0;
  for (int b = 0; b < batch; ++b) {
    cu_q[b + 1] = cu_q[b] + c.lens[b].first;
    cu_k[b + 1] = cu_k[b] + c.lens[b].second;
    max_q = std::max(max_q, c.lens[b].first);
    max_k = std::max(max_k, c.lens[b].second);
  }
  const Packed q{cu_q[batch], c.hq, c.d}, k{cu_k[batch], c.hkv, c.d}, v{cu_k[batch], c.hkv, c.dv},
      o{cu_q[batch], c.hq, c.dv};
  const int64_t n_lse = int64_t(c.hq) * q.total;

  std::vector<uint16_t> hq(q.elems()), hk(k.elems()), hv(v.elems());
  fa::reference::fill_normal(hq.data(), q.elems(), c.dtype, seed, c.q_sigma);
  fa::reference::fill_normal(hk.data(), k.elems(), c.dtype, seed + 1);
  fa::reference::fill_normal(hv.data(), v.elems(), c.dtype, seed + 2);

  // One spare row at the end of every buffer: a per-sequence view of an empty last sequence
  // points one row past the data, and must still be a device pointer.
  DeviceBuffer dq((q.elems() + q.row_stride()) * 2), dk((k.elems() + k.row_stride()) * 2),
      dv((v.elems() + v.row_stride()) * 2), dout((o.elems() + o.row_stride()) * 2),
      dout1((o.elems() + o.row_stride()) * 2), dl((n_lse + 1) * 4), dl1((n_lse + 1) * 4),
      dcq((batch + 1) * 4), dck((batch + 1) * 4);
  ASSERT_TRUE(dq.ptr && dk.ptr && dv.ptr && dout.ptr && dout1.ptr && dl.ptr && dl1.ptr && dcq.ptr &&
              dck.ptr);
  ASSERT_EQ(cudaMemcpy(dq.ptr, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dk.ptr, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dv.ptr, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dcq.ptr, cu_q.data(), cu_q.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dck.ptr, cu_k.data(), cu_k.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dout.ptr, 0xFF, (o.elems() + o.row_stride()) * 2), cudaSuccess);
  ASSERT_EQ(cudaMemset(dout1.ptr, 0xFF, (o.elems() + o.row_stride()) * 2), cudaSuccess);
  ASSERT_EQ(cudaMemset(dl.ptr, 0xFF, (n_lse + 1) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(dl1.ptr, 0xFF, (n_lse + 1) * 4), cudaSuccess);

  // The packed run.
  fa::ForwardParams p;
  p.dtype = c.dtype;
  p.batch = batch;
  p.seqlen_q = max_q;
  p.seqlen_k = max_k;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.head_dim = c.d;
  p.head_dim_v = c.dv;
  p.causal = c.causal;
  p.window_left = c.wl;
  p.window_right = c.wr;
  p.softcap = c.softcap;
  const auto set_strides = [](int64_t(&st)[4], const Packed& t, int len) {
    st[3] = 1;
    st[2] = t.dim;
    st[1] = t.row_stride();
    st[0] = std::max(len, 1) * t.row_stride();
  };
  set_strides(p.q.stride, q, q.total);
  set_strides(p.k.stride, k, k.total);
  set_strides(p.v.stride, v, v.total);
  set_strides(p.o.stride, o, o.total);
  p.q.data = dq.ptr;
  p.k.data = dk.ptr;
  p.v.data = dv.ptr;
  p.o.data = dout.ptr;
  p.lse = static_cast<float*>(dl.ptr);
  p.cu_seqlens_q = static_cast<const int32_t*>(dcq.ptr);
  p.cu_seqlens_k = static_cast<const int32_t*>(dck.ptr);
  p.total_q = q.total;
  p.total_k = k.total;
  ASSERT_TRUE(forward_and_sync(p, c.kernel)) << case_name(c);

  // The same sequences one by one, without cu_seqlens, into a second output.
  for (int b = 0; b < batch; ++b) {
    const auto [lq, lk] = c.lens[b];
    if (lq == 0) continue;
    fa::ForwardParams s = p;
    s.batch = 1;
    s.seqlen_q = lq;
    s.seqlen_k = lk;
    s.cu_seqlens_q = s.cu_seqlens_k = nullptr;
    s.total_q = s.total_k = 0;
    set_strides(s.q.stride, q, lq);
    set_strides(s.k.stride, k, lk);
    set_strides(s.v.stride, v, lk);
    set_strides(s.o.stride, o, lq);
    s.q.data = static_cast<const uint16_t*>(dq.ptr) + cu_q[b] * q.row_stride();
    s.k.data = static_cast<const uint16_t*>(dk.ptr) + cu_k[b] * k.row_stride();
    s.v.data = static_cast<const uint16_t*>(dv.ptr) + cu_k[b] * v.row_stride();
    s.o.data = static_cast<uint16_t*>(dout1.ptr) + cu_q[b] * o.row_stride();
    // Non-varlen LSE is (1, heads_q, lq): a scratch region, scattered back below.
    s.lse = static_cast<float*>(dl1.ptr) + int64_t(c.hq) * cu_q[b];
    ASSERT_TRUE(forward_and_sync(s, c.kernel)) << case_name(c) << " sequence " << b;
  }

  std::vector<uint16_t> out(o.elems()), out1(o.elems());
  std::vector<float> lse(n_lse), lse1(n_lse);
  ASSERT_EQ(cudaMemcpy(out.data(), dout.ptr, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(out1.data(), dout1.ptr, out1.size() * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(lse.data(), dl.ptr, n_lse * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(lse1.data(), dl1.ptr, n_lse * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  uint16_t spare = 0;
  ASSERT_EQ(
      cudaMemcpy(&spare, static_cast<uint16_t*>(dout.ptr) + o.elems(), 2, cudaMemcpyDeviceToHost),
      cudaSuccess);
  EXPECT_EQ(spare, 0xFFFF) << case_name(c) << ": wrote past the packed output";

  // Every token written; bitwise equal to the per-sequence runs.
  int64_t unwritten = 0;
  for (uint16_t x : out) unwritten += x == 0xFFFF;
  EXPECT_EQ(unwritten, 0) << case_name(c) << ": output elements left poisoned";
  EXPECT_EQ(std::memcmp(out.data(), out1.data(), out.size() * 2), 0)
      << case_name(c) << ": varlen output differs from the per-sequence runs";

  for (int b = 0; b < batch; ++b) {
    const auto [lq, lk] = c.lens[b];
    if (lq == 0) continue;
    // The varlen LSE is (heads_q, total_q); the per-sequence one (heads_q, lq) at offset
    // hq*cu_q[b].
    std::vector<float> seq_lse(int64_t(c.hq) * lq);
    for (int h = 0; h < c.hq; ++h)
      for (int i = 0; i < lq; ++i) {
        const float a = lse[int64_t(h) * q.total + cu_q[b] + i];
        const float e = lse1[int64_t(c.hq) * cu_q[b] + int64_t(h) * lq + i];
        seq_lse[int64_t(h) * lq + i] = a;
        ASSERT_EQ(std::memcmp(&a, &e, 4), 0) << case_name(c) << " sequence " << b << " head " << h
                                             << " row " << i << ": LSE " << a << " vs " << e;
      }
    fa::ForwardParams view = p;  // host view of sequence b, batch 1
    view.batch = 1;
    view.seqlen_q = lq;
    view.seqlen_k = lk;
    view.cu_seqlens_q = view.cu_seqlens_k = nullptr;
    view.total_q = view.total_k = 0;
    set_strides(view.q.stride, q, lq);
    set_strides(view.k.stride, k, lk);
    set_strides(view.v.stride, v, lk);
    set_strides(view.o.stride, o, lq);
    view.q.data = hq.data() + cu_q[b] * q.row_stride();
    view.k.data = hk.data() + cu_k[b] * k.row_stride();
    view.v.data = hv.data() + cu_k[b] * v.row_stride();
    view.o.data = out.data() + cu_q[b] * o.row_stride();
    view.lse = seq_lse.data();
    const double work = double(c.hq) * lq * lk * (c.d + c.dv);
    const auto rows = work > 3e8 ? fa::reference::sample_rows(view, 256, seed + b)
                                 : std::vector<fa::reference::RowId>{};
    const fa::reference::CheckResult r = fa::reference::check(view, rows);
    EXPECT_TRUE(r.ok) << case_name(c) << " sequence " << b << " (" << lq << ", " << lk << ") seed "
                      << seed << ": " << r.detail << " (max_err " << r.max_err << ", pt "
                      << r.max_err_pt << ", atol " << r.atol << "; lse " << r.lse_max_err << " vs "
                      << r.lse_max_err_pt << ", not finite " << r.not_finite << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(Batches, GpuVarlen, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const auto& info) { return case_name(all_cases()[info.param]); });

// cu_seqlens must live where the kernel runs; families without varlen refuse it; auto picks one
// that has it. Nothing is written by a refused call.
TEST(GpuVarlenValidation, RulesForCuSeqlens) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const int hq = 2, d = 64, total = 40;
  const int32_t host_cu[3] = {0, 15, 40};
  const size_t n = size_t(total) * hq * d;
  DeviceBuffer q(n * 2), k(n * 2), v(n * 2), o(n * 2), cu(sizeof(host_cu));
  ASSERT_TRUE(q.ptr && k.ptr && v.ptr && o.ptr && cu.ptr);
  ASSERT_EQ(cudaMemcpy(cu.ptr, host_cu, sizeof(host_cu), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(o.ptr, 0xFF, n * 2), cudaSuccess);
  fa::ForwardParams p;
  p.dtype = fa::DType::fp16;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 25;
  p.heads_q = p.heads_kv = hq;
  p.head_dim = d;
  fa::set_contiguous_layout(p);
  p.q.data = q.ptr;
  p.k.data = k.ptr;
  p.v.data = v.ptr;
  p.o.data = o.ptr;
  p.cu_seqlens_q = p.cu_seqlens_k = static_cast<const int32_t*>(cu.ptr);
  p.total_q = p.total_k = total;

  fa::ForwardParams bad = p;
  bad.cu_seqlens_q = host_cu;
  fa::Status s = fa::forward(bad, fa::Kernel::fa2);
  EXPECT_EQ(s.code, fa::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("cu_seqlens_q: kernel fa2 needs device memory"), std::string::npos)
      << s.message;
  bad = p;
  bad.cu_seqlens_k = host_cu;
  s = fa::forward(bad, fa::Kernel::fa2);
  EXPECT_NE(s.message.find("cu_seqlens_k: kernel fa2 needs device memory"), std::string::npos)
      << s.message;
  s = fa::forward(p, fa::Kernel::k2);
  EXPECT_EQ(s.code, fa::StatusCode::unsupported);
  EXPECT_NE(s.message.find("does not support variable length"), std::string::npos) << s.message;

  flashattn::testing::expect_all_poisoned(o.ptr, n);
  EXPECT_EQ(fa::select_kernel(p), flashattn::testing::expected_auto_kernel());
}

}  // namespace
