// JSON written by hand: a handful of flat fields per record does not justify a library.
#include <cmath>
#include <cstdio>
#include <string>

#include "report.h"

namespace flashattn::bench {
namespace {

std::string escape(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string number(double x) {  // JSON has no NaN or infinity
  if (!std::isfinite(x)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::string boolean(bool b) {
  return b ? "true" : "false";
}

std::string record_json(const Record& r) {
  const Workload& w = r.w;
  const bool checked = r.check.ran;
  std::string s = "    {";
  s += "\"kernel\": " + escape(r.kernel);
  if (r.automatic) s += ", \"requested\": \"auto\"";
  s += ", \"dtype\": " + escape(dtype_name(w.dtype));
  s += ", \"out_dtype\": " + escape(dtype_name(w.out_dtype()));
  s += ", \"dist\": " + escape(w.dist == InputDist::outliers ? "outliers" : "normal");
  if (w.fp8()) {  // how the e4m3 inputs were made; K8's time includes its quantize_fp8 pre-pass
    s += ", \"fp8\": " + escape(fp8_scaling_name(w.fp8_scaling));
    if (w.fp8_scaling == Fp8Scaling::per_block_hadamard)
      s += ", \"rotation_seed\": " + std::to_string(kRotationSeed);
  }
  s += ", \"batch\": " + std::to_string(w.batch);
  s += ", \"heads\": " + std::to_string(w.heads);
  s += ", \"kv_heads\": " + std::to_string(w.kv_heads);
  s += ", \"seqlen_q\": " + std::to_string(w.seqlen_q);
  s += ", \"seqlen_k\": " + std::to_string(w.seqlen_k);
  s += ", \"hdim\": " + std::to_string(w.hdim);
  s += ", \"hdim_v\": " + std::to_string(w.hdim_v);
  s += ", \"causal\": " + boolean(w.causal);
  if (w.sinks) s += ", \"sinks\": true";
  if (w.varlen) s += ", \"varlen\": true";
  if (w.page_size > 0) s += ", \"page_size\": " + std::to_string(w.page_size);
  s += ", \"softcap\": " + number(w.softcap);
  s += ", \"window\": [" + std::to_string(w.window_left) + ", " + std::to_string(w.window_right) +
       "]";
  s += ", \"ms\": " + (r.ran ? number(r.timing.median_ms) : "null");
  s += ", \"ms_min\": " + (r.ran ? number(r.timing.min_ms) : "null");
  s += ", \"iters\": " + std::to_string(r.ran ? r.timing.iters : 0);
  s += ", \"tflops\": " + (r.ran ? number(r.tflops) : "null");
  if (r.prepass_ms > 0) {  // K8: the whole's parts, each timed on its own
    s += ", \"prepass_ms\": " + number(r.prepass_ms);
    s += ", \"forward_ms\": " + number(r.forward_ms);
  }
  s += ", \"flops\": " + number(r.flops.flops);
  s += ", \"flop_convention\": " + escape(r.flops.convention);
  s += ", \"max_err\": " + (checked ? number(r.check.result.max_err) : "null");
  s += ", \"max_err_pt\": " + (checked ? number(r.check.result.max_err_pt) : "null");
  if (w.bwd) {
    s += ", \"mode\": \"bwd\"";
    s += ", \"deterministic\": " + boolean(w.deterministic);
  }
  if (r.check.grad) {
    const reference::BackwardCheckResult& g = *r.check.grad;
    for (auto [name, c] :
         {std::pair{"dq", &g.dq}, {"dk", &g.dk}, {"dv", &g.dv}, {"dsinks", &g.dsinks}}) {
      if (c->checked == 0) continue;
      s += std::string(", \"") + name + "_max_err\": " + number(c->max_err);
      s += std::string(", \"") + name + "_max_err_pt\": " + number(c->max_err_pt);
      s += std::string(", \"") + name + "_atol\": " + number(c->atol);
    }
    s += ", \"check_units\": " + std::to_string(r.check.rows);
    s += ", \"check_sampled\": " + boolean(r.check.sampled);
  } else if (checked) {
    s += ", \"atol\": " + number(r.check.result.atol);
    s += ", \"lse_max_err\": " + number(r.check.result.lse_max_err);
    s += ", \"rmse\": " + number(r.check.result.rmse);
    if (r.check.vs_original) {  // FP8: against the bf16 data before quantisation
      s += ", \"max_err_original\": " + number(r.check.vs_original->max_err);
      s += ", \"rmse_original\": " + number(r.check.vs_original->rmse);
    }
    s += ", \"check_rows\": " + std::to_string(r.check.rows);
    s += ", \"check_sampled\": " + boolean(r.check.sampled);
  }
  if (r.decode) {
    s += ", \"mode\": \"decode\"";
    s += ", \"page_size\": " + std::to_string(r.decode->page_size);
    s += ", \"num_splits\": " + std::to_string(r.decode->num_splits);
    s += ", \"rotary_dim\": " + std::to_string(r.decode->rotary_dim);
    if (r.decode->rotary_dim > 0)
      s += std::string(", \"rotary_interleaved\": ") +
           (r.decode->rotary_interleaved ? "true" : "false");
    s += std::string(", \"kv_dtype\": \"") + (r.decode->kv_e4m3 ? "e4m3" : dtype_name(r.w.dtype)) +
         "\"";
    s += ", \"bytes\": " + number(r.decode->kv_bytes);
    s += ", \"gbps\": " + (r.ran ? number(r.decode->gbps) : "null");
    s += ", \"copy_gbps\": " + number(r.decode->copy_gbps);
    s += std::string(", \"timing\": \"") + (r.decode->graph ? "cuda_graph" : "events") + "\"";
  }
  s += ", \"ok\": " + boolean(r.ok);
  if (r.skipped) s += ", \"skipped\": true";
  if (!r.error.empty()) s += ", \"error\": " + escape(r.error);
  return s + "}";
}

}  // namespace

bool write_json(const std::string& path, const RunInfo& info, const std::vector<Record>& records) {
  std::string s = "{\n";
  s += "  \"device\": " + escape(info.device) + ",\n";
  s += "  \"sm_clock_mhz\": " + (info.sm_clock_mhz ? std::to_string(*info.sm_clock_mhz) : "null") +
       ",\n";
  s += "  \"host\": " + escape(info.host) + ",\n";
  s += "  \"date\": " + escape(info.date) + ",\n";
  s += "  \"command\": " + escape(info.command) + ",\n";
  s += "  \"seed\": " + std::to_string(info.seed) + ",\n";
  s += "  \"records\": [\n";
  for (size_t i = 0; i < records.size(); ++i) {
    s += record_json(records[i]) + (i + 1 < records.size() ? ",\n" : "\n");
  }
  s += "  ]\n}\n";

  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const bool wrote = std::fwrite(s.data(), 1, s.size(), f) == s.size();
  return std::fclose(f) == 0 && wrote;
}

}  // namespace flashattn::bench
