// One test per validation rule of can_implement(): each bad input is refused with the right code
// and a message naming the argument, and forward() refuses it too without writing the output.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "flashattn/flashattn.h"
#include "flashattn/reference.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

using flashattn::testing::have_gpu;

// Host buffers for a small valid problem, with 16-byte aligned storage.
struct HostProblem {
  std::vector<uint16_t> q, k, v, o;
  std::vector<float> lse;
  fa::ForwardParams p;

  explicit HostProblem(int sq = 17, int sk = 23, int hq = 4, int hkv = 2, int d = 64) {
    p.dtype = fa::DType::bf16;
    p.batch = 2;
    p.seqlen_q = sq;
    p.seqlen_k = sk;
    p.heads_q = hq;
    p.heads_kv = hkv;
    p.head_dim = d;
    // At least one vector per buffer so that empty (seqlen 0) tensors still have a valid pointer.
    q.resize(std::max<size_t>(size_t(2) * sq * hq * d, 8));
    k.resize(std::max<size_t>(size_t(2) * sk * hkv * d, 8));
    v.resize(k.size());
    o.assign(q.size(), 0xFFFF);  // NaN poison
    lse.assign(std::max<size_t>(size_t(2) * hq * sq, 4), std::numeric_limits<float>::quiet_NaN());
    fa::reference::fill_normal(q.data(), q.size(), p.dtype, 1);
    fa::reference::fill_normal(k.data(), k.size(), p.dtype, 2);
    fa::reference::fill_normal(v.data(), v.size(), p.dtype, 3);
    p.q.data = q.data();
    p.k.data = k.data();
    p.v.data = v.data();
    p.o.data = o.data();
    p.lse = lse.data();
    fa::set_contiguous_layout(p);
  }
  bool output_untouched() const {
    for (uint16_t x : o)
      if (x != 0xFFFF) return false;
    return true;
  }
};

// The one check of every rule table below: the rule's mutation of a valid problem (HostProblem,
// or a wrapper holding one as `h`) is refused by can_implement with `code` and a message
// containing `rule.says`, and forward() refuses the same way without writing the output.
HostProblem& host_of(HostProblem& h) { return h; }
template <class Wrapper>
HostProblem& host_of(Wrapper& g) {
  return g.h;
}
template <class Problem, class RuleT>
void expect_rule_refused(const RuleT& rule, fa::StatusCode code) {
  Problem g;
  HostProblem& h = host_of(g);
  const fa::Status base = fa::can_implement(h.p, fa::Kernel::cpu);
  ASSERT_TRUE(base.ok()) << "the base problem must be valid: " << base.message;
  rule.mutate(g);
  const fa::Status s = fa::can_implement(h.p, fa::Kernel::cpu);
  EXPECT_EQ(s.code, code) << rule.name << ": " << s.message;
  EXPECT_NE(s.message.find(rule.says), std::string::npos)
      << rule.name << ": message was \"" << s.message << "\"";
  const fa::Status f = fa::forward(h.p, fa::Kernel::cpu);
  EXPECT_EQ(f.code, code);
  EXPECT_EQ(f.message, s.message);
  EXPECT_TRUE(h.output_untouched()) << rule.name << ": a refused call wrote the output";
}

struct Rule {
  const char* name;
  std::function<void(HostProblem&)> mutate;
  fa::StatusCode code;
  const char* says;  // substring the message must contain (the argument's name)
};

