// GPU backward tests (ctest label `gpu`): the gradients of every GPU backward family (fa2 on
// mma.sync; k6, the Hopper wgmma kernel, at its head dims) against the fp64 reference with
// FlashAttention's rule (reference::check_backward) over the TESTING.md grid, and the
// deterministic mode's bitwise reproducibility. The forward's o and lse come from the cpu family
// (the backward is what is under test); gradients are NaN-poisoned on the device before every
// run. Without a CUDA device every test skips; k6's cases skip on a device that is not Hopper
// (sm_90); otherwise an `unsupported` answer fails.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backward_case.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

using fa_test::BwdCase;
using fa_test::BwdShape;
using fa_test::Layout;
using flashattn::testing::DeviceBuffer;
using flashattn::testing::have_gpu;

// A host case's tensors on the device, and params pointing at them.
class DeviceCase {
 public:
  explicit DeviceCase(BwdCase& c) : c_(c) {
    params = c.params;
    params.q.data = upload(c.q);
    params.k.data = upload(c.k);
    params.v.data = upload(c.v);
    params.o.data = upload(c.o);
    params.dout.data = upload(c.dout);
    params.lse = static_cast<const float*>(upload(c.lse));
    params.dq.data = alloc(c.dq.size() * 2);
    params.dk.data = alloc(c.dk.size() * 2);
    params.dv.data = alloc(c.dv_.size() * 2);
    if (c.varlen()) {
      params.cu_seqlens_q = static_cast<const int32_t*>(upload(c.cu_q));
      params.cu_seqlens_k = static_cast<const int32_t*>(upload(c.cu_k));
    }
    if (!c.sinks.empty()) {
      params.sinks = static_cast<const float*>(upload(c.sinks));
      params.dsinks = static_cast<float*>(alloc(c.dsinks.size() * 4));
    }
  }

  // Poisons the device gradients, runs `kernel` and copies the gradients into the host case.
  void run(fa::Kernel kernel) {
    for (auto [ptr, bytes] : {std::pair{params.dq.data, c_.dq.size() * 2},
                              {params.dk.data, c_.dk.size() * 2},
                              {params.dv.data, c_.dv_.size() * 2},
                              {static_cast<void*>(params.dsinks), c_.dsinks.size() * 4}}) {
      if (ptr != nullptr) {
        ASSERT_EQ(cudaMemset(ptr, 0xFF, bytes), cudaSuccess);
      }
    }
    const fa::Status s = fa::backward(params, kernel);
    ASSERT_TRUE(s.ok()) << fa::status_code_name(s.code) << ": " << s.message;
    const cudaError_t e = cudaDeviceSynchronize();
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    download(c_.dq, params.dq.data);
    download(c_.dk, params.dk.data);
    download(c_.dv_, params.dv.data);
    if (params.dsinks != nullptr) download(c_.dsinks, params.dsinks);
  }

  fa::BackwardParams params;

