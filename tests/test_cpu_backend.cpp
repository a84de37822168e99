// Kernel::cpu against the oracle (reference::check) over the odd-shape grid of TESTING.md, plus
// the cases that stress one part of the tiled algorithm each: masks that skip or split key
// blocks, GQA, strides, empty sequences, logits large enough that the running max must rescale.
// Outputs are NaN-poisoned before every run, so an element left unwritten fails the check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "attention_case.h"
#include "common/host_dtype.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"
#include "fp8_case.h"

namespace {

namespace fa = flashattn;
namespace ref = flashattn::reference;
using fa_test::Case;
using fa_test::Layout;
using fa_test::Shape;

void run_cpu(Case& c) {
  c.poison();
  const fa::Status st = fa::forward(c.params, fa::Kernel::cpu);
  ASSERT_TRUE(st.ok()) << fa::status_code_name(st.code) << ": " << st.message;
}

// Runs the CPU backend and checks it (all rows, or `rows`), and that o's padding is untouched.
void expect_passes(Case& c, const std::vector<ref::RowId>& rows = {}) {
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  const ref::CheckResult r = ref::check(c.params, rows);
  EXPECT_TRUE(r.ok) << r.detail << "\n  max_err " << r.max_err << ", max_err_pt " << r.max_err_pt
                    << ", atol " << r.atol << ", lse_max_err " << r.lse_max_err
                    << ", lse_max_err_pt " << r.lse_max_err_pt << ", lse_atol " << r.lse_atol;
  EXPECT_EQ(r.not_finite, 0);
  EXPECT_GT(r.checked, 0);
  EXPECT_TRUE(c.padding_untouched()) << "the kernel wrote outside the output tensor";
}

// ---- the grid: every (sq, sk) x dtype x head dim, causal on and off ------------------------

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
std::string grid_name(const ::testing::TestParamInfo<GridParam>& info) {
  return name_of(info.param);
}

std::vector<GridParam> grid() {
  const std::pair<int, int> seqlens[] = {{1, 1},   {1, 239}, {113, 203},
                                         {239, 1}, {799, 3}, {64, 64}};
  const std::pair<int, int> dims[] = {{64, 64},   {96, 96},   {128, 128},
                                      {192, 192}, {256, 256}, {192, 128}};
  std::vector<GridParam> out;
  for (auto [sq, sk] : seqlens)
    for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16})
      for (auto [d, dv] : dims)
        for (bool causal : {false, true}) out.push_back({sq, sk, dtype, d, dv, causal});
  return out;
}

class CpuGrid : public ::testing::TestWithParam<GridParam> {};

// Guards: the tiled loop at tile edges (1 row, 1 key, partial 64-blocks, seqlen_q > seqlen_k with
// fully masked rows) for every head dim, both dtypes; GQA 2 and batch 2 throughout.
TEST_P(CpuGrid, MatchesReference) {
  const GridParam& g = GetParam();
  Shape s;
  s.dtype = g.dtype;
  s.batch = 2;
  s.seqlen_q = g.sq;
  s.seqlen_k = g.sk;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = g.d;
  s.head_dim_v = g.dv;
  s.causal = g.causal;
  Case c(s, fa_test::test_seed());
  expect_passes(c);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuGrid, ::testing::ValuesIn(grid()), grid_name);

// ---- masks ---------------------------------------------------------------------------------

struct WindowParam {
  int sq, sk, left, right;
  bool causal;
};

std::string name_of(const WindowParam& w) {
  auto bound = [](int b) { return b < 0 ? std::string("inf") : std::to_string(b); };
  return "sq" + std::to_string(w.sq) + "_sk" + std::to_string(w.sk) + "_left" + bound(w.left) +
         "_right" + (w.causal ? std::string("causal") : bound(w.right));
}
void PrintTo(const WindowParam& w, std::ostream* os) {
  *os << name_of(w);
}
std::string window_name(const ::testing::TestParamInfo<WindowParam>& info) {
  return name_of(info.param);
}

class CpuWindow : public ::testing::TestWithParam<WindowParam> {};

