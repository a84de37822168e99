#include "workload.h"

#include <algorithm>
#include <cstdio>

namespace flashattn::bench {
namespace {

// TESTING.md's standard grid, as FlashAttention-3 reports it.
constexpr int kSweepTokens = 16384;
constexpr int kSweepHidden = 2048;
constexpr int kSweepHeadDims[] = {64, 128, 256};
constexpr int kSweepSeqlens[] = {512, 1024, 2048, 4096, 8192, 16384};

}  // namespace

std::vector<Workload> make_workloads(const Options& opts) {
  std::vector<Workload> out;
  for (Kernel kernel : opts.kernels) {
    if (!opts.sweep_standard) {
      Workload w;
      w.kernel = kernel;
      w.dtype = opts.dtype;
      w.dist = opts.dist;
      w.fp8_scaling = opts.fp8.value_or(Fp8Scaling::per_tensor);
      w.batch = opts.batch;
      w.heads = opts.heads;
      w.kv_heads = opts.kv_heads > 0 ? opts.kv_heads : opts.heads;
      w.seqlen_q = opts.seqlen_q;
      w.seqlen_k = opts.seqlen_k;
      w.hdim = opts.hdim;
      w.hdim_v = opts.hdim_v > 0 ? opts.hdim_v : opts.hdim;
      w.causal = opts.causal;
      w.window_left = opts.window_left;
      w.window_right = opts.window_right;
      w.sinks = opts.sinks;
      w.softcap = opts.softcap;
      w.bwd = opts.bwd;
      w.deterministic = opts.deterministic;
      w.page_size = opts.page_size;
      w.varlen = opts.varlen || opts.page_size > 0;
      out.push_back(w);
      continue;
    }
    for (int hdim : kSweepHeadDims) {
      for (int seqlen : kSweepSeqlens) {
        for (bool causal : {false, true}) {
          Workload w;
          w.kernel = kernel;
          w.dtype = opts.dtype;
          w.dist = opts.dist;
          w.fp8_scaling = opts.fp8.value_or(Fp8Scaling::per_tensor);
          w.batch = kSweepTokens / seqlen;
          w.heads = w.kv_heads = kSweepHidden / hdim;
          w.seqlen_q = w.seqlen_k = seqlen;
          w.hdim = w.hdim_v = hdim;
          w.causal = causal;
          w.sinks = opts.sinks;
          w.softcap = opts.softcap;
          w.bwd = opts.bwd;
          w.deterministic = opts.deterministic;
          w.page_size = opts.page_size;
          w.varlen = opts.varlen || opts.page_size > 0;
          out.push_back(w);
        }
      }
    }
  }
  return out;
}

int64_t visible_pairs(int seqlen_q, int seqlen_k, int left, int right) {
  int64_t pairs = 0;
  for (int64_t i = 0; i < seqlen_q; ++i) {
    const int64_t diag = i + seqlen_k - seqlen_q;
    const int64_t lo = left < 0 ? 0 : std::max<int64_t>(0, diag - left);
    const int64_t hi = right < 0 ? seqlen_k : std::min<int64_t>(seqlen_k, diag + right + 1);
    pairs += std::max<int64_t>(0, hi - lo);
  }
  return pairs;
}

// Two GEMMs per visible (query, key) pair: 2*head_dim for S = Q*K^T and 2*head_dim_v for O += P*V.
// Which pairs count:
//   no mask                         sq*sk                      ("dense")
//   causal, sq == sk, no left bound sq*sk/2                    ("causal/2", FlashAttention's
//                                   convention, which peers quote; the exact count is sq*(sq+1)/2)
//   any other mask                  the exact visible count    ("exact")
FlopCount forward_flops(const Workload& w) {
  const int right = w.causal ? 0 : w.window_right;
  const double per_pair = 2.0 * (w.hdim + w.hdim_v) * w.batch * w.heads;
  const double dense = static_cast<double>(w.seqlen_q) * w.seqlen_k;
  if (w.window_left < 0 && right < 0) return {per_pair * dense, "dense"};
  if (w.causal && w.window_left < 0 && w.seqlen_q == w.seqlen_k) {
    return {per_pair * dense / 2, "causal/2"};
  }
  const auto pairs = visible_pairs(w.seqlen_q, w.seqlen_k, w.window_left, right);
  return {per_pair * static_cast<double>(pairs), "exact"};
}

FlopCount workload_flops(const Workload& w) {
  FlopCount f = forward_flops(w);
  if (w.bwd) f.flops *= 2.5;
  return f;
}

const char* flop_convention_help() {
  return "  2*b*h*pairs*(hdim + hdim_v), pairs = the visible (query, key) pairs:\n"
         "  sq*sk without a mask; sq*sk/2 for causal with sq == sk and no left window (the\n"
         "  FlashAttention convention the peers use); otherwise the exact count of the\n"
         "  bottom-right aligned mask (row i sees keys [i+sk-sq-L, i+sk-sq+R]).\n"
         "  --bwd: 2.5x that (FlashAttention's convention for the backward's five GEMMs).\n";
}

std::string describe(const Workload& w) {
  // Appends piecewise: GCC 12 at -O3 warns (-Wrestrict, a false positive) on "literal" + string.
  std::string s = kernel_name(w.kernel);
  if (w.dtype != DType::bf16) s.append(" ").append(dtype_name(w.dtype));
  if (w.block_scaled()) s.append(" ").append(fp8_scaling_name(w.fp8_scaling));
  s.append(" hd").append(std::to_string(w.hdim));
  if (w.hdim_v != w.hdim) s.append("/").append(std::to_string(w.hdim_v));
  s.append(" s").append(std::to_string(w.seqlen_q));
  if (w.seqlen_k != w.seqlen_q) s.append("x").append(std::to_string(w.seqlen_k));
  if (w.bwd) s.append(w.deterministic ? " bwd(det)" : " bwd");
  if (w.causal) s.append(" causal");
  if (w.page_size > 0) {
    s.append(" paged").append(std::to_string(w.page_size));
  } else if (w.varlen) {
    s.append(" varlen");
  }
  if (w.sinks) s.append(" sinks");
  if (w.dist == InputDist::outliers) s.append(" outliers");
  if (w.softcap > 0.f) {
    char cap[32];
    std::snprintf(cap, sizeof cap, " softcap%g", static_cast<double>(w.softcap));
    s.append(cap);
  }
  if (w.window_left >= 0 || w.window_right >= 0) {
    s.append(" win")
        .append(std::to_string(w.window_left))
        .append(",")
        .append(std::to_string(w.window_right));
  }
  return s;
}

}  // namespace flashattn::bench
