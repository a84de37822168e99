// FlashAttention's oracle applied to a kernel's output, plus the row sampler and the input
// generator the tests and the benchmark CLI share.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/host_dtype.h"
#include "flashattn/reference.h"
#include "common/host_parallel.h"
#include "reference/rounding.h"

namespace flashattn::reference {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The LSE is an fp32 output, never rounded to the input type, so the output's rounding floor does
// not apply and |pt - ref| is tiny (fp32 rounding of the logits). What a correct kernel may still
// differ by is the order of its fp32 sums (blocked exp2 with running-max rescales instead of one
// pass), a few ulps of fp32 per term over thousands of keys: 1e-4 relative to the LSE's size
// covers that with margin, while a wrong scale, a missing log2(e) factor or a dropped block moves
// the LSE by far more.
constexpr double kLseRelTol = 1e-4;

// FP8 (e4m3) inputs: Hopper's FP8 tensor cores accumulate Q·Kᵀ with fewer bits than fp32 (about
// 14, DeepSeek-V3 §3.3.2), so a score is off by up to a small multiple of 2^-14 of the sum of its
// terms' magnitudes, |scale|·Σ|q_i·k_i|, and the LSE with it. Seen on the H100 (first GPU run of
// tests/test_gpu_fp8.cpp: 14 of 165 cases failed on the LSE alone, every output passed): a row
// with one key and LSE 1.78 off by 4.3e-4, 2.4e-4 relative, where the fp32 arithmetic after the
// GEMM is good to 1e-7. The LSE budget for FP8 adds 2^-12 of the largest term-magnitude sum of
// the checked rows. (The output's own budget, 2·|pt − ref|, is dominated by P's rounding to
// e4m3, far larger.)
constexpr double kFp8ScoreRelTol = 1.0 / 4096;

// One element's location; `rank` orders locations the way a serial loop would meet them, so the
// reported failure does not depend on thread timing.
struct Where {
  int64_t rank = std::numeric_limits<int64_t>::max();
  RowId row{};
  int col = -1;  // -1: the LSE
  double got = 0, want = 0;
};

struct Tally {
  double max_err = 0, max_err_pt = 0, max_floor = 0, sum_sq_err = 0;
  double lse_max_err = 0, lse_max_err_pt = 0, lse_max_abs = 0, score_abs = 0;
  int64_t checked = 0, not_finite = 0, lse_inf_mismatch = 0;
  Where worst;               // largest |out - ref|
  Where worst_lse;           // largest |lse - ref|
  Where first_bad;           // first NaN/inf in the output or the LSE
  Where first_inf_mismatch;  // first row whose reference LSE is -inf but the kernel's is not

  static void keep_first(Where& slot, const Where& w) {
    if (w.rank < slot.rank) slot = w;
  }
  static void keep_worst(Where& slot, double& slot_err, const Where& w, double err) {
    if (err > slot_err || (err == slot_err && w.rank < slot.rank)) {
      slot_err = err;
      slot = w;
    }
  }
  void merge(const Tally& t) {
    if (t.max_err > max_err || (t.max_err == max_err && t.worst.rank < worst.rank)) {
      max_err = t.max_err;
      worst = t.worst;
    }
    if (t.lse_max_err > lse_max_err ||
        (t.lse_max_err == lse_max_err && t.worst_lse.rank < worst_lse.rank)) {
      lse_max_err = t.lse_max_err;
      worst_lse = t.worst_lse;
    }
    max_err_pt = std::max(max_err_pt, t.max_err_pt);
    max_floor = std::max(max_floor, t.max_floor);
    sum_sq_err += t.sum_sq_err;
    lse_max_err_pt = std::max(lse_max_err_pt, t.lse_max_err_pt);
    lse_max_abs = std::max(lse_max_abs, t.lse_max_abs);
    score_abs = std::max(score_abs, t.score_abs);
    checked += t.checked;
    not_finite += t.not_finite;
    lse_inf_mismatch += t.lse_inf_mismatch;
    keep_first(first_bad, t.first_bad);
    keep_first(first_inf_mismatch, t.first_inf_mismatch);
  }
};

std::string describe(const Where& w) {
  char buf[192];
  if (w.col < 0) {
    std::snprintf(buf, sizeof buf, "lse[batch %d, head %d, row %d]: got %.9g, want %.9g",
                  w.row.batch, w.row.head, w.row.row, w.got, w.want);
  } else {
    std::snprintf(buf, sizeof buf, "out[batch %d, head %d, row %d, col %d]: got %.9g, want %.9g",
                  w.row.batch, w.row.head, w.row.row, w.col, w.got, w.want);
  }
  return buf;
}

std::string format(const char* fmt, double a, double b, double c, double d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, a, b, c, d);
  return buf;
}

std::vector<RowId> all_rows(const ForwardParams& p) {
  std::vector<RowId> rows;
  rows.reserve(static_cast<size_t>(int64_t{p.batch} * p.heads_q * p.seqlen_q));
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int r = 0; r < p.seqlen_q; ++r) rows.push_back({b, h, r});
  return rows;
}

}  // namespace

