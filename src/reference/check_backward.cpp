// FlashAttention's oracle applied to a kernel's gradients (reference.h, check_backward), and the
// sampler of (batch, KV head) units for shapes too large to check whole.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/host_dtype.h"
#include "common/host_parallel.h"
#include "flashattn/reference.h"
#include "reference/backward_detail.h"
#include "reference/rounding.h"

namespace flashattn::reference {
namespace {

// Worst element of one gradient, for the message.
struct Worst {
  double err = -1;
  std::string where;
};

struct Tally {
  GradientCheck c;
  double max_floor = 0;
  Worst worst;
  std::string first_bad;
};

void compare(Tally& t, double got, double ref, double pt, DType dtype, const char* name, int a,
             int b, int row, int col) {
  ++t.c.checked;
  t.max_floor = std::max(t.max_floor, rounding_floor(ref, dtype));
  t.c.max_err_pt = std::max(t.c.max_err_pt, std::abs(pt - ref));
  char buf[160];
  if (!std::isfinite(got)) {
    if (t.c.not_finite++ == 0) {
      std::snprintf(buf, sizeof buf, "%s[batch %d, head %d, row %d, col %d] = %g", name, a, b, row,
                    col, got);
      t.first_bad = buf;
    }
    return;
  }
  const double err = std::abs(got - ref);
  if (err > t.worst.err) {
    std::snprintf(buf, sizeof buf, "%s[batch %d, head %d, row %d, col %d]: got %.9g, want %.9g",
                  name, a, b, row, col, got, ref);
    t.worst = {err, buf};
  }
  t.c.max_err = std::max(t.c.max_err, err);
}

// The rule on a finished tally; appends a failure to `detail`.
void conclude(Tally& t, const char* name, std::string& detail) {
  auto add = [&](const std::string& s) { detail += (detail.empty() ? "" : "; ") + s; };
  const double tol = 2 * t.c.max_err_pt + t.c.atol;
  t.c.ok = t.c.not_finite == 0 && t.c.max_err <= tol;
  char buf[192];
  if (t.c.not_finite > 0) {
    add(std::string(name) + ": " + std::to_string(t.c.not_finite) +
        " value(s) not finite (poison left unwritten, or an overflow); first " + t.first_bad);
  }
  if (t.c.max_err > tol) {
    std::snprintf(buf, sizeof buf, "%s: max|g-ref| %.6g > %.6g (2*max|pt-ref| %.6g + atol %.6g); ",
                  name, t.c.max_err, tol, 2 * t.c.max_err_pt, t.c.atol);
    add(buf + std::string("worst ") + t.worst.where);
  }
}

}  // namespace

BackwardCheckResult check_backward(const BackwardParams& p, const std::vector<KvHeadId>& pairs_in) {
  BackwardCheckResult result;
  const bool all = pairs_in.empty();
  const std::vector<KvHeadId> pairs = all ? all_kv_heads(p) : pairs_in;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int d = p.head_dim, dv = p.head_dim_v > 0 ? p.head_dim_v : d;
  const int group = p.heads_q / p.heads_kv;
  const int64_t tq = varlen ? p.total_q : int64_t{p.batch} * p.seqlen_q;
  const int64_t tk = varlen ? p.total_k : int64_t{p.batch} * p.seqlen_k;

  std::vector<double> ref_q(size_t(tq) * p.heads_q * d), pt_q(ref_q.size());
  std::vector<double> ref_k(size_t(tk) * p.heads_kv * d), pt_k(ref_k.size());
  std::vector<double> ref_v(size_t(tk) * p.heads_kv * dv), pt_v(ref_v.size());
  std::vector<SinkTerms> ref_s(size_t(p.batch) * p.heads_q), pt_s(ref_s.size());
  backward_pairs(p, Precision::fp64, pairs, ref_q.data(), ref_k.data(), ref_v.data(), ref_s.data());
  backward_pairs(p, Precision::emulate, pairs, pt_q.data(), pt_k.data(), pt_v.data(), pt_s.data());

  Tally tdq, tdk, tdv;
  for (const KvHeadId& id : pairs) {
    const int b = id.batch;
    const int q0 = varlen ? p.cu_seqlens_q[b] : 0, k0 = varlen ? p.cu_seqlens_k[b] : 0;
    const int len_q = varlen ? p.cu_seqlens_q[b + 1] - q0 : p.seqlen_q;
    const int len_k = varlen ? p.cu_seqlens_k[b + 1] - k0 : p.seqlen_k;
    const int tb = varlen ? 0 : b;  // batch index in the kernel's tensors
    const int64_t qt = varlen ? q0 : int64_t{b} * p.seqlen_q;  // first token in the dense arrays
    const int64_t kt = varlen ? k0 : int64_t{b} * p.seqlen_k;
    for (int h = id.kv_head * group; h < (id.kv_head + 1) * group; ++h) {
      for (int i = 0; i < len_q; ++i) {
        const int64_t off = host::offset(p.dq.stride, tb, q0 + i, h);
        const size_t at = size_t((qt + i) * p.heads_q + h) * d;
        for (int c = 0; c < d; ++c) {
          compare(tdq, load_as_float(p.dq.data, off + c, p.dtype), ref_q[at + c], pt_q[at + c],
                  p.dtype, "dq", b, h, i, c);
        }
      }
    }
    for (int j = 0; j < len_k; ++j) {
      const int64_t koff = host::offset(p.dk.stride, tb, k0 + j, id.kv_head);
      const int64_t voff = host::offset(p.dv.stride, tb, k0 + j, id.kv_head);
      const size_t kat = size_t((kt + j) * p.heads_kv + id.kv_head);
      for (int c = 0; c < d; ++c) {
        compare(tdk, load_as_float(p.dk.data, koff + c, p.dtype), ref_k[kat * d + c],
                pt_k[kat * d + c], p.dtype, "dk", b, id.kv_head, j, c);
      }
      for (int c = 0; c < dv; ++c) {
        compare(tdv, load_as_float(p.dv.data, voff + c, p.dtype), ref_v[kat * dv + c],
                pt_v[kat * dv + c], p.dtype, "dv", b, id.kv_head, j, c);
      }
    }
  }
  std::string detail;
  for (auto [t, name] : {std::pair{&tdq, "dq"}, {&tdk, "dk"}, {&tdv, "dv"}}) {
    t->c.atol = 2 * t->max_floor;
    conclude(*t, name, detail);
  }
  result.dq = tdq.c;
  result.dk = tdk.c;
  result.dv = tdv.c;
  result.ok = tdq.c.ok && tdk.c.ok && tdv.c.ok;

  if (all && p.sinks != nullptr && p.dsinks != nullptr) {
    // D_i = dO_i.O_i is computed from the forward's O, rounded to the input type: a relative error
    // of up to u (the unit roundoff) per element, independent between elements, which moves
    // dsinks[h] by a random sum of standard deviation at most u * sqrt(spread) (SinkTerms). The
    // worst case (every error aligned) is ~sqrt(rows * head_dim) times larger and would hide
    // real errors. atol is one such deviation (about twice the typical one: rounding errors are
    // uniform, not all of size u), on top of 2 * |pt - ref|, pt rounding its O the same way.
    const double u = p.dtype == DType::bf16 ? 0x1p-8 : 0x1p-11;
    Tally ts;
    double max_spread = 0;
    for (int h = 0; h < p.heads_q; ++h) {
      double ref = 0, pt = 0, spread = 0;
      for (int b = 0; b < p.batch; ++b) {
        const size_t i = size_t(b) * p.heads_q + h;
        ref += ref_s[i].grad;
        pt += pt_s[i].grad;
        spread += ref_s[i].spread;
      }
      max_spread = std::max(max_spread, spread);
      ++ts.c.checked;
      ts.c.max_err_pt = std::max(ts.c.max_err_pt, std::abs(pt - ref));
      const double got = p.dsinks[h];
      if (!std::isfinite(got)) {
        if (ts.c.not_finite++ == 0) ts.first_bad = "dsinks[" + std::to_string(h) + "]";
        continue;
      }
      const double err = std::abs(got - ref);
      if (err > ts.worst.err) {
        char buf[96];
        std::snprintf(buf, sizeof buf, "dsinks[%d]: got %.9g, want %.9g", h, got, ref);
        ts.worst = {err, buf};
      }
      ts.c.max_err = std::max(ts.c.max_err, err);
    }
    ts.c.atol = u * std::sqrt(max_spread) + 1e-6;  // 1e-6: fp32 rounding of the sums
    conclude(ts, "dsinks", detail);
    result.dsinks = ts.c;
    result.ok = result.ok && ts.c.ok;
  }
  result.detail = std::move(detail);
  return result;
}

std::vector<KvHeadId> sample_kv_heads(const BackwardParams& p, int count, uint64_t seed) {
  const int64_t total = int64_t{p.batch} * p.heads_kv;
  if (count <= 0 || total == 0) return {};
  if (count >= total) return all_kv_heads(p);
  std::set<int64_t> chosen{0, total - 1};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, total - 1);
  while (static_cast<int64_t>(chosen.size()) < count) chosen.insert(pick(rng));
  std::vector<KvHeadId> out;
  for (int64_t f : chosen) {
    out.push_back({static_cast<int>(f / p.heads_kv), static_cast<int>(f % p.heads_kv)});
  }
  if (static_cast<int64_t>(out.size()) > count) out.resize(static_cast<size_t>(count));
  return out;
}

}  // namespace flashattn::reference
