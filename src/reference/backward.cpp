// Gradients of attention on the host from q, k, v and dout alone: the forward is recomputed here
// (forward_row, in the same precision), so neither the kernel's o nor its lse is trusted.
//
// For one (sequence, KV head) pair: every row of the group's query heads gets O, lse (with the
// sink) and D = dO·O (stage 1), then dQ (stage 2); every key gets dK and dV summed over the
// group's rows (stage 3). Each stage recomputes P = exp(scale·q·k - lse) and dP = dO·v for the
// pairs it needs, asking the mask per (row, key).
//
// Precision::fp64 is exact (double throughout). Precision::emulate is what a kernel of the input
// precision computes: the emulated forward's O (rounded to the input type) and fp32 LSE, D in
// fp32, S, P and dP in fp32 with exp2, P rounded to the input type before dV += Pᵀ·dO and dS
// rounded before dQ += dS·K and dK += dSᵀ·Q (tensor cores take those operands in the input
// type), fp32 accumulation, the scale applied at the end and every gradient rounded to the input
// type.
//
// With softcap the logit of q·k is softcap·tanh(scale·q·k / softcap): P comes from it, and the
// gradient with respect to scale·q·k gains the factor d tanh = 1 - t^2 (t the tanh), applied to
// dS before the products (the scale stays at the end, as without softcap).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/backward_problem.h"
#include "common/host_dtype.h"
#include "common/host_parallel.h"
#include "flashattn/reference.h"
#include "reference/backward_detail.h"

