// The backward on the host: Kernel::cpu against the fp64 reference gradients with FlashAttention's
// rule (reference::check_backward) over the odd-shape grid of TESTING.md, and the reference itself
// against finite differences of the fp64 forward. Gradients are NaN-poisoned before every run, so
// an element left unwritten fails; inputs come from the printed seed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backward_case.h"
#include "common/host_dtype.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"

namespace {

namespace fa = flashattn;
namespace ref = flashattn::reference;
using fa_test::BwdCase;
using fa_test::BwdShape;
using fa_test::Layout;

void run_cpu(BwdCase& c) {
  ASSERT_NO_FATAL_FAILURE(c.run_forward());
  c.poison();
  const fa::Status st = fa::backward(c.params, fa::Kernel::cpu);
  ASSERT_TRUE(st.ok()) << fa::status_code_name(st.code) << ": " << st.message;
}

void expect_passes(BwdCase& c) {
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  const ref::BackwardCheckResult r = ref::check_backward(c.params);
  auto line = [](const char* n, const ref::GradientCheck& g) {
    return std::string(n) + " err " + std::to_string(g.max_err) + " pt " +
           std::to_string(g.max_err_pt) + " atol " + std::to_string(g.atol) + "; ";
  };
  EXPECT_TRUE(r.ok) << r.detail << "\n  " << line("dq", r.dq) << line("dk", r.dk)
                    << line("dv", r.dv) << line("dsinks", r.dsinks);
  EXPECT_EQ(r.dq.not_finite + r.dk.not_finite + r.dv.not_finite + r.dsinks.not_finite, 0);
  EXPECT_EQ(c.stray_writes(), 0) << "the kernel wrote outside a gradient tensor";
  if (c.params.dsinks != nullptr) {
    EXPECT_EQ(r.dsinks.checked, c.params.heads_q);
  }
}

// ---- the grid: (sq, sk) x dtype x head dims, causal on and off ---------------------------

struct GridParam {
  int sq, sk;
  fa::DType dtype;
  int d, dv;
  bool causal;
};

std::string name_of(const GridParam& g) {
  std::string dims = std::to_string(g.d);
  if (g.dv != g.d) dims += 'x' + std::to_string(g.dv);
  return std::string(fa::dtype_name(g.dtype)) + "_d" + dims + "_sq" + std::to_string(g.sq) + "_sk" +
         std::to_string(g.sk) + (g.causal ? "_causal" : "");
}
void PrintTo(const GridParam& g, std::ostream* os) {
  *os << name_of(g);
}

std::vector<GridParam> grid() {
  const std::pair<int, int> seqlens[] = {{1, 1},   {1, 239}, {113, 203}, {239, 1},
                                         {799, 3}, {64, 64}, {130, 67}};
  const std::pair<int, int> dims[] = {{64, 64},   {96, 96},   {128, 128},
                                      {192, 192}, {256, 256}, {192, 128}};
  std::vector<GridParam> out;
  for (auto [sq, sk] : seqlens)
    for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16})
      for (auto [d, dv] : dims)
        for (bool causal : {false, true}) out.push_back({sq, sk, dtype, d, dv, causal});
  return out;
}

class CpuBackwardGrid : public ::testing::TestWithParam<GridParam> {};

