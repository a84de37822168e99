// Attention on the host, one query row at a time: exactly (fp64) or the way a same-precision
// kernel computes it (emulate). The mask comes from make_problem, the same definition the kernels
// use; visibility is asked per (row, key) so the reference does not trust the range helpers that
// the tiled code relies on.
#include "flashattn/reference.h"
#include "reference/rounding.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/host_dtype.h"
#include "common/host_parallel.h"
#include "common/sink.h"

namespace flashattn::reference {
namespace {

// Where one (batch, query head, row) reads from. FP8 inputs carry the descales of their
// (batch, KV head), or with block descales (K8) the query row's block's and each key's block's;
// 16-bit inputs have descales of 1.
struct RowView {
  const void* q;  // the query row
  const void* k;  // key 0 of the KV head this query head reads
  const void* v;
  int64_t k_row_stride, v_row_stride;
  float q_descale = 1.f, k_descale = 1.f, v_descale = 1.f;
  // Block descales: the (batch, KV head)'s blocks of k and v, kv_rows keys each; else null.
  const float* k_blocks = nullptr;
  const float* v_blocks = nullptr;
  int kv_rows = 1;

  float k_descale_of(int key) const {
    return k_blocks != nullptr ? k_blocks[key / kv_rows] : k_descale;
  }
  float v_descale_of(int key) const {
    return v_blocks != nullptr ? v_blocks[key / kv_rows] : v_descale;
  }
};

const void* element(const void* base, DType dtype, int64_t index) {
  return static_cast<const char*>(base) + index * dtype_size(dtype);
}

RowView row_view(const ForwardParams& p, int batch, int head, int row) {
  const int group = p.heads_q / p.heads_kv;
  const int kv_head = head / group;
  RowView rv{element(p.q.data, p.dtype, host::offset(p.q.stride, batch, row, head)),
             element(p.k.data, p.dtype, host::offset(p.k.stride, batch, 0, kv_head)),
             element(p.v.data, p.dtype, host::offset(p.v.stride, batch, 0, kv_head)), p.k.stride[1],
             p.v.stride[1]};
  const int64_t at = int64_t{batch} * p.heads_kv + kv_head;
  if (p.q_descale != nullptr) rv.q_descale = p.q_descale[at];
  if (p.k_descale != nullptr) rv.k_descale = p.k_descale[at];
  if (p.v_descale != nullptr) rv.v_descale = p.v_descale[at];
  if (p.q_block_descale != nullptr) {  // (batch, heads, ceil(seqlen / rows)) arrays
    const Fp8BlockRows rows = fp8_block_rows(p.head_dim);
    const int64_t nq = (int64_t{p.seqlen_q} + rows.q - 1) / rows.q;
    const int64_t nk = (int64_t{p.seqlen_k} + rows.kv - 1) / rows.kv;
    rv.q_descale = p.q_block_descale[(int64_t{batch} * p.heads_q + head) * nq + row / rows.q];
    rv.k_blocks = p.k_block_descale + at * nk;
    rv.v_blocks = p.v_block_descale + at * nk;
    rv.kv_rows = rows.kv;
  }
  return rv;
}

void masked_row(int dv, double* out, double* lse) {
  if (out != nullptr) std::fill(out, out + dv, 0.0);
  if (lse != nullptr) *lse = -std::numeric_limits<double>::infinity();
}

// Exact softmax(q·Kᵀ·scale)·V in double, max-subtracted so large logits do not overflow.
// `score_abs`, if given, receives the largest |scale|·Σ_i |q_i·k_i| over the row's visible keys
// (the bound on a score's accumulation error is a multiple of it).
void row_fp64(const ForwardParams& p, const Mask& mask, int batch, int head, int row, double* out,
              double* lse, double* score_abs = nullptr) {
  const int d = p.head_dim, dv = host::head_dim_v_of(p);
  const double scale =
      p.softmax_scale != 0.f ? double{p.softmax_scale} : 1.0 / std::sqrt(static_cast<double>(d));
  const double softcap = p.softcap;  // soft-capping: logit = softcap·tanh(logit / softcap)
  const RowView rv = row_view(p, batch, head, row);

  // FP8 inputs: exactly the dequantised values, descale·x (16-bit inputs: descales of 1).
  std::vector<double> q(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) q[i] = double{rv.q_descale} * load_as_float(rv.q, i, p.dtype);

  std::vector<double> logit(static_cast<size_t>(p.seqlen_k));
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < p.seqlen_k; ++j) {
    if (!mask.visible(row, j)) continue;
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += q[i] * load_as_float(rv.k, j * rv.k_row_stride + i, p.dtype);
    const double k_descale = rv.k_descale_of(j);
    logit[j] = dot * k_descale * scale;
    if (score_abs != nullptr) {  // (FP8's check only: a second pass, off every other check's path)
      double dot_abs = 0;
      for (int i = 0; i < d; ++i)
        dot_abs += std::abs(q[i] * load_as_float(rv.k, j * rv.k_row_stride + i, p.dtype));
      *score_abs = std::max(*score_abs, dot_abs * std::abs(k_descale * scale));
    }
    if (softcap > 0) logit[j] = softcap * std::tanh(logit[j] / softcap);
    m = std::max(m, logit[j]);
  }
  // An attention sink is one more logit of the row, with no value (ForwardParams::sinks).
  const bool has_sink = p.sinks != nullptr;
  const double sink = has_sink ? p.sinks[head] : 0.0;
  if (m == -std::numeric_limits<double>::infinity()) {
    masked_row(dv, out, lse);
    if (lse != nullptr && has_sink) *lse = sink;
    return;
  }
  const double top = has_sink ? std::max(m, sink) : m;

