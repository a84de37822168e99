// Table-driven parser: every flag is one row (name, value placeholder, help, how to apply it), so
// --help and the parser cannot drift apart.
#include "args.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>

#include "workload.h"

namespace flashattn::bench {
namespace {

constexpr int64_t kMaxSeqlen = int64_t{1} << 24;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxBatch = int64_t{1} << 20;

// Returns an error message, or an empty string on success.
using Apply = std::function<std::string(Options&, std::string_view)>;

struct Flag {
  const char* name;
  const char* metavar;  // nullptr: a switch that takes no value
  const char* help;
  Apply apply;
};

std::string quote(std::string_view s) {
  std::string out;  // appended piecewise: "'" + string trips GCC 12's -Wrestrict false positive
  out.append("'").append(s).append("'");
  return out;
}

template <typename T>
std::string parse_number(std::string_view flag, std::string_view text, T lo, T hi, T& out) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) {
    return std::string(flag) + ": " + quote(text) + " is out of range [" + std::to_string(lo) +
           ", " + std::to_string(hi) + "]";
  }
  if (ec != std::errc() || ptr != end || text.empty()) {
    return std::string(flag) + ": expected an integer, got " + quote(text);
  }
  if (value < lo || value > hi) {
    return std::string(flag) + ": " + std::to_string(value) + " is out of range [" +
           std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  out = value;
  return {};
}

// A flag that stores an int within [lo, hi] into one or two fields.
Apply int_field(const char* flag, int Options::*field, int64_t lo, int64_t hi,
                int Options::*also = nullptr) {
  return [=](Options& o, std::string_view v) {
    int64_t n = 0;
    std::string err = parse_number<int64_t>(flag, v, lo, hi, n);
    if (err.empty()) {
      o.*field = static_cast<int>(n);
      if (also != nullptr) o.*also = static_cast<int>(n);
    }
    return err;
  };
}

std::string parse_kernels(std::string_view v, std::vector<Kernel>& out) {
  out.clear();
  if (v == "all") {
    for (Kernel k : kAllKernels) {
      if (k != Kernel::automatic && kernel_is_built(k)) out.push_back(k);
    }
    if (out.empty()) return "--kernel: 'all' found no built kernel";
    return {};
  }
  while (true) {
    const size_t comma = v.find(',');
    const std::string_view name = v.substr(0, comma);
    const std::optional<Kernel> k = parse_kernel(name);
    if (!k) {
      std::string known;
      for (Kernel each : kAllKernels)
        known += std::string(known.empty() ? "" : ", ") + kernel_name(each);
      return "--kernel: unknown kernel " + quote(name) + " (known: " + known + ", all)";
    }
    out.push_back(*k);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return {};
}

std::string parse_window(std::string_view v, Options& o) {
  const size_t comma = v.find(',');
  const std::string bad =
      "--window: expected L,R (two integers >= -1, -1 unbounded), got " + quote(v);
  if (comma == std::string_view::npos) return bad;
  int64_t left = 0, right = 0;
  if (!parse_number<int64_t>("--window", v.substr(0, comma), -1, kMaxSeqlen, left).empty() ||
      !parse_number<int64_t>("--window", v.substr(comma + 1), -1, kMaxSeqlen, right).empty()) {
    return bad;
  }
  o.window_left = static_cast<int>(left);
  o.window_right = static_cast<int>(right);
  return {};
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"--kernel", "LIST", "kernel name, comma list, or 'all' (every built kernel but auto) [auto]",
       [](Options& o, std::string_view v) { return parse_kernels(v, o.kernels); }},
      {"--batch", "N", "batch size [2]", int_field("--batch", &Options::batch, 1, kMaxBatch)},
      {"--heads", "N", "query heads [16]", int_field("--heads", &Options::heads, 1, kMaxHeads)},
      {"--kv-heads", "N", "key/value heads (GQA/MQA) [= heads]",
       int_field("--kv-heads", &Options::kv_heads, 1, kMaxHeads)},
      {"--seqlen", "N", "sets both --seqlen-q and --seqlen-k [1024]",
       int_field("--seqlen", &Options::seqlen_q, 1, kMaxSeqlen, &Options::seqlen_k)},
      {"--seqlen-q", "N", "query length [1024]",
       int_field("--seqlen-q", &Options::seqlen_q, 1, kMaxSeqlen)},
      {"--seqlen-k", "N", "key length [1024]",
       int_field("--seqlen-k", &Options::seqlen_k, 1, kMaxSeqlen)},
      {"--hdim", "N", "head dim of q and k [128]",
       int_field("--hdim", &Options::hdim, 1, kMaxHeadDim)},
      {"--hdim-v", "N", "head dim of v and o [= hdim]",
       int_field("--hdim-v", &Options::hdim_v, 1, kMaxHeadDim)},
      {"--dtype", "TYPE",
       "element type of q, k, v: bf16, fp16, or FP8 e4m3 (k7 on the GPU, cpu\n"
       "                         on the host): drawn in bf16, quantised per (batch, KV head)\n"
       "                         with descale amax/448 (or as --fp8 says), o in bf16; e5m2 has\n"
       "                         no kernel [bf16]",
       [](Options& o, std::string_view v) -> std::string {
         const std::optional<DType> d = parse_dtype(v);
         if (!d) return "--dtype: expected bf16, fp16, e4m3 or e5m2, got " + quote(v);
         o.dtype = *d;
         o.dtype_given = true;
         return {};
       }},
      {"--fp8", "MODE",
       "FP8 e4m3 inputs (implies --dtype e4m3), quantised from bf16 data:\n"
       "                         per_tensor: once on the host, descale amax/448 per (batch, kv\n"
       "                         head) (k7; = --dtype e4m3); per_block: bf16 on the device and\n"
       "                         every timed run is quantize_fp8() (one descale per block of\n"
       "                         rows) then the forward on its output (k8; the pre-pass is in\n"
       "                         the time; the JSON adds prepass_ms and forward_ms, each part\n"
       "                         timed alone); per_block_hadamard: the same with q and k rotated\n"
       "                         (Hadamard, rotation seed 17: kRotationSeed) [per_tensor]",
       [](Options& o, std::string_view v) -> std::string {
         std::optional<Fp8Scaling> mode;
         for (Fp8Scaling s :
              {Fp8Scaling::per_tensor, Fp8Scaling::per_block, Fp8Scaling::per_block_hadamard}) {
           if (v == fp8_scaling_name(s)) mode = s;
         }
         if (!mode) {
           return "--fp8: expected 'per_tensor', 'per_block' or 'per_block_hadamard', got " +
                  quote(v);
         }
         o.fp8 = *mode;
         return {};
       }},
      {"--dist", "normal|outliers",
       "q, k, v distribution: N(0,1), or FlashAttention-3's outliers\n"
       "                         N(0,1) + N(0,100)*Bernoulli(0.001) [normal]",
       [](Options& o, std::string_view v) -> std::string {
         if (v != "normal" && v != "outliers")
           return "--dist: expected 'normal' or 'outliers', got " + quote(v);
         o.dist = v == "outliers" ? InputDist::outliers : InputDist::normal;
         return {};
       }},
      {"--causal", nullptr, "causal mask (bottom-right aligned)",
       [](Options& o, std::string_view) -> std::string {
         o.causal = true;
         return {};
       }},
      {"--sinks", nullptr,
       "learnable attention sinks: one logit per query head, drawn from the seed in [-4, 4]",
       [](Options& o, std::string_view) -> std::string {
         o.sinks = true;
         return {};
       }},
      {"--softcap", "X", "logit soft-capping: scores become X*tanh(scores/X) (0: off) [0]",
       [](Options& o, std::string_view v) -> std::string {
         float x = 0.f;
         const char* end = v.data() + v.size();
         auto [ptr, ec] = std::from_chars(v.data(), end, x);
         if (ec != std::errc() || ptr != end || v.empty() || !std::isfinite(x) || x < 0.f) {
           return "--softcap: expected a finite number >= 0, got " + quote(v);
         }
         o.softcap = x;
         return {};
       }},
      {"--window", "L,R", "local window: keys [i-L, i+R] around the diagonal, -1 unbounded",
       [](Options& o, std::string_view v) { return parse_window(v, o); }},
      {"--iters", "N", "measured iterations per config (fewer when one run takes > 1 s) [20]",
       int_field("--iters", &Options::iters, 1, 100000)},
      {"--warmup", "N", "warm-up runs [5 on the GPU, 1 for the cpu kernel]",
       [](Options& o, std::string_view v) {
         int64_t n = 0;
         std::string err = parse_number<int64_t>("--warmup", v, 0, 10000, n);
         if (err.empty()) o.warmup = static_cast<int>(n);
         return err;
       }},
      {"--check", nullptr,
       "check each config against the fp64 reference (exit 1 on FAIL); e4m3: the\n"
       "                         FP8 oracle on the dequantised inputs, plus the error against\n"
       "                         the bf16 data before quantisation (reported, not judged)",
       [](Options& o, std::string_view) -> std::string {
         o.check = true;
         return {};
       }},
      {"--sweep", "standard",
       "TESTING.md's 36 configs (16k tokens, hidden 2048, hdim 64/128/256,\n"
       "                         seqlen 512..16384, causal off/on); replaces the shape flags;\n"
       "                         'decode': the decode grid (see --decode)",
       [](Options& o, std::string_view v) -> std::string {
         if (v == "decode") {  // the decode grid of tools/bench/decode.cpp
           o.sweep_decode = true;
           return {};
         }
         if (v != "standard") return "--sweep: expected 'standard' or 'decode', got " + quote(v);
         o.sweep_standard = true;
         return {};
       }},
      {"--max-seqlen", "N", "skip (and list as skipped) configs with a longer sequence",
       int_field("--max-seqlen", &Options::max_seqlen, 1, kMaxSeqlen)},
      {"--json", "FILE", "write the records as JSON (rewritten after every config)",
       [](Options& o, std::string_view v) -> std::string {
         if (v.empty()) return "--json: expected a file name";
         o.json_path = std::string(v);
         return {};
       }},
      {"--seed", "S", "input seed [fresh from std::random_device, printed]",
       [](Options& o, std::string_view v) {
         uint64_t s = 0;
         std::string err =
             parse_number<uint64_t>("--seed", v, 0, std::numeric_limits<uint64_t>::max(), s);
         if (err.empty()) o.seed = s;
         return err;
       }},
      {"--device", "N", "CUDA device ordinal [0]",
       int_field("--device", &Options::device, 0, 1023)},
      {"--bwd", nullptr,
       "time flashattn::backward (the forward runs once for o and lse; dout\n"
       "                         from the seed); TFLOP/s with 2.5x the forward's FLOPs",
       [](Options& o, std::string_view) -> std::string {
         o.bwd = true;
         return {};
       }},
      {"--deterministic", nullptr,
       "with --bwd: BackwardParams::deterministic (bitwise reproducible gradients)",
       [](Options& o, std::string_view) -> std::string {
         o.deterministic = true;
         return {};
       }},
      {"--decode", "Q",
       "time flashattn::decode: Q query tokens (1..16) against a KV cache of\n"
       "                         --seqlen-k tokens per entry; GB/s of K+V read vs a D2D copy",
       int_field("--decode", &Options::decode_q, 1, 16)},
      {"--page-size", "N",
       "decode: paged KV cache with this page size; forward: a --varlen call\n"
       "                         reading k/v from a paged cache (block_table, shuffled blocks)\n"
       "                         of this page size [0: contiguous]",
       int_field("--page-size", &Options::page_size, 0, kMaxSeqlen)},
      {"--varlen", nullptr,
       "forward: the batch as one variable-length call (cu_seqlens, every\n"
       "                         sequence seqlen-q x seqlen-k): the baseline of --page-size",
       [](Options& o, std::string_view) -> std::string {
         o.varlen = true;
         return {};
       }},
      {"--graph", nullptr,
       "decode: time replays of one CUDA graph holding 8 rounds over the input\n"
       "                         sets (serving's way; records say timing \"cuda_graph\") instead "
       "of\n"
       "                         each call between CUDA events",
       [](Options& o, std::string_view) -> std::string {
         o.graph = true;
         return {};
       }},
      {"--splits", "N", "decode: KV splits [0: the heuristic]",
       int_field("--splits", &Options::num_splits, 0, 128)},
      {"--rotary-dim", "N",
       "decode: rotary embedding of q over its first N dims (even, <= hdim),\n"
       "                         standard tables (theta 10000); query i at seqlen-k + i when "
       "causal\n"
       "                         or windowed, else all at seqlen-k (flash-attn's rule) [0: off]",
       int_field("--rotary-dim", &Options::rotary_dim, 0, kMaxHeadDim)},
      {"--kv-dtype", "same|e4m3",
       "decode: the KV cache's element type: the --dtype of q (same), or e4m3 with\n"
       "                         per-tensor scales (k 0.5, v 0.25; powers of two, so --check's\n"
       "                         dequantised cache is exact in --dtype) [same]",
       [](Options& o, std::string_view v) -> std::string {
         if (v != "same" && v != "e4m3")
           return "--kv-dtype: expected 'same' or 'e4m3', got " + quote(v);
         o.kv_e4m3 = v == "e4m3";
         return {};
       }},
      {"--rotary-interleaved", nullptr,
       "decode: rotate pairs (0,1),(2,3)... (GPT-J) instead of halves (GPT-NeoX)",
       [](Options& o, std::string_view) -> std::string {
         o.rotary_interleaved = true;
         return {};
       }},
      // Ablations and diagnosis (flashattn::DebugOptions; the library reads no environment).
      {"--fa4", "none|rescale",
       "k4-k6 softmax: 'rescale' keeps FlashAttention-4's conditional O\n"
       "                         rescaling (skip while the row max grew by <= 8), 'none'\n"
       "                         rescales whenever the max moves [rescale]",
       [](Options& o, std::string_view v) -> std::string {
         if (v != "none" && v != "rescale") {
           return "--fa4: expected 'none' or 'rescale', got " + quote(v);
         }
         o.debug.conditional_rescale = v == "rescale";
         return {};
       }},
      {"--no-persistent", nullptr,
       "k6 (forward and --bwd): one block per tile, scheduled by the hardware,\n"
       "                         instead of one persistent block per SM walking the tiles",
       [](Options& o, std::string_view) -> std::string {
         o.debug.persistent = false;
         return {};
       }},
      {"--timeline-out", "FILE",
       "builds with -DFLASHATTN_TIMELINE=ON: each Hopper launch writes its\n"
       "                         per-warp timeline to FILE (bench/timeline.py reads it)",
       [](Options& o, std::string_view v) -> std::string {
         if (v.empty()) return "--timeline-out: expected a file name";
         o.timeline_out = std::string(v);
         return {};
       }},
  };
  return table;
}

}  // namespace

