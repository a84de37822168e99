// CPU tests of the decode validation rules: one test per rule, each refused with the code and a
// message naming the argument. Shape rules go through check_decode_shapes, index rules through
// check_decode_indices on host arrays (the same functions can_implement runs); can_implement
// itself is checked to refuse host memory (no decode on the CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "api/decode_validate.h"
#include "flashattn/flashattn.h"
#include "gpu_test_util.h"

namespace fa = flashattn;

namespace {

// A small valid decode problem in host memory: batch 3, 2 query tokens, 8/2 heads, d 64, paged or
// contiguous cache of capacity 64.
struct HostDecode {
  std::vector<uint16_t> q, o, k, v, kn, vn, cos, sin;
  std::vector<float> lse, k_scale{0.5f, 2.f}, v_scale{0.25f, 1.f};
  std::vector<int32_t> seqlens{10, 0, 60}, table, batch_idx{2, 0, 1};
  fa::DecodeParams p;

  explicit HostDecode(bool paged) {
    p.batch = 3;
    p.seqlen_q = 2;
    p.heads_q = 8;
    p.heads_kv = 2;
    p.head_dim = 64;
    p.seqlen_new = 2;
    if (paged) {
      p.num_pages = 20;
      p.page_size = 8;
      p.max_pages = 8;
      for (int b = 0; b < 3; ++b)
        for (int i = 0; i < 8; ++i) table.push_back((b * 8 + i) % 20);
    } else {
      p.cache_seqlen = 64;
    }
    const size_t cache = size_t(paged ? 20 * 8 : 3 * 64) * 2 * 64;
    q.assign(3 * 2 * 8 * 64, 0x3c00);
    o.assign(q.size(), 0xFFFF);
    k.assign(cache, 0);
    v.assign(cache, 0);
    kn.assign(3 * 2 * 2 * 64, 0x3c00);
    vn.assign(kn.size(), 0x3c00);
    lse.assign(3 * 8 * 2, NAN);
    p.q.data = q.data();
    p.o.data = o.data();
    p.lse = lse.data();
    p.k_cache.data = k.data();
    p.v_cache.data = v.data();
    p.k_new.data = kn.data();
    p.v_new.data = vn.data();
    p.cache_seqlens = seqlens.data();
    if (paged) p.page_table = table.data();
    fa::set_contiguous_layout(p);
  }
  // Rotary tables of `seqlen_ro` rows for `dim` rotated dims.
  void rotary(int dim, int seqlen_ro) {
    // At least one element, so that the tables are given (non-null) even for refused sizes.
    cos.assign(size_t(std::max<int64_t>(int64_t{seqlen_ro} * dim / 2, 1)), 0x3c00);
    sin.assign(cos.size(), 0);
    p.rotary_cos = cos.data();
    p.rotary_sin = sin.data();
    p.rotary_dim = dim;
    p.seqlen_ro = seqlen_ro;
  }
  // An e4m3 cache (the uint16 buffers hold it with room to spare: strides are in elements).
  void fp8(fa::KvScaleLayout layout = fa::KvScaleLayout::per_tensor) {
    p.cache_dtype = fa::DType::e4m3;
    p.k_scale = k_scale.data();
    p.v_scale = v_scale.data();
    p.kv_scale_layout = layout;
  }
  fa::Status indices() const {
    return fa::check_decode_indices(p, seqlens.data(), p.page_table ? table.data() : nullptr,
                                    p.cache_batch_idx ? batch_idx.data() : nullptr);
  }
};

struct Rule {
  const char* name;
  bool paged;
  std::function<void(HostDecode&)> mutate;
  const char* says;
};

// `s` refuses the argument the way `rule` says it does.
void expect_refused_as_rule_says(const fa::Status& s, const Rule& rule) {
  EXPECT_EQ(s.code, fa::StatusCode::invalid_argument) << s.message;
  EXPECT_NE(s.message.find(rule.says), std::string::npos) << "message was \"" << s.message << "\"";
}

const std::vector<Rule>& shape_rules() {
  static const std::vector<Rule> r = {
      {"bad_dtype", false, [](HostDecode& h) { h.p.dtype = static_cast<fa::DType>(9); },
       "dtype: must be bf16 or fp16"},
      {"batch_zero", false, [](HostDecode& h) { h.p.batch = 0; }, "batch: must be positive"},
      {"batch_over_grid", false, [](HostDecode& h) { h.p.batch = 70000; },
       "batch: must be <= 65535"},
      {"heads_q_zero", false, [](HostDecode& h) { h.p.heads_q = 0; }, "heads_q: must be positive"},
      {"heads_kv_zero", false, [](HostDecode& h) { h.p.heads_kv = 0; },
       "heads_kv: must be positive"},
      {"head_dim_zero", false, [](HostDecode& h) { h.p.head_dim = 0; },
       "head_dim: must be positive"},
      {"rows_over_int32", false,
       [](HostDecode& h) {
         h.p.batch = 65535;
         h.p.seqlen_q = 16;
         h.p.heads_q = 4096;
       },
       "batch: batch * seqlen_q * heads_q must be < 2^31"},
      {"seqlen_q_zero", false, [](HostDecode& h) { h.p.seqlen_q = 0; },
       "seqlen_q: must be in [1, 16]"},
      {"seqlen_q_17", false, [](HostDecode& h) { h.p.seqlen_q = 17; },
       "seqlen_q: must be in [1, 16]"},
      {"gqa_not_multiple", false, [](HostDecode& h) { h.p.heads_kv = 3; },
       "heads_q: must be a multiple of heads_kv"},
      {"head_dim_80", false, [](HostDecode& h) { h.p.head_dim = 80; },
       "head_dim: decode supports 64, 96, 128, 192 or 256, got 80"},
      {"scale_nan", false, [](HostDecode& h) { h.p.softmax_scale = NAN; },
       "softmax_scale: must be finite"},
      {"softcap_negative", false, [](HostDecode& h) { h.p.softcap = -1.f; },
       "softcap: must be >= 0 (0: off)"},
      {"softcap_inf", false, [](HostDecode& h) { h.p.softcap = INFINITY; },
       "softcap: must be finite"},
      {"softcap_nan", false, [](HostDecode& h) { h.p.softcap = NAN; }, "softcap: must be finite"},
      {"window_left", false, [](HostDecode& h) { h.p.window_left = -2; },
       "window_left: must be >= -1"},
      {"window_right", false, [](HostDecode& h) { h.p.window_right = -2; },
       "window_right: must be >= -1"},
      {"causal_window_right", false,
       [](HostDecode& h) {
         h.p.causal = true;
         h.p.window_right = 3;
       },
       "window_right: must be -1 or 0 when causal"},
      {"no_cache_seqlens", false, [](HostDecode& h) { h.p.cache_seqlens = nullptr; },
       "cache_seqlens: must not be null"},
      {"num_splits_negative", false, [](HostDecode& h) { h.p.num_splits = -1; },
       "num_splits: must be in [0, 128]"},
      {"num_splits_too_many", false, [](HostDecode& h) { h.p.num_splits = 129; },
       "num_splits: must be in [0, 128]"},
      {"page_size_zero", true, [](HostDecode& h) { h.p.page_size = 0; }, "page_size: must be >= 1"},
      {"num_pages_zero", true, [](HostDecode& h) { h.p.num_pages = 0; }, "num_pages: must be >= 1"},
      {"max_pages_zero", true, [](HostDecode& h) { h.p.max_pages = 0; }, "max_pages: must be >= 1"},
      {"page_table_stride_short", true, [](HostDecode& h) { h.p.page_table_stride = 7; },
       "page_table_stride: must be 0 or >= max_pages"},
      {"paged_capacity_overflow", true,
       [](HostDecode& h) {
         h.p.max_pages = 1 << 20;
         h.p.page_size = 1 << 12;
         h.p.page_table_stride = 0;
       },
       "max_pages: max_pages * page_size must fit in int32"},
      {"paged_batch_idx", true, [](HostDecode& h) { h.p.cache_batch_idx = h.batch_idx.data(); },
       "cache_batch_idx: not supported with a page_table"},
      {"cache_seqlen_zero", false, [](HostDecode& h) { h.p.cache_seqlen = 0; },
       "cache_seqlen: must be >= 1"},
      {"cache_batch_negative", false, [](HostDecode& h) { h.p.cache_batch = -1; },
       "cache_batch: must be >= 0"},
      {"cache_batch_too_small", false, [](HostDecode& h) { h.p.cache_batch = 2; },
       "cache_batch: 2 rows cannot serve batch 3"},
      {"seqlen_new_negative", false, [](HostDecode& h) { h.p.seqlen_new = -1; },
       "seqlen_new: must be >= 0"},
      {"k_new_without_v_new", false, [](HostDecode& h) { h.p.v_new.data = nullptr; },
       "k_new/v_new: give both or neither"},
      {"k_new_with_zero_length", false, [](HostDecode& h) { h.p.seqlen_new = 0; },
       "seqlen_new: must be >= 1 when k_new/v_new are given"},
      {"seqlen_new_without_k_new", false,
       [](HostDecode& h) {
         h.p.k_new.data = nullptr;
         h.p.v_new.data = nullptr;
       },
       "k_new/v_new: must be given when seqlen_new > 0"},
      {"seqlen_new_over_capacity", false, [](HostDecode& h) { h.p.seqlen_new = 65; },
       "seqlen_new: 65 exceeds the cache capacity 64"},
      {"rotary_cos_without_sin", false,
       [](HostDecode& h) {
         h.rotary(32, 64);
         h.p.rotary_sin = nullptr;
       },
       "rotary_cos/rotary_sin: give both or neither"},
      {"rotary_sin_without_cos", true,
       [](HostDecode& h) {
         h.rotary(32, 64);
         h.p.rotary_cos = nullptr;
       },
       "rotary_cos/rotary_sin: give both or neither"},
      {"rotary_dim_without_tables", false, [](HostDecode& h) { h.p.rotary_dim = 32; },
       "rotary_dim: must be 0 without rotary_cos/rotary_sin, got 32"},
      {"seqlen_ro_without_tables", false, [](HostDecode& h) { h.p.seqlen_ro = 100; },
       "seqlen_ro: must be 0 without rotary_cos/rotary_sin, got 100"},
      {"rotary_dim_zero", false, [](HostDecode& h) { h.rotary(0, 64); },
       "rotary_dim: must be even and in [2, head_dim = 64] with rotary_cos/rotary_sin, got 0"},
      {"rotary_dim_odd", false, [](HostDecode& h) { h.rotary(31, 64); },
       "rotary_dim: must be even and in [2, head_dim = 64] with rotary_cos/rotary_sin, got 31"},
      {"rotary_dim_over_head_dim", true, [](HostDecode& h) { h.rotary(66, 64); },
       "rotary_dim: must be even and in [2, head_dim = 64] with rotary_cos/rotary_sin, got 66"},
      {"rotary_dim_negative", false, [](HostDecode& h) { h.rotary(-2, 64); },
       "rotary_dim: must be even and in [2, head_dim = 64]"},
      {"seqlen_ro_zero", false, [](HostDecode& h) { h.rotary(32, 0); },
       "seqlen_ro: must be >= 1 with rotary_cos/rotary_sin, got 0"},
      // FP8 KV cache (decode.h): e4m3 is the caches' type only, with both scales.
      {"q_e4m3", false, [](HostDecode& h) { h.p.dtype = fa::DType::e4m3; },
       "dtype: must be bf16 or fp16 (q, o, k_new, v_new), got e4m3; an FP8 KV cache is "
       "cache_dtype = e4m3"},
      {"q_e4m3_with_e4m3_cache", true,
       [](HostDecode& h) {
         h.fp8();
         h.p.dtype = fa::DType::e4m3;
       },
       "dtype: must be bf16 or fp16 (q, o, k_new, v_new), got e4m3"},
      {"cache_dtype_other_16bit", false, [](HostDecode& h) { h.p.cache_dtype = fa::DType::fp16; },
       "cache_dtype: must be unset, dtype (bf16) or e4m3, got fp16"},
      {"cache_dtype_unknown", false,
       [](HostDecode& h) { h.p.cache_dtype = static_cast<fa::DType>(9); },
       "cache_dtype: must be unset, dtype (bf16) or e4m3, got unknown"},
      {"e4m3_without_k_scale", false,
       [](HostDecode& h) {
         h.fp8();
         h.p.k_scale = nullptr;
       },
       "k_scale: required with cache_dtype e4m3 (fp32, 1 value (per_tensor))"},
      {"e4m3_without_v_scale", true,
       [](HostDecode& h) {
         h.fp8(fa::KvScaleLayout::per_kv_head);
         h.p.v_scale = nullptr;
       },
       "v_scale: required with cache_dtype e4m3 (fp32, heads_kv = 2 values (per_kv_head))"},
      {"k_scale_without_e4m3", false, [](HostDecode& h) { h.p.k_scale = h.k_scale.data(); },
       "k_scale: only with cache_dtype e4m3 (the cache is bf16)"},
      {"v_scale_without_e4m3", false,
       [](HostDecode& h) {
         h.p.cache_dtype = fa::DType::bf16;
         h.p.v_scale = h.v_scale.data();
       },
       "v_scale: only with cache_dtype e4m3 (the cache is bf16)"},
      {"kv_scale_layout_unknown", false,
       [](HostDecode& h) {
         h.fp8();
         h.p.kv_scale_layout = static_cast<fa::KvScaleLayout>(2);
       },
       "kv_scale_layout: must be per_tensor or per_kv_head, got 2"},
      {"e4m3_head_dim_160", true,
       [](HostDecode& h) {
         h.fp8();
         h.p.head_dim = 160;
       },
       "head_dim: decode supports 64, 96, 128, 192 or 256, got 160"},
  };
  return r;
}

const std::vector<Rule>& index_rules() {
  static const std::vector<Rule> r = {
      {"seqlen_negative", false, [](HostDecode& h) { h.seqlens[1] = -1; },
       "cache_seqlens[1]: must be >= 0"},
      {"seqlen_over_capacity", false, [](HostDecode& h) { h.seqlens[2] = 63; },
       "cache_seqlens[2]: 63 + seqlen_new 2 exceeds the cache capacity 64"},
      {"paged_seqlen_over_capacity", true, [](HostDecode& h) { h.seqlens[0] = 63; },
       "cache_seqlens[0]: 63 + seqlen_new 2 exceeds the cache capacity 64 (max_pages * page_size)"},
      {"page_negative", true, [](HostDecode& h) { h.table[8 + 0] = -1; },
       "page_table[1][0]: page -1 is outside [0, num_pages = 20)"},
      {"page_too_large", true, [](HostDecode& h) { h.table[16 + 7] = 20; },
       "page_table[2][7]: page 20 is outside"},
      {"batch_idx_out_of_range", false,
       [](HostDecode& h) {
         h.p.cache_batch_idx = h.batch_idx.data();
         h.batch_idx[1] = 3;
       },
       "cache_batch_idx[1]: 3 is outside [0, cache_batch = 3)"},
      {"batch_idx_duplicate_with_append", false,
       [](HostDecode& h) {
         h.p.cache_batch_idx = h.batch_idx.data();
         h.batch_idx[2] = 2;
       },
       "cache_batch_idx[2]: cache row 2 is also used by entry 0"},
      {"rotary_table_too_short", false, [](HostDecode& h) { h.rotary(64, 61); },
       "cache_seqlens[2]: 60 uses rotary positions up to 61, beyond the tables' seqlen_ro 61 "
       "rows"},
      {"paged_rotary_table_too_short", true, [](HostDecode& h) { h.rotary(16, 11); },
       "cache_seqlens[0]: 10 uses rotary positions up to 11, beyond the tables' seqlen_ro 11 "
       "rows"},
  };
  return r;
}

// The scales' values (with check_indices, on host copies): finite and > 0, every one the layout
// says is there.
const std::vector<Rule>& scale_rules() {
  static const std::vector<Rule> r = {
      {"k_scale_zero", false,
       [](HostDecode& h) {
         h.fp8();
         h.k_scale[0] = 0.f;
       },
       "k_scale[0]: must be finite and > 0, got 0.000000"},
      {"k_scale_negative", true,
       [](HostDecode& h) {
         h.fp8();
         h.k_scale[0] = -1.f;
       },
       "k_scale[0]: must be finite and > 0, got -1.000000"},
      {"v_scale_inf", false,
       [](HostDecode& h) {
         h.fp8();
         h.v_scale[0] = INFINITY;
       },
       "v_scale[0]: must be finite and > 0"},
      {"per_head_last_scale_nan", true,
       [](HostDecode& h) {
         h.fp8(fa::KvScaleLayout::per_kv_head);
         h.v_scale[1] = NAN;  // heads_kv = 2: the second value is read
       },
       "v_scale[1]: must be finite and > 0"},
  };
  return r;
}

class DecodeShapeRule : public ::testing::TestWithParam<size_t> {};
TEST_P(DecodeShapeRule, RefusedWithNamedArgument) {
  const Rule& rule = shape_rules()[GetParam()];
  HostDecode h(rule.paged);
  ASSERT_TRUE(fa::check_decode_shapes(h.p).ok()) << "the base problem must be valid";
  rule.mutate(h);
  const fa::Status s = fa::check_decode_shapes(h.p);
  expect_refused_as_rule_says(s, rule);
  // can_implement and decode() report the same rule first, and write nothing.
  EXPECT_EQ(fa::can_implement(h.p).message, s.message);
  EXPECT_EQ(fa::decode(h.p).message, s.message);
  for (uint16_t x : h.o) ASSERT_EQ(x, 0xFFFF);
}
INSTANTIATE_TEST_SUITE_P(AllRules, DecodeShapeRule,
                         ::testing::Range<size_t>(0, shape_rules().size()), [](const auto& info) {
                           return std::string(shape_rules()[info.param].name);
                         });

class DecodeScaleRule : public ::testing::TestWithParam<size_t> {};
TEST_P(DecodeScaleRule, RefusedWithNamedEntry) {
  const Rule& rule = scale_rules()[GetParam()];
  HostDecode h(rule.paged);
  rule.mutate(h);
  ASSERT_TRUE(fa::check_decode_shapes(h.p).ok()) << fa::check_decode_shapes(h.p).message;
  const fa::Status s = fa::check_decode_scales(h.p, h.k_scale.data(), h.v_scale.data());
  expect_refused_as_rule_says(s, rule);
}
INSTANTIATE_TEST_SUITE_P(AllRules, DecodeScaleRule,
                         ::testing::Range<size_t>(0, scale_rules().size()), [](const auto& info) {
                           return std::string(scale_rules()[info.param].name);
                         });

// Per tensor reads one value of each scale: the second (per-head) value is never looked at.
TEST(DecodeScales, PerTensorReadsOneValue) {
  HostDecode h(false);
  h.fp8();
  h.v_scale[1] = NAN;
  EXPECT_TRUE(fa::check_decode_shapes(h.p).ok());
  EXPECT_TRUE(fa::check_decode_scales(h.p, h.k_scale.data(), h.v_scale.data()).ok());
  h.p.kv_scale_layout = fa::KvScaleLayout::per_kv_head;
  EXPECT_FALSE(fa::check_decode_scales(h.p, h.k_scale.data(), h.v_scale.data()).ok());
}

class DecodeIndexRule : public ::testing::TestWithParam<size_t> {};
TEST_P(DecodeIndexRule, RefusedWithNamedEntry) {
  const Rule& rule = index_rules()[GetParam()];
  HostDecode h(rule.paged);
  ASSERT_TRUE(h.indices().ok()) << "the base problem must be valid: " << h.indices().message;
  rule.mutate(h);
  ASSERT_TRUE(fa::check_decode_shapes(h.p).ok());
  const fa::Status s = h.indices();
  expect_refused_as_rule_says(s, rule);
}
INSTANTIATE_TEST_SUITE_P(AllRules, DecodeIndexRule,
                         ::testing::Range<size_t>(0, index_rules().size()), [](const auto& info) {
                           return std::string(index_rules()[info.param].name);
                         });

// Entries past the pages a sequence reads are never looked at (padding such as -1 is fine), and
// a duplicated cache row is fine when nothing is appended.
TEST(DecodeIndices, UnreadPagesAndReadOnlySharingAreAccepted) {
  HostDecode paged(true);
  paged.table[7] = -1;  // batch 0 reads ceil((10 + 2) / 8) = 2 pages
  EXPECT_TRUE(paged.indices().ok()) << paged.indices().message;
  HostDecode shared(false);
  shared.p.cache_batch_idx = shared.batch_idx.data();
  shared.batch_idx = {1, 1, 1};
  shared.p.k_new.data = shared.p.v_new.data = nullptr;
  shared.p.seqlen_new = 0;
  EXPECT_TRUE(fa::check_decode_shapes(shared.p).ok());
  EXPECT_TRUE(shared.indices().ok()) << shared.indices().message;
}

// The rotary tables must cover every position used: keys of k_new at cache_seqlens + i; query
// tokens at cache_seqlens + i when causal or local, all at cache_seqlens otherwise.
TEST(DecodeIndices, RotaryPositionsFollowTheMask) {
  HostDecode h(false);  // cache_seqlens {10, 0, 60}, seqlen_q 2
  h.p.k_new.data = h.p.v_new.data = nullptr;
  h.p.seqlen_new = 0;
  h.rotary(64, 61);  // positions 0..60
  EXPECT_TRUE(fa::check_decode_shapes(h.p).ok());
  EXPECT_TRUE(h.indices().ok()) << h.indices().message;  // not causal: queries at 60 only
  // Causal: queries at 60 and 61.
  h.p.causal = true;
  EXPECT_NE(h.indices().message.find("cache_seqlens[2]: 60 uses rotary positions up to 61"),
            std::string::npos)
      << h.indices().message;
  h.p.causal = false;
  h.p.window_left = 100;  // local: per token too
  EXPECT_FALSE(h.indices().ok());
  h.p.window_left = -1;
  h.p.window_right = 0;
  EXPECT_FALSE(h.indices().ok());
  h.rotary(64, 62);
  EXPECT_TRUE(h.indices().ok()) << h.indices().message;
  h.p.seqlen_new = 3;  // keys at 60..62
  h.p.k_new.data = h.kn.data();
  h.p.v_new.data = h.vn.data();
  EXPECT_NE(h.indices().message.find("up to 62, beyond the tables' seqlen_ro 62"),
            std::string::npos)
      << h.indices().message;
}

// An e4m3 cache passes the shape rules (both layouts, paged and contiguous); an e5m2 cache is
// `unsupported` (no kernel), after the shape rules and before any memory is looked at.
TEST(DecodeValidation, Fp8CacheIsE4m3Only) {
  for (bool paged : {false, true})
    for (auto layout : {fa::KvScaleLayout::per_tensor, fa::KvScaleLayout::per_kv_head}) {
      HostDecode h(paged);
      h.fp8(layout);
      EXPECT_TRUE(fa::check_decode_shapes(h.p).ok()) << fa::check_decode_shapes(h.p).message;
      EXPECT_TRUE(fa::check_decode_scales(h.p, h.k_scale.data(), h.v_scale.data()).ok());
      EXPECT_TRUE(h.indices().ok());
    }
  HostDecode h(false);
  h.fp8();
  h.p.cache_dtype = fa::DType::e5m2;
  const fa::Status s = fa::check_decode_shapes(h.p);
  EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
  EXPECT_NE(s.message.find("cache_dtype: e5m2 has no decode kernel"), std::string::npos)
      << s.message;
  EXPECT_EQ(fa::can_implement(h.p).message, s.message);
  EXPECT_EQ(fa::decode(h.p).code, fa::StatusCode::unsupported);
  h.p.seqlen_q = 0;  // a broken rule is reported before the missing kernel
  EXPECT_EQ(fa::check_decode_shapes(h.p).code, fa::StatusCode::invalid_argument);
}

// Every decode head dim passes the shape rules with a 16-bit and an e4m3 cache, paged and
// contiguous (the shape rules read no memory: the d 64 buffers serve as placeholders).
TEST(DecodeValidation, EveryDecodeHeadDimPassesTheShapeRules) {
  for (int d : {64, 96, 128, 192, 256})
    for (bool paged : {false, true})
      for (bool e4m3 : {false, true}) {
        HostDecode h(paged);
        if (e4m3) h.fp8();
        h.p.head_dim = d;
        const fa::Status s = fa::check_decode_shapes(h.p);
        EXPECT_TRUE(s.ok()) << "d " << d << " paged " << paged << " e4m3 " << e4m3 << ": "
                            << s.message;
      }
}

// The FP8 cache's memory rules: the scales' alignment (naming the count the layout asks for),
// 16-byte vectors of e4m3 (16 elements) in the cache strides, no output over a scale, no scale
// inside the cache the append writes.
TEST(DecodeValidation, Fp8MemoryRules) {
  const auto says = [](HostDecode& h, const std::string& what) {
    const std::string m = fa::can_implement(h.p).message;
    EXPECT_NE(m.find(what), std::string::npos) << "message was \"" << m << "\"";
  };
  HostDecode a(false);
  a.fp8();
  a.p.k_scale = reinterpret_cast<const float*>(reinterpret_cast<const char*>(a.k_scale.data()) + 2);
  says(a, "k_scale: must be a 4-byte aligned fp32 array of 1 value (per_tensor)");
  HostDecode b(true);
  b.fp8(fa::KvScaleLayout::per_kv_head);
  b.p.v_scale = reinterpret_cast<const float*>(reinterpret_cast<const char*>(b.v_scale.data()) + 1);
  says(b, "v_scale: must be a 4-byte aligned fp32 array of heads_kv = 2 values (per_kv_head)");
  HostDecode c(false);
  c.fp8();
  c.p.k_cache.stride[2] = 72;  // 16 bytes of bf16, not of e4m3
  says(c, "k_cache.stride[2]: must be a multiple of 16 elements (16 bytes), got 72");
  HostDecode d(false);
  d.fp8(fa::KvScaleLayout::per_kv_head);
  d.p.k_scale = d.lse.data() + 4;
  says(d, "lse: overlaps input k_scale");
  HostDecode e(true);
  e.fp8();
  e.p.k_scale = reinterpret_cast<const float*>(e.v.data());
  says(e, "k_scale: overlaps v_cache, which the append writes");
}

// decode_check_errors' report of a record read back from the device (decode_error_status): the
// error of the first kind in DecodeErrorKind's order (a bad length before the pages it makes look
// bad) in check_decode_indices' words, the other kinds named, nothing when no entry is claimed.
TEST(DecodeErrors, RecordsAreReportedRootCauseFirst) {
  fa::DecodeErrorRecord r;
  EXPECT_TRUE(fa::decode_error_status(r).ok());
  const auto says = [](const fa::DecodeErrorRecord& rec, const std::string& what) {
    const fa::Status s = fa::decode_error_status(rec);
    EXPECT_EQ(s.code, fa::StatusCode::invalid_argument);
    EXPECT_EQ(s.message.rfind(what, 0), 0u) << "message was \"" << s.message << "\"";
    return s.message;
  };
  const auto set = [](fa::DecodeErrorRecord& rec, int kind, int b, int index, int value,
                      int limit, int seqlen_new) {
    rec.by_kind[kind] = {1, b, index, value, limit, seqlen_new};
  };
  fa::DecodeErrorRecord page;
  set(page, fa::kDecodeErrorPage, 1, 3, 99999, 20, 0);
  const std::string m = says(
      page, "page_table[1][3]: page 99999 is outside [0, num_pages = 20) and was read as zeros "
            "(met by a decode kernel with check_indices off; that call's result is unspecified)");
  EXPECT_EQ(m.find("also bad"), std::string::npos) << m;

  fa::DecodeErrorRecord len = page;  // a length error and the page error it caused
  set(len, fa::kDecodeErrorSeqlen, 2, 0, 4096, 4096, 1);
  const std::string both =
      says(len, "cache_seqlens[2]: 4096 + seqlen_new 1 exceeds the cache capacity 4096 (met by");
  EXPECT_NE(both.find("; also bad since the last check: page_table"), std::string::npos) << both;
  set(len, fa::kDecodeErrorSeqlen, 2, 0, -3, 4096, 1);
  says(len, "cache_seqlens[2]: must be >= 0, got -3 (met by");

  fa::DecodeErrorRecord row = page;
  set(row, fa::kDecodeErrorCacheRow, 0, 0, -1, 5, 0);
  const std::string two = says(row, "cache_batch_idx[0]: -1 is outside [0, cache_batch = 5)");
  EXPECT_NE(two.find("also bad since the last check: page_table"), std::string::npos) << two;
  set(row, fa::kDecodeErrorSeqlen, 4, 0, 7, 6, 0);
  const std::string all = says(row, "cache_seqlens[4]: 7 + seqlen_new 0 exceeds");
  EXPECT_NE(all.find("also bad since the last check: cache_batch_idx, page_table"),
            std::string::npos)
      << all;
}

// Without a device there is nothing to check: unsupported, as decode() is. With one (these CPU
// tests launch no decode), nothing was recorded.
TEST(DecodeErrors, CheckNeedsADevice) {
  const fa::Status s = fa::decode_check_errors();
  if (flashattn::testing::have_gpu()) {
    EXPECT_TRUE(s.ok()) << s.message;
  } else {
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_NE(s.message.find("decode_check_errors: needs a CUDA device"), std::string::npos)
        << s.message;
  }
}

TEST(DecodeValidation, HostMemoryIsRefused) {
  HostDecode h(false);
  const fa::Status s = fa::can_implement(h.p);
  if (flashattn::testing::have_gpu()) {
    EXPECT_EQ(s.code, fa::StatusCode::invalid_argument) << s.message;
    EXPECT_NE(s.message.find("decode needs device memory, got host memory"), std::string::npos)
        << s.message;
  } else {
    EXPECT_EQ(s.code, fa::StatusCode::unsupported) << s.message;
    EXPECT_NE(s.message.find("decode: needs a CUDA device"), std::string::npos) << s.message;
  }
  EXPECT_EQ(fa::decode(h.p).code, s.code);
  for (uint16_t x : h.o) ASSERT_EQ(x, 0xFFFF);
}

TEST(DecodeValidation, MemoryRulesComeBeforeTheDevice) {
  HostDecode h(false);
  h.p.q.stride[3] = 2;
  EXPECT_NE(fa::can_implement(h.p).message.find("q.stride[3]"), std::string::npos);
  HostDecode a(false);
  a.p.o.data = a.q.data();
  EXPECT_NE(fa::can_implement(a.p).message.find("o: overlaps input q"), std::string::npos)
      << fa::can_implement(a.p).message;
  HostDecode m(true);
  m.p.k_new.data = m.k.data();
  EXPECT_NE(fa::can_implement(m.p).message.find("k_new: overlaps k_cache"), std::string::npos)
      << fa::can_implement(m.p).message;
  HostDecode u(false);
  u.p.lse = reinterpret_cast<float*>(reinterpret_cast<char*>(u.lse.data()) + 2);
  EXPECT_NE(fa::can_implement(u.p).message.find("lse: must be 4-byte aligned"), std::string::npos);
  HostDecode r(false);
  r.rotary(64, 64);
  r.p.rotary_cos = reinterpret_cast<const char*>(r.cos.data()) + 1;
  EXPECT_NE(fa::can_implement(r.p).message.find("rotary_cos: must be 2-byte aligned"),
            std::string::npos)
      << fa::can_implement(r.p).message;
  HostDecode ra(true);
  ra.rotary(64, 64);
  ra.p.o.data = ra.sin.data();
  EXPECT_NE(fa::can_implement(ra.p).message.find("o: overlaps input rotary_sin"), std::string::npos)
      << fa::can_implement(ra.p).message;
}

}  // namespace
