#include "runner.h"

#include <chrono>
#include <exception>
#include <type_traits>
#include <vector>

namespace flashattn::bench {
namespace {

// cudaEvent_t pairs reused across batches.
class EventPool {
 public:
  EventPool() = default;
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  ~EventPool() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  Status reserve(size_t n) {
    while (events_.size() < n) {
      cudaEvent_t e = nullptr;
      if (Status st = cuda_status(cudaEventCreate(&e), "cudaEventCreate"); !st.ok()) return st;
      events_.push_back(e);
    }
    return Status::success();
  }
  cudaEvent_t operator[](size_t i) const { return events_[i]; }

 private:
  std::vector<cudaEvent_t> events_;
};

// The call being timed: forward(), backward(), or K8's pre-pass then forward(); with its
// validation and the family `auto` resolves to.
Status call(const ForwardParams& p, Kernel kernel) {
  return forward(p, kernel);
}
Status call(const BackwardParams& p, Kernel kernel) {
  return backward(p, kernel);
}
Status call(const QuantizedForward& p, Kernel kernel) {
  if (Status st = quantize_fp8(p.quantize); !st.ok()) return st;
  return forward(p.forward, kernel);
}
// K8's pre-pass alone (the breakdown of a QuantizedForward's time).
struct PrePassOnly {
  QuantizeFp8Params quantize;
};
Status call(const PrePassOnly& p, Kernel) {
  return quantize_fp8(p.quantize);
}

template <class P>
Status validate(const P& p, Kernel kernel) {
  return can_implement(p, kernel);
}
Status validate(const QuantizedForward& p, Kernel kernel) {
  if (Status st = can_quantize_fp8(p.quantize); !st.ok()) return st;
  return can_implement(p.forward, kernel);
}

template <class P>
Kernel resolve(const P& p) {
  return select_kernel(p);
}
Kernel resolve(const QuantizedForward& p) {
  return select_kernel(p.forward);
}

// Enqueues n runs back to back, each between its own pair of events, then waits once: the GPU
// never idles between runs, so host launch latency stays outside the measured intervals.
template <class P>
Status time_on_device(const std::vector<P>& params, Kernel kernel, int& next_set,
                      EventPool& events, cudaStream_t stream, int n, std::vector<double>& ms) {
  if (Status st = events.reserve(2 * static_cast<size_t>(n)); !st.ok()) return st;
  for (int i = 0; i < n; ++i) {
    const P& p = params[static_cast<size_t>(next_set)];
    next_set = (next_set + 1) % static_cast<int>(params.size());
    if (Status st = cuda_status(cudaEventRecord(events[2 * i], stream), "cudaEventRecord");
        !st.ok()) {
      return st;
    }
    if (Status st = call(p, kernel); !st.ok()) {
      cudaStreamSynchronize(stream);
      return st;
    }
    if (Status st = cuda_status(cudaEventRecord(events[2 * i + 1], stream), "cudaEventRecord");
        !st.ok()) {
      return st;
    }
  }
  if (Status st = cuda_status(cudaEventSynchronize(events[2 * n - 1]), "kernel run"); !st.ok()) {
    return st;
  }
  for (int i = 0; i < n; ++i) {
    float elapsed = 0;
    if (Status st = cuda_status(cudaEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]),
                                "cudaEventElapsedTime");
        !st.ok()) {
      return st;
    }
    ms.push_back(elapsed);
  }
  return Status::success();
}

template <class P>
Status time_on_host(const std::vector<P>& params, Kernel kernel, int& next_set, int n,
                    std::vector<double>& ms) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < n; ++i) {
    const P& p = params[static_cast<size_t>(next_set)];
    next_set = (next_set + 1) % static_cast<int>(params.size());
    const Clock::time_point start = Clock::now();
    if (Status st = call(p, kernel); !st.ok()) return st;
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return Status::success();
}

std::string describe_status(const Status& st) {
  return std::string(status_code_name(st.code)) + ": " + st.message;
}

