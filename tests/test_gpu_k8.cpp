// GPU tests of K8 (ctest label `gpu`): the pre-pass quantize_fp8() on the device against the
// host implementation (bit for bit: e4m3 outputs and block descales, with and without the
// Hadamard rotation), then Kernel::k8 on its outputs against the FP8 oracle (reference::check on
// the dequantised inputs, FlashAttention-3's rule), over head dims 64/128/256, odd and unequal
// sequence lengths, GQA/MQA, causal and windows, padded strides, both output dtypes, N(0,1) and
// outlier inputs (and the pre-pass alone on strides that allow only 4-byte or single-element
// accesses). Outputs NaN-poisoned before each run; nothing outside o written; 100 runs
// bitwise identical; and on outlier inputs the rotation's error against the original bf16
// attention is well below K7's with per-head descales. Without an sm_90 device every test skips.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/host_dtype.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"
#include "fp8_case.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

using flashattn::testing::DeviceBuffer;
using flashattn::testing::download;
using flashattn::testing::have_gpu;
using flashattn::testing::run_seed;
using flashattn::testing::upload;

bool k8_runs_here() {
  return fa::kernel_is_built(fa::Kernel::k8) && have_gpu() && flashattn::testing::device_is_sm90();
}

struct K8Shape {
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 128;
  bool causal = false;
  int window_left = -1, window_right = -1;
  fa::DType in_dtype = fa::DType::bf16;  // the data before quantisation; o is the same type
  fa::Fp8Rotation rotation = fa::Fp8Rotation::none;
  bool outliers = false;
  bool padded = false;
  // The pre-pass alone (K8GpuPrePass; the forward's TMA needs 16-byte strides): 2 puts q, k, v and
  // their e4m3 outputs at strides that allow 4-byte loads and 2-byte stores only, 1 at odd ones
  // (one element per load, one byte per store), the outputs also starting `misalign` bytes past
  // an aligned address.
  int misalign = 0;
};

// "k8_bf16_b2_q300_k517_h4x2_d128_causal_hadamard": a gtest name.
std::string k8_name(const K8Shape& s) {
  return flashattn::testing::CaseName(fa::Kernel::k8, s.in_dtype)
      .num("_b", s.batch)
      .num("_q", s.seqlen_q)
      .num("_k", s.seqlen_k)
      .num("_h", s.heads_q)
      .num("x", s.heads_kv)
      .head_dims(s.head_dim, s.head_dim)
      .mask(s.causal, s.window_left, s.window_right)
      .flag(s.rotation == fa::Fp8Rotation::hadamard, "_hadamard")
      .flag(s.outliers, "_outliers")
      .flag(s.padded, "_padded")
      .flag(s.misalign == 2, "_pairs")
      .flag(s.misalign == 1, "_odd")
      .str();
}

using fa_test::fp8_layout;
using fa_test::kPoison16;

int blocks(int seqlen, int rows) { return (seqlen + rows - 1) / rows; }

// K8Shape::misalign's layouts: every stride (elements) `step` more than dense, so that none is a
// multiple of 8 (16 bytes of 16-bit data) and, with step 1, each is odd. Returns the elements to
// allocate, `step` of them past the last for the outputs' offset.
size_t misaligned_layout(int64_t (&stride)[4], int step, int batch, int seqlen, int heads,
                         int dim) {
  stride[3] = 1;
  stride[2] = dim + step;
  stride[1] = heads * stride[2] + step;
  stride[0] = int64_t{seqlen} * stride[1] + step;
  return size_t(batch) * size_t(stride[0]) + size_t(step);
}

// One K8 problem: 16-bit data drawn on the host, quantised on the device and on the host, the
// forward run on the device; host copies of everything for the checks.
struct K8Case {
  K8Shape s;
  fa::Fp8BlockRows rows;
  std::vector<uint16_t> q16, k16, v16;            // the original data
  std::vector<uint8_t> q8, k8, v8;                // host pre-pass
  std::vector<float> qd, kd, vd;                  // host pre-pass descales
  std::vector<uint8_t> q8_dev, k8_dev, v8_dev;    // device pre-pass, copied back
  std::vector<float> qd_dev, kd_dev, vd_dev;
  std::vector<uint16_t> o;
  std::vector<float> lse;
  fa::QuantizeFp8Params qp;  // host pointers (the host pre-pass's call)
  fa::ForwardParams fp;      // host pointers to the device pre-pass's outputs and o / lse
  uint64_t seed;
  int out_offset = 0;  // bytes from q8's (k8's, v8's) start to the e4m3 tensor's