const std::vector<Rule>& rules() {
  using C = fa::StatusCode;
  static const std::vector<Rule> r = {
      {"null_q", [](HostProblem& h) { h.p.q.data = nullptr; }, C::invalid_argument,
       "q.data: must not be null"},
      {"null_k", [](HostProblem& h) { h.p.k.data = nullptr; }, C::invalid_argument,
       "k.data: must not be null"},
      {"null_v", [](HostProblem& h) { h.p.v.data = nullptr; }, C::invalid_argument,
       "v.data: must not be null"},
      {"null_o", [](HostProblem& h) { h.p.o.data = nullptr; }, C::invalid_argument,
       "o.data: must not be null"},
      {"bad_dtype", [](HostProblem& h) { h.p.dtype = static_cast<fa::DType>(7); },
       C::invalid_argument, "dtype: must be bf16 or fp16"},
      // e5m2 is a dtype of the API that no kernel runs (FP8 inputs are e4m3).
      {"e5m2_no_kernel", [](HostProblem& h) { h.p.dtype = fa::DType::e5m2; }, C::unsupported,
       "dtype: e5m2 has no kernel in this build (FP8 inputs run as e4m3)"},
      // Descales are FP8 arguments: with 16-bit inputs they are a mistake, not ignored.
      {"q_descale_with_bf16",
       [](HostProblem& h) {
         static const float d[4] = {1, 1, 1, 1};
         h.p.q_descale = d;
       },
       C::invalid_argument, "q_descale: only with FP8 inputs (dtype e4m3), got dtype bf16"},
      {"k_descale_with_fp16",
       [](HostProblem& h) {
         static const float d[4] = {1, 1, 1, 1};
         h.p.dtype = fa::DType::fp16;
         h.p.k_descale = d;
       },
       C::invalid_argument, "k_descale: only with FP8 inputs (dtype e4m3), got dtype fp16"},
      {"v_descale_with_bf16",
       [](HostProblem& h) {
         static const float d[4] = {1, 1, 1, 1};
         h.p.v_descale = d;
       },
       C::invalid_argument, "v_descale: only with FP8 inputs (dtype e4m3), got dtype bf16"},
      {"batch_zero", [](HostProblem& h) { h.p.batch = 0; }, C::invalid_argument,
       "batch: must be positive"},
      {"heads_q_zero", [](HostProblem& h) { h.p.heads_q = 0; }, C::invalid_argument,
       "heads_q: must be positive"},
      {"heads_kv_neg", [](HostProblem& h) { h.p.heads_kv = -2; }, C::invalid_argument,
       "heads_kv: must be positive"},
      {"head_dim_zero", [](HostProblem& h) { h.p.head_dim = 0; }, C::invalid_argument,
       "head_dim: must be positive"},
      {"seqlen_q_neg", [](HostProblem& h) { h.p.seqlen_q = -1; }, C::invalid_argument,
       "seqlen_q: must be >= 0"},
      {"seqlen_k_neg", [](HostProblem& h) { h.p.seqlen_k = -5; }, C::invalid_argument,
       "seqlen_k: must be >= 0"},
      {"head_dim_v_neg", [](HostProblem& h) { h.p.head_dim_v = -64; }, C::invalid_argument,
       "head_dim_v: must be >= 0"},
      {"gqa_not_multiple", [](HostProblem& h) { h.p.heads_kv = 3; }, C::invalid_argument,
       "heads_q: must be a multiple of heads_kv"},
      {"head_dim_80", [](HostProblem& h) { h.p.head_dim = 80; }, C::invalid_argument,
       "head_dim: must be 64, 96, 128, 192 or 256"},
      {"head_dim_v_pair", [](HostProblem& h) { h.p.head_dim_v = 128; }, C::invalid_argument,
       "head_dim_v 128"},
      {"scale_nan", [](HostProblem& h) { h.p.softmax_scale = std::nanf(""); }, C::invalid_argument,
       "softmax_scale: must be finite"},
      {"scale_inf", [](HostProblem& h) { h.p.softmax_scale = INFINITY; }, C::invalid_argument,
       "softmax_scale: must be finite"},
      {"softcap_negative", [](HostProblem& h) { h.p.softcap = -5.f; }, C::invalid_argument,
       "softcap: must be >= 0 (0: off)"},
      {"softcap_inf", [](HostProblem& h) { h.p.softcap = INFINITY; }, C::invalid_argument,
       "softcap: must be finite"},
      {"softcap_nan", [](HostProblem& h) { h.p.softcap = std::nanf(""); }, C::invalid_argument,
       "softcap: must be finite"},
      {"window_left", [](HostProblem& h) { h.p.window_left = -2; }, C::invalid_argument,
       "window_left: must be >= -1"},
      {"window_right", [](HostProblem& h) { h.p.window_right = -3; }, C::invalid_argument,
       "window_right: must be >= -1"},
      {"causal_window_right",
       [](HostProblem& h) {
         h.p.causal = true;
         h.p.window_right = 4;
       },
       C::invalid_argument, "window_right: must be -1 or 0 when causal"},
      {"cu_seqlens_half",
       [](HostProblem& h) {
         static int32_t cu[3] = {0, 17, 34};
         h.p.cu_seqlens_q = cu;
       },
       C::invalid_argument, "cu_seqlens_q/cu_seqlens_k: give both or neither"},
      // The cpu family reads host cu_seqlens as given: their contents are checked.
      {"varlen_total_mismatch",
       [](HostProblem& h) {
         static int32_t cu[3] = {0, 17, 34};
         h.p.cu_seqlens_q = cu;
         h.p.cu_seqlens_k = cu;
         h.p.total_k = 34;
       },
       C::invalid_argument, "total_q: must equal cu_seqlens_q[batch] (34), got 0"},
      {"varlen_first_not_zero",
       [](HostProblem& h) {
         static int32_t cu_q[3] = {1, 17, 34}, cu_k[3] = {0, 17, 34};
         h.p.cu_seqlens_q = cu_q;
         h.p.cu_seqlens_k = cu_k;
         h.p.total_q = h.p.total_k = 34;
       },
       C::invalid_argument, "cu_seqlens_q[0]: must be 0, got 1"},
      {"varlen_decreasing",
       [](HostProblem& h) {
         static int32_t cu_q[3] = {0, 17, 34}, cu_k[3] = {0, 20, 19};
         h.p.cu_seqlens_q = cu_q;
         h.p.cu_seqlens_k = cu_k;
         h.p.total_q = 34;
         h.p.total_k = 19;
       },
       C::invalid_argument, "cu_seqlens_k[2]: must be >= cu_seqlens_k[1]"},
      {"varlen_longer_than_seqlen",
       [](HostProblem& h) {
         static int32_t cu_q[3] = {0, 18, 34}, cu_k[3] = {0, 17, 34};
         h.p.cu_seqlens_q = cu_q;
         h.p.cu_seqlens_k = cu_k;
         h.p.total_q = h.p.total_k = 34;
       },
       C::invalid_argument, "cu_seqlens_q: sequence 0 has 18 tokens, more than seqlen_q (17)"},
      {"varlen_total_negative", [](HostProblem& h) { static int32_t cu[3] = {0, 17, 34}; h.p.cu_seqlens_q = cu; h.p.cu_seqlens_k = cu; h.p.total_q = -1; }, C::invalid_argument, "total_q/total_k: must be >= 0"},
      {"varlen_misaligned", [](HostProblem& h) { static int32_t cu[4] = {0, 17, 34, 0}; h.p.cu_seqlens_q = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(cu) + 2); h.p.cu_seqlens_k = cu; }, C::invalid_argument, "cu_seqlens_q/cu_seqlens_k: must be 4-byte aligned"},
      {"last_stride", [](HostProblem& h) { h.p.k.stride[3] = 2; }, C::invalid_argument,
       "k.stride[3]: the last (head_dim) dimension must be contiguous"},
      {"negative_stride", [](HostProblem& h) { h.p.v.stride[1] = -128; }, C::invalid_argument,
       "v.stride[1]: must be >= 0"},
      {"misaligned_ptr", [](HostProblem& h) { h.p.q.data = h.q.data() + 1; }, C::invalid_argument,
       "q.data: must be 16-byte aligned"},
      {"misaligned_stride", [](HostProblem& h) { h.p.q.stride[1] = 4 * 64 + 4; },
       C::invalid_argument, "q.stride[1]: must be a multiple of 8 elements"},
      {"lse_misaligned",
       [](HostProblem& h) {
         h.p.lse = reinterpret_cast<float*>(reinterpret_cast<char*>(h.lse.data()) + 2);
       },
       C::invalid_argument, "lse: must be 4-byte aligned"},
      {"o_aliases_q", [](HostProblem& h) { h.p.o.data = h.q.data(); }, C::invalid_argument,
       "o: overlaps input q"},
      {"o_overlaps_v", [](HostProblem& h) { h.p.o.data = h.v.data() + 8 * 64; },
       C::invalid_argument, "o: overlaps input"},
      {"lse_overlaps_o", [](HostProblem& h) { h.p.lse = reinterpret_cast<float*>(h.o.data()); },
       C::invalid_argument, "lse: overlaps the output o"},
      {"lse_overlaps_k", [](HostProblem& h) { h.p.lse = reinterpret_cast<float*>(h.k.data()); },
       C::invalid_argument, "lse: overlaps input k"},
      {"sinks_misaligned",
       [](HostProblem& h) {
         h.p.sinks = reinterpret_cast<const float*>(reinterpret_cast<char*>(h.lse.data()) + 2);
       },
       C::invalid_argument, "sinks: must be a 4-byte aligned fp32 array"},
      {"o_overlaps_sinks",
       [](HostProblem& h) { h.p.sinks = reinterpret_cast<const float*>(h.o.data()); },
       C::invalid_argument, "o: overlaps input sinks"},
      {"lse_overlaps_sinks", [](HostProblem& h) { h.p.sinks = h.lse.data(); },
       C::invalid_argument, "lse: overlaps input sinks"},
  };
  return r;
}