 private:
  void* alloc(size_t bytes) {
    buffers_.emplace_back(std::make_unique<DeviceBuffer>(bytes));
    EXPECT_NE(buffers_.back()->ptr, nullptr) << "cudaMalloc failed";
    return buffers_.back()->ptr;
  }
  template <class T>
  void* upload(const std::vector<T>& host) {
    void* d = alloc(host.size() * sizeof(T));
    EXPECT_EQ(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    return d;
  }
  template <class T>
  void download(std::vector<T>& host, const void* d) {
    ASSERT_EQ(cudaMemcpy(host.data(), d, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }

  BwdCase& c_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
};

// Above this much reference work (multiply-adds per precision) a sample of (batch, KV head)
// units is checked instead of all.
constexpr double kFullCheckWork = 3e8;

// True when `kernel` can run on this device (k6: Hopper only).
bool device_runs(fa::Kernel kernel) {
  return flashattn::testing::kernel_runs_here(kernel);
}

// The GPU families with a backward, and whether one is built for a (head_dim, head_dim_v).
constexpr fa::Kernel kKernels[] = {fa::Kernel::fa2, fa::Kernel::k6};
bool runs_head_dims(fa::Kernel kernel, int d, int dv) {
  return kernel != fa::Kernel::k6 || (d == dv && (d == 64 || d == 128 || d == 256));
}

void expect_matches_reference(BwdCase& c, const std::string& name, fa::Kernel kernel) {
  ASSERT_NO_FATAL_FAILURE(c.run_forward());
  DeviceCase dev(c);
  ASSERT_NO_FATAL_FAILURE(dev.run(kernel));
  const fa::BackwardParams& p = c.params;
  // Query-key pairs the reference visits: per sequence for packed ones.
  double pairs = double(p.batch) * p.seqlen_q * p.seqlen_k;
  if (p.cu_seqlens_q != nullptr) {
    pairs = 0;
    for (int b = 0; b < p.batch; ++b) {
      pairs += double(p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b]) *
               (p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]);
    }
  }
  const double work = pairs * p.heads_q * 4 * p.head_dim;
  const auto units = work > kFullCheckWork
                         ? fa::reference::sample_kv_heads(p, 2, fa_test::test_seed(1))
                         : std::vector<fa::reference::KvHeadId>{};
  const fa::reference::BackwardCheckResult r = fa::reference::check_backward(p, units);
  auto line = [](const char* n, const fa::reference::GradientCheck& g) {
    return std::string(n) + " " + std::to_string(g.max_err) + " (pt " +
           std::to_string(g.max_err_pt) + ", atol " + std::to_string(g.atol) + ") ";
  };
  EXPECT_TRUE(r.ok) << name << ": " << r.detail << "\n  " << line("dq", r.dq) << line("dk", r.dk)
                    << line("dv", r.dv) << line("dsinks", r.dsinks);
  EXPECT_GT(r.dq.checked + r.dk.checked, 0);
  EXPECT_EQ(c.stray_writes(), 0) << name << ": wrote outside a gradient tensor";
}

// ---- the grid ----------------------------------------------------------------------------------

struct GpuCase {
  std::string name;
  BwdShape shape;
  fa::Kernel kernel;
};

std::string case_name(const BwdShape& s, fa::Kernel kernel) {
  fa::testing::CaseName n(kernel, s.dtype);
  if (s.lens_q.empty()) {
    n.num("_b", s.batch).num("_q", s.seqlen_q).num("_k", s.seqlen_k);
  } else {
    n.flag(true, "_varlen");
  }
  n.num("_h", s.heads_q).num("x", s.heads_kv);
  n.head_dims(s.head_dim, s.head_dim_v > 0 ? s.head_dim_v : s.head_dim);
  n.mask(s.causal, s.window_left, s.window_right);
  n.flag(s.q_layout == Layout::padded, "_padded").flag(s.q_layout == Layout::heads_major, "_bhsd");
  n.flag(s.q_sigma > 1, "_big").flag(s.sinks, "_sinks");
  if (s.softcap > 0) n.num("_softcap", static_cast<int>(s.softcap));
  return n.str();
}

std::vector<GpuCase> grid() {
  std::vector<BwdShape> shapes;
  const std::pair<int, int> seqlens[] = {{1, 1},   {1, 239}, {113, 203},
                                         {239, 1}, {799, 3}, {64, 128}};
  const std::pair<int, int> dims[] = {{64, 64},   {96, 96},   {128, 128},
                                      {192, 192}, {256, 256}, {192, 128}};
  int i = 0;
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16})
    for (auto [d, dv] : dims)
      for (auto [sq, sk] : seqlens)
        for (bool causal : {false, true}) {
          BwdShape s;
          s.dtype = dtype;
          s.batch = 2;
          s.seqlen_q = sq;
          s.seqlen_k = sk;
          s.heads_q = 4;
          s.heads_kv = (i++ % 2) ? 2 : 1;  // GQA 2 and MQA 4
          s.head_dim = d;
          s.head_dim_v = dv;
          s.causal = causal;
          shapes.push_back(s);
        }
  // TESTING.md's large odd pair: sq != sk both ways, at the head dims of the standard grid.
  for (int d : {64, 128, 256})
    for (auto [sq, sk] : {std::pair{1023, 1024}, std::pair{1024, 1023}})
      for (bool causal : {false, true}) {
        BwdShape s;
        s.seqlen_q = sq;
        s.seqlen_k = sk;
        s.heads_q = 2;
        s.heads_kv = 1;
        s.head_dim = d;
        s.causal = causal;
        shapes.push_back(s);
      }
  // Windows (asymmetric, both skews), causal with a left window.
  const int windows[][5] = {{113, 203, 37, 5, 0},  {203, 113, 37, 5, 0},  {300, 300, 5, 37, 0},
                            {300, 300, 100, 0, 1}, {130, 500, -1, 70, 0}, {500, 130, 70, -1, 0}};
  for (const auto& w : windows) {
    for (int d : {64, 128, 256}) {
      BwdShape s;
      s.seqlen_q = w[0];
      s.seqlen_k = w[1];
      s.window_left = w[2];
      s.window_right = w[3];
      s.causal = w[4] != 0;
      s.heads_q = 2;
      s.heads_kv = 2;
      s.head_dim = d;
      shapes.push_back(s);
    }
  }
  // GQA ratios 1, 2, 6 and MQA.
  for (int hkv : {12, 6, 2, 1}) {
    BwdShape s;
    s.seqlen_q = 113;
    s.seqlen_k = 203;
    s.heads_q = 12;
    s.heads_kv = hkv;
    s.causal = hkv % 2 == 0;
    shapes.push_back(s);
  }
  // Strides, large logits.
  for (Layout l : {Layout::padded, Layout::heads_major}) {
    BwdShape s;
    s.batch = 2;
    s.seqlen_q = 113;
    s.seqlen_k = 203;
    s.heads_q = 4;
    s.heads_kv = 2;
    s.head_dim = 192;
    s.head_dim_v = 128;
    s.q_layout = s.kv_layout = s.grad_layout = l;
    s.causal = l == Layout::padded;
    shapes.push_back(s);
  }
  {
    BwdShape s;
    s.seqlen_q = 300;
    s.seqlen_k = 257;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.head_dim = 128;
    s.q_sigma = 6.f;
    s.causal = true;
    shapes.push_back(s);
  }
  // Sinks with dsinks (fully masked rows too: causal with sq > sk).
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16})
    for (int d : {64, 128, 256}) {
      BwdShape s;
      s.dtype = dtype;
      s.batch = 2;
      s.seqlen_q = 239;
      s.seqlen_k = 100;
      s.heads_q = 4;
      s.heads_kv = 2;
      s.head_dim = d;
      s.causal = d != 128;
      s.sinks = true;
      shapes.push_back(s);
    }
  // Packed sequences with zero-length ones.
  for (bool causal : {false, true})
    for (int d : {64, 128, 256}) {
      BwdShape s;
      s.lens_q = {37, 0, 130, 1, 64, 9, 200};
      s.lens_k = {50, 17, 129, 1, 0, 9, 300};
      s.heads_q = 4;
      s.heads_kv = 2;
      s.head_dim = d;
      s.causal = causal;
      s.sinks = causal;
      shapes.push_back(s);
    }
  // Tiles (key block, KV head, sequence) for k6's persistent walk, mostly more than an H100/H200
  // has SMs, so that its blocks each walk several: 216-432 at 33 x 257, 144 at d 64's dense
  // 257 x 33, 36-108 in the others; dense and causal, causal rows that see no key (257 x 33);
  // and 60 packed sequences of up to 99 rows and 259 keys (up to 180 tiles): one with keys and no
  // rows (a tile of zero steps: dK = dV = 0) and many shorter than the longest (tiles without
  // keys, passed over). Above kFullCheckWork (the 33 x 257 and 257 x 33 shapes, d 128's packed
  // ones) a sample of (sequence, KV head) units is checked; stray writes everywhere.
  for (int d : {64, 128})
    for (auto [sq, sk] : {std::pair{33, 257}, std::pair{257, 33}})
      for (bool causal : {false, true}) {
        BwdShape s;
        s.batch = 9;
        s.seqlen_q = sq;
        s.seqlen_k = sk;
        s.heads_q = d == 64 ? 16 : 8;
        s.heads_kv = s.heads_q / (causal ? 2 : 1);
        s.head_dim = d;
        s.causal = causal;
        shapes.push_back(s);
      }
  for (int d : {64, 128}) {
    BwdShape s;
    for (int i = 0; i < 60; ++i) {
      s.lens_q.push_back(i * 37 % 100);
      s.lens_k.push_back((i * 53 + 11) % 260);
    }
    s.heads_q = 2;
    s.heads_kv = 1;
    s.head_dim = d;
    s.causal = d == 128;
    shapes.push_back(s);
  }
  // Softcap 5, 30 and 50 (dS times 1 - t^2): every head dim, odd lengths, causal rows that see no
  // key, a window, GQA and MQA, sinks with softcap, packed sequences with empty ones, large logits.
  for (float cap : {5.f, 30.f, 50.f}) {
    int j = 0;
    for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16})
      for (auto [d, dv] : dims) {
        BwdShape s;
        s.dtype = dtype;
        s.batch = 2;
        s.seqlen_q = j % 2 ? 239 : 113;
        s.seqlen_k = j % 2 ? 100 : 203;
        s.heads_q = 4;
        s.heads_kv = j % 3 ? 2 : 1;
        s.head_dim = d;
        s.head_dim_v = dv;
        s.causal = j % 2 == 1;
        if (j % 4 == 2) {
          s.window_left = 37;
          s.window_right = 5;
        }
        s.sinks = j % 3 == 1;
        s.q_sigma = j % 2 ? 1.f : 6.f;
        s.softcap = cap;
        shapes.push_back(s);
        ++j;
      }
    BwdShape s;
    s.lens_q = {37, 0, 130, 1, 64, 9, 200};
    s.lens_k = {50, 17, 129, 1, 0, 9, 300};
    s.heads_q = 4;
    s.heads_kv = 2;
    s.head_dim = 128;
    s.causal = true;
    s.sinks = true;
    s.q_sigma = 6.f;
    s.softcap = cap;
    shapes.push_back(s);
  }
  std::vector<GpuCase> out;
  for (fa::Kernel kernel : kKernels)
    for (const BwdShape& s : shapes) {
      if (runs_head_dims(kernel, s.head_dim, s.head_dim_v > 0 ? s.head_dim_v : s.head_dim)) {
        out.push_back({case_name(s, kernel), s, kernel});
      }
    }
  return out;
}