// Guards: tile edges on both sides (1 row, 1 key, partial 64-blocks, sq > sk with fully masked
// rows and sq < sk with keys no causal row sees), every head dim pair, both dtypes; GQA 2 and
// batch 2 throughout, so dK/dV sum over two query heads.
TEST_P(CpuBackwardGrid, MatchesReference) {
  const GridParam& g = GetParam();
  BwdShape s;
  s.dtype = g.dtype;
  s.batch = 2;
  s.seqlen_q = g.sq;
  s.seqlen_k = g.sk;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = g.d;
  s.head_dim_v = g.dv;
  s.causal = g.causal;
  BwdCase c(s, fa_test::test_seed());
  expect_passes(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuBackwardGrid, ::testing::ValuesIn(grid()),
                         [](const auto& info) { return name_of(info.param); });

// ---- masks, GQA, layouts ---------------------------------------------------------------------

struct WindowParam {
  int sq, sk, left, right;
  bool causal;
};

class CpuBackwardWindow : public ::testing::TestWithParam<WindowParam> {};

// Guards: the key range of a query tile (pass 2) and the row range of a key block (pass 3,
// Mask::query_begin/query_end) under asymmetric windows, on square and skewed shapes.
TEST_P(CpuBackwardWindow, MatchesReference) {
  const WindowParam& w = GetParam();
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
    SCOPED_TRACE(fa::dtype_name(dtype));
    BwdShape s;
    s.dtype = dtype;
    s.seqlen_q = w.sq;
    s.seqlen_k = w.sk;
    s.heads_q = 2;
    s.heads_kv = 2;
    s.head_dim = 64;
    s.window_left = w.left;
    s.window_right = w.right;
    s.causal = w.causal;
    BwdCase c(s, fa_test::test_seed(dtype == fa::DType::bf16 ? 0 : 1));
    expect_passes(c);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Windows, CpuBackwardWindow,
    ::testing::Values(WindowParam{113, 203, 37, 5, false}, WindowParam{203, 113, 37, 5, false},
                      WindowParam{300, 300, 5, 37, false}, WindowParam{300, 300, 100, 0, true},
                      WindowParam{239, 1, 37, 5, false}, WindowParam{64, 64, 0, 0, false},
                      WindowParam{130, 500, -1, 70, false}, WindowParam{500, 130, 70, -1, false},
                      WindowParam{799, 3, 2, 0, false}, WindowParam{1, 239, 100, -1, true}),
    [](const auto& info) {
      const WindowParam& w = info.param;
      auto b = [](int x) { return x < 0 ? std::string("inf") : std::to_string(x); };
      return "sq" + std::to_string(w.sq) + "_sk" + std::to_string(w.sk) + "_left" + b(w.left) +
             "_right" + (w.causal ? std::string("causal") : b(w.right));
    });

// Guards: dK/dV of a KV head sum over its group's query heads, for groups of 1, 2, 6 and MQA.
TEST(CpuBackward, GqaRatios) {
  for (int heads_kv : {12, 6, 2, 1}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE("heads_kv " + std::to_string(heads_kv) + (causal ? " causal" : ""));
      BwdShape s;
      s.seqlen_q = 113;
      s.seqlen_k = 203;
      s.heads_q = 12;
      s.heads_kv = heads_kv;
      s.head_dim = 64;
      s.causal = causal;
      BwdCase c(s, fa_test::test_seed(uint64_t(heads_kv) * 2 + causal));
      expect_passes(c);
    }
  }
}

// Guards: every tensor through its own strides (padded, head-major, mixed), and nothing written
// into the gradients' padding.
TEST(CpuBackward, NonContiguousStrides) {
  const Layout layouts[][3] = {
      {Layout::padded, Layout::padded, Layout::padded},
      {Layout::heads_major, Layout::padded, Layout::heads_major},
      {Layout::dense, Layout::heads_major, Layout::padded},
  };
  int n = 0;
  for (const auto& l : layouts) {
    SCOPED_TRACE("layout set " + std::to_string(n));
    BwdShape s;
    s.batch = 2;
    s.seqlen_q = 113;
    s.seqlen_k = 203;
    s.heads_q = 4;
    s.heads_kv = 2;
    s.head_dim = 192;
    s.head_dim_v = 128;
    s.causal = n == 1;
    s.q_layout = l[0];
    s.kv_layout = l[1];
    s.grad_layout = l[2];
    BwdCase c(s, fa_test::test_seed(uint64_t(n++)));
    expect_passes(c);
  }
}

// Guards: P = exp(scale·S - lse) from the given LSE stays finite for logits far from zero.
TEST(CpuBackward, LargeLogits) {
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
    BwdShape s;
    s.dtype = dtype;
    s.seqlen_q = 150;
    s.seqlen_k = 170;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.q_sigma = 6.f;
    s.causal = true;
    BwdCase c(s, fa_test::test_seed(dtype == fa::DType::bf16 ? 0 : 1));
    expect_passes(c);
  }
}

// ---- variable length ---------------------------------------------------------------------------

