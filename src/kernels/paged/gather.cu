// The GPU gather of paged KV in prefill (entry.h): one read and one write of every key and value
// a sequence uses, 16-byte vectors, and the zeroed tail after the last sequence.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/cuda_check.h"
#include "common/paged_kv.h"
#include "kernels/paged/entry.h"

namespace flashattn {
namespace {

constexpr int kRowsPerBlock = 16;  // key rows (tokens) per unit of work
constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = int64_t{1} << 20;  // more units are walked by a grid-stride loop

// Unit u covers rows [x * kRowsPerBlock, (x + 1) * kRowsPerBlock) of sequence b (u = b * chunks +
// x), or, for b == batch, of the tail after the last sequence. A block's first threads look up
// where each row of its unit comes from and goes to; then all threads copy the rows' 16-byte
// vectors, heads of k first, then heads of v.
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const PagedKv p, int chunks, int64_t units) {
  __shared__ int64_t dst_row[kRowsPerBlock];  // packed row, or -1: nothing to write
  __shared__ int64_t src_k[kRowsPerBlock];    // byte offset of the row in k, or -1: zeros
  __shared__ int64_t src_v[kRowsPerBlock];
  const int k_vecs = p.k_row_bytes / 16, v_vecs = p.v_row_bytes / 16;  // per head
  const int k_row = p.heads_kv * k_vecs;                               // vectors of k per token
  const int per_row = k_row + p.heads_kv * v_vecs;
  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int b = static_cast<int>(unit / chunks);
    const int j0 = static_cast<int>(unit % chunks) * kRowsPerBlock;
    if (threadIdx.x < kRowsPerBlock) {
      const int j = j0 + static_cast<int>(threadIdx.x);
      int64_t dst = -1, sk = -1, sv = -1;
      if (b < p.batch) {
        const int begin = p.cu_seqlens_k[b];
        if (j < min(p.cu_seqlens_k[b + 1] - begin, p.max_keys)) {
          dst = int64_t{begin} + j;
          const PageSlot s = page_slot(p.block_table, p.block_table_stride, p.page_size, b, j);
          if (s.block >= 0 && s.block < p.num_blocks) {
            sk = s.block * p.k_stride[0] + s.row * p.k_stride[1];
            sv = s.block * p.v_stride[0] + s.row * p.v_stride[1];
          }
        }
      } else if (j < kPagedTailRows) {
        dst = int64_t{p.cu_seqlens_k[p.batch]} + j;
      }
      // Nothing past the buffers, whatever cu_seqlens_k holds.
      dst_row[threadIdx.x] = dst >= 0 && dst < p.rows ? dst : -1;
      src_k[threadIdx.x] = sk;
      src_v[threadIdx.x] = sv;
    }
    __syncthreads();

    for (int i = threadIdx.x; i < kRowsPerBlock * per_row; i += kThreads) {
      const int r = i / per_row;
      const int64_t dst = dst_row[r];
      if (dst < 0) continue;
      const bool is_v = i - r * per_row >= k_row;
      const int c = i - r * per_row - (is_v ? k_row : 0);
      const int vecs = is_v ? v_vecs : k_vecs;
      const int h = c / vecs, e = c - h * vecs;
      const int64_t src = is_v ? src_v[r] : src_k[r];
      uint4 x = make_uint4(0, 0, 0, 0);
      if (src >= 0) {
        const auto* in = static_cast<const char*>(is_v ? p.v : p.k) + src +
                         h * (is_v ? p.v_stride[2] : p.k_stride[2]) + e * 16;
        x = __ldg(reinterpret_cast<const uint4*>(in));
      }
      const int row_bytes = is_v ? p.v_row_bytes : p.k_row_bytes;
      char* out = static_cast<char*>(is_v ? p.v_out : p.k_out) +
                  (dst * p.heads_kv + h) * row_bytes + e * 16;
      *reinterpret_cast<uint4*>(out) = x;
    }
    __syncthreads();  // the next unit's lookups overwrite the shared rows
  }
}

}  // namespace

Status paged_gather(const PagedKv& p) {
  const int64_t rows_per_sequence = std::max<int64_t>(p.max_keys, kPagedTailRows);
  const int64_t chunks = (rows_per_sequence + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t units = (int64_t{p.batch} + 1) * chunks;
  const auto grid = static_cast<unsigned>(std::min(units, kMaxGrid));
  gather_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(p.stream)>>>(
      p, static_cast<int>(chunks), units);
  FA_CUDA_LAUNCH_CHECK("paged gather kernel");
  return Status::success();
}

}  // namespace flashattn