const std::vector<GpuCase>& all_cases() {
  static const std::vector<GpuCase> c = grid();
  return c;
}

class GpuBackward : public ::testing::TestWithParam<size_t> {};

TEST_P(GpuBackward, MatchesFp64Reference) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const GpuCase& gc = all_cases()[GetParam()];
  if (!device_runs(gc.kernel)) GTEST_SKIP() << "k6 runs on Hopper (sm_90) only";
  BwdCase c(gc.shape, fa_test::test_seed());
  expect_matches_reference(c, gc.name, gc.kernel);
}

INSTANTIATE_TEST_SUITE_P(Grid, GpuBackward, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const auto& info) { return all_cases()[info.param].name; });

// ---- edges -------------------------------------------------------------------------------------

// Causal with seqlen_q > seqlen_k: rows without keys (LSE -inf) get dq = +0 exactly, no NaN.
TEST(GpuBackwardEdges, FullyMaskedRowsGiveZeroDq) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (fa::Kernel kernel : kKernels) {
    if (!device_runs(kernel)) continue;
    SCOPED_TRACE(fa::kernel_name(kernel));
    BwdShape s;
    s.batch = 2;
    s.seqlen_q = 239;
    s.seqlen_k = 100;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.causal = true;
    BwdCase c(s, fa_test::test_seed());
    ASSERT_NO_FATAL_FAILURE(expect_matches_reference(c, "fully_masked", kernel));
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < s.seqlen_q - s.seqlen_k; ++i)
        for (int h = 0; h < 2; ++h)
          for (int x = 0; x < 64; ++x) {
            const int64_t at = b * c.params.dq.stride[0] + i * c.params.dq.stride[1] +
                               h * c.params.dq.stride[2] + x;
            ASSERT_EQ(c.dq[size_t(at)], 0u) << "row " << i;
          }
  }
}