// Guards: key-block skipping through Mask::key_range and per-element masking of partial blocks:
// asymmetric windows narrower and wider than a block, on square and skewed shapes.
TEST_P(CpuWindow, MatchesReference) {
  const WindowParam& w = GetParam();
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
    SCOPED_TRACE(fa::dtype_name(dtype));
    Shape s;
    s.dtype = dtype;
    s.seqlen_q = w.sq;
    s.seqlen_k = w.sk;
    s.heads_q = 2;
    s.heads_kv = 2;
    s.head_dim = 64;
    s.window_left = w.left;
    s.window_right = w.right;
    s.causal = w.causal;
    Case c(s, fa_test::test_seed(dtype == fa::DType::bf16 ? 0 : 1));
    expect_passes(c);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Windows, CpuWindow,
    ::testing::Values(WindowParam{113, 203, 37, 5, false}, WindowParam{203, 113, 37, 5, false},
                      WindowParam{300, 300, 5, 37, false}, WindowParam{300, 300, 100, 0, true},
                      WindowParam{239, 1, 37, 5, false}, WindowParam{64, 64, 0, 0, false},
                      WindowParam{130, 500, -1, 70, false}, WindowParam{500, 130, 70, -1, false},
                      WindowParam{799, 3, 2, 0, false}, WindowParam{1, 239, 100, -1, true}),
    window_name);

// ---- GQA, layouts, edge cases --------------------------------------------------------------

// Guards: query head h reads KV head h / group for group 1, 2, 6 and MQA.
TEST(Cpu, GqaRatios) {
  for (int heads_kv : {12, 6, 2, 1}) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE("heads_kv " + std::to_string(heads_kv) + (causal ? " causal" : ""));
      Shape s;
      s.seqlen_q = 113;
      s.seqlen_k = 203;
      s.heads_q = 12;
      s.heads_kv = heads_kv;
      s.head_dim = 64;
      s.causal = causal;
      Case c(s, fa_test::test_seed(uint64_t(heads_kv) * 2 + causal));
      expect_passes(c);
    }
  }
}

// Guards: every tensor is addressed through its own strides: padded rows and heads, head-major
// storage, different layouts for q, k/v and o; nothing is written into o's padding.
TEST(Cpu, NonContiguousStrides) {
  const Layout layouts[][3] = {
      {Layout::padded, Layout::padded, Layout::padded},
      {Layout::heads_major, Layout::padded, Layout::heads_major},
      {Layout::dense, Layout::heads_major, Layout::padded},
  };
  int n = 0;
  for (const auto& l : layouts) {
    SCOPED_TRACE("layout set " + std::to_string(n));
    Shape s;
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
    s.o_layout = l[2];
    Case c(s, fa_test::test_seed(uint64_t(n++)));
    expect_passes(c);
  }
}

// Guards: seqlen_k = 0 writes 0 and LSE -inf everywhere (no key block at all), with and without
// a causal mask; seqlen_q = 0 succeeds and writes nothing.
TEST(Cpu, EmptySequences) {
  for (bool causal : {false, true}) {
    Shape s;
    s.seqlen_q = 70;
    s.seqlen_k = 0;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.head_dim = 64;
    s.causal = causal;
    Case c(s, fa_test::test_seed(causal));
    expect_passes(c);
    for (size_t i = 0; i < c.o.size(); ++i) ASSERT_EQ(c.o[i] & 0x7fff, 0) << "element " << i;
    for (float x : c.lse) ASSERT_EQ(x, -std::numeric_limits<float>::infinity());
  }
  Shape s;
  s.seqlen_q = 0;
  s.seqlen_k = 17;
  Case c(s, fa_test::test_seed(2));
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  EXPECT_TRUE(c.padding_untouched());
}

// Guards: the online-softmax rescale. Q scaled up 10x makes logits of size ~80, so block maxima
// differ by tens; with ramps the max rises (or falls) across every key block, so a missing or
// wrong 2^(m - m') factor, or a rescale of l but not O, is far outside the tolerance.
TEST(Cpu, LargeLogitsRescale) {
  for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
    SCOPED_TRACE(fa::dtype_name(dtype));
    Shape s;
    s.dtype = dtype;
    s.seqlen_q = 113;
    s.seqlen_k = 400;
    s.heads_q = 2;
    s.heads_kv = 2;
    s.head_dim = 128;
    s.q_sigma = 10.f;
    Case c(s, fa_test::test_seed(dtype == fa::DType::bf16 ? 0 : 1));
    expect_passes(c);

    for (float dir : {1.f, -1.f}) {
      SCOPED_TRACE(dir > 0 ? "rising logits" : "falling logits");
      s.q_sigma = 1.f;
      Case ramp(s, fa_test::test_seed(dir > 0 ? 2 : 3));
      const auto& p = ramp.params;
      // Key j's last component is dir * j / 16 and every query's is 16, adding dir * j / sqrt(128)
      // to the logits: the max moves by about 5.7 per 64-key block, 35 over the sequence.
      for (int h = 0; h < 2; ++h) {
        for (int j = 0; j < s.seqlen_k; ++j)
          fa::store_from_float(ramp.k.data(), Case::index(p.k.stride, 0, j, h, 127), dir * j / 16.f,
                               dtype);
        for (int r = 0; r < s.seqlen_q; ++r)
          fa::store_from_float(ramp.q.data(), Case::index(p.q.stride, 0, r, h, 127), 16.f, dtype);
      }
      expect_passes(ramp);
    }
  }
}

