// Which (query, key) pairs are visible: the one definition shared by every kernel and the CPU
// reference. Masks are bottom-right aligned (FlashAttention's convention): query row i sits on
// key diagonal i + (seqlen_k - seqlen_q); key j is visible when
//     diag - left <= j <= diag + right,   with a bound of -1 meaning unbounded.
// Causal is right = 0. Host and device code call the same functions.
#pragma once

#include <cstdint>

#include "host_device.h"

namespace flashattn {

struct Mask {
  int seqlen_q = 0;
  int seqlen_k = 0;
  int left = -1;   // keys before the diagonal a row may see; -1 unbounded
  int right = -1;  // keys after the diagonal a row may see; -1 unbounded (0 = causal)

  FA_HD int diagonal(int row) const { return row + seqlen_k - seqlen_q; }

  FA_HD bool visible(int row, int key) const {
    const int d = key - diagonal(row);
    return (left < 0 || d >= -left) && (right < 0 || d <= right) && key >= 0 && key < seqlen_k;
  }

  // Half-open range of keys row `row` may see; empty (begin >= end) for a fully masked row.
  FA_HD int key_begin(int row) const {
    if (left < 0) return 0;
    const int b = diagonal(row) - left;
    return b > 0 ? b : 0;
  }
  FA_HD int key_end(int row) const {
    if (right < 0) return seqlen_k;
    const int e = diagonal(row) + right + 1;
    return e < seqlen_k ? e : seqlen_k;
  }

  // Keys any row of [row_begin, row_end) may see (both bounds grow with the row).
  FA_HD void key_range(int row_begin, int row_end, int& begin, int& end) const {
    begin = key_begin(row_begin);
    end = key_end(row_end - 1);
  }

  // Half-open range of rows that may see key `key` (the backward walks a key block's rows);
  // empty for a key no row sees. Both bounds grow with the key.
  FA_HD int query_begin(int key) const {
    if (right < 0) return 0;
    const int b = key - right - (seqlen_k - seqlen_q);
    return b > 0 ? b : 0;
  }
  FA_HD int query_end(int key) const {
    if (left < 0) return seqlen_q;
    const int e = key + left - (seqlen_k - seqlen_q) + 1;
    return e < seqlen_q ? e : seqlen_q;
  }

  // True when every (row, key) of the tile is visible, so element masking can be skipped.
  FA_HD bool tile_all_visible(int row_begin, int row_end, int key_begin_, int key_end_) const {
    // The tightest constraints come from the last row (left bound) and the first row (right).
    return key_begin_ >= key_begin(row_end - 1) && key_end_ <= key_end(row_begin) &&
           key_end_ <= seqlen_k;
  }
};

}  // namespace flashattn