// Guards: packed sequences addressed from cu_seqlens, each masked on its own lengths, with
// zero-length query and key sequences (their gradients, where they have any, are zero).
TEST(CpuBackward, VarlenWithEmptySequences) {
  for (bool causal : {false, true}) {
    for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
      SCOPED_TRACE(std::string(fa::dtype_name(dtype)) + (causal ? " causal" : ""));
      BwdShape s;
      s.dtype = dtype;
      s.lens_q = {37, 0, 130, 1, 64, 9};
      s.lens_k = {50, 17, 129, 1, 0, 9};
      s.heads_q = 4;
      s.heads_kv = 2;
      s.head_dim = 128;
      s.causal = causal;
      s.window_left = causal ? 40 : -1;
      s.grad_layout = Layout::padded;
      BwdCase c(s, fa_test::test_seed(uint64_t(causal) * 2 + (dtype == fa::DType::fp16)));
      expect_passes(c);
      // Sequence 1 has keys but no queries: its dK and dV are zero.
      for (int j = c.cu_k[1]; j < c.cu_k[2]; ++j)
        for (int h = 0; h < 2; ++h)
          for (int i = 0; i < 128; ++i) {
            ASSERT_EQ(
                fa::load_as_float(c.dk.data(),
                                  j * c.params.dk.stride[1] + h * c.params.dk.stride[2] + i, dtype),
                0.f);
          }
    }
  }
}

// The packed run equals the same sequences run one at a time as dense batches, bitwise: the
// cpu family's sums do not depend on where a sequence sits.
TEST(CpuBackward, VarlenEqualsPerSequenceDense) {
  BwdShape s;
  s.lens_q = {70, 0, 5, 100};
  s.lens_k = {33, 12, 0, 100};
  s.heads_q = 2;
  s.heads_kv = 1;
  s.causal = true;
  BwdCase packed(s, fa_test::test_seed());
  ASSERT_NO_FATAL_FAILURE(run_cpu(packed));
  for (size_t b = 0; b < s.lens_q.size(); ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b));
    fa::BackwardParams p = packed.params;
    const int q0 = packed.cu_q[b], k0 = packed.cu_k[b];
    p.cu_seqlens_q = p.cu_seqlens_k = nullptr;
    p.total_q = p.total_k = 0;
    p.batch = 1;
    p.seqlen_q = s.lens_q[b];
    p.seqlen_k = s.lens_k[b];
    auto shift = [](const void* base, int64_t elems) {
      return static_cast<const uint16_t*>(base) + elems;
    };
    p.q.data = shift(p.q.data, q0 * p.q.stride[1]);
    p.o.data = shift(p.o.data, q0 * p.o.stride[1]);
    p.dout.data = shift(p.dout.data, q0 * p.dout.stride[1]);
    p.k.data = shift(p.k.data, k0 * p.k.stride[1]);
    p.v.data = shift(p.v.data, k0 * p.v.stride[1]);
    std::vector<float> lse(std::max<size_t>(1, size_t(p.heads_q) * p.seqlen_q));
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.seqlen_q; ++i)
        lse[size_t(h) * p.seqlen_q + i] = packed.lse[size_t(h) * packed.params.total_q + q0 + i];
    p.lse = lse.data();
    std::vector<uint16_t> dq(packed.dq.size() + 8, 0), dk(packed.dk.size() + 8, 0),
        dv(packed.dv_.size() + 8, 0);
    p.dq.data = dq.data();
    p.dk.data = dk.data();
    p.dv.data = dv.data();
    const fa::Status st = fa::backward(p, fa::Kernel::cpu);
    ASSERT_TRUE(st.ok()) << st.message;
    const int64_t nq = int64_t{p.seqlen_q} * p.dq.stride[1];
    const int64_t nk = int64_t{p.seqlen_k} * p.dk.stride[1];
    for (int64_t i = 0; i < nq; ++i)
      ASSERT_EQ(dq[size_t(i)], packed.dq[size_t(q0 * p.dq.stride[1] + i)]);
    for (int64_t i = 0; i < nk; ++i) {
      ASSERT_EQ(dk[size_t(i)], packed.dk[size_t(k0 * p.dk.stride[1] + i)]);
      ASSERT_EQ(dv[size_t(i)], packed.dv_[size_t(k0 * p.dv.stride[1] + i)]);
    }
  }
}

// ---- rows that see no key, empty sequences, sinks ------------------------------------------

