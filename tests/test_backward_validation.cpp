// One test per validation rule of can_implement(BackwardParams): each bad input is refused with the
// right code and a message naming the argument, and backward() refuses it too without writing a
// gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backward_case.h"
#include "flashattn/flashattn.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

using fa_test::BwdCase;
using fa_test::BwdShape;
using flashattn::testing::have_gpu;

// A small valid problem: batch 2, 17 x 23, heads 4/2, head dim 64, host memory.
struct Host {
  BwdCase c;
  Host() : c(shape(), 7) {}
  static BwdShape shape() {
    BwdShape s;
    s.batch = 2;
    s.seqlen_q = 17;
    s.seqlen_k = 23;
    s.heads_q = 4;
    s.heads_kv = 2;
    return s;
  }
  fa::BackwardParams& p() { return c.params; }
  bool gradients_untouched() const {
    for (const auto* t : {&c.dq, &c.dk, &c.dv_})
      for (uint16_t x : *t)
        if (x != fa_test::kPoison) return false;
    return true;
  }
};

// Packed sequences of lengths 17 and 6 (queries) and 23 and 0 (keys) over the same buffers.
void make_varlen(Host& h) {
  static int32_t cu_q[3] = {0, 17, 23};
  static int32_t cu_k[3] = {0, 23, 23};
  h.p().cu_seqlens_q = cu_q;
  h.p().cu_seqlens_k = cu_k;
  h.p().total_q = 23;
  h.p().total_k = 23;
}

// Host cu_seqlens arrays a rule may break (copied per use, so rules do not see each other's).
struct VarlenArrays {
  int32_t q[3] = {0, 17, 23};
  int32_t k[3] = {0, 23, 23};
};

struct Rule {
  const char* name;
  std::function<void(Host&)> mutate;
  fa::StatusCode code;
  const char* says;  // substring the message must contain (it names the argument)
};

