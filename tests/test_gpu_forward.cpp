// GPU forward tests (ctest label `gpu`): every GPU family against the fp64 reference with
// FlashAttention's oracle, over the odd-shape grid of TESTING.md. Outputs are poisoned (NaN)
// before each run so an unwritten element fails; inputs are fresh random data from a printed seed.
// Without a CUDA device every test skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "flashattn/reference.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

using flashattn::testing::DeviceBuffer;
using flashattn::testing::have_gpu;
using flashattn::testing::kernel_runs_here;
using flashattn::testing::run_seed;

enum class Layout { contiguous, padded, heads_major };

struct Case {
  fa::Kernel kernel;
  fa::DType dtype;
  int batch, sq, sk, hq, hkv, d, dv;
  bool causal;
  int wl, wr;
  Layout layout;
  float q_sigma;  // > 1 gives large logits, exercising the online-softmax rescale
  bool sinks = false;  // learnable attention sinks (ForwardParams::sinks)
  float softcap = 0.f;  // ForwardParams::softcap
};

std::string case_name(const Case& c) {
  const std::string softcap = "_softcap" + std::to_string(static_cast<int>(c.softcap));
  return flashattn::testing::CaseName(c.kernel, c.dtype)
      .num("_b", c.batch)
      .num("_q", c.sq)
      .num("_k", c.sk)
      .num("_h", c.hq)
      .num("x", c.hkv)
      .head_dims(c.d, c.dv)
      .mask(c.causal, c.wl, c.wr)
      .flag(c.layout == Layout::padded, "_padded")
      .flag(c.layout == Layout::heads_major, "_bhsd")
      .flag(c.q_sigma > 1, "_big")
      .flag(c.sinks, "_sinks")
      .flag(c.softcap > 0, softcap.c_str())
      .str();
}

// Strides for a (batch, seqlen, heads, dim) tensor in the given memory layout; returns the number
// of elements to allocate.
int64_t make_strides(Layout layout, int b, int s, int h, int d, int64_t (&st)[4]) {
  st[3] = 1;
  switch (layout) {
    case Layout::contiguous: fa::set_contiguous_strides(st, s, h, d); break;
    case Layout::padded:  // padded heads and rows, as when slicing a larger projection
      st[2] = d + 16;
      st[1] = h * st[2] + 8;
      st[0] = s * st[1] + 24;
      break;
    case Layout::heads_major:  // (batch, heads, seqlen, dim) memory, viewed as bshd
      st[1] = d;
      st[2] = int64_t(s) * d;
      st[0] = int64_t(h) * s * d;
      break;
  }
  return b > 0 && s > 0 ? (b - 1) * st[0] + (s - 1) * st[1] + (h - 1) * st[2] + d : 0;
}

struct GpuRun {
  fa::ForwardParams host;  // points at the host copies below
  std::vector<uint16_t> q, k, v, o;
  std::vector<float> lse;
  std::vector<float> sinks;   // host copy of the sinks, when the case has them
  int repeats_differing = 0;  // later runs of the same input whose output differs from the first
  int64_t stray_writes = 0;  // elements of the output buffer outside the tensor that lost the poison
};

// Elements of a strided output buffer that are not part of the (b, s, h, d) tensor yet were
// written (their NaN poison is gone): any such write is out of bounds for the kernel.
int64_t count_stray_writes(const std::vector<uint16_t>& buf, const int64_t (&st)[4], int b, int s,
                           int h, int d) {
  std::vector<char> inside(buf.size(), 0);
  for (int bi = 0; bi < b; ++bi)
    for (int si = 0; si < s; ++si)
      for (int hi = 0; hi < h; ++hi)
        for (int di = 0; di < d; ++di) inside[bi * st[0] + si * st[1] + hi * st[2] + di] = 1;
  int64_t stray = 0;
  for (size_t i = 0; i < buf.size(); ++i) stray += !inside[i] && buf[i] != 0xFFFF;
  return stray;
}