  K8Case(const K8Shape& shape, uint64_t seed_) : s(shape), rows(fa::fp8_block_rows(shape.head_dim)),
                                                 seed(seed_) {
    const int d = s.head_dim;
    qp.dtype = s.in_dtype;
    qp.batch = s.batch;
    qp.seqlen_q = s.seqlen_q;
    qp.seqlen_k = s.seqlen_k;
    qp.heads_q = s.heads_q;
    qp.heads_kv = s.heads_kv;
    qp.head_dim = d;
    qp.rotation = s.rotation;
    qp.seed = seed ^ 0x4ad;
    size_t nq, nk, nq8, nk8;
    if (s.misalign != 0) {
      const int m = s.misalign;
      nq = misaligned_layout(qp.q.stride, m, s.batch, s.seqlen_q, s.heads_q, d);
      nk = misaligned_layout(qp.k.stride, m, s.batch, s.seqlen_k, s.heads_kv, d);
      misaligned_layout(qp.v.stride, m, s.batch, s.seqlen_k, s.heads_kv, d);
      nq8 = misaligned_layout(qp.q_out.stride, m, s.batch, s.seqlen_q, s.heads_q, d);
      nk8 = misaligned_layout(qp.k_out.stride, m, s.batch, s.seqlen_k, s.heads_kv, d);
      misaligned_layout(qp.v_out.stride, m, s.batch, s.seqlen_k, s.heads_kv, d);
      out_offset = m;
    } else {
      nq = fp8_layout(qp.q.stride, s.padded, s.batch, s.seqlen_q, s.heads_q, d);
      nk = fp8_layout(qp.k.stride, s.padded, s.batch, s.seqlen_k, s.heads_kv, d);
      fp8_layout(qp.v.stride, s.padded, s.batch, s.seqlen_k, s.heads_kv, d);
      // The e4m3 outputs dense (their own strides), o padded like the inputs.
      nq8 = fp8_layout(qp.q_out.stride, false, s.batch, s.seqlen_q, s.heads_q, d);
      nk8 = fp8_layout(qp.k_out.stride, false, s.batch, s.seqlen_k, s.heads_kv, d);
      fp8_layout(qp.v_out.stride, false, s.batch, s.seqlen_k, s.heads_kv, d);
    }
    q16.resize(nq);
    k16.resize(nk);
    v16.resize(nk);
    for (auto [t, salt] : {std::pair{&q16, 0x51u}, {&k16, 0x4bu}, {&v16, 0x56u}}) {
      if (s.outliers) {
        fa::reference::fill_outliers(t->data(), std::ssize(*t), s.in_dtype, seed ^ salt);
      } else {
        fa::reference::fill_normal(t->data(), std::ssize(*t), s.in_dtype, seed ^ salt);
      }
    }
    q8.assign(nq8, 0xAA);
    k8.assign(nk8, 0xAA);
    v8.assign(nk8, 0xAA);
    q8_dev = q8;
    k8_dev = k8;
    v8_dev = v8;
    qd.assign(size_t(s.batch) * s.heads_q * blocks(s.seqlen_q, rows.q), -1.f);
    kd.assign(size_t(s.batch) * s.heads_kv * blocks(s.seqlen_k, rows.kv), -1.f);
    vd = kd;
    qd_dev = qd;
    kd_dev = kd;
    vd_dev = vd;
    qp.q.data = q16.data();
    qp.k.data = k16.data();
    qp.v.data = v16.data();
    qp.q_out.data = q8.data() + out_offset;
    qp.k_out.data = k8.data() + out_offset;
    qp.v_out.data = v8.data() + out_offset;
    qp.q_block_descale = qd.data();
    qp.k_block_descale = kd.data();
    qp.v_block_descale = vd.data();

    fp.dtype = fa::DType::e4m3;
    fp.out_dtype = s.in_dtype;
    fp.batch = s.batch;
    fp.seqlen_q = s.seqlen_q;
    fp.seqlen_k = s.seqlen_k;
    fp.heads_q = s.heads_q;
    fp.heads_kv = s.heads_kv;
    fp.head_dim = d;
    fp.causal = s.causal;
    fp.window_left = s.window_left;
    fp.window_right = s.window_right;
    for (int i = 0; i < 4; ++i) {
      fp.q.stride[i] = qp.q_out.stride[i];
      fp.k.stride[i] = qp.k_out.stride[i];
      fp.v.stride[i] = qp.v_out.stride[i];
    }
    o.assign(fp8_layout(fp.o.stride, s.padded, s.batch, s.seqlen_q, s.heads_q, d), kPoison16);
    lse.assign(std::max<size_t>(1, size_t(s.batch) * s.heads_q * s.seqlen_q), NAN);
    fp.q.data = q8_dev.data();
    fp.k.data = k8_dev.data();
    fp.v.data = v8_dev.data();
    fp.q_block_descale = qd_dev.data();
    fp.k_block_descale = kd_dev.data();
    fp.v_block_descale = vd_dev.data();
    fp.o.data = o.data();
    fp.lse = lse.data();
  }

