// A seeded backward problem in host memory, shared by the CPU and GPU backward suites: inputs q,
// k, v, dout drawn from the test's seed, o and lse from the cpu forward (per sequence for
// variable length), NaN-poisoned gradients, optional padded or head-major layouts, sinks and
// packed (varlen) sequences with their own lengths.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_case.h"
#include "flashattn/flashattn.h"
#include "flashattn/reference.h"

namespace fa_test {

struct BwdShape {
  fa::DType dtype = fa::DType::bf16;
  int batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1;
  int head_dim = 64, head_dim_v = 0;  // 0: head_dim
  bool causal = false;
  int window_left = -1, window_right = -1;
  float q_sigma = 1.f;  // > 1: large logits
  Layout q_layout = Layout::dense, kv_layout = Layout::dense, grad_layout = Layout::dense;
  bool sinks = false;  // with sinks, dsinks is requested too
  float softcap = 0.f;  // BackwardParams::softcap (and the forward's)
  // Packed sequences: one length per batch entry (batch is their count); empty: dense.
  std::vector<int> lens_q, lens_k;
};

class BwdCase {
 public:
  BwdCase(const BwdShape& s, uint64_t seed) : shape(s) {
    fa::BackwardParams& p = params;
    const bool varlen = !s.lens_q.empty();
    p.dtype = s.dtype;
    p.batch = varlen ? static_cast<int>(s.lens_q.size()) : s.batch;
    p.heads_q = s.heads_q;
    p.heads_kv = s.heads_kv;
    p.head_dim = s.head_dim;
    p.head_dim_v = s.head_dim_v;
    p.causal = s.causal;
    p.window_left = s.window_left;
    p.window_right = s.window_right;
    p.softcap = s.softcap;
    int rows_q = s.seqlen_q, rows_k = s.seqlen_k, nb = s.batch;
    p.seqlen_q = s.seqlen_q;
    p.seqlen_k = s.seqlen_k;
    if (varlen) {
      cu_q.assign(1, 0);
      cu_k.assign(1, 0);
      for (size_t b = 0; b < s.lens_q.size(); ++b) {
        cu_q.push_back(cu_q.back() + s.lens_q[b]);
        cu_k.push_back(cu_k.back() + s.lens_k[b]);
      }
      p.seqlen_q = *std::max_element(s.lens_q.begin(), s.lens_q.end());
      p.seqlen_k = *std::max_element(s.lens_k.begin(), s.lens_k.end());
      p.total_q = rows_q = cu_q.back();
      p.total_k = rows_k = cu_k.back();
      nb = 1;
      p.cu_seqlens_q = cu_q.data();
      p.cu_seqlens_k = cu_k.data();
    }
    const int d = s.head_dim, dv = this->dv();
    q.assign(layout(p.q.stride, s.q_layout, nb, rows_q, s.heads_q, d), 0);
    k.assign(layout(p.k.stride, s.kv_layout, nb, rows_k, s.heads_kv, d), 0);
    v.assign(layout(p.v.stride, s.kv_layout, nb, rows_k, s.heads_kv, dv), 0);
    o.assign(layout(p.o.stride, s.q_layout, nb, rows_q, s.heads_q, dv), kPoison);
    dout.assign(layout(p.dout.stride, s.grad_layout, nb, rows_q, s.heads_q, dv), 0);
    dq.assign(layout(p.dq.stride, s.grad_layout, nb, rows_q, s.heads_q, d), kPoison);
    dk.assign(layout(p.dk.stride, s.grad_layout, nb, rows_k, s.heads_kv, d), kPoison);
    dv_.assign(layout(p.dv.stride, s.grad_layout, nb, rows_k, s.heads_kv, dv), kPoison);
    lse.assign(std::max<size_t>(1, size_t(nb) * s.heads_q * rows_q),
               std::numeric_limits<float>::quiet_NaN());
    fa::reference::fill_normal(q.data(), std::ssize(q), s.dtype, seed ^ 0x51, s.q_sigma);
    fa::reference::fill_normal(k.data(), std::ssize(k), s.dtype, seed ^ 0x4b);
    fa::reference::fill_normal(v.data(), std::ssize(v), s.dtype, seed ^ 0x56);
    fa::reference::fill_normal(dout.data(), std::ssize(dout), s.dtype, seed ^ 0x64);
    if (s.sinks) {
      std::mt19937_64 gen(seed ^ 0x73);
      std::uniform_real_distribution<float> uniform(-3.f, 3.f);
      sinks.resize(size_t(s.heads_q));
      for (float& x : sinks) x = uniform(gen);
      dsinks.assign(size_t(s.heads_q), std::numeric_limits<float>::quiet_NaN());
      p.sinks = sinks.data();
      p.dsinks = dsinks.data();
    }
    p.q.data = q.data();
    p.k.data = k.data();
    p.v.data = v.data();
    p.o.data = o.data();
    p.dout.data = dout.data();
    p.lse = lse.data();
    p.dq.data = dq.data();
    p.dk.data = dk.data();
    p.dv.data = dv_.data();
  }
  BwdCase(const BwdCase&) = delete;
  BwdCase& operator=(const BwdCase&) = delete;

  int dv() const { return shape.head_dim_v > 0 ? shape.head_dim_v : shape.head_dim; }
  bool varlen() const { return !cu_q.empty(); }