// Runs the case on the GPU `runs` times (poisoning the outputs before each); fills `run` with host
// copies of inputs and the first run's outputs, and counts later runs that differ bitwise.
void run_case(const Case& c, uint64_t seed, GpuRun& run, int runs = 1) {
  fa::ForwardParams p;
  p.dtype = c.dtype;
  p.batch = c.batch;
  p.seqlen_q = c.sq;
  p.seqlen_k = c.sk;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.head_dim = c.d;
  p.head_dim_v = c.dv;
  p.causal = c.causal;
  p.window_left = c.wl;
  p.window_right = c.wr;
  p.softcap = c.softcap;
  const int64_t nq = make_strides(c.layout, c.batch, c.sq, c.hq, c.d, p.q.stride);
  const int64_t nk = make_strides(c.layout, c.batch, c.sk, c.hkv, c.d, p.k.stride);
  const int64_t nv = make_strides(c.layout, c.batch, c.sk, c.hkv, c.dv, p.v.stride);
  const int64_t no = make_strides(c.layout, c.batch, c.sq, c.hq, c.dv, p.o.stride);
  const int64_t nl = int64_t(c.batch) * c.hq * c.sq;
  run.q.resize(nq);
  run.k.resize(nk);
  run.v.resize(nv);
  fa::reference::fill_normal(run.q.data(), nq, c.dtype, seed, c.q_sigma);
  fa::reference::fill_normal(run.k.data(), nk, c.dtype, seed + 1);
  fa::reference::fill_normal(run.v.data(), nv, c.dtype, seed + 2);

  DeviceBuffer dq(nq * 2), dk(nk * 2), dv(nv * 2), dout(no * 2), dl(nl * 4), ds(c.hq * 4);
  ASSERT_TRUE(dq.ptr && dk.ptr && dv.ptr && dout.ptr && dl.ptr && ds.ptr) << "cudaMalloc failed";
  if (c.sinks) {
    // Logits around the scores' range, plus the extremes: head 0's sink dominates every row (O
    // near 0, LSE the sink), head 1's is negligible (as if absent).
    std::mt19937_64 gen(seed + 3);
    std::uniform_real_distribution<float> uniform(-6.f, 6.f);
    run.sinks.resize(c.hq);
    for (float& x : run.sinks) x = uniform(gen);
    run.sinks[0] = 40.f;
    if (c.hq > 1) run.sinks[1] = -40.f;
    ASSERT_EQ(cudaMemcpy(ds.ptr, run.sinks.data(), c.hq * 4, cudaMemcpyHostToDevice), cudaSuccess);
    p.sinks = static_cast<const float*>(ds.ptr);
  }
  ASSERT_EQ(cudaMemcpy(dq.ptr, run.q.data(), nq * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dk.ptr, run.k.data(), nk * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dv.ptr, run.v.data(), nv * 2, cudaMemcpyHostToDevice), cudaSuccess);
  p.q.data = dq.ptr;
  p.k.data = dk.ptr;
  p.v.data = dv.ptr;
  p.o.data = dout.ptr;
  p.lse = static_cast<float*>(dl.ptr);

  std::vector<uint16_t> again;
  for (int r = 0; r < runs; ++r) {
    // Poison: 0xFFFF is NaN in bf16 and fp16, 0xFFFFFFFF is NaN in fp32.
    ASSERT_EQ(cudaMemset(dout.ptr, 0xFF, no * 2), cudaSuccess);
    ASSERT_EQ(cudaMemset(dl.ptr, 0xFF, nl * 4), cudaSuccess);
    const fa::Status s = fa::forward(p, c.kernel);
    ASSERT_TRUE(s.ok()) << s.message;
    const cudaError_t e = cudaDeviceSynchronize();
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    std::vector<uint16_t>& dst = r == 0 ? run.o : again;
    dst.resize(no);
    ASSERT_EQ(cudaMemcpy(dst.data(), dout.ptr, no * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    if (r > 0) run.repeats_differing += std::memcmp(run.o.data(), again.data(), no * 2) != 0;
  }
  run.stray_writes = count_stray_writes(run.o, p.o.stride, c.batch, c.sq, c.hq, c.dv);
  run.lse.resize(nl);
  ASSERT_EQ(cudaMemcpy(run.lse.data(), dl.ptr, nl * 4, cudaMemcpyDeviceToHost), cudaSuccess);

  run.host = p;
  run.host.q.data = run.q.data();
  run.host.k.data = run.k.data();
  run.host.v.data = run.v.data();
  run.host.o.data = run.o.data();
  run.host.lse = run.lse.data();
  run.host.sinks = c.sinks ? run.sinks.data() : nullptr;
}

std::vector<Case> grid() {
  std::vector<Case> cases;
  const std::pair<int, int> shapes[] = {{1, 1},   {1, 239},     {17, 17},     {113, 203},  {239, 1},
                                        {799, 3}, {1023, 1024}, {1024, 1023}, {4224, 4224}};
  const std::pair<int, int> dims[] = {{64, 64},   {96, 96},   {128, 128},
                                      {192, 192}, {256, 256}, {192, 128}};
  const std::pair<int, int> heads[] = {{2, 2}, {4, 2}, {6, 1}, {12, 2}};  // GQA 1, 2, MQA 6, 6
  struct M {
    bool causal;
    int wl, wr;
  };
  const M masks[] = {{false, -1, -1}, {true, -1, -1}, {false, 37, 5},
                     {true, 64, -1},  {false, -1, 0}, {false, 3, 100}};
  int i = 0;
  for (fa::Kernel kernel : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::fa2, fa::Kernel::k3,
                            fa::Kernel::k4, fa::Kernel::k5, fa::Kernel::k6}) {
    for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
      for (auto [d, dv] : dims) {
        // K3, K4 and K5 are built for head dim 128 only (the steps of the Hopper story).
        const bool story_step =
            kernel == fa::Kernel::k3 || kernel == fa::Kernel::k4 || kernel == fa::Kernel::k5;
        if (story_step && (d != 128 || dv != 128)) continue;
        for (auto [sq, sk] : shapes) {
          for (const M& m : masks) {
            const bool big = sq >= 4000;
            if (big && (i % 3 != 0)) {  // the 4224^2 shape: a third of the masks, to bound runtime
              ++i;
              continue;
            }
            const auto [hq, hkv] = heads[i % 4];
            const Layout layout = static_cast<Layout>(i % 3);
            const float sigma = (i % 5 == 0) ? 6.0f : 1.0f;
            cases.push_back({kernel, dtype, big ? 1 : 1 + (i % 2), sq, sk, hq, hkv, d, dv, m.causal,
                             m.wl, m.wr, layout, sigma});
            ++i;
          }
        }
      }
    }
  }
  return cases;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> c = grid();
  return c;
}

