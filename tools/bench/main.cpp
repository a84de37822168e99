// flashattn-bench: times flashattn::forward (or, with --bwd, flashattn::backward) per kernel on one
// workload or the standard grid, and optionally checks each result against the fp64 reference.
// See --help.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "args.h"
#include "decode.h"
#include "report.h"
#include "runner.h"
#include "workload.h"

namespace flashattn::bench {
namespace {

constexpr int kExitRunFailed = 1;
constexpr int kExitBadArgument = 2;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: the host backend still works
    return 0;
  }
  return n;
}

uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

void print_progress(size_t index, size_t total, const Record& r) {
  const int width = static_cast<int>(std::to_string(total).size());
  std::fprintf(stderr, "[%*zu/%zu] %s ... ", width, index, total, describe(r.w).c_str());
  if (r.skipped) {
    std::fprintf(stderr, "skipped\n");
  } else if (!r.ran) {
    std::fprintf(stderr, "error\n");
  } else {
    std::fprintf(stderr, "%s TFLOP/s%s\n", format_tflops(r.tflops).c_str(), r.ok ? "" : " (FAIL)");
  }
}

int run_main(int argc, char** argv) {
  Options opts;
  std::string error;
  switch (parse_args(argc, argv, opts, error)) {
    case ParseOutcome::help: print_usage(stdout); return 0;
    case ParseOutcome::error:
      std::fprintf(stderr, "flashattn-bench: %s\n", error.c_str());
      return kExitBadArgument;
    case ParseOutcome::run: break;
  }

  const int device_count = cuda_device_count();
  const std::vector<Workload> workloads = make_workloads(opts);
  bool needs_device = false;
  for (const Workload& w : workloads) {
    needs_device |= memory_for(w.kernel, device_count) == Memory::device;
  }
  const bool uses_gpu = needs_device && device_count > 0;
  if (uses_gpu && opts.device >= device_count) {
    std::fprintf(stderr, "flashattn-bench: --device: %d is out of range (%d CUDA device%s)\n",
                 opts.device, device_count, device_count == 1 ? "" : "s");
    return kExitBadArgument;
  }

  RunInfo info;
  info.command = opts.command;
  info.seed = opts.seed ? *opts.seed : fresh_seed();
  info.date = utc_timestamp();
  info.host = cpu_model();
  info.device = uses_gpu ? gpu_name(opts.device) : "cpu: " + info.host;
  if (uses_gpu) info.sm_clock_mhz = gpu_sm_clock_mhz(opts.device);

  if (!opts.json_path.empty() && !write_json(opts.json_path, info, {})) {
    std::fprintf(stderr, "flashattn-bench: --json: cannot write '%s'\n", opts.json_path.c_str());
    return kExitBadArgument;
  }

  RunContext ctx;
  ctx.device_count = device_count;
  ctx.seed = info.seed;
  ctx.iters = opts.iters;
  ctx.warmup_gpu = opts.warmup.value_or(kDefaultWarmupGpu);
  ctx.warmup_cpu = opts.warmup.value_or(kDefaultWarmupCpu);
  ctx.check = opts.check;
  ctx.max_seqlen = opts.max_seqlen;
  ctx.debug = opts.debug;
  ctx.debug.timeline_out = opts.timeline_out.empty() ? nullptr : opts.timeline_out.c_str();
  if (uses_gpu) {
    cudaStream_t stream = nullptr;
    if (cudaSetDevice(opts.device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      std::fprintf(stderr, "flashattn-bench: cannot use CUDA device %d: %s\n", opts.device,
                   cudaGetErrorString(cudaGetLastError()));
      return kExitRunFailed;
    }
    ctx.stream = stream;
  }

  if (opts.decode_q > 0 || opts.sweep_decode) {  // decode mode: its own workloads and table
    const int rc = run_decode(opts, info, ctx);
    if (ctx.stream != nullptr) cudaStreamDestroy(ctx.stream);
    return rc;
  }

  std::printf("# device: %s", info.device.c_str());
  if (info.sm_clock_mhz) std::printf(" (peak SM clock %d MHz)", *info.sm_clock_mhz);
  std::printf("\n# seed: %llu\n", static_cast<unsigned long long>(info.seed));
  if (!ctx.debug.conditional_rescale || !ctx.debug.persistent || ctx.debug.timeline_out) {
    std::printf("# debug: conditional rescale %s, persistent %s, timeline %s\n",
                ctx.debug.conditional_rescale ? "on" : "off (--fa4 none)",
                ctx.debug.persistent ? "on" : "off (--no-persistent)",
                ctx.debug.timeline_out ? ctx.debug.timeline_out : "none");
  }
  const char* dist = opts.dist == InputDist::outliers
                         ? "N(0,1) + N(0,100)*Bernoulli(0.001) (FlashAttention-3's outliers)"
                         : "N(0,1)";
  const Fp8Scaling fp8 = opts.fp8.value_or(Fp8Scaling::per_tensor);
  if (opts.dtype == DType::e4m3 && fp8 != Fp8Scaling::per_tensor) {
    std::printf(
        "# inputs: %s drawn in bf16; every timed run is quantize_fp8() (e4m3, one descale per "
        "block of rows%s) then the forward on its output; o in bf16 (JSON: prepass_ms and "
        "forward_ms, each part timed alone)\n",
        dist,
        fp8 == Fp8Scaling::per_block_hadamard
            ? (", q and k rotated by Hadamard with seed " + std::to_string(kRotationSeed)).c_str()
            : "");
  } else if (opts.dtype == DType::e4m3) {
    std::printf(
        "# inputs: %s drawn in bf16, quantised to e4m3 per (batch, kv head) with descale "
        "amax/448; o in bf16\n",
        dist);
  } else if (opts.dist == InputDist::outliers) {
    std::printf("# inputs: %s\n", dist);
  }
  if (needs_device && device_count == 0) {
    std::printf("# no CUDA device: GPU kernels are recorded as errors; use --kernel cpu\n");
  }
  if (opts.bwd) {
    std::printf("# mode: backward%s (forward once for o and lse; FLOPs 2.5x the forward's)\n",
                opts.deterministic ? ", deterministic" : "");
  }
  print_table_header(stdout);

  std::vector<Record> records;
  int exit_code = 0;
  for (const Workload& w : workloads) {
    records.push_back(run_workload(w, ctx));
    const Record& r = records.back();
    print_table_row(stdout, r);
    if (opts.sweep_standard) print_progress(records.size(), workloads.size(), r);
    if (r.run_failed) exit_code = kExitRunFailed;
    if (!opts.json_path.empty() && !write_json(opts.json_path, info, records)) {
      std::fprintf(stderr, "flashattn-bench: cannot write '%s'\n", opts.json_path.c_str());
      exit_code = kExitRunFailed;
    }
  }
  const auto skipped =
      std::count_if(records.begin(), records.end(), [](const Record& r) { return r.skipped; });
  if (skipped > 0) {
    std::printf("# %zu config%s skipped: sequence longer than --max-seqlen %d\n",
                static_cast<size_t>(skipped), skipped == 1 ? "" : "s", opts.max_seqlen);
  }
  if (ctx.stream != nullptr) cudaStreamDestroy(ctx.stream);
  return exit_code;
}

}  // namespace
}  // namespace flashattn::bench

int main(int argc, char** argv) {
  try {
    return flashattn::bench::run_main(argc, argv);
  } catch (const std::exception& e) {  // a last resort: run_workload already catches per row
    std::fprintf(stderr, "flashattn-bench: %s\n", e.what());
    return 1;
  }
}