// A valid paged call over HostProblem's buffers (ForwardParams::block_table): two sequences of
// (10, 9) and (7, 14) tokens, pages of 4 keys, 8 blocks, a block table of 6 columns whose rows
// use blocks {5, 1, 7} and {0, 6, 2, 4}; total_k is left 0 (not used with a block table).
struct PagedProblem {
  HostProblem h;
  std::vector<int32_t> cu_q{0, 10, 17}, cu_k{0, 9, 23};
  std::vector<int32_t> table{5, 1, 7, 3, 3, 3, 0, 6, 2, 4, 3, 3};

  PagedProblem() {
    fa::ForwardParams& p = h.p;
    p.cu_seqlens_q = cu_q.data();
    p.cu_seqlens_k = cu_k.data();
    p.total_q = 17;
    p.seqlen_q = 10;
    p.seqlen_k = 14;
    p.block_table = table.data();
    p.max_blocks_per_seq = 6;
    p.num_blocks = 8;
    p.page_size = 4;
    fa::set_contiguous_strides(p.k.stride, p.page_size, p.heads_kv, p.head_dim);
    fa::set_contiguous_strides(p.v.stride, p.page_size, p.heads_kv, p.head_dim);
  }
};

struct PagedRule {
  const char* name;
  std::function<void(PagedProblem&)> mutate;
  const char* says;  // every paged rule is an invalid_argument
};

const std::vector<PagedRule>& paged_rules() {
  static const std::vector<PagedRule> r = {
      {"no_cu_seqlens",
       [](PagedProblem& g) {
         g.h.p.cu_seqlens_q = g.h.p.cu_seqlens_k = nullptr;
         g.h.p.total_q = 0;
       },
       "block_table: needs cu_seqlens_q/cu_seqlens_k (paged KV is a variable-length call"},
      {"page_size_zero", [](PagedProblem& g) { g.h.p.page_size = 0; },
       "page_size: must be >= 1 with block_table, got 0"},
      {"num_blocks_zero", [](PagedProblem& g) { g.h.p.num_blocks = 0; },
       "num_blocks: must be >= 1 with block_table, got 0"},
      {"max_blocks_zero", [](PagedProblem& g) { g.h.p.max_blocks_per_seq = 0; },
       "max_blocks_per_seq: must be >= 1 with block_table, got 0"},
      {"row_stride_short", [](PagedProblem& g) { g.h.p.block_table_stride = 5; },
       "block_table_stride: must be 0 or >= max_blocks_per_seq (6), got 5"},
      {"block_table_misaligned",
       [](PagedProblem& g) {
         g.h.p.block_table = reinterpret_cast<const int32_t*>(
             reinterpret_cast<const char*>(g.table.data()) + 2);
       },
       "block_table: must be a 4-byte aligned int32 array"},
      {"too_many_keys",
       [](PagedProblem& g) {
         g.h.p.seqlen_k = 1 << 30;
         g.h.p.max_blocks_per_seq = 1 << 20;
         g.h.p.page_size = 1 << 12;
       },
       "block_table: batch * min(seqlen_k, max_blocks_per_seq * page_size) = 2147483648 keys to "
       "gather, more than 2147483391"},
      // k and v are the blocks: every stride is checked, the block stride included.
      {"block_stride_misaligned", [](PagedProblem& g) { g.h.p.v.stride[0] = 4 * 2 * 64 + 4; },
       "v.stride[0]: must be a multiple of 8 elements"},
      // k's blocks (4096 elements) and o (4352) in one arena, overlapping by 128 elements: with
      // o placed in k's own buffer its tail would reach whatever the heap put next (q, at times).
      {"o_overlaps_blocks",
       [](PagedProblem& g) {
         static std::vector<uint16_t> arena(31 * 2 * 64 + 17 * 4 * 64);
         g.h.p.k.data = arena.data();
         g.h.p.o.data = arena.data() + 31 * 2 * 64;
       },
       "o: overlaps input k"},
      // Host memory (the cpu family): the table's contents are checked.
      {"block_out_of_range", [](PagedProblem& g) { g.table[8] = 8; },
       "block_table[1][2]: block 8 is outside [0, num_blocks = 8) and would be read"},
      {"block_negative", [](PagedProblem& g) { g.table[2] = -1; },
       "block_table[0][2]: block -1 is outside [0, num_blocks = 8)"},
      {"sequence_longer_than_its_row", [](PagedProblem& g) { g.h.p.max_blocks_per_seq = 3; },
       "cu_seqlens_k: sequence 1 has 14 keys, more than its block_table row holds "
       "(max_blocks_per_seq * page_size = 12)"},
      {"sequence_longer_than_seqlen_k", [](PagedProblem& g) { g.h.p.seqlen_k = 13; },
       "cu_seqlens_k: sequence 1 has 14 tokens, more than seqlen_k (13)"},
  };
  return r;
}