class GpuForward : public ::testing::TestWithParam<size_t> {};

// Runs the case and checks it against the fp64 reference with the oracle (whole up to ~3e8
// multiply-adds per precision, sampled rows beyond) and that nothing outside o was written.
void expect_matches_reference(const Case& c, uint64_t seed, GpuRun& run) {
  run_case(c, seed, run);
  if (::testing::Test::HasFatalFailure()) return;
  const double work = double(c.batch) * c.hq * c.sq * c.sk * (c.d + c.dv);
  const auto rows = work > 3e8 ? fa::reference::sample_rows(run.host, 384, seed)
                               : std::vector<fa::reference::RowId>{};
  const fa::reference::CheckResult r = fa::reference::check(run.host, rows);
  EXPECT_TRUE(r.ok) << case_name(c) << " seed " << seed << ": " << r.detail << " (max_err "
                    << r.max_err << ", pt " << r.max_err_pt << ", atol " << r.atol << "; lse "
                    << r.lse_max_err << " vs " << r.lse_max_err_pt << " + " << r.lse_atol
                    << ", not finite " << r.not_finite << ")";
  EXPECT_GT(r.checked, 0);
  EXPECT_EQ(run.stray_writes, 0) << case_name(c) << ": wrote outside the output tensor";
}

TEST_P(GpuForward, MatchesFp64Reference) {
  const Case& c = all_cases()[GetParam()];
  if (!kernel_runs_here(c.kernel)) GTEST_SKIP() << "no device for " << fa::kernel_name(c.kernel);
  GpuRun run;
  expect_matches_reference(c, run_seed() + GetParam() * 7919, run);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuForward, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const auto& info) { return case_name(all_cases()[info.param]); });

