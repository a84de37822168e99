#include <string>

#include "report.h"

namespace flashattn::bench {
namespace {

const char* row_status(const Record& r) {
  if (r.skipped) return "skip";
  if (r.ok) return "ok";
  if (r.ran && r.check.ran && !r.check.result.ok) return "FAIL";
  return "ERR";
}

std::string window_text(const Workload& w) {
  if (w.window_left < 0 && w.window_right < 0) return "-";
  return std::to_string(w.window_left) + "," + std::to_string(w.window_right);
}

std::string kernel_text(const Record& r) {
  if (r.automatic && r.kernel != "auto") return "auto->" + r.kernel;
  return r.kernel;
}

std::string head_dim_text(const Workload& w) {
  if (w.hdim == w.hdim_v) return std::to_string(w.hdim);
  return std::to_string(w.hdim) + "/" + std::to_string(w.hdim_v);
}

}  // namespace

std::string format_tflops(double tflops) {
  // One decimal is plenty on the GPU; the cpu kernel's rates need three to show more than 0.0.
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", tflops >= 10 ? 1 : 3, tflops);
  return buf;
}

void print_table_header(std::FILE* out) {
  std::fprintf(out, "%-10s %-5s %5s %5s %5s %7s %7s %7s %6s %11s %10s %8s %9s %4s\n", "kernel",
               "dtype", "b", "h", "hkv", "sq", "sk", "d", "causal", "window", "ms", "TFLOP/s",
               "max_err", "ok");
}

void print_table_row(std::FILE* out, const Record& r) {
  const Workload& w = r.w;
  std::fprintf(out, "%-10s %-5s %5d %5d %5d %7d %7d %7s %6d %11s ", kernel_text(r).c_str(),
               dtype_name(w.dtype), w.batch, w.heads, w.kv_heads, w.seqlen_q, w.seqlen_k,
               head_dim_text(w).c_str(), w.causal ? 1 : 0, window_text(w).c_str());
  if (r.ran) {
    std::fprintf(out, "%10.4f %8s ", r.timing.median_ms, format_tflops(r.tflops).c_str());
  } else {
    std::fprintf(out, "%10s %8s ", "-", "-");
  }
  if (r.check.ran) {
    std::fprintf(out, "%9.2e ", r.check.result.max_err);
  } else {
    std::fprintf(out, "%9s ", "-");
  }
  std::fprintf(out, "%4s\n", row_status(r));

  if (r.ran && r.timing.iters < r.iters_requested) {
    std::fprintf(out, "    iters: %d of %d (one run takes %.0f ms; capped at ~10 s per config)\n",
                 r.timing.iters, r.iters_requested, r.timing.median_ms);
  }
  if (r.check.grad) {
    const reference::BackwardCheckResult& g = *r.check.grad;
    std::fprintf(out, "    check:");
    for (auto [name, c] :
         {std::pair{"dq", &g.dq}, {"dk", &g.dk}, {"dv", &g.dv}, {"dsinks", &g.dsinks}}) {
      if (c->checked == 0) continue;
      std::fprintf(out, " %s %.3e (pt %.3e, atol %.3e)%s", name, c->max_err, c->max_err_pt, c->atol,
                   c->not_finite > 0 ? " NOT FINITE" : "");
    }
    std::fprintf(out, " | %lld %s (batch, kv head) units | %s\n",
                 static_cast<long long>(r.check.rows), r.check.sampled ? "sampled" : "(all)",
                 g.ok ? "PASS" : "FAIL");
  } else if (r.check.ran) {
    const reference::CheckResult& c = r.check.result;
    std::fprintf(out,
                 "    check: max_err %.3e max_err_pt %.3e atol %.3e | lse_err %.3e (pt %.3e, "
                 "atol %.3e) | %lld %s rows",
                 c.max_err, c.max_err_pt, c.atol, c.lse_max_err, c.lse_max_err_pt, c.lse_atol,
                 static_cast<long long>(r.check.rows), r.check.sampled ? "sampled" : "(all)");
    if (c.not_finite > 0)
      std::fprintf(out, ", %lld not finite", static_cast<long long>(c.not_finite));
    std::fprintf(out, " | rmse %.3e", c.rmse);
    if (r.check.vs_original) {  // FP8 inputs: the accuracy against the data before quantisation
      std::fprintf(out, " (vs bf16 before quantisation: rmse %.3e, max_err %.3e)",
                   r.check.vs_original->rmse, r.check.vs_original->max_err);
    }
    std::fprintf(out, " | %s\n", c.ok ? "PASS" : "FAIL");
  }
  if (!r.error.empty() && !r.skipped) std::fprintf(out, "    %s\n", r.error.c_str());
  std::fflush(out);
}

}  // namespace flashattn::bench