const std::vector<Rule>& rules() {
  using C = fa::StatusCode;
  static VarlenArrays bad_first, decreasing, too_long, wrong_total;
  bad_first.q[0] = 1;
  decreasing.k[2] = 20;
  too_long.q[1] = 18;
  too_long.q[2] = 23;
  static const std::vector<Rule> r = {
      {"null_q", [](Host& h) { h.p().q.data = nullptr; }, C::invalid_argument,
       "q.data: must not be null"},
      {"null_k", [](Host& h) { h.p().k.data = nullptr; }, C::invalid_argument,
       "k.data: must not be null"},
      {"null_v", [](Host& h) { h.p().v.data = nullptr; }, C::invalid_argument,
       "v.data: must not be null"},
      {"null_o", [](Host& h) { h.p().o.data = nullptr; }, C::invalid_argument,
       "o.data: must not be null"},
      {"null_dout", [](Host& h) { h.p().dout.data = nullptr; }, C::invalid_argument,
       "dout.data: must not be null"},
      {"null_dq", [](Host& h) { h.p().dq.data = nullptr; }, C::invalid_argument,
       "dq.data: must not be null"},
      {"null_dk", [](Host& h) { h.p().dk.data = nullptr; }, C::invalid_argument,
       "dk.data: must not be null"},
      {"null_dv", [](Host& h) { h.p().dv.data = nullptr; }, C::invalid_argument,
       "dv.data: must not be null"},
      {"null_lse", [](Host& h) { h.p().lse = nullptr; }, C::invalid_argument,
       "lse: must not be null"},
      {"bad_dtype", [](Host& h) { h.p().dtype = static_cast<fa::DType>(7); }, C::invalid_argument,
       "dtype: must be bf16 or fp16"},
      {"e4m3", [](Host& h) { h.p().dtype = fa::DType::e4m3; }, C::unsupported,
       "dtype: e4m3 has no backward in this build"},
      {"e5m2", [](Host& h) { h.p().dtype = fa::DType::e5m2; }, C::unsupported,
       "dtype: e5m2 has no backward in this build"},
      {"batch_zero", [](Host& h) { h.p().batch = 0; }, C::invalid_argument,
       "batch: must be positive"},
      {"heads_q_zero", [](Host& h) { h.p().heads_q = 0; }, C::invalid_argument,
       "heads_q: must be positive"},
      {"heads_kv_negative", [](Host& h) { h.p().heads_kv = -2; }, C::invalid_argument,
       "heads_kv: must be positive"},
      {"head_dim_zero", [](Host& h) { h.p().head_dim = 0; }, C::invalid_argument,
       "head_dim: must be positive"},
      {"seqlen_q_negative", [](Host& h) { h.p().seqlen_q = -1; }, C::invalid_argument,
       "seqlen_q: must be >= 0"},
      {"seqlen_k_negative", [](Host& h) { h.p().seqlen_k = -5; }, C::invalid_argument,
       "seqlen_k: must be >= 0"},
      {"head_dim_v_negative", [](Host& h) { h.p().head_dim_v = -64; }, C::invalid_argument,
       "head_dim_v: must be >= 0"},
      {"gqa_not_multiple", [](Host& h) { h.p().heads_kv = 3; }, C::invalid_argument,
       "heads_q: must be a multiple of heads_kv"},
      {"head_dim_80", [](Host& h) { h.p().head_dim = 80; }, C::invalid_argument,
       "head_dim: must be 64, 96, 128, 192 or 256"},
      {"head_dim_v_pair", [](Host& h) { h.p().head_dim_v = 128; }, C::invalid_argument,
       "head_dim_v 128"},
      {"scale_nan", [](Host& h) { h.p().softmax_scale = std::nanf(""); }, C::invalid_argument,
       "softmax_scale: must be finite"},
      {"softcap_negative", [](Host& h) { h.p().softcap = -30.f; }, C::invalid_argument,
       "softcap: must be >= 0 (0: off)"},
      {"softcap_inf", [](Host& h) { h.p().softcap = INFINITY; }, C::invalid_argument,
       "softcap: must be finite"},
      {"softcap_nan", [](Host& h) { h.p().softcap = std::nanf(""); }, C::invalid_argument,
       "softcap: must be finite"},
      {"window_left", [](Host& h) { h.p().window_left = -2; }, C::invalid_argument,
       "window_left: must be >= -1"},
      {"window_right", [](Host& h) { h.p().window_right = -3; }, C::invalid_argument,
       "window_right: must be >= -1"},
      {"causal_window_right",
       [](Host& h) {
         h.p().causal = true;
         h.p().window_right = 4;
       },
       C::invalid_argument, "window_right: must be -1 or 0 when causal"},
      {"cu_seqlens_half",
       [](Host& h) {
         make_varlen(h);
         h.p().cu_seqlens_k = nullptr;
       },
       C::invalid_argument, "cu_seqlens_q/cu_seqlens_k: give both or neither"},
      {"varlen_total_negative",
       [](Host& h) {
         make_varlen(h);
         h.p().total_k = -1;
       },
       C::invalid_argument, "total_q/total_k: must be >= 0"},
      {"varlen_misaligned",
       [](Host& h) {
         make_varlen(h);
         h.p().cu_seqlens_q = reinterpret_cast<const int32_t*>(
             reinterpret_cast<const char*>(h.p().cu_seqlens_q) + 2);
       },
       C::invalid_argument, "cu_seqlens_q/cu_seqlens_k: must be 4-byte aligned"},
      {"varlen_first_not_zero",
       [](Host& h) {
         make_varlen(h);
         h.p().cu_seqlens_q = bad_first.q;
       },
       C::invalid_argument, "cu_seqlens_q[0]: must be 0"},
      {"varlen_decreasing",
       [](Host& h) {
         make_varlen(h);
         h.p().cu_seqlens_k = decreasing.k;
       },
       C::invalid_argument, "cu_seqlens_k[2]: must be >= cu_seqlens_k[1]"},
      {"varlen_longer_than_seqlen",
       [](Host& h) {
         make_varlen(h);
         h.p().cu_seqlens_q = too_long.q;
       },
       C::invalid_argument, "cu_seqlens_q: sequence 0 has 18 tokens, more than seqlen_q (17)"},
      {"varlen_total_mismatch",
       [](Host& h) {
         make_varlen(h);
         h.p().total_q = 22;
       },
       C::invalid_argument, "total_q: must equal cu_seqlens_q[batch] (23)"},
      {"last_stride", [](Host& h) { h.p().dq.stride[3] = 2; }, C::invalid_argument,
       "dq.stride[3]: the last (head_dim) dimension must be contiguous"},
      {"negative_stride", [](Host& h) { h.p().dout.stride[1] = -128; }, C::invalid_argument,
       "dout.stride[1]: must be >= 0"},
      {"misaligned_pointer", [](Host& h) { h.p().dk.data = h.c.dk.data() + 1; },
       C::invalid_argument, "dk.data: must be 16-byte aligned"},
      {"misaligned_stride", [](Host& h) { h.p().dv.stride[1] = 2 * 64 + 4; }, C::invalid_argument,
       "dv.stride[1]: must be a multiple of 8 elements"},
      {"lse_misaligned",
       [](Host& h) {
         h.p().lse =
             reinterpret_cast<const float*>(reinterpret_cast<const char*>(h.c.lse.data()) + 2);
       },
       C::invalid_argument, "lse: must be 4-byte aligned"},
      {"sinks_misaligned",
       [](Host& h) {
         h.p().sinks =
             reinterpret_cast<const float*>(reinterpret_cast<const char*>(h.c.lse.data()) + 2);
       },
       C::invalid_argument, "sinks: must be a 4-byte aligned fp32 array"},
      {"dsinks_without_sinks",
       [](Host& h) {
         h.c.dsinks.resize(4);
         h.p().dsinks = h.c.dsinks.data();
       },
       C::invalid_argument, "dsinks: given without sinks"},
      {"dsinks_misaligned",
       [](Host& h) {
         h.c.sinks.assign(4, 0.5f);
         h.c.dsinks.resize(8);
         h.p().sinks = h.c.sinks.data();
         h.p().dsinks = reinterpret_cast<float*>(reinterpret_cast<char*>(h.c.dsinks.data()) + 2);
       },
       C::invalid_argument, "dsinks: must be a 4-byte aligned fp32 array"},
      {"dq_aliases_q", [](Host& h) { h.p().dq.data = h.c.q.data(); }, C::invalid_argument,
       "dq: overlaps input q"},
      {"dk_aliases_k", [](Host& h) { h.p().dk.data = h.c.k.data(); }, C::invalid_argument,
       "dk: overlaps input k"},
      {"dv_aliases_dout", [](Host& h) { h.p().dv.data = h.c.dout.data(); }, C::invalid_argument,
       "dv: overlaps input dout"},
      {"dq_aliases_o", [](Host& h) { h.p().dq.data = h.c.o.data(); }, C::invalid_argument,
       "dq: overlaps input o"},
      {"dq_overlaps_lse",
       [](Host& h) { h.p().lse = reinterpret_cast<const float*>(h.c.dq.data()); },
       C::invalid_argument, "dq: overlaps input lse"},
      {"dk_aliases_dq", [](Host& h) { h.p().dk.data = h.c.dq.data(); }, C::invalid_argument,
       "dk: overlaps the output dq"},
      {"dv_aliases_dk", [](Host& h) { h.p().dv.data = h.c.dk.data(); }, C::invalid_argument,
       "dv: overlaps the output dk"},
      {"dsinks_aliases_sinks",
       [](Host& h) {
         h.c.sinks.assign(4, 0.5f);
         h.p().sinks = h.c.sinks.data();
         h.p().dsinks = h.c.sinks.data();
       },
       C::invalid_argument, "dsinks: overlaps input sinks"},
  };
  return r;
}