class PagedValidationRule : public ::testing::TestWithParam<size_t> {};

TEST_P(PagedValidationRule, RefusedWithNamedArgumentAndNothingWritten) {
  expect_rule_refused<PagedProblem>(paged_rules()[GetParam()], fa::StatusCode::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(AllRules, PagedValidationRule,
                         ::testing::Range<size_t>(0, paged_rules().size()),
                         [](const auto& info) {
                           return std::string(paged_rules()[info.param].name);
                         });

// Paged input goes through the variable-length forward: families without variable length refuse
// it as unsupported, naming cu_seqlens_q; total_k is not read; the base call runs and writes
// every row.
TEST(Validation, PagedNeedsAVariableLengthFamily) {
  PagedProblem g;
  for (fa::Kernel k : {fa::Kernel::k1, fa::Kernel::k2}) {
    if (!fa::kernel_is_built(k)) continue;
    const fa::Status s = fa::can_implement(g.h.p, k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_NE(s.message.find("cu_seqlens_q: kernel " + std::string(fa::kernel_name(k)) +
                             " does not support variable length"),
              std::string::npos)
        << s.message;
  }
  g.h.p.total_k = 12345;
  EXPECT_EQ(fa::select_kernel(g.h.p), fa::Kernel::cpu);
  const fa::Status s = fa::forward(g.h.p);
  ASSERT_TRUE(s.ok()) << s.message;
  for (size_t i = 0; i < size_t(17) * 4 * 64; ++i) ASSERT_NE(g.h.o[i], 0xFFFF) << i;
}

class ValidationRule : public ::testing::TestWithParam<size_t> {};

TEST_P(ValidationRule, RefusedWithNamedArgumentAndNothingWritten) {
  const Rule& rule = rules()[GetParam()];
  expect_rule_refused<HostProblem>(rule, rule.code);
}

INSTANTIATE_TEST_SUITE_P(AllRules, ValidationRule, ::testing::Range<size_t>(0, rules().size()),
                         [](const auto& info) { return std::string(rules()[info.param].name); });

// Attention sinks run on the families that support them (cpu here) and are refused by the others
// as unsupported, naming the argument; on the GPU families they must be device memory.
TEST(Validation, SinksOnlyWhereSupported) {
  HostProblem h;
  const std::vector<float> sinks(h.p.heads_q, 0.5f);
  h.p.sinks = sinks.data();
  EXPECT_TRUE(fa::can_implement(h.p, fa::Kernel::cpu).ok());
  for (fa::Kernel k : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::k3, fa::Kernel::k4,
                       fa::Kernel::k5}) {
    if (!fa::kernel_is_built(k)) continue;
    const fa::Status s = fa::can_implement(h.p, k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << fa::kernel_name(k) << ": " << s.message;
    EXPECT_NE(s.message.find("sinks: kernel " + std::string(fa::kernel_name(k)) +
                             " does not support attention sinks"),
              std::string::npos)
        << s.message;
  }
}

// Softcap runs on cpu, fa2 and k6 and is refused as unsupported by every other family: a family
// without it would read make_problem's scale_log2 = softcap·log2(e) as the softmax scale.
TEST(Validation, SoftcapOnlyWhereSupported) {
  HostProblem h;
  h.p.softcap = 30.f;
  EXPECT_TRUE(fa::can_implement(h.p, fa::Kernel::cpu).ok());
  for (fa::Kernel k : fa::kAllKernels) {
    // k7 and k8 run e4m3 only, which refuses softcap for every family (Fp8ValidationRule).
    if (k == fa::Kernel::cpu || k == fa::Kernel::fa2 || k == fa::Kernel::k6 ||
        k == fa::Kernel::k7 || k == fa::Kernel::k8 || k == fa::Kernel::automatic ||
        !fa::kernel_is_built(k)) {
      continue;
    }
    const fa::Status s = fa::can_implement(h.p, k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << fa::kernel_name(k) << ": " << s.message;
    EXPECT_NE(s.message.find("softcap: kernel " + std::string(fa::kernel_name(k)) +
                             " does not support softcap"),
              std::string::npos)
        << s.message;
  }
  h.p.softcap = 0.f;  // off: every family may take it
  for (fa::Kernel k : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::k3, fa::Kernel::k4,
                       fa::Kernel::k5}) {
    if (!fa::kernel_is_built(k)) continue;
    EXPECT_EQ(fa::can_implement(h.p, k).message.find("softcap"), std::string::npos);
  }
}

// e5m2 is refused for every kernel, auto included, and before any rule of the kernel's own.
TEST(Validation, E5m2IsUnsupportedOnEveryKernel) {
  HostProblem h;
  h.p.dtype = fa::DType::e5m2;
  for (fa::Kernel k : fa::kAllKernels) {
    const fa::Status s = fa::can_implement(h.p, k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << fa::kernel_name(k) << ": " << s.message;
    EXPECT_EQ(s.message, "dtype: e5m2 has no kernel in this build (FP8 inputs run as e4m3)");
  }
  EXPECT_EQ(fa::select_kernel(h.p), fa::Kernel::cpu);  // host memory: the family, refused above
  h.p.batch = 0;  // a broken rule is reported before the missing kernel
  EXPECT_EQ(fa::can_implement(h.p, fa::Kernel::cpu).code, fa::StatusCode::invalid_argument);
}

// ---- FP8 (e4m3) inputs ---------------------------------------------------------------------
// HostProblem's shape with e4m3 q, k, v (in its 16-bit buffers, which hold twice the bytes), o in
// bf16 and host descales of (batch 2, heads_kv 2).
struct Fp8Problem {
  HostProblem h;
  std::vector<float> q_descale{0.5f, 1.25f, 2.f, 0.75f}, k_descale{1.f, 0.625f, 1.5f, 2.f},
      v_descale{1.75f, 1.f, 0.5f, 1.125f};

  Fp8Problem() {
    fa::ForwardParams& p = h.p;
    p.dtype = fa::DType::e4m3;
    p.out_dtype = fa::DType::bf16;
    fa::reference::fill_normal(h.q.data(), std::ssize(h.q), p.dtype, 11);
    fa::reference::fill_normal(h.k.data(), std::ssize(h.k), p.dtype, 12);
    fa::reference::fill_normal(h.v.data(), std::ssize(h.v), p.dtype, 13);
    p.q_descale = q_descale.data();
    p.k_descale = k_descale.data();
    p.v_descale = v_descale.data();
  }

  // K8's block descales in place of the per-head ones: fp8_block_rows(64) is {192, 128}, so one
  // block per (sequence, head): (batch 2, heads_q 4, 1) and (batch 2, heads_kv 2, 1).
  std::vector<float> q_block{0.5f, 1.f, 1.5f, 2.f, 0.25f, 0.75f, 1.25f, 1.75f},
      k_block{1.f, 0.5f, 2.f, 0.625f}, v_block{0.75f, 1.5f, 1.f, 1.25f};
  void use_blocks() {
    h.p.q_descale = h.p.k_descale = h.p.v_descale = nullptr;
    h.p.q_block_descale = q_block.data();
    h.p.k_block_descale = k_block.data();
    h.p.v_block_descale = v_block.data();
  }
};

struct Fp8Rule {
  const char* name;
  std::function<void(Fp8Problem&)> mutate;
  fa::StatusCode code;
  const char* says;
};

const std::vector<Fp8Rule>& fp8_rules() {
  using C = fa::StatusCode;
  static const std::vector<Fp8Rule> r = {
      {"out_dtype_e4m3", [](Fp8Problem& g) { g.h.p.out_dtype = fa::DType::e4m3; },
       C::invalid_argument,
       "out_dtype: must be bf16 or fp16 with FP8 inputs (o's element type), got e4m3"},
      {"out_dtype_unknown", [](Fp8Problem& g) { g.h.p.out_dtype = static_cast<fa::DType>(9); },
       C::invalid_argument, "out_dtype: must be bf16 or fp16 with FP8 inputs"},
      // 16-byte vectors (and TMA's 16-byte strides) are 16 elements of e4m3.
      {"e4m3_stride_8", [](Fp8Problem& g) { g.h.p.q.stride[1] = 4 * 64 + 8; },
       C::invalid_argument, "q.stride[1]: must be a multiple of 16 elements (16 bytes), got 264"},
      {"e4m3_k_head_stride", [](Fp8Problem& g) { g.h.p.k.stride[2] = 64 + 8; },
       C::invalid_argument, "k.stride[2]: must be a multiple of 16 elements (16 bytes), got 72"},
      // o is out_dtype (2 bytes): its vectors are 8 elements.
      {"o_stride_in_out_dtype", [](Fp8Problem& g) { g.h.p.o.stride[1] = 4 * 64 + 4; },
       C::invalid_argument, "o.stride[1]: must be a multiple of 8 elements (16 bytes), got 260"},
      // o's bytes are out_dtype's: an o ending one bf16 row before v no longer overlaps it when
      // counted in bytes of e4m3, and does when counted in bf16.
      {"o_extent_in_out_dtype",
       [](Fp8Problem& g) {
         // v starts right after o's extent counted in e4m3 bytes, inside its bf16 extent (the
         // o buffer holds both; a refused call reads and writes nothing).
         const int64_t o_bytes_e4m3 = int64_t{2} * 17 * 4 * 64;
         g.h.p.v.data = reinterpret_cast<char*>(g.h.o.data()) + o_bytes_e4m3;
       },
       C::invalid_argument, "o: overlaps input v"},
      {"q_descale_misaligned",
       [](Fp8Problem& g) {
         g.h.p.q_descale = reinterpret_cast<const float*>(
             reinterpret_cast<const char*>(g.q_descale.data()) + 2);
       },
       C::invalid_argument,
       "q_descale: must be a 4-byte aligned fp32 array of batch * heads_kv descales"},
      {"v_descale_misaligned",
       [](Fp8Problem& g) {
         g.h.p.v_descale = reinterpret_cast<const float*>(
             reinterpret_cast<const char*>(g.v_descale.data()) + 1);
       },
       C::invalid_argument, "v_descale: must be a 4-byte aligned fp32 array"},
      // Descales are inputs: no output may overlap them.
      {"o_overlaps_k_descale",
       [](Fp8Problem& g) { g.h.p.k_descale = reinterpret_cast<const float*>(g.h.o.data()); },
       C::invalid_argument, "o: overlaps input k_descale"},
      {"lse_overlaps_q_descale", [](Fp8Problem& g) { g.h.p.q_descale = g.h.lse.data() + 4; },
       C::invalid_argument, "lse: overlaps input q_descale"},
      // The cpu family reads host descales as given: each must be finite and > 0.
      {"q_descale_zero", [](Fp8Problem& g) { g.q_descale[3] = 0.f; }, C::invalid_argument,
       "q_descale[3] (batch 1, kv head 1): must be finite and > 0, got 0"},
      {"k_descale_negative", [](Fp8Problem& g) { g.k_descale[1] = -1.f; }, C::invalid_argument,
       "k_descale[1] (batch 0, kv head 1): must be finite and > 0, got -1"},
      {"v_descale_nan", [](Fp8Problem& g) { g.v_descale[2] = std::nanf(""); },
       C::invalid_argument, "v_descale[2] (batch 1, kv head 0): must be finite and > 0"},
      {"v_descale_inf", [](Fp8Problem& g) { g.v_descale[0] = INFINITY; }, C::invalid_argument,
       "v_descale[0] (batch 0, kv head 0): must be finite and > 0"},
      // Valid requests no family runs with FP8 inputs.
      {"sinks_with_e4m3",
       [](Fp8Problem& g) {
         static const float sinks[4] = {0, 0, 0, 0};
         g.h.p.sinks = sinks;
       },
       C::unsupported, "sinks: attention sinks are not supported with FP8 inputs (dtype e4m3)"},
      {"softcap_with_e4m3", [](Fp8Problem& g) { g.h.p.softcap = 30.f; }, C::unsupported,
       "softcap: soft-capping is not supported with FP8 inputs (dtype e4m3)"},
      // K8's block descales (q/k/v_block_descale): e4m3 inputs only, all three or none, instead
      // of the per-head descales, dense batches, and head dims whose blocks are defined.
      {"block_descales_with_bf16",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.dtype = fa::DType::bf16;
       },
       C::invalid_argument,
       "q_block_descale: only with dtype e4m3 (FP8 inputs, as quantize_fp8() writes them), got "
       "dtype bf16"},
      {"k_block_descale_missing",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.k_block_descale = nullptr;
       },
       C::invalid_argument,
       "k_block_descale: null while q_block_descale is set (the block descales come all three or "
       "none)"},
      {"only_v_block_descale",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.q_block_descale = g.h.p.k_block_descale = nullptr;
       },
       C::invalid_argument, "q_block_descale: null while v_block_descale is set"},
      {"block_and_per_head_descales",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.k_descale = g.k_descale.data();
       },
       C::invalid_argument,
       "k_descale: must be null with block descales (q_block_descale...): each block of rows "
       "carries its own descale"},
      {"block_descales_with_block_table",
       [](Fp8Problem& g) {
         static const int32_t cu_q[3] = {0, 10, 17}, cu_k[3] = {0, 9, 23};
         static const int32_t table[12] = {5, 1, 7, 3, 3, 3, 0, 6, 2, 4, 3, 3};
         g.use_blocks();
         fa::ForwardParams& p = g.h.p;
         p.cu_seqlens_q = cu_q;
         p.cu_seqlens_k = cu_k;
         p.total_q = 17;
         p.block_table = table;
         p.max_blocks_per_seq = 6;
         p.num_blocks = 8;
         p.page_size = 4;
       },
       C::invalid_argument,
       "block_table: not with block descales (q_block_descale...), which describe dense batches "
       "only"},
      {"block_descales_with_cu_seqlens",
       [](Fp8Problem& g) {
         static const int32_t cu_q[3] = {0, 10, 17}, cu_k[3] = {0, 9, 23};
         g.use_blocks();
         g.h.p.cu_seqlens_q = cu_q;
         g.h.p.cu_seqlens_k = cu_k;
         g.h.p.total_q = 17;
         g.h.p.total_k = 23;
       },
       C::invalid_argument,
       "cu_seqlens_q: not with block descales (q_block_descale...): their layout (batch, heads, "
       "ceil(seqlen / rows)) describes dense batches only"},
      {"block_descales_head_dim_96",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.head_dim = 96;
       },
       C::invalid_argument,
       "head_dim: block descales need head_dim 64, 128 or 256 with head_dim_v equal (their rows "
       "per block are the FP8 kernel's tiles, fp8_block_rows), got 96 / 96"},
      {"block_descales_head_dim_v_differs",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.head_dim = 192;
         g.h.p.head_dim_v = 128;
       },
       C::invalid_argument, "head_dim: block descales need head_dim 64, 128 or 256"},
      {"q_block_descale_misaligned",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.q_block_descale = reinterpret_cast<const float*>(
             reinterpret_cast<const char*>(g.q_block.data()) + 2);
       },
       C::invalid_argument,
       "q_block_descale: must be a 4-byte aligned fp32 array of batch * heads_q * ceil(seqlen_q / "
       "192) descales"},
      {"v_block_descale_misaligned",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.v_block_descale = reinterpret_cast<const float*>(
             reinterpret_cast<const char*>(g.v_block.data()) + 1);
       },
       C::invalid_argument,
       "v_block_descale: must be a 4-byte aligned fp32 array of batch * heads_kv * ceil(seqlen_k "
       "/ 128) descales"},
      {"o_overlaps_v_block_descale",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.h.p.v_block_descale = reinterpret_cast<const float*>(g.h.o.data()) + 8;
       },
       C::invalid_argument, "o: overlaps input v_block_descale"},
      // The cpu family reads host block descales as given: each must be finite and > 0.
      {"q_block_descale_zero",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.q_block[5] = 0.f;
       },
       C::invalid_argument,
       "q_block_descale[5] (batch 1, head 1, block 0): must be finite and > 0, got 0"},
      {"k_block_descale_nan",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.k_block[2] = std::nanf("");
       },
       C::invalid_argument,
       "k_block_descale[2] (batch 1, kv head 0, block 0): must be finite and > 0"},
      {"v_block_descale_negative",
       [](Fp8Problem& g) {
         g.use_blocks();
         g.v_block[1] = -0.5f;
       },
       C::invalid_argument,
       "v_block_descale[1] (batch 0, kv head 1, block 0): must be finite and > 0, got -0.5"},
      // A broken rule of the problem is reported before a dtype rule.
      {"batch_before_fp8_rules",
       [](Fp8Problem& g) {
         g.h.p.batch = 0;
         g.h.p.out_dtype = fa::DType::e4m3;
       },
       C::invalid_argument, "batch: must be positive"},
  };
  return r;
}