// Guards: on shapes too large to check whole, sampled rows still catch tile-boundary rows; both
// off-by-one sequence lengths around a block multiple.
TEST(Cpu, LargeShapesSampled) {
  const std::pair<int, int> seqlens[] = {{1023, 1024}, {1024, 1023}};
  int n = 0;
  for (auto [sq, sk] : seqlens) {
    Shape s;
    s.seqlen_q = sq;
    s.seqlen_k = sk;
    s.heads_q = 2;
    s.heads_kv = 1;
    s.head_dim = 128;
    s.causal = n == 1;
    Case c(s, fa_test::test_seed(uint64_t(n++)));
    expect_passes(c, ref::sample_rows(c.params, 96, fa_test::test_seed(100)));
  }
}

// Guards: a run without an LSE pointer computes the same output and touches no LSE.
TEST(Cpu, WithoutLse) {
  Shape s;
  s.seqlen_q = 113;
  s.seqlen_k = 203;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.head_dim = 64;
  s.causal = true;
  s.with_lse = false;
  Case c(s, fa_test::test_seed());
  expect_passes(c);
  for (float x : c.lse) ASSERT_TRUE(std::isnan(x));
}

// Guards: no data race or thread-order dependence: repeated runs are bitwise identical.
TEST(Cpu, Deterministic) {
  Shape s;
  s.batch = 2;
  s.seqlen_q = 300;
  s.seqlen_k = 257;
  s.heads_q = 6;
  s.heads_kv = 2;
  s.head_dim = 64;
  s.causal = true;
  Case c(s, fa_test::test_seed());
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  const std::vector<uint16_t> o = c.o;
  const std::vector<float> lse = c.lse;
  for (int i = 0; i < 5; ++i) {
    ASSERT_NO_FATAL_FAILURE(run_cpu(c));
    ASSERT_EQ(c.o, o) << "run " << i;
    ASSERT_EQ(std::memcmp(c.lse.data(), lse.data(), lse.size() * sizeof(float)), 0) << "run " << i;
  }
}

}  // namespace

// Guards the cpu family's attention sinks (ForwardParams::sinks) against the oracle: shapes with
// fully masked rows (LSE = the sink), a window, GQA and a sink that dominates every row.
TEST(Cpu, Sinks) {
  struct S {
    int sq, sk, hq, hkv, d;
    bool causal;
    int wl, wr;
  };
  for (const S& g : {S{239, 1, 4, 2, 128, true, -1, -1}, S{113, 203, 6, 2, 64, false, 37, 5},
                     S{799, 3, 2, 1, 256, true, -1, -1}, S{1, 1, 2, 2, 96, false, -1, -1}}) {
    for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
      SCOPED_TRACE(std::to_string(g.sq) + "x" + std::to_string(g.sk) + " " + fa::dtype_name(dtype));
      Shape s;
      s.dtype = dtype;
      s.seqlen_q = g.sq;
      s.seqlen_k = g.sk;
      s.heads_q = g.hq;
      s.heads_kv = g.hkv;
      s.head_dim = g.d;
      s.causal = g.causal;
      s.window_left = g.wl;
      s.window_right = g.wr;
      Case c(s, fa_test::test_seed(g.sq));
      std::vector<float> sinks(g.hq);
      for (int h = 0; h < g.hq; ++h) sinks[h] = 1.5f * h - 2.f;
      sinks[0] = 30.f;  // dominates: O near 0, LSE near 30
      c.params.sinks = sinks.data();
      expect_passes(c);
      if (g.causal && g.sq > g.sk) {
        for (int h = 0; h < g.hq; ++h) EXPECT_EQ(c.lse[size_t(h) * g.sq], sinks[h]) << "head " << h;
      }
    }
  }
}

