// Test fixtures shared by the CPU suites: a seeded attention problem in host memory with optional
// padded or head-major layouts, NaN-poisoned outputs, and the run's seed.
//
// The seed is fresh every run (std::random_device) unless FLASHATTN_SEED is set; it is printed once
// and recorded as the gtest property "seed" of every test that draws data. Each test derives its
// own stream from the seed and its full name, so `FLASHATTN_SEED=<n> --gtest_filter=<test>`
// reproduces one test alone.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_dtype.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"

namespace fa_test {

namespace fa = flashattn;

inline uint64_t run_seed() {
  static const uint64_t seed = [] {
    uint64_t s = 0;
    if (const char* env = std::getenv("FLASHATTN_SEED"); env != nullptr && *env != '\0') {
      s = std::strtoull(env, nullptr, 0);
    } else {
      std::random_device rd;
      s = (uint64_t{rd()} << 32) ^ rd();
    }
    std::cout << "[flashattn] seed " << s << " (FLASHATTN_SEED=" << s << " reproduces this run)\n";
    return s;
  }();
  return seed;
}

// FNV-1a: stable across compilers, unlike std::hash.
inline uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A seed for the current test's `salt`-th draw; records the run seed on the test.
inline uint64_t test_seed(uint64_t salt = 0) {
  const uint64_t base = run_seed();
  std::string name = "?";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name = std::string(info->test_suite_name()) + "." + info->name();
    ::testing::Test::RecordProperty("seed", std::to_string(base));
  }
  return fnv1a(name, base ^ (salt * 0x9e3779b97f4a7c15ull));
}

enum class Layout {
  dense,        // (batch, seqlen, heads, dim) packed
  padded,       // row and head strides padded beyond the data
  heads_major,  // (batch, heads, seqlen, dim) in memory, rows padded
};

struct Shape {
  fa::DType dtype = fa::DType::bf16;
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1;
  int head_dim = 64, head_dim_v = 0;  // 0: head_dim
  bool causal = false;
  int window_left = -1, window_right = -1;
  float softmax_scale = 0.f;
  float softcap = 0.f;  // ForwardParams::softcap
  float q_sigma = 1.f;  // > 1 makes large logits, exercising the online-softmax rescale
  Layout q_layout = Layout::dense, kv_layout = Layout::dense, o_layout = Layout::dense;
  bool with_lse = true;
};

inline constexpr uint16_t kPoison = 0xFFFF;  // a NaN in both bf16 and fp16

// Host tensors and the ForwardParams that point at them. Not copyable (params hold pointers into
// the buffers); moving keeps the buffers where they are.
class Case {
 public:
  Case(const Shape& s, uint64_t seed) : shape(s) {
    fa::ForwardParams& p = params;
    p.dtype = s.dtype;
    p.batch = s.batch;
    p.seqlen_q = s.seqlen_q;
    p.seqlen_k = s.seqlen_k;
    p.heads_q = s.heads_q;
    p.heads_kv = s.heads_kv;
    p.head_dim = s.head_dim;
    p.head_dim_v = s.head_dim_v;
    p.causal = s.causal;
    p.window_left = s.window_left;
    p.window_right = s.window_right;
    p.softmax_scale = s.softmax_scale;
    p.softcap = s.softcap;
    const int dv = s.head_dim_v > 0 ? s.head_dim_v : s.head_dim;
    q.assign(layout(p.q.stride, s.q_layout, s.seqlen_q, s.heads_q, s.head_dim), 0);
    k.assign(layout(p.k.stride, s.kv_layout, s.seqlen_k, s.heads_kv, s.head_dim), 0);
    v.assign(layout(p.v.stride, s.kv_layout, s.seqlen_k, s.heads_kv, dv), 0);
    o.assign(layout(p.o.stride, s.o_layout, s.seqlen_q, s.heads_q, dv), kPoison);
    lse.assign(size_t(s.batch) * s.heads_q * s.seqlen_q, std::numeric_limits<float>::quiet_NaN());
    // Padding is filled too: a kernel that reads it gets plausible numbers, not a crash.
    fa::reference::fill_normal(q.data(), std::ssize(q), s.dtype, seed ^ 0x51, s.q_sigma);
    fa::reference::fill_normal(k.data(), std::ssize(k), s.dtype, seed ^ 0x4b);
    fa::reference::fill_normal(v.data(), std::ssize(v), s.dtype, seed ^ 0x56);
    p.q.data = q.data();
    p.k.data = k.data();
    p.v.data = v.data();
    p.o.data = o.data();
    p.lse = s.with_lse ? lse.data() : nullptr;
  }
  Case(const Case&) = delete;
  Case& operator=(const Case&) = delete;

  int dv() const { return shape.head_dim_v > 0 ? shape.head_dim_v : shape.head_dim; }

  // Element (b, s, h, i) of q/k/v/o as float.
  static int64_t index(const int64_t (&st)[4], int b, int s, int h, int i) {
    return b * st[0] + s * st[1] + h * st[2] + i;
  }
  float get(const std::vector<uint16_t>& t, const int64_t (&st)[4], int b, int s, int h,
            int i) const {
    return fa::load_as_float(t.data(), index(st, b, s, h, i), shape.dtype);
  }

  void poison() {
    std::fill(o.begin(), o.end(), kPoison);
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
  }

  // True when every element of `o` outside the logical tensor still holds the poison.
  bool padding_untouched() const {
    std::vector<bool> logical(o.size(), false);
    for (int b = 0; b < shape.batch; ++b)
      for (int s = 0; s < shape.seqlen_q; ++s)
        for (int h = 0; h < shape.heads_q; ++h)
          for (int i = 0; i < dv(); ++i) logical[size_t(index(params.o.stride, b, s, h, i))] = true;
    for (size_t j = 0; j < o.size(); ++j)
      if (!logical[j] && o[j] != kPoison) return false;
    return true;
  }

  Shape shape;
  fa::ForwardParams params;
  std::vector<uint16_t> q, k, v, o;
  std::vector<float> lse;

 private:
  // Fills `stride` for the layout and returns the elements the buffer needs.
  size_t layout(int64_t (&stride)[4], Layout l, int seqlen, int heads, int dim) const {
    stride[3] = 1;
    switch (l) {
      case Layout::dense: fa::set_contiguous_strides(stride, seqlen, heads, dim); break;
      case Layout::padded:
        stride[2] = dim + 8;
        stride[1] = heads * stride[2] + 24;
        stride[0] = int64_t{seqlen} * stride[1] + 16;
        break;
      case Layout::heads_major:
        stride[1] = dim + 8;
        stride[2] = int64_t{seqlen} * stride[1];
        stride[0] = heads * stride[2];
        break;
    }
    // At least one element so that empty tensors (seqlen_k = 0) still have a valid pointer.
    return std::max<size_t>(1, size_t(shape.batch) * size_t(stride[0]));
  }
};

}  // namespace fa_test