// Validates, fills the inputs (and in backward mode runs the forward once), times the call on
// `params` (one per input set) and checks it if asked. P: ForwardParams, BackwardParams or
// QuantizedForward.
template <class P>
void run_timed(const Workload& w, const RunContext& ctx, Workspace& ws, const std::vector<P>& params,
               Record& rec) {
  const Memory memory = ws.memory();
  const cudaStream_t stream = memory == Memory::device ? ctx.stream : nullptr;
  if (w.kernel == Kernel::automatic) {
    const Kernel chosen = resolve(params[0]);
    if (chosen != Kernel::automatic) rec.kernel = kernel_name(chosen);
  }
  if (Status st = validate(params[0], w.kernel); !st.ok()) {
    rec.error = describe_status(st);
    return;
  }
  rec.run_failed = true;  // from here on, any failure is the kernel's or the machine's
  if (Status st = ws.fill_inputs(ctx.seed, stream); !st.ok()) {
    rec.error = describe_status(st);
    return;
  }
  if (w.bwd) {
    if (Status st = ws.prepare_backward(stream, ctx.debug); !st.ok()) {
      rec.error = describe_status(st);
      return;
    }
  }

  TimingPolicy policy;
  policy.iters = ctx.iters;
  policy.warmup = memory == Memory::device ? ctx.warmup_gpu : ctx.warmup_cpu;
  EventPool events;
  // Times `calls` (one per input set, rotated) under the policy, on the device or the host.
  const auto timed = [&](const auto& calls, Timing& out) {
    int next_set = 0;
    const TimedBatch batch = [&](int n, std::vector<double>& ms) {
      return memory == Memory::device
                 ? time_on_device(calls, w.kernel, next_set, events, stream, n, ms)
                 : time_on_host(calls, w.kernel, next_set, n, ms);
    };
    return measure(policy, batch, out);
  };
  if (Status st = timed(params, rec.timing); !st.ok()) {
    rec.error = describe_status(st);
    return;
  }
  rec.ran = true;
  rec.tflops =
      rec.timing.median_ms > 0 ? rec.flops.flops / (rec.timing.median_ms * 1e-3) / 1e12 : 0;

  if constexpr (std::is_same_v<P, QuantizedForward>) {
    // K8's time split, each part timed on its own over the same input sets: the pre-pass alone,
    // then the forward alone on what the timed runs quantised (every set was quantised by then).
    std::vector<PrePassOnly> prepass;
    std::vector<ForwardParams> forward_only;
    for (const QuantizedForward& q : params) {
      prepass.push_back({q.quantize});
      forward_only.push_back(q.forward);
    }
    Timing pre, fwd;
    if (Status st = timed(prepass, pre); !st.ok()) {
      rec.error = describe_status(st);
      return;
    }
    if (Status st = timed(forward_only, fwd); !st.ok()) {
      rec.error = describe_status(st);
      return;
    }
    rec.prepass_ms = pre.median_ms;
    rec.forward_ms = fwd.median_ms;
  }

  if (ctx.check) {
    const Status st = w.bwd ? check_backward_workload(ws, w.kernel, ctx, rec.check)
                            : check_workload(ws, w.kernel, ctx, rec.check);
    if (!st.ok()) {
      rec.error = describe_status(st);
      return;
    }
    if (!rec.check.result.ok) {
      rec.error = "check failed: " + rec.check.result.detail;
      return;
    }
  }
  rec.ok = true;
  rec.run_failed = false;
}

void run(const Workload& w, const RunContext& ctx, Record& rec) {
  const Memory memory = memory_for(w.kernel, ctx.device_count);
  if (memory == Memory::device && ctx.device_count == 0) {
    rec.error = "unsupported: no CUDA device available";
    return;
  }
  const cudaStream_t stream = memory == Memory::device ? ctx.stream : nullptr;
  Workspace ws;
  if (Status st = ws.allocate(w, memory); !st.ok()) {
    rec.error = describe_status(st);
    return;
  }
  if (w.bwd) {
    std::vector<BackwardParams> params;
    for (int s = 0; s < ws.num_sets(); ++s) {
      params.push_back(ws.backward_params(s, stream, ctx.debug));
    }
    run_timed(w, ctx, ws, params, rec);
  } else if (w.block_scaled()) {  // K8: each set's pre-pass reads and writes that set only
    std::vector<QuantizedForward> params;
    for (int s = 0; s < ws.num_sets(); ++s)
      params.push_back(ws.quantized_params(s, stream, ctx.debug));
    run_timed(w, ctx, ws, params, rec);
  } else {
    std::vector<ForwardParams> params;
    for (int s = 0; s < ws.num_sets(); ++s) params.push_back(ws.params(s, stream, ctx.debug));
    run_timed(w, ctx, ws, params, rec);
  }
}

}  // namespace

Memory memory_for(Kernel kernel, int device_count) {
  if (kernel_runs_on_host(kernel)) return Memory::host;
  if (kernel == Kernel::automatic && device_count == 0) return Memory::host;
  return Memory::device;
}

Record run_workload(const Workload& w, const RunContext& ctx) {
  Record rec;
  rec.w = w;
  rec.kernel = kernel_name(w.kernel);
  rec.automatic = w.kernel == Kernel::automatic;
  rec.flops = workload_flops(w);
  rec.iters_requested = ctx.iters;
  if (ctx.max_seqlen > 0 && (w.seqlen_q > ctx.max_seqlen || w.seqlen_k > ctx.max_seqlen)) {
    rec.skipped = true;
    rec.error = "skipped: sequence longer than --max-seqlen " + std::to_string(ctx.max_seqlen);
    return rec;
  }
  try {
    run(w, ctx, rec);
  } catch (const std::exception& e) {  // std::bad_alloc from a host staging buffer, mostly
    rec.ok = false;
    rec.error = std::string("exception: ") + e.what();
  }
  return rec;
}

}  // namespace flashattn::bench