// Guards the cpu family's softcap (ForwardParams::softcap) against the oracle, whose fp64 and
// emulated references apply it independently: softcap 5, 30 and 50 over odd shapes, causal rows
// that see no key, an asymmetric window, GQA and MQA, sinks with softcap, large logits (q scaled
// up, so that tanh saturates and the cap decides the softmax) and both dtypes.
TEST(Cpu, Softcap) {
  struct S {
    int sq, sk, hq, hkv, d;
    bool causal;
    int wl, wr;
    bool sinks;
    float q_sigma;
  };
  const S shapes[] = {S{113, 203, 2, 1, 64, false, -1, -1, false, 4.f},
                      S{239, 1, 4, 2, 128, true, -1, -1, false, 1.f},
                      S{1, 239, 6, 1, 96, false, -1, -1, false, 8.f},
                      S{130, 67, 6, 2, 192, false, 37, 5, true, 4.f},
                      S{799, 3, 2, 2, 256, true, -1, -1, true, 8.f}};
  for (float softcap : {5.f, 30.f, 50.f}) {
    for (const S& g : shapes) {
      for (fa::DType dtype : {fa::DType::bf16, fa::DType::fp16}) {
        SCOPED_TRACE("softcap " + std::to_string(softcap) + " " + std::to_string(g.sq) + "x" +
                     std::to_string(g.sk) + " " + fa::dtype_name(dtype));
        Shape s;
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
        s.softcap = softcap;
        s.q_sigma = g.q_sigma;
        Case c(s, fa_test::test_seed(g.sq + static_cast<uint64_t>(softcap)));
        std::vector<float> sinks(g.hq);
        for (int h = 0; h < g.hq; ++h) sinks[h] = 1.5f * h - 2.f;
        if (g.sinks) c.params.sinks = sinks.data();
        expect_passes(c);
      }
    }
  }
}

// The cap changes the answer where logits are large (so the test above compares two references
// that really apply it), and a cap far above every logit changes it by no more than rounding.
TEST(Cpu, SoftcapChangesLargeLogitsOnly) {
  Shape s;
  s.seqlen_q = 64;
  s.seqlen_k = 80;
  s.heads_q = 2;
  s.heads_kv = 1;
  s.q_sigma = 8.f;
  Case c(s, fa_test::test_seed());
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  const std::vector<float> lse = c.lse;
  c.params.softcap = 5.f;
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  float max_diff = 0.f;
  for (size_t i = 0; i < lse.size(); ++i) max_diff = std::max(max_diff, std::abs(c.lse[i] - lse[i]));
  EXPECT_GT(max_diff, 1.f) << "softcap 5 left the LSE of logits near 8 sigma unchanged";
  c.params.softcap = 1e6f;
  ASSERT_NO_FATAL_FAILURE(run_cpu(c));
  for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(c.lse[i], lse[i], 1e-3f * (1 + std::abs(lse[i])));
}

// ---- FP8 (e4m3) inputs -----------------------------------------------------------------------