  // The original 16-bit problem with o / lse pointing at `out` / `out_lse` (the attention the
  // quantised run approximates: the rotation leaves it unchanged).
  fa::ForwardParams original(std::vector<uint16_t>& out, std::vector<float>& out_lse) const {
    fa::ForwardParams p = fp;
    p.dtype = s.in_dtype;
    p.q_block_descale = p.k_block_descale = p.v_block_descale = nullptr;
    for (int i = 0; i < 4; ++i) {
      p.q.stride[i] = qp.q.stride[i];
      p.k.stride[i] = qp.k.stride[i];
      p.v.stride[i] = qp.v.stride[i];
    }
    p.q.data = q16.data();
    p.k.data = k16.data();
    p.v.data = v16.data();
    p.o.data = out.data();
    p.lse = out_lse.data();
    return p;
  }
};

// Device buffers of a case; quantize() runs the device pre-pass, forward() the k8 forward (both
// copy their results into the case).
class K8Run {
 public:
  explicit K8Run(K8Case& c)
      : c_(c), q16_(c.q16.size() * 2), k16_(c.k16.size() * 2), v16_(c.v16.size() * 2),
        q8_(c.q8.size()), k8_(c.k8.size()), v8_(c.v8.size()), qd_(c.qd.size() * 4),
        kd_(c.kd.size() * 4), vd_(c.vd.size() * 4), o_(c.o.size() * 2), lse_(c.lse.size() * 4) {
    ok = q16_.ptr && k16_.ptr && v16_.ptr && q8_.ptr && k8_.ptr && v8_.ptr && qd_.ptr && kd_.ptr &&
         vd_.ptr && o_.ptr && lse_.ptr;
    EXPECT_TRUE(ok) << "cudaMalloc failed";
    if (!ok) return;
    upload(q16_, c.q16);
    upload(k16_, c.k16);
    upload(v16_, c.v16);
    upload(q8_, c.q8_dev);  // the poison pattern
    upload(k8_, c.k8_dev);
    upload(v8_, c.v8_dev);
    upload(qd_, c.qd_dev);
    upload(kd_, c.kd_dev);
    upload(vd_, c.vd_dev);
    qp = c.qp;
    qp.q.data = q16_.ptr;
    qp.k.data = k16_.ptr;
    qp.v.data = v16_.ptr;
    qp.q_out.data = static_cast<uint8_t*>(q8_.ptr) + c.out_offset;
    qp.k_out.data = static_cast<uint8_t*>(k8_.ptr) + c.out_offset;
    qp.v_out.data = static_cast<uint8_t*>(v8_.ptr) + c.out_offset;
    qp.q_block_descale = static_cast<float*>(qd_.ptr);
    qp.k_block_descale = static_cast<float*>(kd_.ptr);
    qp.v_block_descale = static_cast<float*>(vd_.ptr);
    fp = c.fp;
    fp.q.data = q8_.ptr;
    fp.k.data = k8_.ptr;
    fp.v.data = v8_.ptr;
    fp.q_block_descale = static_cast<const float*>(qd_.ptr);
    fp.k_block_descale = static_cast<const float*>(kd_.ptr);
    fp.v_block_descale = static_cast<const float*>(vd_.ptr);
    fp.o.data = o_.ptr;
    fp.lse = static_cast<float*>(lse_.ptr);
  }