  // o and lse from the cpu forward; with packed sequences, one dense call per sequence (the cpu
  // forward has no variable length) with its LSE scattered into the (heads_q, total_q) layout.
  void run_forward() {
    const fa::ForwardParams whole = forward_of(params);
    if (!varlen()) {
      const fa::Status st = fa::forward(whole, fa::Kernel::cpu);
      ASSERT_TRUE(st.ok()) << st.message;
      return;
    }
    for (int b = 0; b < params.batch; ++b) {
      fa::ForwardParams f = whole;
      const int q0 = cu_q[size_t(b)], k0 = cu_k[size_t(b)];
      f.cu_seqlens_q = f.cu_seqlens_k = nullptr;
      f.total_q = f.total_k = 0;
      f.batch = 1;
      f.seqlen_q = cu_q[size_t(b) + 1] - q0;
      f.seqlen_k = cu_k[size_t(b) + 1] - k0;
      f.q.data = q.data() + int64_t{q0} * params.q.stride[1];
      f.k.data = k.data() + int64_t{k0} * params.k.stride[1];
      f.v.data = v.data() + int64_t{k0} * params.v.stride[1];
      f.o.data = o.data() + int64_t{q0} * params.o.stride[1];
      std::vector<float> seq_lse(std::max<size_t>(1, size_t(params.heads_q) * f.seqlen_q));
      f.lse = seq_lse.data();
      const fa::Status st = fa::forward(f, fa::Kernel::cpu);
      ASSERT_TRUE(st.ok()) << st.message;
      for (int h = 0; h < params.heads_q; ++h)
        for (int i = 0; i < f.seqlen_q; ++i)
          lse[size_t(h) * params.total_q + q0 + i] = seq_lse[size_t(h) * f.seqlen_q + i];
    }
  }

  void poison() {
    for (auto* t : {&dq, &dk, &dv_}) std::fill(t->begin(), t->end(), kPoison);
    std::fill(dsinks.begin(), dsinks.end(), std::numeric_limits<float>::quiet_NaN());
  }

  // The ForwardParams of the same problem (o and lse as outputs).
  static fa::ForwardParams forward_of(const fa::BackwardParams& p) {
    fa::ForwardParams f;
    f.dtype = p.dtype;
    f.batch = p.batch;
    f.seqlen_q = p.seqlen_q;
    f.seqlen_k = p.seqlen_k;
    f.heads_q = p.heads_q;
    f.heads_kv = p.heads_kv;
    f.head_dim = p.head_dim;
    f.head_dim_v = p.head_dim_v;
    f.q = p.q;
    f.k = p.k;
    f.v = p.v;
    f.o.data = const_cast<void*>(p.o.data);
    std::copy(std::begin(p.o.stride), std::end(p.o.stride), std::begin(f.o.stride));
    f.lse = const_cast<float*>(p.lse);
    f.softmax_scale = p.softmax_scale;
    f.causal = p.causal;
    f.window_left = p.window_left;
    f.window_right = p.window_right;
    f.cu_seqlens_q = p.cu_seqlens_q;
    f.cu_seqlens_k = p.cu_seqlens_k;
    f.total_q = p.total_q;
    f.total_k = p.total_k;
    f.sinks = p.sinks;
    f.softcap = p.softcap;
    return f;
  }

  // Elements of a gradient buffer outside its logical tensor that lost their poison.
  int64_t stray_writes(const std::vector<uint16_t>& buf, const int64_t (&st)[4], int heads, int dim,
                       bool keys) const {
    std::vector<char> inside(buf.size(), 0);
    const int nb = varlen() ? 1 : params.batch;
    const int rows = varlen() ? (keys ? params.total_k : params.total_q)
                              : (keys ? params.seqlen_k : params.seqlen_q);
    for (int b = 0; b < nb; ++b)
      for (int s = 0; s < rows; ++s)
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < dim; ++i) inside[size_t(b * st[0] + s * st[1] + h * st[2] + i)] = 1;
    int64_t stray = 0;
    for (size_t i = 0; i < buf.size(); ++i) stray += !inside[i] && buf[i] != kPoison;
    return stray;
  }
  int64_t stray_writes() const {
    const fa::BackwardParams& p = params;
    return stray_writes(dq, p.dq.stride, p.heads_q, p.head_dim, false) +
           stray_writes(dk, p.dk.stride, p.heads_kv, p.head_dim, true) +
           stray_writes(dv_, p.dv.stride, p.heads_kv, dv(), true);
  }

  BwdShape shape;
  fa::BackwardParams params;
  std::vector<uint16_t> q, k, v, o, dout, dq, dk, dv_;
  std::vector<float> lse, sinks, dsinks;
  std::vector<int32_t> cu_q, cu_k;

 private:
  // Strides for a (batch, rows, heads, dim) tensor in layout `l`; returns the elements it needs.
  static size_t layout(int64_t (&stride)[4], Layout l, int batch, int rows, int heads, int dim) {
    stride[3] = 1;
    switch (l) {
      case Layout::dense: fa::set_contiguous_strides(stride, rows, heads, dim); break;
      case Layout::padded:
        stride[2] = dim + 8;
        stride[1] = heads * stride[2] + 24;
        stride[0] = int64_t{rows} * stride[1] + 16;
        break;
      case Layout::heads_major:
        stride[1] = dim + 8;
        stride[2] = int64_t{rows} * stride[1];
        stride[0] = heads * stride[2];
        break;
    }
    // At least one vector so that empty tensors still have a valid, aligned pointer.
    return std::max<size_t>(8, size_t(batch) * size_t(std::max<int64_t>(stride[0], 1)));
  }
};

}  // namespace fa_test