class BackwardValidationRule : public ::testing::TestWithParam<size_t> {};

TEST_P(BackwardValidationRule, RefusedWithNamedArgumentAndNothingWritten) {
  const Rule& rule = rules()[GetParam()];
  Host h;
  ASSERT_TRUE(fa::can_implement(h.p(), fa::Kernel::cpu).ok()) << "the base problem must be valid";
  rule.mutate(h);
  const fa::Status s = fa::can_implement(h.p(), fa::Kernel::cpu);
  EXPECT_EQ(s.code, rule.code) << rule.name << ": " << s.message;
  EXPECT_NE(s.message.find(rule.says), std::string::npos)
      << rule.name << ": message was \"" << s.message << "\"";
  const fa::Status b = fa::backward(h.p(), fa::Kernel::cpu);
  EXPECT_EQ(b.code, rule.code);
  EXPECT_EQ(b.message, s.message);
  EXPECT_TRUE(h.gradients_untouched()) << rule.name << ": a refused call wrote a gradient";
}

INSTANTIATE_TEST_SUITE_P(AllRules, BackwardValidationRule,
                         ::testing::Range<size_t>(0, rules().size()),
                         [](const auto& info) { return std::string(rules()[info.param].name); });

TEST(BackwardValidation, BaseAndVarlenProblemsRunOnCpu) {
  Host h;
  ASSERT_TRUE(fa::backward(h.p(), fa::Kernel::cpu).ok());
  EXPECT_FALSE(h.gradients_untouched());
  Host v;
  make_varlen(v);
  const fa::Status s = fa::backward(v.p(), fa::Kernel::cpu);
  EXPECT_TRUE(s.ok()) << s.message;
}