  bool quantize() {
    const fa::Status st = fa::quantize_fp8(qp);
    EXPECT_TRUE(st.ok()) << st.message;
    if (!st.ok()) return false;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    download(c_.q8_dev, q8_);
    download(c_.k8_dev, k8_);
    download(c_.v8_dev, v8_);
    download(c_.qd_dev, qd_);
    download(c_.kd_dev, kd_);
    download(c_.vd_dev, vd_);
    return true;
  }

  bool forward(fa::Kernel kernel = fa::Kernel::k8) {
    std::fill(c_.o.begin(), c_.o.end(), kPoison16);
    std::fill(c_.lse.begin(), c_.lse.end(), NAN);
    upload(o_, c_.o);
    upload(lse_, c_.lse);
    if (!flashattn::testing::forward_and_sync(fp, kernel)) return false;
    download(c_.o, o_);
    download(c_.lse, lse_);
    return true;
  }

  fa::QuantizeFp8Params qp;
  fa::ForwardParams fp;
  bool ok = false;

 private:
  K8Case& c_;
  DeviceBuffer q16_, k16_, v16_, q8_, k8_, v8_, qd_, kd_, vd_, o_, lse_;
};

// Index of the first difference, or -1.
template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return int64_t(i);
  return -1;
}

// The host pre-pass on the case, then bit for bit against the device's: outputs (the untouched
// padding included) and descales.
void expect_pre_passes_equal(K8Case& c) {
  const fa::Status host = fa::quantize_fp8(c.qp);
  ASSERT_TRUE(host.ok()) << host.message;
  EXPECT_EQ(first_difference(c.q8, c.q8_dev), -1) << "q e4m3";
  EXPECT_EQ(first_difference(c.k8, c.k8_dev), -1) << "k e4m3";
  EXPECT_EQ(first_difference(c.v8, c.v8_dev), -1) << "v e4m3";
  EXPECT_EQ(first_difference(c.qd, c.qd_dev), -1) << "q descales";
  EXPECT_EQ(first_difference(c.kd, c.kd_dev), -1) << "k descales";
  EXPECT_EQ(first_difference(c.vd, c.vd_dev), -1) << "v descales";
  for (float x : c.qd_dev) ASSERT_GT(x, 0.f);
}

class K8Gpu : public ::testing::TestWithParam<K8Shape> {};

TEST_P(K8Gpu, PrePassMatchesHostAndForwardMatchesOracle) {
  if (!k8_runs_here()) GTEST_SKIP() << "no sm_90 device or k8 not built";
  K8Case c(GetParam(), run_seed());
  K8Run run(c);
  ASSERT_TRUE(run.ok);
  ASSERT_TRUE(run.quantize());
  expect_pre_passes_equal(c);
  if (::testing::Test::HasFatalFailure()) return;

  ASSERT_TRUE(run.forward());
  const fa::reference::CheckResult r = fa::reference::check(c.fp);
  EXPECT_TRUE(r.ok) << r.detail << " (max_err " << r.max_err << ", pt " << r.max_err_pt
                    << ", atol " << r.atol << "; lse " << r.lse_max_err << " vs "
                    << r.lse_max_err_pt << " + " << r.lse_atol << ", not finite " << r.not_finite
                    << ")";
  EXPECT_GT(r.checked, 0);
  // Nothing written outside o's logical elements (the padding keeps its poison).
  const int d = c.s.head_dim;
  int64_t stray = 0;
  std::vector<char> inside(c.o.size(), 0);
  for (int b = 0; b < c.s.batch; ++b)
    for (int t = 0; t < c.s.seqlen_q; ++t)
      for (int h = 0; h < c.s.heads_q; ++h)
        for (int i = 0; i < d; ++i)
          inside[b * c.fp.o.stride[0] + t * c.fp.o.stride[1] + h * c.fp.o.stride[2] + i] = 1;
  for (size_t i = 0; i < c.o.size(); ++i) stray += !inside[i] && c.o[i] != kPoison16;
  EXPECT_EQ(stray, 0) << "elements written outside o";
}