const char* fp8_scaling_name(Fp8Scaling s) {
  switch (s) {
    case Fp8Scaling::per_tensor: return "per_tensor";
    case Fp8Scaling::per_block: return "per_block";
    case Fp8Scaling::per_block_hadamard: return "per_block_hadamard";
  }
  return "?";
}

void print_usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: flashattn-bench [flags]\n"
      "Times flashattn::forward (flashattn::backward with --bwd) on one workload, or on the\n"
      "standard grid, per kernel.\n\n");
  for (const Flag& f : flags()) {
    std::string head = std::string(f.name) + (f.metavar ? std::string(" ") + f.metavar : "");
    std::fprintf(out, "  %-22s %s\n", head.c_str(), f.help);
  }
  std::fprintf(out, "  %-22s %s\n\n", "--help, -h", "this text");
  std::fprintf(out, "FLOPs (TFLOP/s column):\n%s\n", flop_convention_help());
  std::fprintf(out,
               "Timing: CUDA events per iteration (steady_clock for the cpu kernel), median and "
               "min;\ninputs rotate among copies totalling > 256 MB so L2 cannot hold them. After "
               "warm-up, a\nconfig whose run takes > 1 s gets fewer iterations (>= 3, ~10 s "
               "total).\n"
               "Exit codes: 0 ok, 1 a --check FAIL or a run error, 2 a refused argument.\n");
}