class Fp8ValidationRule : public ::testing::TestWithParam<size_t> {};

TEST_P(Fp8ValidationRule, RefusedWithNamedArgumentAndNothingWritten) {
  const Fp8Rule& rule = fp8_rules()[GetParam()];
  expect_rule_refused<Fp8Problem>(rule, rule.code);
}

INSTANTIATE_TEST_SUITE_P(AllRules, Fp8ValidationRule,
                         ::testing::Range<size_t>(0, fp8_rules().size()),
                         [](const auto& info) { return std::string(fp8_rules()[info.param].name); });

// The base FP8 problem runs on cpu (auto picks it for host memory), writing o in out_dtype.
TEST(Fp8Validation, BaseProblemRunsOnCpu) {
  for (fa::DType out : {fa::DType::bf16, fa::DType::fp16}) {
    Fp8Problem g;
    g.h.p.out_dtype = out;
    EXPECT_EQ(fa::select_kernel(g.h.p), fa::Kernel::cpu);
    const fa::Status s = fa::forward(g.h.p);
    ASSERT_TRUE(s.ok()) << s.message;
    // Every element of o (2 * 17 * 4 * 64 of out_dtype, the whole buffer) written.
    for (size_t i = 0; i < g.h.o.size(); ++i) ASSERT_NE(g.h.o[i], 0xFFFF) << i;
  }
}