// Guards: causal with seqlen_q > seqlen_k leaves the first rows without keys (LSE -inf): their
// dQ is exactly 0 and nothing anywhere is NaN.
TEST(CpuBackward, FullyMaskedRowsGiveZeroDq) {
  BwdShape s;
  s.batch = 2;
  s.seqlen_q = 239;
  s.seqlen_k = 100;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.causal = true;
  BwdCase c(s, fa_test::test_seed());
  expect_passes(c);
  const int masked = s.seqlen_q - s.seqlen_k;  // rows 0 .. masked-1 see no key
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < masked; ++i)
      for (int h = 0; h < 2; ++h) {
        ASSERT_EQ(c.lse[size_t((b * 2 + h) * s.seqlen_q + i)], -INFINITY);
        for (int x = 0; x < 64; ++x) {
          const int64_t at =
              b * c.params.dq.stride[0] + i * c.params.dq.stride[1] + h * c.params.dq.stride[2] + x;
          ASSERT_EQ(c.dq[size_t(at)], 0u) << "row " << i;  // +0.0, not merely small
        }
      }
}

// seqlen_k == 0: every row sees nothing, so dq = 0; seqlen_q == 0: dk = dv = 0. Both are
// written (the poison must be gone), not skipped.
TEST(CpuBackward, EmptySequencesWriteZeros) {
  for (auto [sq, sk] : {std::pair{5, 0}, std::pair{0, 9}}) {
    SCOPED_TRACE("sq " + std::to_string(sq) + " sk " + std::to_string(sk));
    BwdShape s;
    s.batch = 2;
    s.seqlen_q = sq;
    s.seqlen_k = sk;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.sinks = true;
    BwdCase c(s, fa_test::test_seed(uint64_t(sq)));
    ASSERT_NO_FATAL_FAILURE(run_cpu(c));
    const size_t nq = size_t(2) * sq * 2 * 64, nk = size_t(2) * sk * 64;
    for (size_t i = 0; i < nq; ++i) ASSERT_EQ(c.dq[i], 0u);
    for (size_t i = 0; i < nk; ++i) ASSERT_EQ(c.dk[i], 0u);
    for (size_t i = 0; i < nk; ++i) ASSERT_EQ(c.dv_[i], 0u);
    for (float g : c.dsinks) ASSERT_EQ(g, 0.f);  // D = dO.O = 0 on every row (or no rows)
  }
}

// Guards: the sink's share of the softmax (through the given LSE) in dQ, dK, dV, and its own
// gradient dsinks, with GQA, causal rows that see no key (LSE = the sink) and both dtypes.
TEST(CpuBackward, SinksWithDsinks) {
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
    for (auto [sq, sk, causal] : {std::tuple{113, 203, false}, std::tuple{239, 100, true}}) {
      SCOPED_TRACE(std::string(fa::dtype_name(dtype)) + " sq " + std::to_string(sq));
      BwdShape s;
      s.dtype = dtype;
      s.batch = 2;
      s.seqlen_q = sq;
      s.seqlen_k = sk;
      s.heads_q = 4;
      s.heads_kv = 2;
      s.causal = causal;
      s.sinks = true;
      BwdCase c(s, fa_test::test_seed(uint64_t(sq) + (dtype == fa::DType::fp16)));
      expect_passes(c);
    }
  }
  // Packed sequences with sinks.
  BwdShape s;
  s.lens_q = {40, 0, 77};
  s.lens_k = {12, 30, 90};
  s.heads_q = 2;
  s.heads_kv = 1;
  s.causal = true;
  s.sinks = true;
  BwdCase c(s, fa_test::test_seed(99));
  expect_passes(c);
}

