// --check: one poisoned run on input set 0, compared with the fp64 reference on the host (the
// output, or in backward mode the gradients).
#include <algorithm>
#include <cstring>
#include <tuple>
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
// Backward: the reference gradients of a (batch, KV head) unit need every row and key of it, so
// a large shape checks whole units: the first and the last, and seeded others up to this many.
constexpr int kSampledUnits = 3;

Status to_host(std::vector<std::byte>& dst, const Block& src) {
  dst.resize(src.bytes());
  if (src.bytes() == 0) return Status::success();
  return cuda_status(cudaMemcpy(dst.data(), src.get(), src.bytes(), cudaMemcpyDeviceToHost),
                     "cudaMemcpy to host");
}

// A varlen workload's host tensors as the dense call the reference checks. Its sequences all have
// seqlen_q x seqlen_k tokens, so the packed q and o are the dense (batch, seqlen, heads, dim)
// tensors; a paged k and v are gathered back through the block table, and the (heads, total)
// LSE is transposed to (batch, heads, seqlen). The vectors hold what `host` then points to.
void dense_view(const Workspace& ws, ForwardParams& host, std::vector<std::byte>& k,
                std::vector<std::byte>& v, std::vector<float>& lse) {
  const Workload& w = ws.workload();
  host.cu_seqlens_q = host.cu_seqlens_k = nullptr;
  host.total_q = host.total_k = 0;
  if (host.lse != nullptr) {
    lse.resize(static_cast<size_t>(w.batch) * w.heads * w.seqlen_q);
    const int64_t total_q = int64_t{w.batch} * w.seqlen_q;
    for (int b = 0; b < w.batch; ++b)
      for (int h = 0; h < w.heads; ++h)
        for (int i = 0; i < w.seqlen_q; ++i)
          lse[(static_cast<size_t>(b) * w.heads + h) * w.seqlen_q + i] =
              host.lse[h * total_q + int64_t{b} * w.seqlen_q + i];
    host.lse = lse.data();
  }
  if (w.page_size == 0) return;
  const std::vector<int32_t>& table = ws.block_table_host();
  const int blocks = ws.blocks_per_sequence();
  const size_t es = static_cast<size_t>(dtype_size(w.dtype));
  for (auto [dst, ref, dim] : {std::tuple{&k, &host.k, w.hdim}, {&v, &host.v, w.hdim_v}}) {
    const size_t row = static_cast<size_t>(w.kv_heads) * dim * es;  // one token's bytes
    dst->resize(static_cast<size_t>(w.batch) * w.seqlen_k * row);
    const auto* pages = static_cast<const std::byte*>(ref->data);
    for (int b = 0; b < w.batch; ++b) {
      for (int j = 0; j < w.seqlen_k; ++j) {
        const int64_t block = table[static_cast<size_t>(b) * blocks + j / w.page_size];
        const int64_t at = block * w.page_size + j % w.page_size;
        std::memcpy(dst->data() + (static_cast<size_t>(b) * w.seqlen_k + j) * row,
                    pages + static_cast<size_t>(at) * row, row);
      }
    }
    ref->data = dst->data();
    set_contiguous_strides(ref->stride, w.seqlen_k, w.kv_heads, dim);
  }
  host.block_table = nullptr;
  host.max_blocks_per_seq = host.num_blocks = host.page_size = 0;
}

}  // namespace

