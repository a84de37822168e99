// FP8 (e4m3) forward cases shared by the CPU suite and the GPU suite: seeded e4m3 q, k, v in host
// memory (N(0, 1) or FlashAttention-3's outlier distribution), (batch, heads_kv) descales,
// optional padded rows and variable length, NaN-poisoned outputs, and the FP8 oracle applied to
// every sequence (reference::check: ref = fp64 attention of the dequantised inputs, pt = the same
// math in bf16 with P rounded to e4m3; reference.h). The seed is attention_case.h's: fresh every
// run, printed, FLASHATTN_SEED reproduces it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention_case.h"
#include "common/host_dtype.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"

namespace fa_test {

enum class Descales {
  none,    // null pointers: 1.0
  random,  // uniform in [0.5, 2]
  exact,   // k/8 for k in 4..16: descale·x is exact in bf16 and fp16 for every e4m3 x
  // The user's way (and flashattn-bench's): the data drawn in bf16, then quantised per (batch,
  // KV head) with descale = amax / 448 (reference::quantize_e4m3_per_head). Dense layouts only.
  amax,
};

enum class Dist { normal, outliers };

struct Fp8Shape {
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 128;
  bool causal = false;
  int window_left = -1, window_right = -1;
  fa::DType out_dtype = fa::DType::bf16;
  Descales descales = Descales::random;
  Dist dist = Dist::normal;
  float q_sigma = 1.f;  // > 1 makes large logits, exercising the online-softmax rescale
  bool padded = false;  // rows and heads padded (16-element multiples, e4m3's vectors)
  // Variable length: (seqlen_q, seqlen_k) per sequence; batch, seqlen_q and seqlen_k are then
  // set from it (the longest sequence).
  std::vector<std::pair<int, int>> lens = {};
};

// "b2_q113_k203_h4x2_d64_bf16_causal": a gtest name (letters, digits, '_'). Built with appends
// only: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
inline std::string fp8_name(const Fp8Shape& s) {
  std::string n;
  auto num = [&](const char* tag, int x) { n.append(tag).append(std::to_string(x)); };
  int sq = s.seqlen_q, sk = s.seqlen_k;
  if (s.lens.empty()) {
    num("b", s.batch);
  } else {  // the longest sequences, as the case sets seqlen_q and seqlen_k
    num("varlen", static_cast<int>(s.lens.size()));
    sq = sk = 0;
    for (auto [lq, lk] : s.lens) sq = std::max(sq, lq), sk = std::max(sk, lk);
  }
  num("_q", sq);
  num("_k", sk);
  num("_h", s.heads_q);
  num("x", s.heads_kv);
  num("_d", s.head_dim);
  n.append("_").append(fa::dtype_name(s.out_dtype));
  if (s.causal) n.append("_causal");
  if (s.window_left >= 0 || s.window_right >= 0) {
    num("_win", s.window_left);
    num("_", s.window_right);
  }
  if (s.padded) n.append("_padded");
  if (s.q_sigma > 1.f) n.append("_big");
  if (s.dist == Dist::outliers) n.append("_outliers");
  if (s.descales == Descales::none) n.append("_nodescale");
  if (s.descales == Descales::exact) n.append("_exact");
  if (s.descales == Descales::amax) n.append("_amax");
  for (char& c : n)
    if (c == '-') c = 'm';
  return n;
}

inline constexpr uint16_t kPoison16 = 0xFFFF;  // NaN in bf16 and fp16

// Fills `stride` for a (batch, seqlen, heads, dim) tensor, dense or padded (rows and heads padded
// to 16-element multiples, e4m3's vectors), and returns the elements the buffer needs (at least
// 16, so that empty tensors still have a valid, aligned pointer).
inline size_t fp8_layout(int64_t (&stride)[4], bool padded, int batch, int seqlen, int heads,
                         int dim) {
  stride[3] = 1;
  if (padded) {
    stride[2] = dim + 16;
    stride[1] = heads * stride[2] + 32;
    stride[0] = int64_t{seqlen} * stride[1] + 16;
  } else {
    fa::set_contiguous_strides(stride, seqlen, heads, dim);
  }
  return std::max<size_t>(16, size_t(batch) * size_t(stride[0]));
}

// Host tensors of one FP8 problem and the ForwardParams that point at them (not copyable).
class Fp8Case {
 public:
  Fp8Case(Fp8Shape s, uint64_t seed) : shape(std::move(s)) {
    const bool packed = !shape.lens.empty();
    if (packed) {
      shape.batch = static_cast<int>(shape.lens.size());
      shape.seqlen_q = shape.seqlen_k = 0;
      cu_q.assign(1, 0);
      cu_k.assign(1, 0);
      for (auto [lq, lk] : shape.lens) {
        cu_q.push_back(cu_q.back() + lq);
        cu_k.push_back(cu_k.back() + lk);
        shape.seqlen_q = std::max(shape.seqlen_q, lq);
        shape.seqlen_k = std::max(shape.seqlen_k, lk);
      }
    }
    fa::ForwardParams& p = params;
    p.dtype = fa::DType::e4m3;
    p.out_dtype = shape.out_dtype;
    p.batch = shape.batch;
    p.seqlen_q = shape.seqlen_q;
    p.seqlen_k = shape.seqlen_k;
    p.heads_q = shape.heads_q;
    p.heads_kv = shape.heads_kv;
    p.head_dim = shape.head_dim;
    p.causal = shape.causal;
    p.window_left = shape.window_left;
    p.window_right = shape.window_right;
    // Varlen tensors are one batch of the packed tokens.
    const int nb = packed ? 1 : shape.batch;
    const int tq = packed ? cu_q.back() : shape.seqlen_q;
    const int tk = packed ? cu_k.back() : shape.seqlen_k;
    const int d = shape.head_dim;
    q.assign(layout(p.q.stride, nb, tq, shape.heads_q, d), 0);
    k.assign(layout(p.k.stride, nb, tk, shape.heads_kv, d), 0);
    v.assign(layout(p.v.stride, nb, tk, shape.heads_kv, d), 0);
    o.assign(layout(p.o.stride, nb, tq, shape.heads_q, d), kPoison16);
    lse.assign(std::max<size_t>(1, size_t(nb) * shape.heads_q * tq),
               std::numeric_limits<float>::quiet_NaN());
    // Padding is filled too: a kernel that reads it gets plausible numbers, not a crash.
    auto fill = [&](std::vector<uint8_t>& t, uint64_t salt, float sigma) {
      if (shape.dist == Dist::outliers) {
        fa::reference::fill_outliers(t.data(), std::ssize(t), fa::DType::e4m3, seed ^ salt, sigma);
      } else {
        fa::reference::fill_normal(t.data(), std::ssize(t), fa::DType::e4m3, seed ^ salt, sigma);
      }
    };
    fill(q, 0x51, shape.q_sigma);
    fill(k, 0x4b, 1.f);
    fill(v, 0x56, 1.f);
    if (shape.descales == Descales::amax) {
      EXPECT_FALSE(packed || shape.padded) << "Descales::amax takes dense batches only";
      quantise_from_bf16(seed);
    } else if (shape.descales != Descales::none) {
      std::mt19937_64 gen(seed ^ 0xde5ca1e);
      std::uniform_real_distribution<float> uniform(0.5f, 2.f);
      std::uniform_int_distribution<int> eighths(4, 16);
      for (auto* t : {&q_descale, &k_descale, &v_descale}) {
        t->resize(size_t(shape.batch) * shape.heads_kv);
        for (float& x : *t)
          x = shape.descales == Descales::exact ? eighths(gen) / 8.f : uniform(gen);
      }
    }
    if (shape.descales != Descales::none) {
      p.q_descale = q_descale.data();
      p.k_descale = k_descale.data();
      p.v_descale = v_descale.data();
    }
    p.q.data = q.data();
    p.k.data = k.data();
    p.v.data = v.data();
    p.o.data = o.data();
    p.lse = lse.data();
    if (packed) {
      p.cu_seqlens_q = cu_q.data();
      p.cu_seqlens_k = cu_k.data();
      p.total_q = cu_q.back();
      p.total_k = cu_k.back();
    }
  }
  Fp8Case(const Fp8Case&) = delete;
  Fp8Case& operator=(const Fp8Case&) = delete;