// Guards the cpu family's softcap backward (dS times 1 - t^2, P from the capped logit) against
// the oracle: softcap 5, 30 and 50 over odd shapes, causal rows that see no key, an asymmetric
// window, GQA, sinks with softcap, packed sequences with an empty one, large logits.
TEST(CpuBackward, Softcap) {
  struct S {
    int sq, sk, hq, hkv, d;
    bool causal;
    int wl, wr;
    bool sinks;
    float q_sigma;
  };
  const S shapes[] = {S{113, 203, 2, 1, 64, false, -1, -1, false, 4.f},
                      S{239, 100, 4, 2, 128, true, -1, -1, true, 1.f},
                      S{1, 239, 6, 1, 96, false, -1, -1, false, 8.f},
                      S{130, 67, 6, 2, 192, false, 37, 5, true, 4.f}};
  for (float softcap : {5.f, 30.f, 50.f}) {
    for (const S& g : shapes) {
      for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
        SCOPED_TRACE("softcap " + std::to_string(softcap) + " " + std::to_string(g.sq) + "x" +
                     std::to_string(g.sk) + " " + fa::dtype_name(dtype));
        BwdShape s;
        s.dtype = dtype;
        s.batch = 2;
        s.seqlen_q = g.sq;
        s.seqlen_k = g.sk;
        s.heads_q = g.hq;
        s.heads_kv = g.hkv;
        s.head_dim = g.d;
        s.causal = g.causal;
        s.window_left = g.wl;
        s.window_right = g.wr;
        s.sinks = g.sinks;
        s.q_sigma = g.q_sigma;
        s.softcap = softcap;
        BwdCase c(s, fa_test::test_seed(uint64_t(g.sq) + static_cast<uint64_t>(softcap)));
        expect_passes(c);
      }
    }
    // Packed sequences, one of them empty.
    BwdShape s;
    s.lens_q = {40, 0, 77};
    s.lens_k = {12, 30, 90};
    s.heads_q = 2;
    s.heads_kv = 1;
    s.causal = true;
    s.sinks = true;
    s.q_sigma = 4.f;
    s.softcap = softcap;
    BwdCase c(s, fa_test::test_seed(7 + static_cast<uint64_t>(softcap)));
    expect_passes(c);
  }
}

// The cpu family's sums run in a fixed order: two runs (deterministic or not) agree bitwise.
TEST(CpuBackward, RepeatedRunsAreBitwiseIdentical) {
  BwdShape s;
  s.batch = 2;
  s.seqlen_q = 200;
  s.seqlen_k = 300;
  s.heads_q = 6;
  s.heads_kv = 2;
  s.causal = true;
  s.sinks = true;
  BwdCase c(s, fa_test::test_seed());
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  const auto dq = c.dq, dk = c.dk, dv = c.dv_;
  const auto dsinks = c.dsinks;
  for (bool deterministic : {true, false}) {
    c.params.deterministic = deterministic;
    c.poison();
    ASSERT_TRUE(fa::backward(c.params, fa::Kernel::cpu).ok());
    EXPECT_EQ(c.dq, dq);
    EXPECT_EQ(c.dk, dk);
    EXPECT_EQ(c.dv_, dv);
    for (size_t h = 0; h < dsinks.size(); ++h) EXPECT_EQ(c.dsinks[h], dsinks[h]);
  }
}

// `auto` on host memory is the cpu family.
TEST(CpuBackward, AutoPicksCpuForHostMemory) {
  BwdShape s;
  s.seqlen_q = 17;
  s.seqlen_k = 23;
  BwdCase c(s, fa_test::test_seed());
  ASSERT_NO_FATAL_FAILURE(c.run_forward());
  EXPECT_EQ(fa::select_kernel(c.params), fa::Kernel::cpu);
  ASSERT_TRUE(fa::backward(c.params).ok());
  EXPECT_TRUE(ref::check_backward(c.params).ok);
}

// ---- the reference against finite differences --------------------------------------------

// L = sum(dout * o) with o from reference::forward in fp64, over fp16 inputs: one input element
// moved by +-h, L's central difference against reference::backward's fp64 gradient. h = 2^-7 is
// exactly representable next to every fp16 value below 16 in magnitude (the step is checked), so
// the difference quotient has no rounding of the inputs in it; its truncation error (h^2 f'''/6)
// is ~1e-5 of the gradients' scale.
class Gradcheck {
 public:
  explicit Gradcheck(BwdCase& c) : c_(c), p_(BwdCase::forward_of(c.params)) {
    p_.o.data = nullptr;
    p_.lse = nullptr;
  }

  double loss() const {
    const int dv = c_.dv();
    std::vector<double> out(size_t(p_.batch) * p_.seqlen_q * p_.heads_q * dv);
    ref::forward(p_, ref::Precision::fp64, out.data(), nullptr);
    double sum = 0;
    for (int b = 0; b < p_.batch; ++b)
      for (int i = 0; i < p_.seqlen_q; ++i)
        for (int h = 0; h < p_.heads_q; ++h)
          for (int x = 0; x < dv; ++x) {
            const int64_t at = b * c_.params.dout.stride[0] + i * c_.params.dout.stride[1] +
                               h * c_.params.dout.stride[2] + x;
            sum += out[size_t(((b * p_.seqlen_q + i) * p_.heads_q + h) * dv + x)] *
                   fa::load_as_float(c_.dout.data(), at, p_.dtype);
          }
    return sum;
  }