  // v's descale multiplies at the end, or with block descales each key's weight.
  const bool v_blocks = rv.v_blocks != nullptr;
  std::vector<double> acc(static_cast<size_t>(dv), 0.0);
  double sum = has_sink ? std::exp(sink - top) : 0.0;
  for (int j = 0; j < p.seqlen_k; ++j) {
    if (!mask.visible(row, j)) continue;
    const double w = std::exp(logit[j] - top);
    sum += w;
    const double wv = v_blocks ? w * rv.v_descale_of(j) : w;
    for (int c = 0; c < dv; ++c)
      acc[c] += wv * load_as_float(rv.v, j * rv.v_row_stride + c, p.dtype);
  }
  if (out != nullptr)
    for (int c = 0; c < dv; ++c) out[c] = acc[c] * (v_blocks ? 1.0 : rv.v_descale) / sum;
  if (lse != nullptr) *lse = top + std::log(sum);
}

// What a kernel of the input precision computes: fp32 logits, max and sum; exp2 with
// scale·log2(e) (with softcap: the logit t = tanh(q·k · softcap_scale) in fp32 and exp2 with
// softcap·log2(e), Problem's convention); the unnormalised P rounded to the input type before
// P·V (tensor cores take P in that type); fp32 accumulation; the output divided by the fp32 sum
// and rounded at the end. Single pass with the final max, where a kernel rescales a running max:
// the rounding points are the same, which is what the oracle's 2·|pt - ref| budget is about.
//
// FP8 (e4m3) inputs, FlashAttention-3's `pt`: the same math in bf16 on the dequantised inputs,
// descale·x rounded to bf16 as FA3's test does ((x.float() * descale).to(bf16)); P scaled by
// kFp8POffset before it is rounded to e4m3 (reference.h), the row sum of the unrounded P, and o
// rounded to out_dtype.
void row_emulate(const ForwardParams& p, const Mask& mask, int batch, int head, int row,
                 double* out, double* lse) {
  const int d = p.head_dim, dv = host::head_dim_v_of(p);
  const Problem pr = make_problem(p);
  const RowView rv = row_view(p, batch, head, row);
  const bool fp8 = p.dtype == DType::e4m3;
  const DType p_type = fp8 ? DType::e4m3 : p.dtype;  // what P is rounded to before P·V
  const float p_offset = fp8 ? kFp8POffset : 1.f;
  auto input = [&](const void* base, int64_t i, float descale) {
    const float x = load_as_float(base, i, p.dtype);
    return fp8 ? round_to(descale * x, DType::bf16) : x;
  };

  std::vector<float> q(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) q[i] = input(rv.q, i, rv.q_descale);

  std::vector<float> logit(static_cast<size_t>(p.seqlen_k));
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < p.seqlen_k; ++j) {
    if (!mask.visible(row, j)) continue;
    float dot = 0;
    const float k_descale = rv.k_descale_of(j);
    for (int i = 0; i < d; ++i) dot += q[i] * input(rv.k, j * rv.k_row_stride + i, k_descale);
    if (pr.has_softcap()) dot = std::tanh(dot * pr.softcap_scale);
    logit[j] = dot;
    m = std::max(m, dot);
  }
  if (m == -std::numeric_limits<float>::infinity()) {
    masked_row(dv, out, lse);
    if (lse != nullptr && p.sinks != nullptr) *lse = p.sinks[head];
    return;
  }