CheckResult check(const ForwardParams& params, const std::vector<RowId>& rows_in) {
  CheckResult result;
  if (params.cu_seqlens_q != nullptr || params.cu_seqlens_k != nullptr) {
    result.detail = "check: variable-length batches are not supported by the host reference";
    return result;
  }
  const std::vector<RowId> rows = rows_in.empty() ? all_rows(params) : rows_in;
  const int dv = host::head_dim_v_of(params);
  const DType o_type = make_problem(params).out_dtype;  // out_dtype for FP8 inputs
  const auto n = static_cast<int64_t>(rows.size());

  std::vector<Tally> tallies(static_cast<size_t>(host::worker_count(n)));
  host::parallel_for(n, [&](int worker, int64_t i) {
    Tally& t = tallies[static_cast<size_t>(worker)];
    const RowId id = rows[static_cast<size_t>(i)];
    std::vector<double> ref(static_cast<size_t>(dv)), pt(static_cast<size_t>(dv));
    double ref_lse = 0, pt_lse = 0;
    if (params.dtype == DType::e4m3) {
      double score_abs = 0;
      forward_row_fp64_score_abs(params, id.batch, id.head, id.row, ref.data(), &ref_lse,
                                 &score_abs);
      t.score_abs = std::max(t.score_abs, score_abs);
    } else {
      forward_row(params, Precision::fp64, id.batch, id.head, id.row, ref.data(), &ref_lse);
    }
    forward_row(params, Precision::emulate, id.batch, id.head, id.row, pt.data(), &pt_lse);

    const int64_t base = host::offset(params.o.stride, id.batch, id.row, id.head);
    for (int c = 0; c < dv; ++c) {
      const double got = load_as_float(params.o.data, base + c, o_type);
      const Where w{i * (dv + 1) + c, id, c, got, ref[c]};
      ++t.checked;
      t.max_floor = std::max(t.max_floor, rounding_floor(ref[c], o_type));
      t.max_err_pt = std::max(t.max_err_pt, std::abs(pt[c] - ref[c]));
      if (!std::isfinite(got)) {
        ++t.not_finite;
        Tally::keep_first(t.first_bad, w);
        continue;
      }
      Tally::keep_worst(t.worst, t.max_err, w, std::abs(got - ref[c]));
      t.sum_sq_err += (got - ref[c]) * (got - ref[c]);
    }

    if (params.lse == nullptr) return;
    const double got =
        params.lse[(int64_t{id.batch} * params.heads_q + id.head) * params.seqlen_q + id.row];
    const Where w{i * (dv + 1) + dv, id, -1, got, ref_lse};
    if (std::isnan(got) || got == kInf) {
      ++t.not_finite;
      Tally::keep_first(t.first_bad, w);
    } else if (ref_lse == -kInf || got == -kInf) {
      // A row that sees no key must say so exactly; a row that sees keys must not.
      if (got != ref_lse) {
        ++t.lse_inf_mismatch;
        Tally::keep_first(t.first_inf_mismatch, w);
      }
    } else {
      t.lse_max_abs = std::max(t.lse_max_abs, std::abs(ref_lse));
      t.lse_max_err_pt = std::max(t.lse_max_err_pt, std::abs(pt_lse - ref_lse));
      Tally::keep_worst(t.worst_lse, t.lse_max_err, w, std::abs(got - ref_lse));
    }
  });

  Tally all;
  for (const Tally& t : tallies) all.merge(t);

  result.max_err = all.max_err;
  result.max_err_pt = all.max_err_pt;
  result.atol = 2 * all.max_floor;
  result.checked = all.checked;
  result.not_finite = all.not_finite;
  const int64_t finite = all.checked - all.not_finite;
  result.rmse = finite > 0 ? std::sqrt(all.sum_sq_err / static_cast<double>(finite)) : 0.0;
  const double tol = 2 * result.max_err_pt + result.atol;
  const bool out_ok = result.max_err <= tol;
  bool lse_ok = true;
  if (params.lse != nullptr) {
    result.lse_max_err = all.lse_max_err;
    result.lse_max_err_pt = all.lse_max_err_pt;
    result.lse_atol = kLseRelTol * (1 + all.lse_max_abs) + kFp8ScoreRelTol * all.score_abs;
    lse_ok = all.lse_inf_mismatch == 0 &&
             result.lse_max_err <= 2 * result.lse_max_err_pt + result.lse_atol;
  }
  result.ok = all.not_finite == 0 && out_ok && lse_ok;

  std::string detail;
  auto add = [&](const std::string& s) { detail += (detail.empty() ? "" : "; ") + s; };
  if (all.not_finite > 0) {
    add(std::to_string(all.not_finite) +
        " value(s) not finite (poison left unwritten, or an overflow); first " +
        describe(all.first_bad));
  }
  if (!out_ok) {
    add(format("max|out-ref| %.6g > %.6g (2*max|pt-ref| %.6g + atol %.6g); worst ", result.max_err,
               tol, 2 * result.max_err_pt, result.atol) +
        describe(all.worst));
  }
  if (all.lse_inf_mismatch > 0) {
    add(std::to_string(all.lse_inf_mismatch) +
        " row(s) with -inf LSE on one side only (a row sees no key iff its LSE is -inf); first " +
        describe(all.first_inf_mismatch));
  }
  if (params.lse != nullptr && result.lse_max_err > 2 * result.lse_max_err_pt + result.lse_atol) {
    add(format("max|lse-ref| %.6g > %.6g (2*max|pt-ref| %.6g + lse_atol %.6g); worst ",
               result.lse_max_err, 2 * result.lse_max_err_pt + result.lse_atol,
               2 * result.lse_max_err_pt, result.lse_atol) +
        describe(all.worst_lse));
  }
  result.detail = std::move(detail);
  return result;
}