  // The derivative of L in 16-bit element `i` of `t` by central differences at steps h and h/2
  // combined by Richardson extrapolation, (4·D(h/2) − D(h)) / 3, which cancels the h² term of the
  // truncation error: a small softcap (0.5) gives tanh a third derivative large enough that the
  // plain central difference's h²·f'''/6 reached the tolerance on some draws. NaN when a step is
  // not exact (|x| >= 8 for h/2 = 2^-8).
  double fd(std::vector<uint16_t>& t, size_t i) const {
    const double d1 = central(t, i, 0x1p-7f), d2 = central(t, i, 0x1p-8f);
    return (4.0 * d2 - d1) / 3.0;
  }

  double central(std::vector<uint16_t>& t, size_t i, float h) const {
    const uint16_t keep = t[i];
    const float x = fa::fp16_to_float(keep);
    const uint16_t up = fa::float_to_fp16(x + h), down = fa::float_to_fp16(x - h);
    if (fa::fp16_to_float(up) != x + h || fa::fp16_to_float(down) != x - h) return std::nan("");
    t[i] = up;
    const double lp = loss();
    t[i] = down;
    const double lm = loss();
    t[i] = keep;
    return (lp - lm) / (2.0 * h);
  }

  double fd_sink(std::vector<float>& sinks, size_t h) const {
    constexpr float step = 0x1p-7f;
    const float keep = sinks[h];
    sinks[h] = keep + step;
    const double lp = loss();
    sinks[h] = keep - step;
    const double lm = loss();
    sinks[h] = keep;
    return (lp - lm) / (double{keep + step} - double{keep - step});
  }

 private:
  BwdCase& c_;
  fa::ForwardParams p_;
};

struct GradcheckParam {
  const char* name;
  int sq, sk, hq, hkv;
  bool causal;
  int left, right;
  bool sinks;
  float softcap = 0.f;
};

class ReferenceGradcheck : public ::testing::TestWithParam<GradcheckParam> {};

// Guards: reference::backward's fp64 formulas (dS = P (dP - D), the scale, GQA sums, masks, the
// sink's gradient, softcap's 1 - t^2) are the derivative of reference::forward, element by element.
TEST_P(ReferenceGradcheck, MatchesFiniteDifferences) {
  const GradcheckParam& g = GetParam();
  BwdShape s;
  s.dtype = fa::DType::fp16;
  s.batch = 2;
  s.seqlen_q = g.sq;
  s.seqlen_k = g.sk;
  s.heads_q = g.hq;
  s.heads_kv = g.hkv;
  s.head_dim = 8;  // the reference takes any head dim; tiny keeps 2 forwards per element cheap
  s.head_dim_v = 4;
  s.causal = g.causal;
  s.window_left = g.left;
  s.window_right = g.right;
  s.sinks = g.sinks;
  s.softcap = g.softcap;
  s.q_sigma = 2.f;  // a peaked softmax, so P's curvature is exercised
  BwdCase c(s, fa_test::test_seed());
  const fa::BackwardParams& p = c.params;
  const int dv = 4;
  std::vector<double> dq(size_t(2) * g.sq * g.hq * 8), dk(size_t(2) * g.sk * g.hkv * 8),
      dvv(size_t(2) * g.sk * g.hkv * dv), dsinks(size_t(g.hq));
  ref::backward(p, ref::Precision::fp64, dq.data(), dk.data(), dvv.data(), dsinks.data());

  Gradcheck gc(c);
  double scale = 1e-3;  // the gradients' magnitude, for the tolerance
  for (const auto* v : {&dq, &dk, &dvv})
    for (double x : *v) scale = std::max(scale, std::abs(x));
  const double tol = 2e-4 * scale;
  int64_t compared = 0;
  // The dense buffers of the case and the reference's dense gradients share their layout.
  struct Tensor {
    const char* name;
    std::vector<uint16_t>* data;
    const std::vector<double>* grad;
  };
  for (const Tensor& t :
       {Tensor{"q", &c.q, &dq}, Tensor{"k", &c.k, &dk}, Tensor{"v", &c.v, &dvv}}) {
    ASSERT_EQ(t.data->size(), std::max<size_t>(8, t.grad->size())) << t.name;
    for (size_t i = 0; i < t.grad->size(); ++i) {
      const double want = gc.fd(*t.data, i);
      if (std::isnan(want)) continue;
      ++compared;
      ASSERT_NEAR((*t.grad)[i], want, tol) << t.name << "[" << i << "]";
    }
  }
  if (g.sinks) {
    for (size_t h = 0; h < c.sinks.size(); ++h) {
      ASSERT_NEAR(dsinks[h], gc.fd_sink(c.sinks, h), tol) << "dsinks[" << h << "]";
    }
  }
  EXPECT_GT(compared, int64_t(dq.size() + dk.size() + dvv.size()) * 9 / 10);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceGradcheck,
    ::testing::Values(GradcheckParam{"plain", 5, 7, 2, 2, false, -1, -1, false},
                      GradcheckParam{"causal_sq_gt_sk", 7, 5, 2, 2, true, -1, -1, false},
                      GradcheckParam{"causal_sq_lt_sk", 4, 9, 2, 1, true, -1, -1, false},
                      GradcheckParam{"window", 6, 6, 2, 2, false, 2, 1, false},
                      GradcheckParam{"gqa", 5, 6, 6, 2, false, -1, -1, false},
                      GradcheckParam{"mqa_causal_window", 6, 8, 4, 1, true, 3, 0, false},
                      GradcheckParam{"sinks", 5, 7, 2, 1, false, -1, -1, true},
                      GradcheckParam{"sinks_masked_rows", 7, 4, 4, 2, true, -1, -1, true},
                      // softcap: logits of head dim 8 with q_sigma 2 reach about 2 softcaps at
                      // 0.5 (tanh saturating), 0.1 at 30 (the 1 - t^2 factor near 1)
                      GradcheckParam{"softcap_5", 5, 7, 2, 2, false, -1, -1, false, 0.5f},
                      GradcheckParam{"softcap_causal_gqa", 7, 5, 4, 2, true, -1, -1, false, 1.f},
                      GradcheckParam{"softcap_window_sinks", 6, 8, 4, 1, false, 3, 1, true, 2.f},
                      GradcheckParam{"softcap_30", 5, 6, 2, 1, true, -1, -1, true, 30.f}),
    [](const auto& info) { return std::string(info.param.name); });