  const float m_scaled = m * pr.scale_log2;
  std::vector<float> acc(static_cast<size_t>(dv), 0.f);
  float sum = 0;
  for (int j = 0; j < p.seqlen_k; ++j) {
    if (!mask.visible(row, j)) continue;
    const float w = std::exp2(logit[j] * pr.scale_log2 - m_scaled);
    sum += w;
    const float w_rounded = round_to(w * p_offset, p_type);
    const float v_descale = rv.v_descale_of(j);
    for (int c = 0; c < dv; ++c)
      acc[c] += w_rounded * input(rv.v, j * rv.v_row_stride + c, v_descale);
  }
  // The kernels' end of the row: without a sink O / l; with one, common/sink.h.
  float inv = 1.f / (sum * p_offset);
  double row_lse = m * (pr.has_softcap() ? pr.softcap : pr.scale) + std::log(sum);
  if (p.sinks != nullptr) {
    const SinkNorm n = normalize_with_sink(sum, m_scaled, p.sinks[head]);
    inv = n.inv / p_offset;
    row_lse = n.lse;
  }
  if (out != nullptr)
    for (int c = 0; c < dv; ++c) out[c] = round_to(acc[c] * inv, pr.out_dtype);
  if (lse != nullptr) *lse = row_lse;
}

}  // namespace

void forward_row(const ForwardParams& params, Precision precision, int batch, int head, int row,
                 double* out, double* lse) {
  const Mask mask = host::mask_of(params);
  if (precision == Precision::fp64) {
    row_fp64(params, mask, batch, head, row, out, lse);
  } else {
    row_emulate(params, mask, batch, head, row, out, lse);
  }
}

void forward_row_fp64_score_abs(const ForwardParams& params, int batch, int head, int row,
                                double* out, double* lse, double* score_abs) {
  *score_abs = 0;
  row_fp64(params, host::mask_of(params), batch, head, row, out, lse, score_abs);
}

void forward(const ForwardParams& params, Precision precision, double* out, double* lse) {
  const int dv = host::head_dim_v_of(params);
  const int64_t rows = int64_t{params.batch} * params.heads_q * params.seqlen_q;
  host::parallel_for(rows, [&](int, int64_t i) {
    // Row-major over (batch, row, head), the order of the dense output.
    const int head = static_cast<int>(i % params.heads_q);
    const int row = static_cast<int>(i / params.heads_q % params.seqlen_q);
    const int batch = static_cast<int>(i / params.heads_q / params.seqlen_q);
    double* o = out != nullptr ? out + i * dv : nullptr;
    double* l = lse != nullptr
                    ? lse + (int64_t{batch} * params.heads_q + head) * params.seqlen_q + row
                    : nullptr;
    forward_row(params, precision, batch, head, row, o, l);
  });
}

}  // namespace flashattn::reference