bool has_backward(fa::Kernel k) {
  return k == fa::Kernel::cpu || k == fa::Kernel::fa2 || k == fa::Kernel::k6;
}

// Only cpu, fa2 and k6 have a backward: every other kernel is unsupported, naming itself and the
// families that do have one.
TEST(BackwardValidation, KernelsWithoutBackwardAreUnsupported) {
  Host h;
  for (fa::Kernel k : fa::kAllKernels) {
    if (k == fa::Kernel::automatic || has_backward(k)) continue;
    const fa::Status s = fa::can_implement(h.p(), k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << fa::kernel_name(k);
    EXPECT_EQ(s.message, std::string("kernel ") + fa::kernel_name(k) +
                             ": no backward in this build; backward runs on k6, fa2 or cpu");
    EXPECT_EQ(fa::backward(h.p(), k).code, fa::StatusCode::unsupported);
  }
  EXPECT_TRUE(h.gradients_untouched());
}

// Softcap is accepted by the backward families (cpu, fa2, k6); every other kernel stays refused
// as a kernel without a backward.
TEST(BackwardValidation, SoftcapOnBackwardFamilies) {
  Host h;
  h.p().softcap = 30.f;
  EXPECT_TRUE(fa::can_implement(h.p(), fa::Kernel::cpu).ok());
  EXPECT_EQ(fa::select_kernel(h.p()), fa::Kernel::cpu);
  for (fa::Kernel k : fa::kAllKernels) {
    if (k == fa::Kernel::automatic || has_backward(k)) continue;
    EXPECT_EQ(fa::can_implement(h.p(), k).code, fa::StatusCode::unsupported) << fa::kernel_name(k);
  }
}

// FP8 is refused on every kernel, and after the invalid_argument rules.
TEST(BackwardValidation, Fp8IsUnsupportedOnEveryKernel) {
  Host h;
  h.p().dtype = fa::DType::e4m3;
  for (fa::Kernel k : fa::kAllKernels) {
    EXPECT_EQ(fa::can_implement(h.p(), k).code, fa::StatusCode::unsupported) << fa::kernel_name(k);
  }
  h.p().batch = 0;
  EXPECT_EQ(fa::can_implement(h.p(), fa::Kernel::cpu).code, fa::StatusCode::invalid_argument);
}

TEST(BackwardValidation, AutoPicksCpuForHostMemory) {
  Host h;
  EXPECT_EQ(fa::select_kernel(h.p()), fa::Kernel::cpu);
  EXPECT_TRUE(fa::can_implement(h.p()).ok());
}

TEST(BackwardValidation, Fa2RefusesHostMemory) {
  Host h;
  const fa::Status s = fa::can_implement(h.p(), fa::Kernel::fa2);
  if (have_gpu()) {
    EXPECT_EQ(s.code, fa::StatusCode::invalid_argument) << s.message;
    EXPECT_NE(s.message.find("kernel fa2 needs device memory, got host memory"), std::string::npos)
        << s.message;
  } else {
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_NE(s.message.find("kernel fa2: needs a CUDA device"), std::string::npos) << s.message;
  }
  EXPECT_EQ(fa::backward(h.p(), fa::Kernel::fa2).code, s.code);
  EXPECT_TRUE(h.gradients_untouched());
}

// k6's backward is built for head dims 64, 128 and 256 (kBwdSm90HeadDims): other pairs are refused,
// naming the head dims it has and the family that runs the rest (checked before memory, so on any
// machine).
TEST(BackwardValidation, K6RefusesHeadDimsItIsNotBuiltFor) {
  for (auto [d, dv] :
       {std::pair{96, 96}, std::pair{192, 192}, std::pair{192, 128}}) {
    fa_test::BwdShape shape;
    shape.seqlen_q = 9;
    shape.seqlen_k = 11;
    shape.head_dim = d;
    shape.head_dim_v = dv;
    fa_test::BwdCase c(shape, 1);
    const fa::Status s = fa::can_implement(c.params, fa::Kernel::k6);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << d << "/" << dv;
    // 192/128 meets the head_dim_v rule first.
    EXPECT_EQ(s.message, d != dv ? std::string("head_dim_v: kernel k6 needs head_dim_v == head_dim")
                                 : "head_dim: kernel k6's backward is built for head_dim 64, "
                                   "128 or 256 (head_dim_v equal); got " +
                                       std::to_string(d) + " / " + std::to_string(dv) +
                                       " (fa2's backward runs every head dim)");
    EXPECT_EQ(fa::backward(c.params, fa::Kernel::k6).code, fa::StatusCode::unsupported);
  }
}

TEST(BackwardValidation, CpuRefusesDeviceMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: device memory cannot be allocated";
  Host h;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, h.c.dq.size() * 2), cudaSuccess);
  h.p().dq.data = d;
  const fa::Status s = fa::can_implement(h.p(), fa::Kernel::cpu);
  EXPECT_EQ(s.code, fa::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("dq.data: kernel cpu needs host memory"), std::string::npos)
      << s.message;
  cudaFree(d);
}

TEST(BackwardValidation, ContiguousLayout) {
  fa::BackwardParams p;
  p.seqlen_q = 5;
  p.seqlen_k = 7;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.head_dim = 192;
  p.head_dim_v = 128;
  fa::set_contiguous_layout(p);
  EXPECT_EQ(p.q.stride[0], 5 * 4 * 192);
  EXPECT_EQ(p.dq.stride[1], 4 * 192);
  EXPECT_EQ(p.k.stride[0], 7 * 2 * 192);
  EXPECT_EQ(p.dk.stride[2], 192);
  EXPECT_EQ(p.v.stride[1], 2 * 128);
  EXPECT_EQ(p.dv.stride[0], 7 * 2 * 128);
  EXPECT_EQ(p.o.stride[1], 4 * 128);
  EXPECT_EQ(p.dout.stride[0], 5 * 4 * 128);
  for (const int64_t* st : {p.q.stride, p.k.stride, p.v.stride, p.o.stride, p.dout.stride,
                            p.dq.stride, p.dk.stride, p.dv.stride}) {
    EXPECT_EQ(st[3], 1);
  }
}

}  // namespace