ParseOutcome parse_args(int argc, char** argv, Options& opts, std::string& error) {
  for (int i = 0; i < argc; ++i) {
    if (i > 0) opts.command += ' ';
    opts.command += argv[i];
  }
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") return ParseOutcome::help;
    std::optional<std::string_view> inline_value;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags()) {
      if (arg == f.name) flag = &f;
    }
    if (flag == nullptr) {
      error = "unknown flag " + quote(argv[i]) + " (see --help)";
      return ParseOutcome::error;
    }
    std::string_view value;
    if (flag->metavar == nullptr) {
      if (inline_value) {
        error = std::string(flag->name) + ": takes no value";
        return ParseOutcome::error;
      }
    } else if (inline_value) {
      value = *inline_value;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      error = std::string(flag->name) + ": missing value (" + flag->metavar + ")";
      return ParseOutcome::error;
    }
    error = flag->apply(opts, value);
    if (!error.empty()) return ParseOutcome::error;
  }
  // --fp8 names how e4m3 inputs are made: it implies e4m3 (an explicit other dtype conflicts).
  if (opts.fp8) {
    if (opts.dtype_given && opts.dtype != DType::e4m3) {
      error = std::string("--fp8: quantises to e4m3, not with --dtype ") + dtype_name(opts.dtype);
      return ParseOutcome::error;
    }
    opts.dtype = DType::e4m3;
  }
  const bool debug_set = !opts.debug.conditional_rescale || !opts.debug.persistent ||
                         !opts.timeline_out.empty();
  if (opts.deterministic && !opts.bwd) {
    error = "--deterministic: only with --bwd (the forward is deterministic already)";
    return ParseOutcome::error;
  }
  if (opts.bwd && (opts.decode_q > 0 || opts.sweep_decode)) {
    error = "--bwd: decode (--decode, --sweep decode) has no backward";
    return ParseOutcome::error;
  }
  const bool decode_mode = opts.decode_q > 0 || opts.sweep_decode;
  if (opts.varlen && (opts.bwd || decode_mode)) {
    error = "--varlen: forward runs only (not with --bwd, --decode or --sweep decode)";
    return ParseOutcome::error;
  }
  if (opts.page_size > 0 && opts.bwd) {
    error = "--page-size: not with --bwd (a paged call has no backward)";
    return ParseOutcome::error;
  }
  if (opts.rotary_dim > 0 && opts.decode_q == 0 && !opts.sweep_decode) {
    error = "--rotary-dim: only with --decode or --sweep decode (rotary is a decode option)";
    return ParseOutcome::error;
  }
  if (opts.graph && !decode_mode) {
    error = "--graph: only with --decode or --sweep decode (graph timing is for decode steps)";
    return ParseOutcome::error;
  }
  if (opts.kv_e4m3 && opts.decode_q == 0 && !opts.sweep_decode) {
    error = "--kv-dtype: only with --decode or --sweep decode (an FP8 KV cache is a decode option)";
    return ParseOutcome::error;
  }
  if (opts.dist != InputDist::normal && decode_mode) {
    error = "--dist: not with --decode or --sweep decode (decode draws N(0, 1) inputs)";
    return ParseOutcome::error;
  }
  if (opts.fp8.value_or(Fp8Scaling::per_tensor) != Fp8Scaling::per_tensor) {
    const std::string flag = std::string("--fp8 ") + fp8_scaling_name(*opts.fp8);
    if (opts.bwd || decode_mode) {
      error = flag + ": forward only (not with --bwd, --decode or --sweep decode)";
      return ParseOutcome::error;
    }
    if (opts.varlen || opts.page_size > 0) {
      error = flag + ": dense batches only (block descales have no --varlen or --page-size form)";
      return ParseOutcome::error;
    }
  }
  if (opts.rotary_interleaved && opts.rotary_dim == 0) {
    error = "--rotary-interleaved: only with --rotary-dim N";
    return ParseOutcome::error;
  }
  if (debug_set && (opts.decode_q > 0 || opts.sweep_decode)) {
    error = "--fa4, --no-persistent and --timeline-out switch the forward kernels; decode "
            "(--decode, --sweep decode) has none of them";
    return ParseOutcome::error;
  }
  return ParseOutcome::run;
}

}  // namespace flashattn::bench