  bool varlen() const { return !shape.lens.empty(); }

  void poison() {
    std::fill(o.begin(), o.end(), kPoison16);
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
  }

  // The FP8 oracle on every sequence of `host` (params of this case's shape whose q, k, v, o,
  // lse and descales point at host copies): reference::check directly, or for a varlen case on a
  // batch-1 view of each sequence (offset pointers, its descale row, its LSE gathered from the
  // packed (heads_q, total_q) layout). Records gtest failures naming `what` and the sequence.
  void expect_oracle(const fa::ForwardParams& host, const std::string& what,
                     int sample_rows = 0) const {
    if (!varlen()) {
      expect_check(host, what, sample_rows);
      return;
    }
    for (int b = 0; b < shape.batch; ++b) {
      const auto [lq, lk] = shape.lens[size_t(b)];
      if (lq == 0) continue;
      fa::ForwardParams view = host;
      view.batch = 1;
      view.seqlen_q = lq;
      view.seqlen_k = lk;
      view.cu_seqlens_q = view.cu_seqlens_k = nullptr;
      view.total_q = view.total_k = 0;
      view.q.data = static_cast<const uint8_t*>(host.q.data) + cu_q[b] * host.q.stride[1];
      view.k.data = static_cast<const uint8_t*>(host.k.data) + cu_k[b] * host.k.stride[1];
      view.v.data = static_cast<const uint8_t*>(host.v.data) + cu_k[b] * host.v.stride[1];
      view.o.data = static_cast<uint16_t*>(host.o.data) + cu_q[b] * host.o.stride[1];
      for (auto [ptr, t] : {std::pair{&view.q_descale, host.q_descale},
                            {&view.k_descale, host.k_descale},
                            {&view.v_descale, host.v_descale}}) {
        *ptr = t != nullptr ? t + int64_t{b} * shape.heads_kv : nullptr;
      }
      std::vector<float> seq_lse(size_t(shape.heads_q) * lq);
      if (host.lse != nullptr) {
        for (int h = 0; h < shape.heads_q; ++h)
          for (int i = 0; i < lq; ++i)
            seq_lse[size_t(h) * lq + i] = host.lse[int64_t(h) * cu_q.back() + cu_q[b] + i];
        view.lse = seq_lse.data();
      }
      expect_check(view, what + " sequence " + std::to_string(b), sample_rows);
    }
  }

