// Runs one workload end to end: allocate, validate, fill, time, and optionally check.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>

#include "flashattn/reference.h"
#include "timing.h"
#include "workload.h"
#include "workspace.h"

namespace flashattn::bench {

struct CheckSummary {
  bool ran = false;
  bool sampled = false;  // a sample of rows (units, backward) instead of all (large shapes)
  int64_t rows = 0;      // rows checked; backward: (batch, KV head) units
  reference::CheckResult result;  // backward: ok, detail and the largest of dq/dk/dv's errors
  // FP8 inputs: the output against the fp64 attention of the bf16 data before quantisation
  // (TESTING.md's accuracy report; not a pass/fail rule), on the same rows.
  std::optional<reference::CheckResult> vs_original;
  std::optional<reference::BackwardCheckResult> grad;  // backward mode: per gradient
};

// Decode records (--decode) add the cache layout and the bandwidth figures.
struct DecodeInfo {
  int page_size = 0;   // 0: contiguous cache
  int num_splits = 0;  // as requested (0: heuristic)
  double kv_bytes = 0;  // K and V bytes read per call
  double gbps = 0;      // kv_bytes / median time
  bool graph = false;   // timed as CUDA-graph replays (record field timing: "cuda_graph")
  double copy_gbps = 0;  // device-to-device copy in the same run, bytes read + written per second
  int rotary_dim = 0;    // rotary embedding of q (0: off)
  bool kv_e4m3 = false;  // an FP8 (e4m3) KV cache (record field kv_dtype)
  bool rotary_interleaved = false;
};

struct Record {
  Workload w;
  std::optional<DecodeInfo> decode;
  std::string kernel;       // the family that ran (auto resolved), or the requested name
  bool automatic = false;   // requested as auto
  bool skipped = false;     // over --max-seqlen
  bool ran = false;         // timing completed
  bool ok = false;          // ran, and passed the check if one was asked for
  bool run_failed = false;  // failed after can_implement accepted it (exit code 1)
  Timing timing;
  int iters_requested = 0;  // the measured count may be lower for a slow kernel
  FlopCount flops;
  double tflops = 0;
  // K8 (--fp8 per_block / per_block_hadamard): medians of the pre-pass alone and of the forward
  // alone on its output, each timed like the whole (0 otherwise).
  double prepass_ms = 0;
  double forward_ms = 0;
  CheckSummary check;
  std::string error;
};

struct RunContext {
  int device_count = 0;  // 0 when cudaGetDeviceCount fails
  cudaStream_t stream = nullptr;
  uint64_t seed = 0;
  int iters = 20;
  int warmup_gpu = kDefaultWarmupGpu;
  int warmup_cpu = kDefaultWarmupCpu;
  bool check = false;
  int max_seqlen = 0;
  DebugOptions debug;  // set on every forward call, timed and checked
};

// Where a workload's tensors live: host for the cpu kernel, and for auto without a device.
Memory memory_for(Kernel kernel, int device_count);

// Never throws; every failure ends up in Record::error.
Record run_workload(const Workload& w, const RunContext& ctx);

// Poisons the outputs, runs `kernel` once on input set 0 and checks against the reference.
Status check_workload(Workspace& ws, Kernel kernel, const RunContext& ctx, CheckSummary& out);
// The same for the backward: the gradients against the fp64 reference gradients.
Status check_backward_workload(Workspace& ws, Kernel kernel, const RunContext& ctx,
                               CheckSummary& out);

}  // namespace flashattn::bench