// Learnable attention sinks on the families that have them (k6, fa2): the TESTING.md shapes with
// a sink per query head, one dominating (head 0) and one negligible (head 1); fully masked rows
// (causal with seqlen_q > seqlen_k) must give O = 0 and LSE = the sink.
std::vector<Case> sink_cases() {
  std::vector<Case> cases;
  for (fa::Kernel kernel : {fa::Kernel::fa2, fa::Kernel::k6}) {
    for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
      const Layout dense = Layout::contiguous, padded = Layout::padded, bhsd = Layout::heads_major;
      cases.push_back({kernel, dtype, 2, 1, 1, 6, 2, 128, 128, false, -1, -1, dense, 1.f, true});
      cases.push_back({kernel, dtype, 2, 113, 203, 4, 4, 64, 64, false, 37, 5, padded, 1.f, true});
      cases.push_back({kernel, dtype, 1, 239, 1, 6, 1, 128, 128, true, -1, -1, dense, 6.f, true});
      cases.push_back({kernel, dtype, 2, 799, 3, 4, 2, 256, 256, true, -1, -1, bhsd, 1.f, true});
      cases.push_back({kernel, dtype, 1, 1023, 1024, 6, 2, 192, 128, true, -1, -1, padded, 6.f, true});
      cases.push_back({kernel, dtype, 1, 1024, 1023, 4, 4, 96, 96, false, 64, -1, dense, 1.f, true});
    }
    cases.push_back({kernel, fa::DType::bf16, 1, 4224, 4224, 4, 1, 128, 128, true, -1, -1,
                     Layout::contiguous, 1.f, true});
  }
  return cases;
}

const std::vector<Case>& all_sink_cases() {
  static const std::vector<Case> c = sink_cases();
  return c;
}