  // Elements of o outside the logical tensor that lost their poison (writes out of bounds).
  int64_t stray_writes(const std::vector<uint16_t>& out) const {
    const std::vector<char> inside = logical_o();
    int64_t stray = 0;
    for (size_t i = 0; i < out.size(); ++i) stray += !inside[i] && out[i] != kPoison16;
    return stray;
  }
  // Elements of the logical o still holding the poison (never written).
  int64_t unwritten(const std::vector<uint16_t>& out) const {
    const std::vector<char> inside = logical_o();
    int64_t left = 0;
    for (size_t i = 0; i < out.size(); ++i) left += inside[i] && out[i] == kPoison16;
    return left;
  }

  // The dequantised inputs as a 16-bit problem: q, k, v of `dtype` holding descale·x rounded
  // (exact with Descales::exact), same strides, no descales; o and lse in the given buffers.
  fa::ForwardParams dequantised(fa::DType dtype, std::vector<uint16_t>& q16,
                                std::vector<uint16_t>& k16, std::vector<uint16_t>& v16,
                                std::vector<uint16_t>& o16, std::vector<float>& lse16) const {
    fa::ForwardParams p = params;
    p.dtype = dtype;
    p.q_descale = p.k_descale = p.v_descale = nullptr;
    const int group = shape.heads_q / shape.heads_kv;
    dequantise(q, p.q.stride, shape.heads_q, group, q_descale, cu_q, shape.seqlen_q, dtype, q16);
    dequantise(k, p.k.stride, shape.heads_kv, 1, k_descale, cu_k, shape.seqlen_k, dtype, k16);
    dequantise(v, p.v.stride, shape.heads_kv, 1, v_descale, cu_k, shape.seqlen_k, dtype, v16);
    o16.assign(o.size(), kPoison16);
    lse16.assign(lse.size(), std::numeric_limits<float>::quiet_NaN());
    p.q.data = q16.data();
    p.k.data = k16.data();
    p.v.data = v16.data();
    p.o.data = o16.data();
    p.lse = lse16.data();
    return p;
  }

  Fp8Shape shape;
  fa::ForwardParams params;
  std::vector<uint8_t> q, k, v;
  std::vector<uint16_t> o;
  std::vector<float> lse;
  std::vector<float> q_descale, k_descale, v_descale;  // empty with Descales::none
  std::vector<int32_t> cu_q, cu_k;                     // varlen only

