// Paged K/V in prefill (ForwardParams::block_table, flashattn.h) as the gather step receives it:
// where each sequence's keys and values live in the cache's blocks, and the packed buffers they
// are copied into, laid out as a variable-length call's k and v (token cu_seqlens_k[b] + j is key
// j of sequence b), so that the variable-length forward then runs on them unchanged.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/host_device.h"
#include "flashattn/flashattn.h"

namespace flashattn {

// Rows zeroed after the last gathered key. Kernels read whole key tiles (at most 128 keys in
// every family's tile plan) and mask the keys past a sequence's end, but a masked value row still
// enters O += P·V as 0 · v, and 0 · NaN is NaN: the rows after the last sequence must be finite.
// A contiguous call reads zeros there (TMA's out-of-bounds fill, or predicated loads); the
// gathered copy reads these zeros, so paged and contiguous runs are bitwise equal.
inline constexpr int kPagedTailRows = 256;

struct PagedKv {
  // The cache: (num_blocks, page_size, heads_kv, row) of k and of v; strides in bytes (block,
  // row, head), each row contiguous.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride[3] = {};
  int64_t v_stride[3] = {};
  int k_row_bytes = 0;  // head_dim * element size, a multiple of 16
  int v_row_bytes = 0;  // head_dim_v * element size, a multiple of 16
  int heads_kv = 0;

  // block_table (batch, max_blocks) int32, row b at block_table + b * block_table_stride.
  const int32_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  int max_blocks = 0;
  int num_blocks = 0;
  int page_size = 0;

  // Sequence b: keys cu_seqlens_k[b] .. cu_seqlens_k[b + 1] - 1 of the packed copy; at most
  // max_keys each (the longest a sequence may be: min(seqlen_k, max_blocks * page_size)).
  const int32_t* cu_seqlens_k = nullptr;
  int batch = 0;
  int max_keys = 0;

  // The packed copies, dense (rows, heads_kv, row): `rows` rows each, nothing written past them.
  void* k_out = nullptr;
  void* v_out = nullptr;
  int64_t rows = 0;

  void* stream = nullptr;  // cudaStream_t (GPU gather)
};

// The most keys one sequence of a paged call can have: seqlen_k (the longest sequence) and the
// blocks its table row holds both bound it.
inline int64_t paged_max_keys(const ForwardParams& p) {
  return std::min<int64_t>(p.seqlen_k, int64_t{p.max_blocks_per_seq} * p.page_size);
}

// Rows of the GPU gather's packed buffers: every sequence at its longest, then the zeroed tail.
// Sized on the host without reading cu_seqlens_k (which would need a synchronisation).
inline int64_t paged_gather_rows(const ForwardParams& p) {
  return int64_t{p.batch} * paged_max_keys(p) + kPagedTailRows;
}

// Block and row of key j of sequence b: the one definition of the paged layout (the gathers use
// it; so do the tests' host copies).
struct PageSlot {
  int block;  // block_table[b][j / page_size]: unchecked here
  int row;    // j % page_size
};
FA_HD PageSlot page_slot(const int32_t* block_table, int64_t block_table_stride, int page_size,
                         int b, int j) {
  const int column = j / page_size;
  return {block_table[b * block_table_stride + column], j - column * page_size};
}

}  // namespace flashattn