// seqlen_k == 0 writes dq = 0; seqlen_q == 0 writes dk = dv = 0 (and dsinks = 0).
TEST(GpuBackwardEdges, EmptySequencesWriteZeros) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (fa::Kernel kernel : kKernels)
    for (auto [sq, sk] : {std::pair{5, 0}, std::pair{0, 9}}) {
      if (!device_runs(kernel)) continue;
      SCOPED_TRACE(std::string(fa::kernel_name(kernel)) + " sq " + std::to_string(sq) + " sk " +
                   std::to_string(sk));
      BwdShape s;
      s.batch = 2;
      s.seqlen_q = sq;
      s.seqlen_k = sk;
      s.heads_q = 2;
      s.heads_kv = 1;
      s.sinks = true;
      BwdCase c(s, fa_test::test_seed(uint64_t(sq)));
      ASSERT_NO_FATAL_FAILURE(c.run_forward());
      DeviceCase dev(c);
      ASSERT_NO_FATAL_FAILURE(dev.run(kernel));
      const size_t nq = size_t(2) * sq * 2 * 64, nk = size_t(2) * sk * 64;
      for (size_t i = 0; i < nq; ++i) ASSERT_EQ(c.dq[i], 0u);
      for (size_t i = 0; i < nk; ++i) ASSERT_EQ(c.dk[i], 0u);
      for (size_t i = 0; i < nk; ++i) ASSERT_EQ(c.dv_[i], 0u);
      for (float g : c.dsinks) ASSERT_EQ(g, 0.f);
    }
}