// Paged KV is a variable-length call through a gather of 16-bit pages: refused with FP8 inputs,
// after the paged shape rules (which are invalid_argument) and naming block_table.
TEST(Fp8Validation, BlockTableIsUnsupported) {
  PagedProblem g;
  g.h.p.dtype = fa::DType::e4m3;
  const fa::Status s = fa::can_implement(g.h.p, fa::Kernel::cpu);
  EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
  EXPECT_EQ(s.message, "block_table: paged KV is not supported with FP8 inputs (dtype e4m3)");
  g.h.p.page_size = 0;
  EXPECT_EQ(fa::can_implement(g.h.p, fa::Kernel::cpu).code, fa::StatusCode::invalid_argument);
}

// Each family names the dtypes it runs: k7 and k8 e4m3 only, the 16-bit families bf16 and fp16.
// These feature rules come before the memory rules, so they answer without a device.
TEST(Fp8Validation, EachFamilyRunsItsDtypes) {
  Fp8Problem g;
  for (fa::Kernel k : fa::kAllKernels) {
    if (k == fa::Kernel::automatic || k == fa::Kernel::cpu || k == fa::Kernel::k7 ||
        k == fa::Kernel::k8 || !fa::kernel_is_built(k)) {
      continue;
    }
    const fa::Status s = fa::can_implement(g.h.p, k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << fa::kernel_name(k) << ": " << s.message;
    EXPECT_EQ(s.message, "dtype: kernel " + std::string(fa::kernel_name(k)) +
                             " runs bf16 and fp16, not e4m3 (k7, k8 and cpu run e4m3)");
  }
  HostProblem h;
  for (fa::Kernel k : {fa::Kernel::k7, fa::Kernel::k8}) {
    const fa::Status s = fa::can_implement(h.p, k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_EQ(s.message, "dtype: kernel " + std::string(fa::kernel_name(k)) +
                             " runs e4m3, not bf16");
  }
}

// Block descales pick the family: k7 refuses them pointing to k8, k8 refuses inputs without them
// pointing to k7, cpu takes both (and auto picks it for host memory). Feature rules: they answer
// before the memory rules, without a device.
TEST(Fp8Validation, BlockDescalesRunOnK8) {
  {
    Fp8Problem g;
    g.use_blocks();
    const fa::Status s = fa::can_implement(g.h.p, fa::Kernel::k7);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_EQ(s.message,
              "q_block_descale: kernel k7 takes per-head descales only (q_descale, k_descale, "
              "v_descale); block descales run on k8 (and cpu)");
    EXPECT_EQ(fa::select_kernel(g.h.p), fa::Kernel::cpu);
    EXPECT_TRUE(fa::can_implement(g.h.p).ok()) << fa::can_implement(g.h.p).message;
  }
  for (bool per_head : {true, false}) {
    Fp8Problem g;
    if (!per_head) g.h.p.q_descale = g.h.p.k_descale = g.h.p.v_descale = nullptr;
    const fa::Status s = fa::can_implement(g.h.p, fa::Kernel::k8);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_EQ(s.message,
              "q_block_descale: kernel k8 needs block descales (q/k/v_block_descale, as "
              "quantize_fp8() makes them); FP8 inputs with per-head descales run on k7");
  }
  for (int d : {64, 128, 256}) {  // k8's head dims pass its feature rules
    Fp8Problem g;
    g.use_blocks();
    g.h.p.head_dim = d;
    const fa::Status s = fa::can_implement(g.h.p, fa::Kernel::k8);
    EXPECT_EQ(s.message.find("head_dim"), std::string::npos) << d << ": " << s.message;
    EXPECT_EQ(s.message.find("block_descale"), std::string::npos) << d << ": " << s.message;
  }
}

// The base problem with block descales runs on cpu and writes every element of o.
TEST(Fp8Validation, BlockDescalesRunOnCpu) {
  Fp8Problem g;
  g.use_blocks();
  const fa::Status s = fa::forward(g.h.p, fa::Kernel::cpu);
  ASSERT_TRUE(s.ok()) << s.message;
  for (size_t i = 0; i < g.h.o.size(); ++i) ASSERT_NE(g.h.o[i], 0xFFFF) << i;
}

// k7's own limits: the FP8 head dims with head_dim_v equal, and its feature list. Without a
// device (or with host memory) the memory rules that follow refuse it anyway.
TEST(Fp8Validation, K7Limits) {
  {
    Fp8Problem g;
    g.h.p.head_dim = 96;
    const fa::Status s = fa::can_implement(g.h.p, fa::Kernel::k7);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_EQ(s.message,
              "head_dim: kernel k7 is built for head_dim 64, 128 or 256 (head_dim_v equal); got "
              "96 / 96");
  }
  {
    Fp8Problem g;
    g.h.p.head_dim = 192;
    g.h.p.head_dim_v = 128;
    const fa::Status s = fa::can_implement(g.h.p, fa::Kernel::k7);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_EQ(s.message, "head_dim_v: kernel k7 needs head_dim_v == head_dim");
  }
  for (int d : {64, 128, 256}) {  // the head dims pass k7's feature rules
    Fp8Problem g;
    g.h.p.head_dim = d;
    const fa::Status s = fa::can_implement(g.h.p, fa::Kernel::k7);
    EXPECT_EQ(s.message.find("head_dim"), std::string::npos) << d << ": " << s.message;
    EXPECT_EQ(s.message.find("dtype"), std::string::npos) << d << ": " << s.message;
  }
}

TEST(Validation, BaseProblemRunsOnCpu) {
  HostProblem h;
  const fa::Status s = fa::forward(h.p, fa::Kernel::cpu);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_FALSE(h.output_untouched());
}

TEST(Validation, HeadDimPair192x128Accepted) {
  HostProblem h(9, 9, 2, 1, 192);
  std::vector<uint16_t> v(size_t(2) * 9 * 1 * 128), o(size_t(2) * 9 * 2 * 128);
  h.p.head_dim_v = 128;
  h.p.v.data = v.data();
  h.p.o.data = o.data();
  fa::set_contiguous_layout(h.p);
  EXPECT_TRUE(fa::can_implement(h.p, fa::Kernel::cpu).ok())
      << fa::can_implement(h.p, fa::Kernel::cpu).message;
}

TEST(Validation, PaddedStridesAccepted) {
  HostProblem h;
  h.p.q.stride[2] = 64;
  h.p.q.stride[1] = 4 * 64;
  h.p.q.stride[0] = 17 * 4 * 64;
  // Interleaved heads with padding: a larger head stride that still fits the buffer is fine.
  std::vector<uint16_t> qpad(size_t(2) * 17 * 4 * 72);
  h.p.q.data = qpad.data();
  h.p.q.stride[2] = 72;
  h.p.q.stride[1] = 4 * 72;
  h.p.q.stride[0] = 17 * 4 * 72;
  EXPECT_TRUE(fa::can_implement(h.p, fa::Kernel::cpu).ok())
      << fa::can_implement(h.p, fa::Kernel::cpu).message;
}

TEST(Validation, UnbuiltKernelIsUnsupported) {
  HostProblem h;
  for (fa::Kernel k : fa::kAllKernels) {
    if (fa::kernel_is_built(k)) continue;
    const fa::Status s = fa::can_implement(h.p, k);
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << fa::kernel_name(k);
    EXPECT_NE(s.message.find(std::string("kernel ") + fa::kernel_name(k)), std::string::npos)
        << s.message;
    EXPECT_EQ(fa::forward(h.p, k).code, fa::StatusCode::unsupported);
  }
}

TEST(Validation, GpuKernelRefusesHostMemory) {
  HostProblem h;
  for (fa::Kernel k : {fa::Kernel::k1, fa::Kernel::k2, fa::Kernel::fa2}) {
    if (!fa::kernel_is_built(k)) continue;  // -DFLASHATTN_LINEAGE=OFF has no k1, k2
    const fa::Status s = fa::can_implement(h.p, k);
    if (have_gpu()) {
      EXPECT_EQ(s.code, fa::StatusCode::invalid_argument) << s.message;
      EXPECT_NE(s.message.find("needs device memory, got host memory"), std::string::npos)
          << s.message;
    } else {
      EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
      EXPECT_NE(s.message.find("needs a CUDA device"), std::string::npos) << s.message;
    }
    EXPECT_EQ(fa::forward(h.p, k).code, s.code);
    EXPECT_TRUE(h.output_untouched());
  }
}

TEST(Validation, CpuKernelRefusesDeviceMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device: device memory cannot be allocated";
  HostProblem h;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, h.o.size() * 2), cudaSuccess);
  h.p.o.data = d;
  const fa::Status s = fa::can_implement(h.p, fa::Kernel::cpu);
  EXPECT_EQ(s.code, fa::StatusCode::invalid_argument);
  EXPECT_NE(s.message.find("o.data: kernel cpu needs host memory"), std::string::npos) << s.message;
  cudaFree(d);
}