namespace {

using fa_test::Descales;
using fa_test::Dist;
using fa_test::Fp8Case;
using fa_test::Fp8Shape;

// Shapes over the cpu family's FP8 path: GQA 2 and MQA, causal (rows that see no key), windows,
// padded strides, variable length with empty sequences, both output dtypes, every FP8 head dim.
std::vector<Fp8Shape> fp8_cpu_shapes() {
  using L = std::vector<std::pair<int, int>>;
  const L lens = {{0, 5}, {1, 1}, {17, 33}, {113, 239}, {70, 0}, {129, 128}};
  const fa::DType fp16 = fa::DType::fp16;
  return {
      {.batch = 2, .seqlen_q = 113, .seqlen_k = 203, .heads_q = 4, .heads_kv = 2, .head_dim = 64},
      {.batch = 2,
       .seqlen_q = 113,
       .seqlen_k = 203,
       .heads_q = 4,
       .heads_kv = 2,
       .head_dim = 64,
       .causal = true,
       .out_dtype = fp16},
      {.batch = 3,
       .seqlen_q = 239,
       .seqlen_k = 1,
       .heads_q = 4,
       .heads_kv = 1,
       .head_dim = 128,
       .causal = true},
      {.batch = 1,
       .seqlen_q = 300,
       .seqlen_k = 255,
       .heads_q = 2,
       .heads_kv = 2,
       .head_dim = 256,
       .window_left = 37,
       .window_right = 5,
       .padded = true},
      {.heads_q = 4, .heads_kv = 2, .head_dim = 128, .q_sigma = 6.f, .padded = true, .lens = lens},
      {.heads_q = 4,
       .heads_kv = 2,
       .head_dim = 128,
       .causal = true,
       .out_dtype = fp16,
       .lens = lens},
  };
}

class CpuFp8 : public ::testing::TestWithParam<size_t> {};

// Guards: the cpu family computes on the dequantised inputs exactly as on 16-bit ones. With
// descales of a few bits (Descales::exact) descale·x is exact in bf16 and fp16, so the e4m3 run
// and a 16-bit run on the dequantised copy must agree bit for bit, o and LSE.
TEST_P(CpuFp8, EqualsSixteenBitRunOnDequantisedInputs) {
  Fp8Shape shape = fp8_cpu_shapes()[GetParam()];
  shape.descales = Descales::exact;
  Fp8Case c(shape, fa_test::test_seed());
  const fa::Status st = fa::forward(c.params, fa::Kernel::cpu);
  ASSERT_TRUE(st.ok()) << st.message;
  std::vector<uint16_t> q16, k16, v16, o16;
  std::vector<float> lse16;
  const fa::ForwardParams p16 = c.dequantised(shape.out_dtype, q16, k16, v16, o16, lse16);
  const fa::Status st16 = fa::forward(p16, fa::Kernel::cpu);
  ASSERT_TRUE(st16.ok()) << st16.message;
  EXPECT_EQ(c.o, o16) << fa_test::fp8_name(c.shape);
  EXPECT_EQ(std::memcmp(c.lse.data(), lse16.data(), lse16.size() * sizeof(float)), 0)
      << fa_test::fp8_name(c.shape);
  EXPECT_EQ(c.stray_writes(c.o), 0);
}

// Guards: with arbitrary descales in [0.5, 2] (and without any) the cpu family passes the FP8
// oracle on every sequence, LSE included, and writes nothing outside o.
TEST_P(CpuFp8, PassesTheFp8Oracle) {
  for (Descales d : {Descales::random, Descales::none}) {
    Fp8Shape shape = fp8_cpu_shapes()[GetParam()];
    shape.descales = d;
    Fp8Case c(shape, fa_test::test_seed(d == Descales::none));
    const fa::Status st = fa::forward(c.params, fa::Kernel::cpu);
    ASSERT_TRUE(st.ok()) << st.message;
    c.expect_oracle(c.params, fa_test::fp8_name(c.shape));
    EXPECT_EQ(c.stray_writes(c.o), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuFp8, ::testing::Range<size_t>(0, fp8_cpu_shapes().size()),
                         [](const auto& info) {
                           return fa_test::fp8_name(fp8_cpu_shapes()[info.param]);
                         });

// Guards: the oracle's outlier inputs (N(0,1) + N(0,100)·Bernoulli(0.001)) through the cpu family.
TEST(CpuFp8Oracle, OutlierInputsPass) {
  Fp8Case c({.batch = 2,
             .seqlen_q = 200,
             .seqlen_k = 1000,
             .heads_q = 4,
             .heads_kv = 2,
             .head_dim = 128,
             .dist = Dist::outliers},
            fa_test::test_seed());
  ASSERT_TRUE(fa::forward(c.params, fa::Kernel::cpu).ok());
  c.expect_oracle(c.params, fa_test::fp8_name(c.shape));
}

// Guards the oracle itself: an output computed without one of the descales (or with q's and v's
// swapped) fails it, so a kernel that drops or misplaces a descale cannot pass.
TEST(CpuFp8Oracle, CatchesAMissingOrMisplacedDescale) {
  Fp8Case c(
      {.batch = 2, .seqlen_q = 65, .seqlen_k = 130, .heads_q = 4, .heads_kv = 2, .head_dim = 64},
      fa_test::test_seed());
  // Descales far from 1 and from each other, so that each mistake moves the output.
  c.q_descale = {0.5f, 2.f, 1.75f, 0.625f};
  c.k_descale = {1.875f, 0.5f, 0.75f, 2.f};
  c.v_descale = {2.f, 0.625f, 0.5f, 1.5f};
  c.params.q_descale = c.q_descale.data();
  c.params.k_descale = c.k_descale.data();
  c.params.v_descale = c.v_descale.data();
  for (int wrong = 0; wrong < 4; ++wrong) {
    SCOPED_TRACE("case " + std::to_string(wrong));
    fa::ForwardParams run = c.params;
    if (wrong == 0) run.q_descale = nullptr;
    if (wrong == 1) run.k_descale = nullptr;
    if (wrong == 2) run.v_descale = nullptr;
    if (wrong == 3) std::swap(run.q_descale, run.v_descale);
    c.poison();
    ASSERT_TRUE(fa::forward(run, fa::Kernel::cpu).ok());
    EXPECT_FALSE(ref::check(c.params).ok);
  }
}

}  // namespace