 private:
  static void expect_check(const fa::ForwardParams& p, const std::string& what, int sample) {
    const std::vector<fa::reference::RowId> rows =
        sample > 0 ? fa::reference::sample_rows(p, sample, run_seed())
                   : std::vector<fa::reference::RowId>{};
    const fa::reference::CheckResult r = fa::reference::check(p, rows);
    EXPECT_TRUE(r.ok) << what << ": " << r.detail << " (max_err " << r.max_err << ", pt "
                      << r.max_err_pt << ", atol " << r.atol << ", rmse " << r.rmse << "; lse "
                      << r.lse_max_err << " vs " << r.lse_max_err_pt << " + " << r.lse_atol
                      << ", not finite " << r.not_finite << ")";
    EXPECT_GT(r.checked, 0) << what;
  }

  // Which elements of o's buffer belong to the logical tensor.
  std::vector<char> logical_o() const {
    std::vector<char> inside(o.size(), 0);
    const int nb = varlen() ? 1 : shape.batch;
    const int tq = varlen() ? cu_q.back() : shape.seqlen_q;
    const auto& st = params.o.stride;
    for (int b = 0; b < nb; ++b)
      for (int s = 0; s < tq; ++s)
        for (int h = 0; h < shape.heads_q; ++h)
          for (int i = 0; i < shape.head_dim; ++i)
            inside[b * st[0] + s * st[1] + h * st[2] + i] = 1;
    return inside;
  }

  // Descales::amax: q, k, v drawn again in bf16 (the case's distribution) and quantised.
  void quantise_from_bf16(uint64_t seed) {
    const int group = shape.heads_q / shape.heads_kv;
    struct T {
      std::vector<uint8_t>& out;
      std::vector<float>& descale;
      int seqlen, heads, per_descale;
      uint64_t salt;
      float sigma;
    };
    for (const T& t : {T{q, q_descale, shape.seqlen_q, shape.heads_q, group, 0x51, shape.q_sigma},
                       T{k, k_descale, shape.seqlen_k, shape.heads_kv, 1, 0x4b, 1.f},
                       T{v, v_descale, shape.seqlen_k, shape.heads_kv, 1, 0x56, 1.f}}) {
      std::vector<uint16_t> x(t.out.size());
      if (shape.dist == Dist::outliers) {
        fa::reference::fill_outliers(x.data(), std::ssize(x), fa::DType::bf16, seed ^ t.salt,
                                     t.sigma);
      } else {
        fa::reference::fill_normal(x.data(), std::ssize(x), fa::DType::bf16, seed ^ t.salt,
                                   t.sigma);
      }
      t.descale.resize(size_t(shape.batch) * shape.heads_kv);
      fa::reference::quantize_e4m3_per_head(fa::DType::bf16, x.data(), shape.batch, t.seqlen,
                                            t.heads, shape.head_dim, t.per_descale, t.out.data(),
                                            t.descale.data());
    }
  }

  size_t layout(int64_t (&stride)[4], int batch, int seqlen, int heads, int dim) const {
    return fp8_layout(stride, shape.padded, batch, seqlen, heads, dim);
  }

  // Every element of an e4m3 tensor as `dtype`: the logical ones times their head's descale
  // (`cu`: the varlen prefix sums that map a packed row to its sequence; `len`: rows per batch
  // entry otherwise), the padding as it is.
  void dequantise(const std::vector<uint8_t>& in, const int64_t (&st)[4], int heads,
                  int heads_per_descale, const std::vector<float>& descale,
                  const std::vector<int32_t>& cu, int len, fa::DType dtype,
                  std::vector<uint16_t>& out) const {
    out.assign(in.size(), 0);
    for (size_t i = 0; i < in.size(); ++i)
      fa::store_from_float(out.data(), int64_t(i), fa::e4m3_to_float(in[i]), dtype);
    if (descale.empty()) return;
    const int nb = varlen() ? 1 : shape.batch;
    const int rows = varlen() ? cu.back() : len;
    for (int b = 0; b < nb; ++b) {
      for (int r = 0; r < rows; ++r) {
        const int seq =
            varlen() ? int(std::upper_bound(cu.begin(), cu.end(), r) - cu.begin()) - 1 : b;
        for (int h = 0; h < heads; ++h) {
          const float ds = descale[size_t(seq) * shape.heads_kv + h / heads_per_descale];
          const int64_t base = b * st[0] + r * st[1] + h * st[2];
          for (int i = 0; i < shape.head_dim; ++i)
            fa::store_from_float(out.data(), base + i, ds * fa::e4m3_to_float(in[base + i]), dtype);
        }
      }
    }
  }
};

}  // namespace fa_test
