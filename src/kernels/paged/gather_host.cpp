// The host gather of paged KV in prefill (entry.h), for the cpu family: the same copy as the GPU
// gather, row by row, with no tail (the cpu family reads only its sequences' own keys).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/paged_kv.h"
#include "kernels/paged/entry.h"

namespace flashattn {

void paged_gather_host(const PagedKv& p) {
  const struct {
    const void* in;
    void* out;
    const int64_t* stride;
    int row_bytes;
  } tensors[] = {{p.k, p.k_out, p.k_stride, p.k_row_bytes},
                 {p.v, p.v_out, p.v_stride, p.v_row_bytes}};
  for (int b = 0; b < p.batch; ++b) {
    const int begin = p.cu_seqlens_k[b];
    const int len = std::min(p.cu_seqlens_k[b + 1] - begin, p.max_keys);
    for (int j = 0; j < len; ++j) {
      const int64_t dst = int64_t{begin} + j;
      if (dst < 0 || dst >= p.rows) continue;
      const PageSlot s = page_slot(p.block_table, p.block_table_stride, p.page_size, b, j);
      const bool valid = s.block >= 0 && s.block < p.num_blocks;
      for (const auto& t : tensors) {
        char* out = static_cast<char*>(t.out) + dst * p.heads_kv * t.row_bytes;
        for (int h = 0; h < p.heads_kv; ++h, out += t.row_bytes) {
          if (!valid) {
            std::memset(out, 0, static_cast<size_t>(t.row_bytes));
            continue;
          }
          const char* in = static_cast<const char*>(t.in) + s.block * t.stride[0] +
                           s.row * t.stride[1] + h * t.stride[2];
          std::memcpy(out, in, static_cast<size_t>(t.row_bytes));
        }
      }
    }
  }
}

}  // namespace flashattn