// ---- deterministic mode ----------------------------------------------------------------------

// deterministic = true: 20 calls on the same inputs give bitwise identical dq, dk, dv and dsinks,
// at head dims 64, 128 and 256 (FlashAttention-3 refuses 256), with GQA (dK/dV summed over a
// group) and causal and full masks, for every family at the head dims it is built for.
TEST(GpuBackwardDeterminism, TwentyRunsAreBitwiseIdentical) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  for (fa::Kernel kernel : kKernels)
    for (int d : {64, 128, 256}) {
      if (!device_runs(kernel) || !runs_head_dims(kernel, d, d)) continue;
      for (int shape = 0; shape < 3; ++shape) {
        const bool causal = shape > 0;
        SCOPED_TRACE(std::string(fa::kernel_name(kernel)) + " d " + std::to_string(d) +
                     (causal ? " causal" : "") + " shape " + std::to_string(shape));
        BwdShape s;
        // More tiles than an H100/H200 has SMs (at d 64/128: 144, 432 and 144): k6's blocks each
        // walk several (the persistent walk on the short ones, shapes 0 and 2) and wait on each
        // other's turns across them.
        s.batch = 8;
        // Dense: 200 rows, an odd number of 32-row semaphore blocks (k6's slots of the last
        // 64-row block once ran into the next sequence's, and the walk hung).
        const int seqlens[3][2] = {{200, 300}, {1000, 1100}, {250, 300}};
        s.seqlen_q = seqlens[shape][0];
        s.seqlen_k = seqlens[shape][1];
        s.heads_q = 24;
        s.heads_kv = 6;
        s.head_dim = d;
        s.causal = causal;
        s.sinks = true;
        BwdCase c(s, fa_test::test_seed(uint64_t(d) + shape));
        ASSERT_NO_FATAL_FAILURE(c.run_forward());
        DeviceCase dev(c);
        dev.params.deterministic = true;
        ASSERT_NO_FATAL_FAILURE(dev.run(kernel));
        const auto dq = c.dq, dk = c.dk, dv = c.dv_;
        const auto dsinks = c.dsinks;
        int differing = 0;
        for (int r = 1; r < 20; ++r) {
          ASSERT_NO_FATAL_FAILURE(dev.run(kernel));
          differing += c.dq != dq || c.dk != dk || c.dv_ != dv ||
                       std::memcmp(c.dsinks.data(), dsinks.data(), dsinks.size() * 4) != 0;
        }
        EXPECT_EQ(differing, 0) << "of 19 repeated deterministic runs";
        // The deterministic gradients pass the oracle too.
        const auto r = fa::reference::check_backward(
            c.params, fa::reference::sample_kv_heads(c.params, 2, fa_test::test_seed(7)));
        EXPECT_TRUE(r.ok) << r.detail;
      }
    }
}