// The packed reference equals the dense reference of each sequence, element by element.
TEST(ReferenceBackward, VarlenMatchesDensePerSequence) {
  BwdShape s;
  s.lens_q = {9, 0, 20, 3};
  s.lens_k = {12, 5, 20, 0};
  s.heads_q = 4;
  s.heads_kv = 2;
  s.head_dim = 8;
  s.causal = true;
  s.window_left = 6;
  BwdCase c(s, fa_test::test_seed());
  const fa::BackwardParams& p = c.params;
  std::vector<double> dq(size_t(p.total_q) * 4 * 8), dk(size_t(p.total_k) * 2 * 8), dv(dk.size());
  ref::backward(p, ref::Precision::fp64, dq.data(), dk.data(), dv.data(), nullptr);
  for (size_t b = 0; b < s.lens_q.size(); ++b) {
    fa::BackwardParams one = p;
    one.cu_seqlens_q = one.cu_seqlens_k = nullptr;
    one.batch = 1;
    one.seqlen_q = s.lens_q[b];
    one.seqlen_k = s.lens_k[b];
    const int q0 = c.cu_q[b], k0 = c.cu_k[b];
    one.q.data = c.q.data() + q0 * p.q.stride[1];
    one.dout.data = c.dout.data() + q0 * p.dout.stride[1];
    one.k.data = c.k.data() + k0 * p.k.stride[1];
    one.v.data = c.v.data() + k0 * p.v.stride[1];
    std::vector<double> dq1(size_t(one.seqlen_q) * 4 * 8), dk1(size_t(one.seqlen_k) * 2 * 8),
        dv1(dk1.size());
    ref::backward(one, ref::Precision::fp64, dq1.data(), dk1.data(), dv1.data(), nullptr);
    for (size_t i = 0; i < dq1.size(); ++i) ASSERT_EQ(dq1[i], dq[size_t(q0) * 32 + i]);
    for (size_t i = 0; i < dk1.size(); ++i) {
      ASSERT_EQ(dk1[i], dk[size_t(k0) * 16 + i]);
      ASSERT_EQ(dv1[i], dv[size_t(k0) * 16 + i]);
    }
  }
}

}  // namespace
