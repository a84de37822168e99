// The decode family's shared-memory tile layout: where 16-byte chunk `chunk` of row `row` of a
// [rows][kHeadDim] 16-bit tile (Q, the 16-bit K/V ring, the widened e4m3 tiles) lives. Host and
// device (FA_HD) so that the CPU tests check it for every head dim (tests/test_decode_swizzle.cpp).
#pragma once

#include "common/host_device.h"

namespace flashattn::decoding {

// The XOR spreads the eight rows one ldmatrix phase reads (eight consecutive rows, one chunk
// column) over the eight 16-byte bank groups of a 128-byte line. Rows of 8k chunks (hd 64, 128,
// 192, 256) start on a line: XOR the chunk with row % 8. Rows of 8k + 4 chunks (hd 96: 12)
// alternate between the two halves of a line, so row parity already separates two groups of
// four; the XOR stays inside the chunk's aligned four (a chunk index past the row would otherwise
// land in the next row) and takes (row / 2) % 4, which differs across the four rows of each
// parity. Returns an element offset.
template <int kHeadDim>
constexpr FA_HD int swizzle(int row, int chunk) {
  constexpr int kChunks = kHeadDim / 8;
  static_assert(kChunks % 4 == 0, "decode tiles are built for head dims that are multiples of 32");
  if constexpr (kChunks % 8 == 0) {
    return row * kHeadDim + ((chunk ^ (row & 7)) << 3);
  } else {
    return row * kHeadDim + ((chunk ^ ((row >> 1) & 3)) << 3);
  }
}

}  // namespace flashattn::decoding
