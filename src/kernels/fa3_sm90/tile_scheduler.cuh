// Which (query tile, head, sequence) a thread block computes next: one linear tile index, which
// the kernel hands from role to role through shared memory (kernel_fwd_sm90.cuh). The index comes
// from static rounds (tile_of) or, for K6 with uneven tiles, from a global counter.
//
// Dense masks: query tiles fastest, so blocks running at the same time share one head's K and V
// in L2. Causal/windowed masks (tiles differ in work): longest first within groups of heads
// whose K and V fit in about half of the 50 MB L2 — a longest-processing-time order that keeps
// the tail short without scattering the working set over every head. Where the pairs do not
// divide into whole groups, the smaller group goes first, not last: last, its longest tiles came
// when every SM had less work left than one of them (bench/tile_order_sim.py: K6 d256 8k causal
// 0.86 -> 0.96 of the SMs' time busy, d128 16k 0.95 -> 1.00, with the producer's late claim).
#pragma once

#include <cuda_runtime.h>  // __host__ __device__: the CPU tests check the orders too

#include "common/fast_div.h"

namespace flashattn::fa3 {

struct TileCoord {
  int m_block, head, batch;
};

// Rows before a sequence's first row that its first query tile covers: 0, or, with tiles aligned
// to the sequence's end, what makes len_q + top_rows a whole number of tiles (the partial tile is
// then the first). The tile count, ceil(len_q / block_m), is the same either way.
__host__ __device__ __forceinline__ int top_rows(int block_m, int len_q, bool align_to_end) {
  return align_to_end ? (block_m - len_q % block_m) % block_m : 0;
}

struct TileScheduler {
  int num_m_blocks = 0;
  int heads = 0;
  int batch = 0;
  int group_heads = 1;  // (sequence, head) pairs per longest-first group; 0 = dense order
  // The smaller group first: coord() walks the order above (whole groups, the smaller one last)
  // rotated by that group's tiles: tile t < first_tiles is position t + shift of it, any later
  // t position t - first_tiles. (A separate first group in coord() spilled d 64's registers.)
  int first_tiles = 0;
  int shift = 0;
  // The divisions of coord() and kv_head(), prepared on the host (make): a run-time integer
  // division on the GPU goes through the MUFU pipe, which the softmax keeps busy.
  FastDiv by_m_blocks, by_heads, by_group_heads, by_last_group, by_pairs_per_group, by_kv_group;

  // kv_group: query heads per KV head (GQA), for kv_head().
  static TileScheduler make(int num_m_blocks, int heads, int batch, int group_heads,
                            int kv_group = 1) {
    TileScheduler s;
    s.num_m_blocks = num_m_blocks;
    s.heads = heads;
    s.batch = batch;
    s.group_heads = group_heads;
    s.by_m_blocks = FastDiv(num_m_blocks > 0 ? num_m_blocks : 1);
    s.by_heads = FastDiv(heads > 0 ? heads : 1);
    s.by_kv_group = FastDiv(kv_group > 0 ? kv_group : 1);
    if (group_heads > 0) {
      const int pairs = heads * batch;
      const int last = pairs > 0 ? pairs - (pairs - 1) / group_heads * group_heads : 1;
      s.by_group_heads = FastDiv(group_heads);
      s.by_last_group = FastDiv(last < group_heads ? last : group_heads);
      s.by_pairs_per_group = FastDiv(group_heads * (num_m_blocks > 0 ? num_m_blocks : 1));
      if (last < group_heads && pairs > group_heads) {
        s.first_tiles = last * num_m_blocks;
        s.shift = s.num_tiles() - s.first_tiles;
      }
    }
    return s;
  }

  __host__ __device__ int num_tiles() const { return num_m_blocks * heads * batch; }

  // The tile block `block` of `blocks` takes in round `round` (>= num_tiles(): none, nor in any
  // later round). Rounds snake: odd rounds hand out their tiles in reverse, so under the
  // longest-first order the block that drew the longest tile of one round draws the shortest of
  // the next (a plain stride gave block 0 the longest tile of every round). It balances only
  // where a group's tiles line up with the grid: hdim 256 causal at seqlen 16k (one 128-tile
  // group per head, 132 blocks) stayed at 419 -> 451 TFLOP/s against ~590 at 8k. So K6 draws
  // uneven tiles from a global counter instead (Params::tile_counter); the rounds remain for
  // equal tiles, where they cost no memset, and for one-tile-per-block grids.
  __host__ __device__ __forceinline__ int tile_of(int round, int block, int blocks) const {
    return round * blocks + ((round & 1) ? blocks - 1 - block : block);
  }

  // kFast = false divides with the hardware instead, for kernels with no register to spare for
  // the divisors (d 256 spilled 24-64 bytes in its epilogue with them).
  template <bool kFast = true>
  __host__ __device__ __forceinline__ TileCoord coord(int tile) const {
    int m_block, bh;
    if (group_heads == 0) {
      by_m_blocks.divmod_by<kFast>(tile, bh, m_block);
    } else {
      // Groups of group_heads pairs (the last one possibly smaller), each walked longest tile
      // first: position r of a group is query tile num_m_blocks - 1 - r / in_group of pair
      // r % in_group; the smaller group's tiles come first (first_tiles, shift).
      tile = tile < first_tiles ? tile + shift : tile - first_tiles;
      int group, r;
      by_pairs_per_group.divmod_by<kFast>(tile, group, r);
      const int left = heads * batch - group * group_heads;
      const FastDiv& in_group = group_heads < left ? by_group_heads : by_last_group;
      int row, pair;
      in_group.divmod_by<kFast>(r, row, pair);
      m_block = num_m_blocks - 1 - row;
      bh = group * group_heads + pair;
    }
    int b, h;
    by_heads.divmod_by<kFast>(bh, b, h);
    return {m_block, h, b};
  }

  // The KV head query head `head` reads (GQA / MQA).
  template <bool kFast = true>
  __host__ __device__ __forceinline__ int kv_head(int head) const {
    return by_kv_group.div_by<kFast>(head);
  }
};

}  // namespace flashattn::fa3