namespace flashattn::reference {
namespace {

// One (sequence, KV head) pair, its inputs unpacked into dense arrays of T.
template <class T>
struct Pair {
  int batch = 0, kv_head = 0, group = 1;
  int len_q = 0, len_k = 0;
  int64_t q_token0 = 0, k_token0 = 0;  // first token in the dense/packed outputs
  ForwardParams fwd;                   // the sequence alone, as forward_row reads it
  int fwd_batch = 0;                   // its batch index in `fwd`
  Mask mask;
  std::vector<T> q, dout;    // (group, len_q, d) and (group, len_q, dv)
  std::vector<T> k, v;       // (len_k, d) and (len_k, dv)
  std::vector<T> lse, d;     // (group, len_q): the recomputed LSE and D
  std::vector<double> d_sq;  // (group, len_q): sum_c (dO_c O_c)^2, the scale of D's rounding
};

template <class T>
void unpack(const void* base, const int64_t (&stride)[4], int batch, int token0, int rows, int head,
            int dim, DType dtype, T* out) {
  for (int r = 0; r < rows; ++r) {
    const int64_t off = host::offset(stride, batch, token0 + r, head);
    for (int c = 0; c < dim; ++c) out[int64_t{r} * dim + c] = load_as_float(base, off + c, dtype);
  }
}

template <class T>
Pair<T> make_pair(const BackwardParams& p, int batch, int kv_head) {
  Pair<T> pr;
  pr.batch = batch;
  pr.kv_head = kv_head;
  pr.group = p.heads_q / p.heads_kv;
  pr.fwd = forward_params(p);
  const int d = p.head_dim, dv = host::head_dim_v_of(pr.fwd);
  int q0 = 0, k0 = 0;  // first token of the sequence in the tensors
  int tensor_batch = batch;
  if (p.cu_seqlens_q != nullptr) {
    q0 = p.cu_seqlens_q[batch];
    k0 = p.cu_seqlens_k[batch];
    pr.len_q = p.cu_seqlens_q[batch + 1] - q0;
    pr.len_k = p.cu_seqlens_k[batch + 1] - k0;
    pr.q_token0 = q0;
    pr.k_token0 = k0;
    tensor_batch = 0;
    // forward_row reads dense tensors: the sequence as a batch of one starting at its tokens.
    ForwardParams& f = pr.fwd;
    f.cu_seqlens_q = f.cu_seqlens_k = nullptr;
    f.batch = 1;
    f.seqlen_q = pr.len_q;
    f.seqlen_k = pr.len_k;
    f.q.data = static_cast<const uint16_t*>(p.q.data) + int64_t{q0} * p.q.stride[1];
    f.k.data = static_cast<const uint16_t*>(p.k.data) + int64_t{k0} * p.k.stride[1];
    f.v.data = static_cast<const uint16_t*>(p.v.data) + int64_t{k0} * p.v.stride[1];
    pr.fwd_batch = 0;
  } else {
    pr.len_q = p.seqlen_q;
    pr.len_k = p.seqlen_k;
    pr.q_token0 = int64_t{batch} * p.seqlen_q;
    pr.k_token0 = int64_t{batch} * p.seqlen_k;
    pr.fwd_batch = batch;
  }
  pr.mask = host::mask_of(pr.fwd);
  const auto g = static_cast<size_t>(pr.group);
  pr.q.resize(g * pr.len_q * d);
  pr.dout.resize(g * pr.len_q * dv);
  pr.lse.resize(g * pr.len_q);
  pr.d.resize(g * pr.len_q);
  pr.d_sq.resize(g * pr.len_q);
  pr.k.resize(size_t(pr.len_k) * d);
  pr.v.resize(size_t(pr.len_k) * dv);
  for (int h = 0; h < pr.group; ++h) {
    const int head = kv_head * pr.group + h;
    unpack(p.q.data, p.q.stride, tensor_batch, q0, pr.len_q, head, d, p.dtype,
           pr.q.data() + size_t(h) * pr.len_q * d);
    unpack(p.dout.data, p.dout.stride, tensor_batch, q0, pr.len_q, head, dv, p.dtype,
           pr.dout.data() + size_t(h) * pr.len_q * dv);
  }
  unpack(p.k.data, p.k.stride, tensor_batch, k0, pr.len_k, kv_head, d, p.dtype, pr.k.data());
  unpack(p.v.data, p.v.stride, tensor_batch, k0, pr.len_k, kv_head, dv, p.dtype, pr.v.data());
  return pr;
}

template <class T>
T dot(const T* a, const T* b, int n) {
  T s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The precision's arithmetic: T, where it rounds to the input type, and P from a logit.
template <class T>
struct Arith {
  static constexpr bool kEmulate = std::is_same_v<T, float>;
  DType dtype;
  T scale, scale_log2;
  T softcap = 0, softcap_scale = 0;  // Problem's: softcap_scale = scale / softcap; 0: off

  T round(T x) const {
    if constexpr (kEmulate) return round_to(x, dtype);
    return x;
  }
  // P of a raw dot product q·k given the row's LSE (natural log), and the factor dS takes on its
  // way back to scale·q·k: 1 - t^2 with softcap (t = tanh(q·k · softcap_scale)), else 1.
  struct Score {
    T prob, dtanh;
  };
  Score score(T qk, T lse) const {
    if (softcap > 0) {
      const T t = std::tanh(qk * softcap_scale);
      if constexpr (kEmulate) {
        // scale_log2 is softcap·log2(e) here (make_problem).
        return {std::exp2(t * scale_log2 - lse * static_cast<T>(kLog2e)), T{1} - t * t};
      }
      return {std::exp(softcap * t - lse), T{1} - t * t};
    }
    if constexpr (kEmulate) return {std::exp2(qk * scale_log2 - lse * static_cast<T>(kLog2e)), 1};
    return {std::exp(qk * scale - lse), 1};
  }
};

// Stage 1 and 2 for row `row` of local head h: O and lse by forward_row, D, then dQ.
template <class T>
void row_pass(const BackwardParams& p, const Arith<T>& ar, Pair<T>& pr, int h, int row,
              double* dq_out) {
  constexpr bool kEmulate = Arith<T>::kEmulate;
  const int d = p.head_dim, dv = host::head_dim_v_of(pr.fwd);
  const int head = pr.kv_head * pr.group + h;
  std::vector<double> o(static_cast<size_t>(dv));
  double lse = 0;
  forward_row(pr.fwd, kEmulate ? Precision::emulate : Precision::fp64, pr.fwd_batch, head, row,
              o.data(), &lse);
  const T* q = pr.q.data() + (size_t(h) * pr.len_q + row) * d;
  const T* dout = pr.dout.data() + (size_t(h) * pr.len_q + row) * dv;
  T dsum = 0;
  double dsq = 0;
  for (int c = 0; c < dv; ++c) {
    dsum += dout[c] * static_cast<T>(o[c]);
    dsq += (double{dout[c]} * o[c]) * (double{dout[c]} * o[c]);
  }
  const size_t ri = size_t(h) * pr.len_q + row;
  pr.lse[ri] = static_cast<T>(lse);
  pr.d[ri] = dsum;
  pr.d_sq[ri] = dsq;

  std::vector<T> acc(static_cast<size_t>(d), T{0});
  if (lse != -std::numeric_limits<double>::infinity()) {
    for (int j = 0; j < pr.len_k; ++j) {
      if (!pr.mask.visible(row, j)) continue;
      const T* k = pr.k.data() + size_t(j) * d;
      const auto [prob, dtanh] = ar.score(dot(q, k, d), pr.lse[ri]);
      const T dp = dot(dout, pr.v.data() + size_t(j) * dv, dv);
      const T ds = ar.round(prob * (dp - dsum) * dtanh);
      for (int c = 0; c < d; ++c) acc[c] += ds * k[c];
    }
  }
  double* out = dq_out + ((pr.q_token0 + row) * p.heads_q + head) * d;
  for (int c = 0; c < d; ++c) out[c] = ar.round(acc[c] * ar.scale);
}

// Stage 3 for key `key`: dK and dV over every row of the group that sees it.
template <class T>
void key_pass(const BackwardParams& p, const Arith<T>& ar, const Pair<T>& pr, int key,
              double* dk_out, double* dv_out) {
  const int d = p.head_dim, dv = host::head_dim_v_of(pr.fwd);
  const T* k = pr.k.data() + size_t(key) * d;
  const T* v = pr.v.data() + size_t(key) * dv;
  std::vector<T> dk(static_cast<size_t>(d), T{0}), dvacc(static_cast<size_t>(dv), T{0});
  for (int h = 0; h < pr.group; ++h) {
    for (int row = 0; row < pr.len_q; ++row) {
      if (!pr.mask.visible(row, key)) continue;
      const size_t ri = size_t(h) * pr.len_q + row;
      if (pr.lse[ri] == -std::numeric_limits<T>::infinity()) continue;
      const T* q = pr.q.data() + ri * d;
      const T* dout = pr.dout.data() + ri * dv;
      const auto [prob, dtanh] = ar.score(dot(q, k, d), pr.lse[ri]);
      const T dp = dot(dout, v, dv);
      const T ds = ar.round(prob * (dp - pr.d[ri]) * dtanh);
      const T pr_rounded = ar.round(prob);
      for (int c = 0; c < dv; ++c) dvacc[c] += pr_rounded * dout[c];
      for (int c = 0; c < d; ++c) dk[c] += ds * q[c];
    }
  }
  const int64_t base = (pr.k_token0 + key) * p.heads_kv + pr.kv_head;
  for (int c = 0; c < d; ++c) dk_out[base * d + c] = ar.round(dk[c] * ar.scale);
  for (int c = 0; c < dv; ++c) dv_out[base * dv + c] = ar.round(dvacc[c]);
}

template <class T>
void pair_gradients(const BackwardParams& p, int batch, int kv_head, double* dq, double* dk,
                    double* dv, SinkTerms* sinks) {
  Pair<T> pr = make_pair<T>(p, batch, kv_head);
  const Problem problem = make_problem(pr.fwd);
  const Arith<T> ar{p.dtype, static_cast<T>(problem.scale), static_cast<T>(problem.scale_log2),
                    static_cast<T>(problem.softcap), static_cast<T>(problem.softcap_scale)};
  // The reference uses the exact scale in fp64 (make_problem rounds it to float, as kernels do).
  Arith<T> exact = ar;
  if constexpr (!Arith<T>::kEmulate) {
    exact.scale = p.softmax_scale != 0.f ? double{p.softmax_scale}
                                         : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
    if (exact.softcap > 0) exact.softcap_scale = exact.scale / exact.softcap;
  }
  const int64_t rows = int64_t{pr.group} * pr.len_q;
  host::parallel_for(rows, [&](int, int64_t i) {
    row_pass(p, exact, pr, static_cast<int>(i / pr.len_q), static_cast<int>(i % pr.len_q), dq);
  });
  host::parallel_for(pr.len_k,
                     [&](int, int64_t j) { key_pass(p, exact, pr, static_cast<int>(j), dk, dv); });
  if (sinks == nullptr || p.sinks == nullptr) return;
  // dsinks[h] = -sum_i w_i D_i with w_i = exp(sink - lse_i); `spread` sums w_i^2 sum_c (dO_ic
  // O_ic)^2, the variance of that sum under independent relative errors of O's elements.
  for (int h = 0; h < pr.group; ++h) {
    const int head = kv_head * pr.group + h;
    T sum = 0;
    double spread = 0;
    for (int row = 0; row < pr.len_q; ++row) {
      const size_t ri = size_t(h) * pr.len_q + row;
      if (pr.lse[ri] == -std::numeric_limits<T>::infinity()) continue;
      const T w =
          Arith<T>::kEmulate
              ? std::exp2((static_cast<T>(p.sinks[head]) - pr.lse[ri]) * static_cast<T>(kLog2e))
              : std::exp(static_cast<T>(p.sinks[head]) - pr.lse[ri]);
      sum += w * pr.d[ri];
      spread += double{w} * w * pr.d_sq[ri];
    }
    sinks[size_t(batch) * p.heads_q + head] = {static_cast<double>(-sum), spread};
  }
}

}  // namespace

void backward_pairs(const BackwardParams& params, Precision precision,
                    const std::vector<KvHeadId>& pairs, double* dq, double* dk, double* dv,
                    SinkTerms* sinks) {
  for (const KvHeadId& id : pairs) {
    if (precision == Precision::fp64) {
      pair_gradients<double>(params, id.batch, id.kv_head, dq, dk, dv, sinks);
    } else {
      pair_gradients<float>(params, id.batch, id.kv_head, dq, dk, dv, sinks);
    }
  }
}

std::vector<KvHeadId> all_kv_heads(const BackwardParams& params) {
  std::vector<KvHeadId> out;
  for (int b = 0; b < params.batch; ++b)
    for (int g = 0; g < params.heads_kv; ++g) out.push_back({b, g});
  return out;
}

void backward(const BackwardParams& params, Precision precision, double* dq, double* dk, double* dv,
              double* dsinks) {
  const bool varlen = params.cu_seqlens_q != nullptr;
  const int d = params.head_dim, dvd = params.head_dim_v > 0 ? params.head_dim_v : d;
  const int64_t tq = varlen ? params.total_q : int64_t{params.batch} * params.seqlen_q;
  const int64_t tk = varlen ? params.total_k : int64_t{params.batch} * params.seqlen_k;
  // Scratch for the outputs a caller does not want.
  std::vector<double> dq_s, dk_s, dv_s;
  if (dq == nullptr) dq = (dq_s.assign(size_t(tq) * params.heads_q * d, 0.0), dq_s.data());
  if (dk == nullptr) dk = (dk_s.assign(size_t(tk) * params.heads_kv * d, 0.0), dk_s.data());
  if (dv == nullptr) dv = (dv_s.assign(size_t(tk) * params.heads_kv * dvd, 0.0), dv_s.data());
  std::vector<SinkTerms> sinks(size_t(params.batch) * params.heads_q);
  backward_pairs(params, precision, all_kv_heads(params), dq, dk, dv, sinks.data());
  if (dsinks == nullptr || params.sinks == nullptr) return;
  for (int h = 0; h < params.heads_q; ++h) {
    double sum = 0;
    for (int b = 0; b < params.batch; ++b) sum += sinks[size_t(b) * params.heads_q + h].grad;
    dsinks[h] = precision == Precision::emulate ? double{static_cast<float>(sum)} : sum;
  }
}

}  // namespace flashattn::reference