std::vector<K8Shape> k8_grid() {
  std::vector<K8Shape> g;
  using R = fa::Fp8Rotation;
  for (int d : {64, 128, 256}) {
    for (R rot : {R::none, R::hadamard}) {
      g.push_back({.batch = 2, .seqlen_q = 300, .seqlen_k = 517, .heads_q = 4, .heads_kv = 2,
                   .head_dim = d, .rotation = rot});
      g.push_back({.batch = 1, .seqlen_q = 333, .seqlen_k = 333, .heads_q = 3, .heads_kv = 1,
                   .head_dim = d, .causal = true, .rotation = rot, .outliers = true});
      g.push_back({.batch = 2, .seqlen_q = 1, .seqlen_k = 129, .heads_q = 2, .heads_kv = 2,
                   .head_dim = d, .in_dtype = fa::DType::fp16, .rotation = rot});
    }
    g.push_back({.batch = 1, .seqlen_q = 257, .seqlen_k = 1, .heads_q = 2, .heads_kv = 1,
                 .head_dim = d, .rotation = R::hadamard});
    g.push_back({.batch = 3, .seqlen_q = 200, .seqlen_k = 700, .heads_q = 2, .heads_kv = 2,
                 .head_dim = d, .window_left = 100, .window_right = 20,
                 .rotation = R::hadamard, .padded = true});
    g.push_back({.batch = 1, .seqlen_q = 640, .seqlen_k = 413, .heads_q = 4, .heads_kv = 4,
                 .head_dim = d, .causal = true, .in_dtype = fa::DType::fp16,
                 .rotation = R::hadamard, .padded = true});
  }
  return g;
}

INSTANTIATE_TEST_SUITE_P(Grid, K8Gpu, ::testing::ValuesIn(k8_grid()),
                         [](const auto& info) { return k8_name(info.param); });

// The pre-pass's narrower memory paths (4-byte loads and 2-byte stores; single elements and bytes)
// against the host, bit for bit. The K8 grid above reaches only its 16-byte path: the forward
// that follows the pre-pass there needs 16-byte strides.
class K8GpuPrePass : public ::testing::TestWithParam<K8Shape> {};

TEST_P(K8GpuPrePass, NarrowLayoutsMatchHost) {
  if (!k8_runs_here()) GTEST_SKIP() << "no sm_90 device or k8 not built";
  K8Case c(GetParam(), run_seed());
  K8Run run(c);
  ASSERT_TRUE(run.ok);
  ASSERT_TRUE(run.quantize());
  expect_pre_passes_equal(c);
}

std::vector<K8Shape> k8_prepass_grid() {
  std::vector<K8Shape> g;
  using R = fa::Fp8Rotation;
  for (int d : {64, 128, 256}) {
    for (int m : {2, 1}) {
      g.push_back({.batch = 2, .seqlen_q = 203, .seqlen_k = 331, .heads_q = 4, .heads_kv = 2,
                   .head_dim = d, .rotation = R::hadamard, .outliers = true, .misalign = m});
      g.push_back({.batch = 1, .seqlen_q = 97, .seqlen_k = 1, .heads_q = 3, .heads_kv = 1,
                   .head_dim = d, .in_dtype = fa::DType::fp16, .rotation = R::none,
                   .misalign = m});
    }
  }
  return g;
}

INSTANTIATE_TEST_SUITE_P(Layouts, K8GpuPrePass, ::testing::ValuesIn(k8_prepass_grid()),
                         [](const auto& info) { return k8_name(info.param); });

// 100 runs of the pre-pass and the forward on one input: bitwise the same.
TEST(K8GpuDeterminism, HundredRunsBitwise) {
  if (!k8_runs_here()) GTEST_SKIP() << "no sm_90 device or k8 not built";
  K8Case c({.batch = 2, .seqlen_q = 1000, .seqlen_k = 1000, .heads_q = 4, .heads_kv = 2,
            .head_dim = 128, .causal = true, .rotation = fa::Fp8Rotation::hadamard},
           run_seed());
  K8Run run(c);
  ASSERT_TRUE(run.ok);
  ASSERT_TRUE(run.quantize());
  ASSERT_TRUE(run.forward());
  const std::vector<uint16_t> o0 = c.o;
  const std::vector<float> lse0 = c.lse;
  const std::vector<uint8_t> q0 = c.q8_dev;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(run.quantize());
    ASSERT_TRUE(run.forward());
    ASSERT_EQ(first_difference(c.q8_dev, q0), -1) << "run " << i;
    ASSERT_EQ(first_difference(c.o, o0), -1) << "run " << i;
    ASSERT_EQ(first_difference(c.lse, lse0), -1) << "run " << i;
  }
}

