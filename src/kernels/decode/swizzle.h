// The decode family's shared-memory tile layout: where 16-byte chunk `chunk` of row `row` of a
// [rows][kHeadDim] 16-bit tile (Q, the 16-bit K/V ring) lives; the e4m3 ring tiles have their own
// layouts, below. Host and device (FA_HD) so that the CPU tests check them for every head dim
// (tests/test_decode_swizzle.cpp).
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

// e4m3 ring tiles ([16 keys][kHeadDim bytes]) are read straight into MMA fragments (kernel.cuh):
// for S each lane reads keys g and g + 8, W = 16 (8 at hd 96) bytes per group of 4W dimensions;
// for P·V each lane reads keys 2t, 2t + 1, 2t + 8, 2t + 9, the kHeadDim / 8 bytes at g ·
// kHeadDim / 8. Where 16-byte chunks of a row sit is chosen per head dim so that both reads and
// the cp.async writes (consecutive chunks) meet no bank conflict (every phase of a warp's load
// touches distinct banks; checked by a bank model of the three access patterns, the one
// exception being hd 96's V writes at 1.5 wavefronts per ideal one). Rows of 128k bytes XOR the
// chunk with row bits; rows of 64, 96 or 192 bytes also swap rows 2i and 2i + 1 where row / 4 is
// odd, so that the four rows a V read touches fall in both halves of a 128-byte line. Byte `byte`
// of row `row`; returns a byte offset in the tile.
//
// The reads' widths (Config in kernel.cuh and the CPU test take them from here): S's bytes per
// lane per group of 4W dimensions (W / 4 k16 steps), P·V's bytes per lane per key, and the load
// unit those are read in.
constexpr FA_HD int e4m3_qk_bytes(int head_dim) {
  return head_dim % 64 == 0 ? 16 : 8;
}
constexpr FA_HD int e4m3_v_bytes(int head_dim) {
  return head_dim / 8;
}
constexpr FA_HD int e4m3_v_unit(int head_dim) {
  return e4m3_v_bytes(head_dim) % 16 == 0 ? 16 : e4m3_v_bytes(head_dim) % 8 == 0 ? 8 : 4;
}

template <int kHeadDim>
constexpr FA_HD int e4m3_k_offset(int row, int byte) {
  if constexpr (kHeadDim % 128 == 0) {
    return row * kHeadDim + (((byte >> 4) ^ ((row & 1) << 2)) << 4) + (byte & 15);
  } else {
    return row * kHeadDim + byte;
  }
}
template <int kHeadDim>
constexpr FA_HD int e4m3_v_offset(int row, int byte) {
  const int chunk = byte >> 4, in = byte & 15;
  if constexpr (kHeadDim == 128) {
    return row * kHeadDim + ((chunk ^ (row & 7)) << 4) + in;
  } else if constexpr (kHeadDim == 256) {
    return row * kHeadDim + ((chunk ^ (((row & 3) << 1) ^ ((row >> 2) & 1))) << 4) + in;
  } else {
    static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 192, "e4m3 decode head dim");
    const int slot = row ^ ((row >> 2) & 1);
    const int x = kHeadDim == 96 ? 0 : (row & 3);
    return slot * kHeadDim + ((chunk ^ x) << 4) + in;
  }
}

}  // namespace flashattn::decoding