std::vector<RowId> sample_rows(const ForwardParams& params, int count, uint64_t seed) {
  const int64_t heads = params.heads_q, sq = params.seqlen_q;
  const int64_t total = int64_t{params.batch} * heads * sq;
  if (count <= 0 || total == 0) return {};
  if (count >= total) return all_rows(params);

  // Rows are numbered (batch, head, row) row-major; the set keeps them sorted and distinct.
  auto id = [&](int64_t flat) {
    return RowId{static_cast<int>(flat / (heads * sq)), static_cast<int>(flat / sq % heads),
                 static_cast<int>(flat % sq)};
  };
  auto flat_of = [&](int b, int h, int r) { return (b * heads + h) * sq + r; };
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n - 1)(rng); };

  // Required rows, most important first, truncated to `count`: the first and last row of the
  // problem; the edges of the fully masked block (masked rows form a prefix under bottom-right
  // alignment, but the scan does not assume it); then the first and last row of each batch in a
  // seeded head.
  std::vector<int64_t> required{0, total - 1};
  const Mask mask = host::mask_of(params);
  int first_masked = -1, last_masked = -1;
  for (int r = 0; r < params.seqlen_q; ++r) {
    if (mask.key_begin(r) < mask.key_end(r)) continue;
    if (first_masked < 0) first_masked = r;
    last_masked = r;
  }
  if (first_masked >= 0) {
    required.push_back(
        flat_of(static_cast<int>(pick(params.batch)), static_cast<int>(pick(heads)), last_masked));
    required.push_back(
        flat_of(static_cast<int>(pick(params.batch)), static_cast<int>(pick(heads)), first_masked));
  }
  for (int b = 0; b < params.batch; ++b) {
    const auto h = static_cast<int>(pick(heads));
    required.push_back(flat_of(b, h, 0));
    required.push_back(flat_of(b, h, static_cast<int>(sq - 1)));
  }

  std::set<int64_t> chosen;
  for (int64_t f : required) {
    if (static_cast<int64_t>(chosen.size()) >= count) break;
    chosen.insert(f);
  }
  // The rest: one random row in each of as many equal strata of the flat index as rows are
  // missing, so the sample spreads over batches, heads and positions.
  const int64_t strata = count - static_cast<int64_t>(chosen.size());
  for (int64_t s = 0; s < strata; ++s) {
    const int64_t lo = s * total / strata, hi = (s + 1) * total / strata;
    chosen.insert(lo + pick(hi - lo));
  }
  // Collisions above can leave the sample short; fill from a seeded walk over what is left.
  for (int64_t f = pick(total), tries = 0;
       static_cast<int64_t>(chosen.size()) < count && tries < total; f = (f + 1) % total, ++tries) {
    chosen.insert(f);
  }

  std::vector<RowId> rows;
  rows.reserve(chosen.size());
  for (int64_t f : chosen) rows.push_back(id(f));
  return rows;
}

namespace {

// Zeros would hide a kernel that skips a term, so a draw that rounds to zero becomes a small value
// of the same sign: sigma/1024, or the type's smallest subnormal when even that rounds to zero (a
// tiny sigma in fp16, e4m3 always).
float nonzero_tiny(float sigma, DType dtype) {
  const float tiny = round_to(sigma * 0x1p-10f, dtype);
  if (tiny != 0.f) return tiny;
  switch (dtype) {
    case DType::bf16: return bf16_to_float(1);
    case DType::e4m3: return e4m3_to_float(1);
    default: return fp16_to_float(1);
  }
}

template <class Draw>
void fill_with(void* data, int64_t n, DType dtype, float sigma, Draw&& draw) {
  const float tiny = nonzero_tiny(sigma, dtype);
  for (int64_t i = 0; i < n; ++i) {
    const float x = draw();
    float r = round_to(x, dtype);
    if (r == 0.f) r = std::signbit(x) ? -tiny : tiny;
    store_from_float(data, i, r, dtype);
  }
}

}  // namespace

void fill_normal(void* data, int64_t n, DType dtype, uint64_t seed, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, sigma);
  fill_with(data, n, dtype, sigma, [&] { return normal(rng); });
}

void fill_outliers(void* data, int64_t n, DType dtype, uint64_t seed, float sigma) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, sigma), outlier(0.f, 10.f * sigma);
  std::bernoulli_distribution rare(0.001);
  fill_with(data, n, dtype, sigma, [&] {
    const float x = normal(rng);
    return rare(rng) ? x + outlier(rng) : x;
  });
}

}  // namespace flashattn::reference