class GpuForwardSinks : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuForwardSinks, MatchesFp64Reference) {
  const Case& c = all_sink_cases()[GetParam()];
  if (!kernel_runs_here(c.kernel)) GTEST_SKIP() << "no device for " << fa::kernel_name(c.kernel);
  GpuRun run;
  expect_matches_reference(c, run_seed() + GetParam() * 104729, run);
  if (HasFatalFailure()) return;
  // Rows that see no key: O = 0 and LSE = the sink of their head, exactly.
  if (c.causal && c.sq > c.sk) {
    for (int h = 0; h < c.hq; ++h) {
      const float lse0 = run.lse[(int64_t{0} * c.hq + h) * c.sq + 0];
      EXPECT_EQ(lse0, run.sinks[h]) << case_name(c) << " head " << h << ": a fully masked row";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuForwardSinks,
                         ::testing::Range<size_t>(0, all_sink_cases().size()),
                         [](const auto& info) { return case_name(all_sink_cases()[info.param]); });

// Softcap on the families that have it (k6, fa2): softcap 5, 30 and 50 over the TESTING.md shapes,
// with GQA and MQA, causal rows that see no key, asymmetric windows, large logits (q scaled up so
// that tanh saturates and the cap decides the softmax), sinks with softcap and every head dim. A
// family that answers unsupported fails (run_case asserts the call succeeded) rather than skips.
std::vector<Case> softcap_cases() {
  std::vector<Case> cases;
  const Layout dense = Layout::contiguous, padded = Layout::padded, bhsd = Layout::heads_major;
  for (fa::Kernel kernel : {fa::Kernel::fa2, fa::Kernel::k6}) {
    for (float cap : {5.f, 30.f, 50.f}) {
      for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
        cases.push_back({kernel, dtype, 2, 1, 1, 6, 2, 128, 128, false, -1, -1, dense, 1.f, false,
                         cap});
        cases.push_back({kernel, dtype, 2, 1, 239, 4, 2, 64, 64, false, -1, -1, padded, 6.f,
                         false, cap});
        cases.push_back({kernel, dtype, 2, 113, 203, 4, 4, 64, 64, false, 37, 5, padded, 6.f,
                         false, cap});
        cases.push_back({kernel, dtype, 1, 239, 1, 6, 1, 128, 128, true, -1, -1, dense, 6.f, true,
                         cap});
        cases.push_back({kernel, dtype, 2, 799, 3, 4, 2, 256, 256, true, -1, -1, bhsd, 1.f, false,
                         cap});
        cases.push_back({kernel, dtype, 1, 1023, 1024, 6, 2, 192, 128, true, -1, -1, padded, 6.f,
                         true, cap});
        cases.push_back({kernel, dtype, 1, 1024, 1023, 4, 4, 96, 96, false, 64, -1, dense, 6.f,
                         false, cap});
      }
      cases.push_back({kernel, fa::DType::bf16, 1, 4224, 4224, 4, 1, 128, 128, true, -1, -1,
                       Layout::contiguous, 6.f, false, cap});
    }
  }
  return cases;
}

const std::vector<Case>& all_softcap_cases() {
  static const std::vector<Case> c = softcap_cases();
  return c;
}

class GpuForwardSoftcap : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuForwardSoftcap, MatchesFp64Reference) {
  const Case& c = all_softcap_cases()[GetParam()];
  if (!kernel_runs_here(c.kernel)) GTEST_SKIP() << "no device for " << fa::kernel_name(c.kernel);
  GpuRun run;
  expect_matches_reference(c, run_seed() + GetParam() * 15485863, run);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuForwardSoftcap,
                         ::testing::Range<size_t>(0, all_softcap_cases().size()),
                         [](const auto& info) { return case_name(all_softcap_cases()[info.param]); });

// auto with softcap on a GPU runs a family that has it (one without would read make_problem's
// scale_log2 = softcap·log2(e) as the softmax scale and fail the oracle), and the lineage
// families refuse softcap as unsupported.
TEST(GpuForwardSoftcapSelection, AutoRunsASoftcapFamily) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const Case c{fa::Kernel::automatic, fa::DType::bf16, 1, 200, 300, 4, 2, 128, 128, true, -1, -1,
               Layout::contiguous, 6.f, false, 30.f};
  GpuRun run;
  expect_matches_reference(c, run_seed(), run);
  if (HasFatalFailure()) return;
  for (fa::Kernel k : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::k3, fa::Kernel::k4,
                       fa::Kernel::k5}) {
    if (!fa::kernel_is_built(k)) continue;
    const fa::Status st = fa::can_implement(run.host, k);
    EXPECT_EQ(st.code, fa::StatusCode::unsupported) << fa::kernel_name(k) << ": " << st.message;
    EXPECT_NE(st.message.find("softcap"), std::string::npos) << st.message;
  }
}

// The same input twice gives bitwise identical output (no races, no order-dependent reductions).
TEST(GpuForwardDeterminism, RepeatedRunsAreBitwiseIdentical) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (fa::Kernel kernel : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::fa2}) {
    if (!kernel_runs_here(kernel)) continue;
    const Case c{kernel, fa::DType::bf16,    2,   1023, 1024, 6, 2, 128, 128, true, -1,
                 -1,     Layout::contiguous, 1.0f};
    for (int rep = 0; rep < 5; ++rep) {
      GpuRun run;
      run_case(c, run_seed() + rep, run, 2);
      if (HasFatalFailure()) return;
      ASSERT_EQ(run.repeats_differing, 0) << fa::kernel_name(kernel);
    }
  }
}