TEST(Validation, AutoPicksCpuForHostMemory) {
  HostProblem h;
  EXPECT_EQ(fa::select_kernel(h.p), fa::Kernel::cpu);
  EXPECT_TRUE(fa::forward(h.p).ok());
}

TEST(Validation, SeqlenKZeroGivesZeroOutputAndMinusInfLse) {
  HostProblem h(5, 0);
  const fa::Status s = fa::forward(h.p, fa::Kernel::cpu);
  ASSERT_TRUE(s.ok()) << s.message;
  for (uint16_t x : h.o) EXPECT_EQ(x, 0u);
  for (float l : h.lse) EXPECT_EQ(l, -INFINITY);
}

TEST(Validation, SeqlenQZeroWritesNothing) {
  HostProblem h(0, 9);
  EXPECT_TRUE(fa::forward(h.p, fa::Kernel::cpu).ok());
  EXPECT_TRUE(h.output_untouched());
}

TEST(Names, KernelNamesRoundTrip) {
  for (fa::Kernel k : fa::kAllKernels) {
    const auto parsed = fa::parse_kernel(fa::kernel_name(k));
    ASSERT_TRUE(parsed.has_value()) << fa::kernel_name(k);
    EXPECT_EQ(*parsed, k);
  }
  EXPECT_FALSE(fa::parse_kernel("k9").has_value());
  EXPECT_TRUE(fa::kernel_is_built(fa::Kernel::cpu));
  EXPECT_TRUE(fa::kernel_runs_on_host(fa::Kernel::cpu));
  EXPECT_FALSE(fa::kernel_runs_on_host(fa::Kernel::k2));
}

TEST(Names, DtypeNamesRoundTrip) {
  for (fa::DType d : {fa::DType::bf16, fa::DType::fp16, fa::DType::e4m3, fa::DType::e5m2}) {
    EXPECT_EQ(fa::parse_dtype(fa::dtype_name(d)), d);
  }
  EXPECT_EQ(fa::dtype_size(fa::DType::bf16), 2);
  EXPECT_EQ(fa::dtype_size(fa::DType::fp16), 2);
  EXPECT_EQ(fa::dtype_size(fa::DType::e4m3), 1);
  EXPECT_EQ(fa::dtype_size(fa::DType::e5m2), 1);
  EXPECT_EQ(fa::parse_dtype("float8_e4m3fn"), fa::DType::e4m3);  // torch's names
  EXPECT_EQ(fa::parse_dtype("float8_e5m2"), fa::DType::e5m2);
  EXPECT_FALSE(fa::parse_dtype("fp32").has_value());
  EXPECT_EQ(static_cast<int>(fa::DType::e4m3), 2);  // the C ABI's FLASHATTN_C_E4M3
}

}  // namespace
