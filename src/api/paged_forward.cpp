// forward() with ForwardParams::block_table. The first version materialises K/V: the sequences'
// keys and values are copied out of the cache's blocks into packed buffers laid out as a
// variable-length call's k and v (kernels/paged), and the variable-length forward runs on them
// unchanged, so every family with variable length takes paged input and paged and contiguous
// calls give bitwise equal results. The price is one extra read and write of the keys and values
// used (docs/DESIGN.md, "Paged KV in prefill"); a loader that reads the blocks inside the
// attention kernel is the next step.
//
// GPU families: the buffers come from the library's workspace pool, sized from host-known bounds
// (every sequence at its longest, common/paged_kv.h), so nothing reads cu_seqlens_k on the host:
// no synchronisation, and the call can be captured in a CUDA graph. The cpu family gathers on the
// host into exactly cu_seqlens_k[batch] rows (validation checked the host arrays).
#include "api/paged_forward.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/paged_kv.h"
#include "common/workspace.h"
#include "kernels/paged/entry.h"

namespace flashattn {
namespace {

PagedKv describe(const ForwardParams& p) {
  const int es = dtype_size(p.dtype);
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  PagedKv g;
  g.k = p.k.data;
  g.v = p.v.data;
  for (int i = 0; i < 3; ++i) {
    g.k_stride[i] = p.k.stride[i] * es;
    g.v_stride[i] = p.v.stride[i] * es;
  }
  g.k_row_bytes = p.head_dim * es;
  g.v_row_bytes = dv * es;
  g.heads_kv = p.heads_kv;
  g.block_table = p.block_table;
  g.block_table_stride = p.block_table_stride > 0 ? p.block_table_stride : p.max_blocks_per_seq;
  g.max_blocks = p.max_blocks_per_seq;
  g.num_blocks = p.num_blocks;
  g.page_size = p.page_size;
  g.cu_seqlens_k = p.cu_seqlens_k;
  g.batch = p.batch;
  g.max_keys = static_cast<int>(paged_max_keys(p));
  g.stream = p.stream;
  return g;
}

// `p` reading the packed copies (`rows` dense rows each) instead of the blocks.
ForwardParams packed_params(const ForwardParams& p, const void* k, const void* v, int64_t rows) {
  ForwardParams f = p;
  f.block_table = nullptr;
  f.block_table_stride = 0;
  f.max_blocks_per_seq = f.num_blocks = f.page_size = 0;
  f.k.data = k;
  f.v.data = v;
  const int dv = p.head_dim_v > 0 ? p.head_dim_v : p.head_dim;
  set_contiguous_strides(f.k.stride, rows, p.heads_kv, p.head_dim);
  set_contiguous_strides(f.v.stride, rows, p.heads_kv, dv);
  f.total_k = static_cast<int>(rows);
  return f;
}

Status forward_paged_host(const ForwardParams& p, Kernel kernel, ForwardRunner run) {
  PagedKv g = describe(p);
  g.rows = p.cu_seqlens_k[p.batch];
  // At least one row: the family gets real pointers even when no sequence has a key.
  const auto bytes = [&](int row_bytes) {
    return static_cast<size_t>(std::max<int64_t>(g.rows, 1) * p.heads_kv * row_bytes);
  };
  std::vector<std::byte> k(bytes(g.k_row_bytes)), v(bytes(g.v_row_bytes));
  g.k_out = k.data();
  g.v_out = v.data();
  paged_gather_host(g);
  return run(packed_params(p, k.data(), v.data(), g.rows), kernel);
}

}  // namespace

Status forward_paged(const ForwardParams& p, Kernel kernel, ForwardRunner run) {
  if (p.seqlen_q == 0) return Status::success();  // nothing to compute or write
  if (kernel_runs_on_host(kernel)) return forward_paged_host(p, kernel, run);

  PagedKv g = describe(p);
  g.rows = paged_gather_rows(p);
  const auto round_up = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t k_bytes = round_up(static_cast<size_t>(g.rows) * p.heads_kv * g.k_row_bytes);
  const size_t v_bytes = static_cast<size_t>(g.rows) * p.heads_kv * g.v_row_bytes;
  const auto stream = static_cast<cudaStream_t>(p.stream);
  void* ws = nullptr;
  if (Status s = workspace_alloc(k_bytes + v_bytes, stream, &ws); !s.ok()) return s;
  g.k_out = ws;
  g.v_out = static_cast<char*>(ws) + k_bytes;
  Status s = paged_gather(g);
  if (s.ok()) s = run(packed_params(p, g.k_out, g.v_out, g.rows), kernel);
  const Status freed = workspace_free(ws, stream);
  return s.ok() ? freed : s;
}

}  // namespace flashattn