// The Hopper families: one input, 100 runs, every output bitwise equal to the first (causal
// exercises the persistent scheduler's uneven tiles; GQA and a ragged length the edge paths).
TEST(GpuForwardDeterminism, HopperHundredRunsAreBitwiseIdentical) {
  for (fa::Kernel kernel : {fa::Kernel::k3, fa::Kernel::k4, fa::Kernel::k5, fa::Kernel::k6}) {
    if (!kernel_runs_here(kernel)) GTEST_SKIP() << "needs an sm_90 device";
    for (bool causal : {false, true}) {
      const Case c{kernel, fa::DType::bf16,    2,   1999, 2048, 8, 2, 128, 128, causal, -1,
                   -1,     Layout::contiguous, 1.0f};
      GpuRun run;
      run_case(c, run_seed(), run, 100);
      if (HasFatalFailure()) return;
      EXPECT_EQ(run.repeats_differing, 0) << fa::kernel_name(kernel) << " causal " << causal;
    }
  }
}

// No key at all: every row outputs 0 and LSE -inf (defined by the API, not an error).
TEST(GpuForwardEdges, SeqlenKZeroGivesZeroAndMinusInf) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (fa::Kernel kernel : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::fa2, fa::Kernel::k3,
                            fa::Kernel::k4, fa::Kernel::k5, fa::Kernel::k6}) {
    if (!kernel_runs_here(kernel)) continue;
    const Case c{kernel, fa::DType::fp16, 2, 17, 0, 4, 2, 128, 128, false, -1, -1, Layout::padded, 1.0f};
    GpuRun run;
    run_case(c, run_seed(), run);
    if (HasFatalFailure()) return;
    EXPECT_EQ(run.stray_writes, 0);
    for (int b = 0; b < c.batch; ++b)
      for (int s = 0; s < c.sq; ++s)
        for (int h = 0; h < c.hq; ++h)
          for (int d = 0; d < c.dv; ++d) {
            const auto& st = run.host.o.stride;
            ASSERT_EQ(run.o[b * st[0] + s * st[1] + h * st[2] + d], 0u) << fa::kernel_name(kernel);
          }
    for (float l : run.lse) ASSERT_EQ(l, -INFINITY) << fa::kernel_name(kernel);
  }
}

// Bad device-side input is refused before any launch: the output stays poisoned.
TEST(GpuValidation, DeviceRulesRefuseWithoutWriting) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  Case c{fa::Kernel::k2,
         fa::DType::bf16,
         1,
         64,
         64,
         2,
         2,
         64,
         64,
         false,
         -1,
         -1,
         Layout::contiguous,
         1.0f};
  fa::ForwardParams p;
  p.dtype = c.dtype;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 64;
  p.heads_q = p.heads_kv = 2;
  p.head_dim = 64;
  fa::set_contiguous_layout(p);
  const size_t n = 64 * 2 * 64;
  DeviceBuffer q(n * 2), k(n * 2), v(n * 2), o(n * 2);
  std::vector<uint16_t> host_q(n);
  p.q.data = q.ptr;
  p.k.data = k.ptr;
  p.v.data = v.ptr;
  p.o.data = o.ptr;
  ASSERT_EQ(cudaMemset(o.ptr, 0xFF, n * 2), cudaSuccess);
  for (fa::Kernel kernel : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::fa2}) {
    if (!fa::kernel_is_built(kernel)) continue;
    fa::ForwardParams bad = p;
    bad.q.data = host_q.data();
    fa::Status s = fa::forward(bad, kernel);
    EXPECT_EQ(s.code, fa::StatusCode::invalid_argument);
    EXPECT_NE(s.message.find("q.data: kernel"), std::string::npos) << s.message;
    bad = p;
    bad.o.data = q.ptr;
    s = fa::forward(bad, kernel);
    EXPECT_NE(s.message.find("o: overlaps input q"), std::string::npos) << s.message;
  }
  flashattn::testing::expect_all_poisoned(o.ptr, n);
  EXPECT_EQ(fa::select_kernel(p), flashattn::testing::expected_auto_kernel());
}

}  // namespace