Status check_workload(Workspace& ws, Kernel kernel, const RunContext& ctx, CheckSummary& out) {
  const bool on_device = ws.memory() == Memory::device;
  const cudaStream_t stream = on_device ? ctx.stream : nullptr;
  if (Status st = ws.poison_outputs(stream); !st.ok()) return st;
  const Workload& w = ws.workload();
  const ForwardParams run_params = ws.params(0, stream, ctx.debug);
  if (w.block_scaled()) {  // K8: the pre-pass as timed, then the forward on what it wrote
    if (Status st = quantize_fp8(ws.quantized_params(0, stream, ctx.debug).quantize); !st.ok())
      return st;
  }
  if (Status st = forward(run_params, kernel); !st.ok()) return st;

  ForwardParams host = run_params;
  host.stream = nullptr;
  std::vector<std::byte> q, k, v, o, lse, sinks, descales[3];
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
    if (w.block_scaled()) {  // what the pre-pass wrote, read as the kernel read it
      const float** to[3] = {&host.q_block_descale, &host.k_block_descale, &host.v_block_descale};
      const Block* from[3] = {&s.q_block_descale, &s.k_block_descale, &s.v_block_descale};
      for (int i = 0; i < 3; ++i) {
        if (Status st = to_host(descales[i], *from[i]); !st.ok()) return st;
        *to[i] = reinterpret_cast<const float*>(descales[i].data());
      }
    } else if (w.fp8()) {
      const float** to[3] = {&host.q_descale, &host.k_descale, &host.v_descale};
      for (int i = 0; i < 3; ++i) {
        if (Status st = to_host(descales[i], ws.descale(i)); !st.ok()) return st;
        *to[i] = reinterpret_cast<const float*>(descales[i].data());
      }
    }
  }

  std::vector<std::byte> dense_k, dense_v;
  std::vector<float> dense_lse;
  if (w.varlen) dense_view(ws, host, dense_k, dense_v, dense_lse);
  const double macs =
      static_cast<double>(w.batch) * w.heads * w.seqlen_q * w.seqlen_k * std::max(w.hdim, w.hdim_v);
  std::vector<reference::RowId> rows;
  if (macs > kFullCheckMacs) rows = reference::sample_rows(host, kSampledRows, ctx.seed);
  out.ran = true;
  out.sampled = !rows.empty();
  out.rows = out.sampled ? static_cast<int64_t>(rows.size())
                         : static_cast<int64_t>(w.batch) * w.heads * w.seqlen_q;
  out.result = reference::check(host, rows);  // FP8 inputs: the FP8 oracle (reference.h)
  if (w.fp8()) {
    // The same output against the bf16 data the inputs were quantised from (dense, as `host`).
    // K8 with the rotation: q and k were rotated by the same orthogonal matrix before
    // quantisation, which leaves q·kᵀ and so the attention of the unrotated data unchanged.
    ForwardParams original = host;
    original.dtype = DType::bf16;
    original.q_descale = original.k_descale = original.v_descale = nullptr;
    original.q_block_descale = original.k_block_descale = original.v_block_descale = nullptr;
    original.q.data = ws.original(0).data();
    original.k.data = ws.original(1).data();
    original.v.data = ws.original(2).data();
    out.vs_original = reference::check(original, rows);
  }
  return Status::success();
}

Status check_backward_workload(Workspace& ws, Kernel kernel, const RunContext& ctx,
                               CheckSummary& out) {
  const bool on_device = ws.memory() == Memory::device;
  const cudaStream_t stream = on_device ? ctx.stream : nullptr;
  if (Status st = ws.poison_outputs(stream); !st.ok()) return st;
  const BackwardParams run_params = ws.backward_params(0, stream, ctx.debug);
  if (Status st = backward(run_params, kernel); !st.ok()) return st;

  BackwardParams host = run_params;
  host.stream = nullptr;
  std::vector<std::byte> q, k, v, dout, dq, dk, dv, sinks, dsinks;
  if (on_device) {
    if (Status st = cuda_status(cudaStreamSynchronize(stream), "kernel run"); !st.ok()) return st;
    const InputSet& s = ws.set(0);
    for (auto [dst, src] : {std::pair{&q, &s.q},
                            {&k, &s.k},
                            {&v, &s.v},
                            {&dout, &s.dout},
                            {&dq, &ws.dq()},
                            {&dk, &ws.dk()},
                            {&dv, &ws.dv()}}) {
      if (Status st = to_host(*dst, *src); !st.ok()) return st;
    }
    host.q.data = q.data();
    host.k.data = k.data();
    host.v.data = v.data();
    host.dout.data = dout.data();
    host.o.data = nullptr;  // the reference recomputes the forward; o and lse are not read
    host.lse = nullptr;
    host.dq.data = dq.data();
    host.dk.data = dk.data();
    host.dv.data = dv.data();
    if (ws.workload().sinks) {
      if (Status st = to_host(sinks, ws.sinks()); !st.ok()) return st;
      if (Status st = to_host(dsinks, ws.dsinks()); !st.ok()) return st;
      host.sinks = reinterpret_cast<const float*>(sinks.data());
      host.dsinks = reinterpret_cast<float*>(dsinks.data());
    }
  }

  const Workload& w = ws.workload();
  const double macs =
      static_cast<double>(w.batch) * w.heads * w.seqlen_q * w.seqlen_k * std::max(w.hdim, w.hdim_v);
  std::vector<reference::KvHeadId> units;
  if (macs > kFullCheckMacs) units = reference::sample_kv_heads(host, kSampledUnits, ctx.seed);
  out.ran = true;
  out.sampled = !units.empty();
  out.rows =
      out.sampled ? static_cast<int64_t>(units.size()) : static_cast<int64_t>(w.batch) * w.kv_heads;
  const reference::BackwardCheckResult g = reference::check_backward(host, units);
  out.grad = g;
  // The summary the table and JSON show for every mode: the largest error of the three.
  out.result = {};
  out.result.ok = g.ok;
  out.result.detail = g.detail;
  for (const reference::GradientCheck* c : {&g.dq, &g.dk, &g.dv}) {
    out.result.max_err = std::max(out.result.max_err, c->max_err);
    out.result.max_err_pt = std::max(out.result.max_err_pt, c->max_err_pt);
    out.result.atol = std::max(out.result.atol, c->atol);
    out.result.checked += c->checked;
    out.result.not_finite += c->not_finite;
  }
  return Status::success();
}

}  // namespace flashattn::bench