// Validation of device-side arguments: host memory is refused by fa2, device memory by cpu.
TEST(GpuBackwardValidation, MemoryPlacement) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  BwdShape s;
  s.seqlen_q = 17;
  s.seqlen_k = 23;
  BwdCase c(s, fa_test::test_seed());
  ASSERT_NO_FATAL_FAILURE(c.run_forward());
  DeviceCase dev(c);
  EXPECT_TRUE(fa::can_implement(dev.params, fa::Kernel::fa2).ok());
  // auto: k6 on Hopper (head dim 64 here), fa2 elsewhere.
  EXPECT_EQ(fa::select_kernel(dev.params),
            device_runs(fa::Kernel::k6) ? fa::Kernel::k6 : fa::Kernel::fa2);
  fa::BackwardParams mixed = dev.params;
  mixed.lse = c.lse.data();
  const fa::Status s1 = fa::can_implement(mixed, fa::Kernel::fa2);
  EXPECT_EQ(s1.code, fa::StatusCode::invalid_argument);
  EXPECT_NE(s1.message.find("lse: kernel fa2 needs device memory"), std::string::npos)
      << s1.message;
  const fa::Status s2 = fa::can_implement(dev.params, fa::Kernel::cpu);
  EXPECT_EQ(s2.code, fa::StatusCode::invalid_argument);
  EXPECT_NE(s2.message.find("kernel cpu needs host memory"), std::string::npos) << s2.message;
}

// k6 reads q, k, v and dout through TMA, which needs a stride in (0, 2^40) bytes for a dimension
// of extent > 1: a broadcast (stride 0) head dimension is refused for k6, naming the tensor,
// and runs on fa2.
TEST(GpuBackwardValidation, K6NeedsTmaStrides) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  if (!device_runs(fa::Kernel::k6)) GTEST_SKIP() << "k6 runs on Hopper (sm_90) only";
  BwdShape s;
  s.seqlen_q = 17;
  s.seqlen_k = 23;
  s.heads_q = 4;
  s.heads_kv = 2;
  BwdCase c(s, fa_test::test_seed());
  ASSERT_NO_FATAL_FAILURE(c.run_forward());
  DeviceCase dev(c);
  EXPECT_TRUE(fa::can_implement(dev.params, fa::Kernel::k6).ok());
  for (const char* name : {"q", "k", "v", "dout"}) {
    fa::BackwardParams p = dev.params;
    fa::TensorRef& t = std::string(name) == "q"   ? p.q
                       : std::string(name) == "k" ? p.k
                       : std::string(name) == "v" ? p.v
                                                  : p.dout;
    t.stride[2] = 0;
    const fa::Status k6 = fa::can_implement(p, fa::Kernel::k6);
    EXPECT_EQ(k6.code, fa::StatusCode::unsupported) << name;
    EXPECT_NE(k6.message.find(std::string(name) +
                              ".stride[2]: kernel k6 loads through TMA, which needs a stride in "
                              "(0, 2^40) bytes"),
              std::string::npos)
        << k6.message;
    EXPECT_TRUE(fa::can_implement(p, fa::Kernel::fa2).ok()) << name;
    EXPECT_EQ(fa::select_kernel(p), fa::Kernel::fa2) << name;
  }
}

}  // namespace
