// --check: one poisoned run on input set 0, compared with the fp64 reference on the host.
#include <algorithm>
#include <utility>
#include <vector>

#include "runner.h"

namespace flashattn::bench {
namespace {

// Above this many multiply-adds (b*h*sq*sk*d) the fp64 reference takes too long on the host; a
// sample of rows (first and last of each sequence, fully masked ones, and evenly spread others)
// is checked instead.
constexpr double kFullCheckMacs = 2e9;
constexpr int kSampledRows = 512;

Status to_host(std::vector<std::byte>& dst, const Block& src) {
  dst.resize(src.bytes());
  if (src.bytes() == 0) return Status::success();
  return cuda_status(cudaMemcpy(dst.data(), src.get(), src.bytes(), cudaMemcpyDeviceToHost),
                     "cudaMemcpy to host");
}

}  // namespace

Status check_workload(Workspace& ws, Kernel kernel, const RunContext& ctx, CheckSummary& out) {
  const bool on_device = ws.memory() == Memory::device;
  const cudaStream_t stream = on_device ? ctx.stream : nullptr;
  if (Status st = ws.poison_outputs(stream); !st.ok()) return st;
  const ForwardParams run_params = ws.params(0, stream, ctx.debug);
  if (Status st = forward(run_params, kernel); !st.ok()) return st;

  ForwardParams host = run_params;
  host.stream = nullptr;
  std::vector<std::byte> q, k, v, o, lse, sinks;
  if (on_device) {
    if (Status st = cuda_status(cudaStreamSynchronize(stream), "kernel run"); !st.ok()) return st;
    const InputSet& s = ws.set(0);
    for (auto [dst, src] :
         {std::pair{&q, &s.q}, {&k, &s.k}, {&v, &s.v}, {&o, &ws.o()}, {&lse, &ws.lse()}}) {
      if (Status st = to_host(*dst, *src); !st.ok()) return st;
    }
    host.q.data = q.data();
    host.k.data = k.data();
    host.v.data = v.data();
    host.o.data = o.data();
    host.lse = reinterpret_cast<float*>(lse.data());
    if (ws.workload().sinks) {
      if (Status st = to_host(sinks, ws.sinks()); !st.ok()) return st;
      host.sinks = reinterpret_cast<const float*>(sinks.data());
    }
  }

  const Workload& w = ws.workload();
  const double macs =
      static_cast<double>(w.batch) * w.heads * w.seqlen_q * w.seqlen_k * std::max(w.hdim, w.hdim_v);
  std::vector<reference::RowId> rows;
  if (macs > kFullCheckMacs) rows = reference::sample_rows(host, kSampledRows, ctx.seed);
  out.ran = true;
  out.sampled = !rows.empty();
  out.rows = out.sampled ? static_cast<int64_t>(rows.size())
                         : static_cast<int64_t>(w.batch) * w.heads * w.seqlen_q;
  out.result = reference::check(host, rows);
  return Status::success();
}

}  // namespace flashattn::bench