// The point of the rotation: on FlashAttention-3's outlier inputs, the RMSE against the fp64
// attention of the original bf16 data, K8 with the rotation vs K7 (per-(sequence, KV head)
// descales from the same data), asserted < 0.7x. At 1024 x 1024 keys the ratio measured 0.54,
// 0.64 and 0.68 in three runs (too few outliers for a stable figure); with 4096 keys 0.36-0.51
// over nine seeds on the H100 (the accuracy report, 4096 x 4096: 0.40 / 0.35).
TEST(K8GpuAccuracy, HadamardBeatsPerHeadDescalesOnOutliers) {
  if (!k8_runs_here()) GTEST_SKIP() << "no sm_90 device or k8 not built";
  const K8Shape shape{.batch = 1, .seqlen_q = 1024, .seqlen_k = 4096, .heads_q = 4, .heads_kv = 4,
                      .head_dim = 128, .rotation = fa::Fp8Rotation::hadamard, .outliers = true};
  K8Case c(shape, run_seed());
  K8Run run(c);
  ASSERT_TRUE(run.ok);
  ASSERT_TRUE(run.quantize());
  ASSERT_TRUE(run.forward());
  std::vector<uint16_t> unused_o(c.o.size());
  std::vector<float> unused_lse(c.lse.size());
  const fa::ForwardParams original = c.original(unused_o, unused_lse);
  auto rmse_vs_original = [&](const std::vector<uint16_t>& out) {
    fa::ForwardParams p = original;
    p.o.data = const_cast<uint16_t*>(out.data());
    p.lse = nullptr;
    return fa::reference::check(p).rmse;
  };
  const double k8 = rmse_vs_original(c.o);

  // K7 on the same data with per-head descales (amax / 448).
  const int d = shape.head_dim;
  std::vector<uint8_t> q7(c.q16.size()), k7(c.k16.size()), v7(c.v16.size());
  std::vector<float> qd7(shape.heads_kv), kd7(shape.heads_kv), vd7(shape.heads_kv);
  fa::reference::quantize_e4m3_per_head(shape.in_dtype, c.q16.data(), 1, shape.seqlen_q,
                                        shape.heads_q, d, shape.heads_q / shape.heads_kv, q7.data(),
                                        qd7.data());
  fa::reference::quantize_e4m3_per_head(shape.in_dtype, c.k16.data(), 1, shape.seqlen_k,
                                        shape.heads_kv, d, 1, k7.data(), kd7.data());
  fa::reference::quantize_e4m3_per_head(shape.in_dtype, c.v16.data(), 1, shape.seqlen_k,
                                        shape.heads_kv, d, 1, v7.data(), vd7.data());
  DeviceBuffer q7d(q7.size()), k7d(k7.size()), v7d(v7.size()), dd(3 * 4 * shape.heads_kv),
      o7d(c.o.size() * 2);
  ASSERT_TRUE(q7d.ptr && k7d.ptr && v7d.ptr && dd.ptr && o7d.ptr);
  upload(q7d, q7);
  upload(k7d, k7);
  upload(v7d, v7);
  std::vector<float> descales(qd7);
  descales.insert(descales.end(), kd7.begin(), kd7.end());
  descales.insert(descales.end(), vd7.begin(), vd7.end());
  upload(dd, descales);
  fa::ForwardParams p7 = original;
  p7.dtype = fa::DType::e4m3;
  p7.out_dtype = shape.in_dtype;
  p7.q.data = q7d.ptr;
  p7.k.data = k7d.ptr;
  p7.v.data = v7d.ptr;
  p7.q_descale = static_cast<const float*>(dd.ptr);
  p7.k_descale = p7.q_descale + shape.heads_kv;
  p7.v_descale = p7.k_descale + shape.heads_kv;
  p7.o.data = o7d.ptr;
  p7.lse = nullptr;
  ASSERT_TRUE(flashattn::testing::forward_and_sync(p7, fa::Kernel::k7));
  std::vector<uint16_t> o7(c.o.size());
  download(o7, o7d);
  const double k7_rmse = rmse_vs_original(o7);
  std::printf("[k8 accuracy] outliers d128 q1024 k4096: rmse vs original k8+hadamard %.3e, k7 %.3e "
              "(ratio %.2f)\n", k8, k7_rmse, k8 / k7_rmse);
  EXPECT_GT(k7_rmse, 0.0);
  EXPECT_LT(k8, 0.7 * k7_rmse);
}

}  // namespace
