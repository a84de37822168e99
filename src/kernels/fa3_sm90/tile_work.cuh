// What one tile of the Hopper forward is: its coordinates from the scheduler, its sequence (padded
// or packed), its mask and the key blocks it visits. Computed by every role from the tile index
// (the producer to load, the consumers to compute and store), never handed through memory.
#pragma once

#include "common/mask.h"
#include "common/sequence_view.cuh"
#include "kernels/fa3_sm90/params_fwd_sm90.cuh"
#include "kernels/fa3_sm90/tile_scheduler.cuh"

namespace flashattn::fa3 {

// What one tile is: its coordinates, its sequence, and the key blocks [n_min, n_max) it visits
// (last to first). `skip` tiles lie past the end of a variable-length sequence: nothing to write.
struct TileWork {
  TileCoord c;
  int h_kv;
  SequenceView seq;
  Mask mask;
  int row0;
  int n_min, n_max;
  bool skip;
  __device__ __forceinline__ bool empty() const { return n_max <= n_min; }
  // Whether tile row `row` (row0 + offset) is a row of the sequence, to be stored: rows before 0
  // (a first tile aligned to the end, top_rows) and past the end are not.
  __device__ __forceinline__ bool stores_row(int row) const { return row >= 0 && row < seq.len_q; }
};

// Rows before the sequence's first that the first query tile covers. Under a mask with a right
// bound (causal), later rows see more keys, so the tiles are aligned to the sequence's end: the
// partial tile is the first, the cheapest, rather than the last, the dearest (d 64's 192-row tiles
// at seqlen 512: 27 warpgroup-blocks per head -> 24). Rows before 0 see no key or (seqlen_k >
// seqlen_q) read zero-filled or neighbouring Q rows; they are never stored.
template <class C>
__device__ __forceinline__ int top_rows(const Problem& p, int len_q) {
  return fa3::top_rows(C::kBlockM, len_q, C::kAlignTilesToEnd && p.mask.right >= 0);
}

template <class C>
__device__ __forceinline__ TileWork tile_work(const Params<C>& params, int tile) {
  const Problem& p = params.p;
  TileWork w;
  w.c = params.scheduler.template coord<C::kFastDivide>(tile);
  w.h_kv = params.scheduler.template kv_head<C::kFastDivide>(w.c.head);
  w.seq = sequence_view(p, w.c.batch, w.c.head, w.h_kv);
  w.mask = Mask{w.seq.len_q, w.seq.len_k, p.mask.left, p.mask.right};
  w.row0 = w.c.m_block * C::kBlockM - top_rows<C>(p, w.seq.len_q);
  w.skip = w.row0 >= w.seq.len_q;
  int key_begin = 0, key_end = 0;
  if (!w.skip) w.mask.key_range(w.row0, min(w.seq.len_q, w.row0 + C::kBlockM), key_begin, key_end);
  w.n_min = key_begin / C::kBlockN;
  w.n_max = key_end > key_begin ? (key_end + C::kBlockN - 1) / C::kBlockN : w.n_min;
  return w;
}

}  // namespace flashattn::fa3
